"""The greedy DDTree decode loop with the draft, the tree and its mask built on the device, and
the host one step behind the GPU.

A step on the device, all in stream order (graphs on the GPU, eager on the CPU):
  draft   the drafter's top-k from the device prefix length and the last bonus token
          (``draft_on_device``)
  tree    the best-first tree of ``budget`` nodes into the verify bucket's ids (one Triton
          program on the GPU, tree_kernel.py; tree_device.py's tensor operations on the CPU)
  mask    its ancestor mask
  verify  the target forward over the tree (the bucket's graph)
  walk    the greedy walk (accepted_commit.walk_result), copied to a pinned host buffer
  commit  the path's rows moved, and the device prefix length advanced by the path

Nothing in a step waits for the host, so the host queues step n + 1 before it reads step n's
result: it never stands between two steps. It then reads the path's tokens, extends the output
and keeps enough pages reserved: a step's tree needs prefix + budget rows, and the prefix grows
by at most ``block_size`` + 1 per step, so before queuing a step the host reserves its last known
prefix plus ``block_size + 1 + budget`` (one step unread). The pages past that horizon go back to
the allocator; the horizon only grows while decoding, so the whole reservation is returned when
the run ends. The run's last queued step is never read.

Timing: a step's wall time is the host clock from one step's result to the next (the first from
the loop's start); every phase is a GPU time between CUDA events, read after the run. On the CPU
the phases are host times of the eager calls.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from dataclasses import dataclass

import torch

from harness.decode.commit_graph import AcceptedCommit
from harness.decode.loop import PHASES, DecodeRun, StepRecord, greedy_walk_inputs, restart_at, sync_device, spin_wait
from harness.decode.tree_device import ancestor_mask, build_tree_tensors
from harness.decode.tree_kernel import TreeKernel
from harness.decode.drafters import Drafter
from harness.decode.target_runner import TargetRunner


def supports_device_drafting(drafter: Drafter) -> bool:
    return callable(getattr(drafter, "draft_on_device", None))


@dataclass
class _Queued:
    """A queued step: the host buffer its walk result lands in, and its events."""
    host: torch.Tensor
    read: torch.cuda.Event | None
    marks: list  # one event (GPU) or host time (CPU) before each phase, and one after the last


class _DeviceStep:
    """The draft, tree and mask of a step as three graphs that read the device prefix length and
    ``root`` and write the verify bucket. On the GPU: the draft and the mask compiled, the tree one
    Triton program; on the CPU all three eager tensor operations."""

    def __init__(self, runner: TargetRunner, drafter: Drafter, *, budget: int, block_size: int, offset: int,
                 root_token: int):
        cache = runner.cache
        self.cuda = cache.pool.device.type == "cuda"
        self.bucket = runner.warm(budget)
        self.root = torch.full((1,), root_token, dtype=torch.int64, device=cache.pool.device)
        self.block_size, self.budget = block_size, budget
        self._prefix_lens, self._offset, self._drafter = cache.prefix_lens, offset, drafter
        self._draft_fn, self._tree_fn, self._mask_fn = self._draft, self._tree, self._mask
        self._kernel: TreeKernel | None = None  # the GPU's tree builder (budget >= 2)
        self._graphs: list[torch.cuda.CUDAGraph] = []
        if self.cuda:
            self._capture()

    def _draft(self):
        position = self._prefix_lens.to(torch.int64) + self._offset  # the history's length
        block = self._drafter.draft_on_device(position, self.block_size)
        return block.top_tokens, block.top_logprobs

    def _tree(self, tokens, logprobs):
        return build_tree_tensors(self.root, tokens, logprobs, self.budget)[0]  # (the mask is _mask's)

    def _write_tree(self, tokens, logprobs) -> None:
        """The tree's ids into the bucket: one Triton launch on the GPU (tree_kernel.py),
        the tensor operations of tree_device.py on the CPU."""
        if self._kernel is not None:
            self._kernel(self.root, tokens, logprobs, self.bucket.ids)
        else:
            self.bucket.ids.copy_(self._tree_fn(tokens, logprobs))

    def _mask(self, ids):
        return ancestor_mask(ids[2 * self.budget:3 * self.budget], max_depth=self.block_size)

    def _run(self, mark=lambda: None) -> None:
        """The three phases once, eagerly, calling ``mark()`` before each (the CPU path, and the
        GPU warm-up before capture)."""
        mark()
        tokens, logprobs = self._draft_fn()
        mark()
        self._write_tree(tokens, logprobs)
        mark()
        self.bucket.mask.copy_(self._mask_fn(self.bucket.ids))

    def _capture(self) -> None:
        self._run()  # eagerly first: the drafter builds its device tables outside the compiler
        tokens, _ = self._draft_fn()
        if self.budget >= 2:
            self._kernel = TreeKernel(tokens.shape[0], tokens.shape[1], self.budget, tokens.device)
        compile_ = lambda fn: torch.compile(fn, dynamic=False, fullgraph=True)  # noqa: E731
        self._draft_fn, self._mask_fn = compile_(self._draft), compile_(self._mask)
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for _ in range(2):
                self._run()
        torch.cuda.current_stream().wait_stream(stream)
        draft, tree, mask = (torch.cuda.CUDAGraph() for _ in range(3))
        with torch.cuda.graph(draft):
            tokens, logprobs = self._draft_fn()
        with torch.cuda.graph(tree):
            self._write_tree(tokens, logprobs)
        with torch.cuda.graph(mask):
            self.bucket.mask.copy_(self._mask_fn(self.bucket.ids))
        self._graphs = [draft, tree, mask]
        self._tokens, self._logprobs = tokens, logprobs  # the draft graph's outputs, kept alive

    def queue(self, mark) -> None:
        """Queue draft, tree and mask, calling ``mark()`` before each."""
        if not self.cuda:
            self._run(mark)
            return
        for graph in self._graphs:
            mark()
            graph.replay()


def ddtree_decode_on_device(runner: TargetRunner, history: list[int], new_tokens: int, drafter: Drafter, *,
                            budget: int, block_size: int = 16) -> DecodeRun:
    """Greedy DDTree decoding of ``new_tokens`` tokens with the drafter's ``draft_on_device``; the
    tree is padded to ``budget`` nodes. Same tokens as ``decode_loop.ddtree_decode`` at temperature
    0 when the trees agree (equal-score ties may pick other prefixes; either way the tokens are
    the target's greedy ones)."""
    if not supports_device_drafting(drafter):
        raise ValueError(f"drafter {getattr(drafter, 'name', drafter)!r}: drafting on the device needs "
                         f"draft_on_device (the oracle drafter has it)")
    if block_size < 1 or budget < 1:
        raise ValueError(f"block_size, budget: expected at least 1, got {block_size}, {budget}")
    cache = runner.cache
    device = cache.pool.device
    cuda = device.type == "cuda"
    start_len = cache.prefix_len
    horizon = lambda prefix: prefix + block_size + 1 + budget  # noqa: E731 - rows a queued step may touch
    cache.reserve(horizon(start_len))
    step = _DeviceStep(runner, drafter, budget=budget, block_size=block_size, offset=len(history) - start_len,
                       root_token=history[-1])
    bucket = step.bucket
    commit = AcceptedCommit(cache, budget)
    commit.warm_greedy(greedy_walk_inputs(bucket), bucket.hidden, advance_prefix=True)
    sync_device(device)
    buffers = deque(commit.result_buffer() for _ in range(2))  # a result is read while the next lands

    def queue() -> _Queued:
        host = buffers[0]
        buffers.rotate(-1)
        queued = _Queued(host, torch.cuda.Event() if cuda else None, [])

        def mark() -> None:
            if cuda:
                queued.marks.append(torch.cuda.Event(enable_timing=True))
                queued.marks[-1].record()
            else:
                queued.marks.append(time.perf_counter())

        step.queue(mark)
        mark()
        runner.run(bucket)
        mark()
        # read per step: the CPU forward makes new picks
        commit.queue_walk(greedy_walk_inputs(bucket), host, queued.read)
        step.root.copy_(commit.walk_result[budget + 1:budget + 2])  # the next step's root: the bonus
        mark()
        commit.queue_commit(bucket.hidden)
        mark()
        return queued

    run = DecodeRun(tokens=[])
    known = start_len  # the host's prefix length: through the last result read
    began, thread_began, process_began = time.perf_counter(), time.thread_time(), time.process_time()
    last, host_cpu = began, 0.0
    in_flight = deque([queue()])
    queued_steps: list[_Queued] = []
    while len(run.tokens) < new_tokens:
        host_began = time.thread_time()
        cache.reserve(horizon(known))  # for the step queued next, one result unread
        in_flight.append(queue())
        done = in_flight.popleft()
        host_cpu += time.thread_time() - host_began
        if cuda:
            spin_wait(done.read)
        now = time.perf_counter()
        host_began = time.thread_time()
        values = done.host.tolist()
        length, bonus = values[budget], values[budget + 1]
        produced = values[budget + 3:budget + 2 + length] + [bonus]  # the path's tokens past the root
        known += length
        cache.prefix_len = known  # the device's is ahead by the queued step; it advances there
        cache.truncate(horizon(known))
        run.tokens.extend(produced)
        run.steps.append(StepRecord(values[2 * budget + 2], len(produced), {}, wall_ms=(now - last) * 1e3,
                                    host_cpu_ms=(host_cpu + time.thread_time() - host_began) * 1e3))
        queued_steps.append(done)
        last, host_cpu = now, 0.0
    run.seconds = time.perf_counter() - began
    run.window = (began, began + run.seconds)
    run.host_cpu = {"thread_s": time.thread_time() - thread_began, "process_s": time.process_time() - process_began,
                    "threads": threading.active_count()}
    sync_device(device)  # the step queued last (never read) has run
    for record, queued in zip(run.steps, queued_steps):
        marks = queued.marks
        spans = ([marks[i].elapsed_time(marks[i + 1]) for i in range(len(marks) - 1)] if cuda
                 else [(marks[i + 1] - marks[i]) * 1e3 for i in range(len(marks) - 1)])
        record.phases_ms = dict(zip(PHASES, spans))
    run.tokens = run.tokens[:new_tokens]
    restart_at(runner, start_len)
    return run
