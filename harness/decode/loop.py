"""Plain greedy decoding and the DDTree decode loop over one stream, with per-phase metrics.

One DDTree step, with the root (the previous bonus token) not yet in the cache:
  draft   the drafter's top-k for the next block        tree    best-first builder (tree.py)
  mask    the tree's tokens, depths and ancestor mask into the bucket's static inputs
  verify  one target forward over the tree (padded to the budget), graph-replayed on the GPU
  walk    the target's pick at each node (greedy, or sampled at temperature > 0) along the tree;
          the accepted nodes' final hidden states go to the next draft (``hidden=``)
  commit  the accepted path's rows moved to contiguous positions in every layer
          (commit_accepted), pages past the new length returned to the allocator

Greedy steps walk on the device: the verify graph computes the picks; queued right behind it, a
graph walks the tree, its result goes to pinned memory, and the commit's graph moves the path
(commit_graph.py). The host waits for that copy only ("walk": the wait and the read;
"commit": the GPU time of the walk, the copy and the commit when overlapped, else the host's
bookkeeping). At temperature > 0 the host samples the walk from the logits and uploads the path
to the commit.

Two ways to time a step (``sync_phases``):
- overlapped (the default): the loop waits for the GPU once per step, where the walk needs the
  verify's logits, as a serving loop would; the commit's kernels then run while the host drafts
  the next step. The step is the host's wall clock from one step's start to the next; verify and
  commit are the GPU times of their graphs (CUDA events), the other phases host times, so the
  phases overlap and need not add up to the step.
- synced: a device sync after every phase, so phases add up to the step (attribution, at the
  price of the overlap and of the syncs).
On the CPU both are the same.

Overlapped steps wait for the GPU by polling the event (``spin_wait``), so the waiting thread
keeps its core; ``spin=False`` waits in cudaEventSynchronize instead, which may yield it (``vk
decode --phase-timing overlapped-blocking``, to compare: results/README.md has one such pair).
"""

from __future__ import annotations

import statistics
import threading
import time
from collections import Counter
from dataclasses import asdict, dataclass, field

import torch

from harness.decode.commit_graph import AcceptedCommit
from harness.decode.tree import build_tree, walk_sampled
from harness.decode.drafters import Drafter
from harness.decode.target_runner import TargetRunner

PHASES = ("draft", "tree", "mask", "verify", "walk", "commit")


def sync_device(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def spin_wait(event: torch.cuda.Event) -> None:
    """Wait for ``event`` by polling it, so the thread keeps its core through a 10-30 ms verify
    (cudaEventSynchronize may yield it) and starts the next host phases at once."""
    while not event.query():
        pass


class _SyncedClock:
    """Synced phases: a device sync before each reading of the host clock; a step is the sum of
    its phases."""

    def __init__(self, device: torch.device):
        self.device, self.times, self._last = device, {}, None

    def start(self) -> None:
        sync_device(self.device)
        self.times, self._last = {}, time.perf_counter()

    def lap(self, phase: str) -> None:
        sync_device(self.device)
        now = time.perf_counter()
        self.times[phase] = (now - self._last) * 1e3
        self._last = now

    def gpu_begin(self, phase: str) -> None:
        pass

    def gpu_end(self, phase: str) -> None:
        pass

    def wait_for(self, phase: str) -> None:
        pass

    def wait(self, event: torch.cuda.Event) -> None:
        event.synchronize()

    def step_done(self, record: "StepRecord") -> None:
        pass

    def finish(self) -> None:
        sync_device(self.device)


class _OverlappedClock(_SyncedClock):
    """Overlapped phases: no syncs but ``wait_for``; host times, and for the phases bracketed by
    gpu_begin / gpu_end their GPU time (CUDA events). A step's wall time closes at the next step's
    start; its commit's GPU time is read after the next step's wait, when the commit has certainly
    run (it precedes that verify on the stream), so reading never waits."""

    def __init__(self, device: torch.device, *, spin: bool = True):
        super().__init__(device)
        self.cuda, self.spin = device.type == "cuda", spin
        self._events: dict[str, tuple[torch.cuda.Event, torch.cuda.Event]] = {}
        self._last_step: tuple["StepRecord", float] | None = None
        self._began = 0.0  # this step's start

    def start(self) -> None:
        self.times, self._last = {}, time.perf_counter()
        if self._last_step is not None:
            record, began = self._last_step
            record.wall_ms = (self._last - began) * 1e3
        self._began = self._last

    def lap(self, phase: str) -> None:
        now = time.perf_counter()
        self.times[phase] = (now - self._last) * 1e3
        self._last = now

    def gpu_begin(self, phase: str) -> None:
        if self.cuda:
            self._events[phase] = (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
            self._events[phase][0].record()

    def gpu_end(self, phase: str) -> None:
        if self.cuda:
            self._events[phase][1].record()

    def _gpu_ms(self, phase: str) -> float:
        begin, end = self._events[phase]
        end.synchronize()
        return begin.elapsed_time(end)

    def wait_for(self, phase: str) -> None:
        """The step's one wait for the GPU: until ``phase`` (the verify) is done."""
        if self.cuda:
            self.wait(self._events[phase][1])
            if self._last_step is not None and "commit" in self._events:
                self._last_step[0].phases_ms["commit"] = self._gpu_ms("commit")

    def wait(self, event: torch.cuda.Event) -> None:
        if self.spin:
            spin_wait(event)
        else:
            event.synchronize()

    def step_done(self, record: "StepRecord") -> None:
        if self.cuda:
            record.phases_ms["verify"] = self._gpu_ms("verify")
        self._last_step = (record, self._began)

    def finish(self) -> None:
        sync_device(self.device)
        if self._last_step is not None:
            record, began = self._last_step
            record.wall_ms = (time.perf_counter() - began) * 1e3
            if self.cuda:
                record.phases_ms["commit"] = self._gpu_ms("commit")


@dataclass
class StepRecord:
    tree_nodes: int            # real nodes (the verify ran on the padded bucket)
    new_tokens: int            # accepted drafted tokens + the bonus token
    phases_ms: dict[str, float]
    wall_ms: float | None = None  # overlapped timing: the step's start to the next step's start
    host_cpu_ms: float | None = None  # this thread's CPU time in draft + tree + mask (against their wall time)

    @property
    def step_ms(self) -> float:
        return self.wall_ms if self.wall_ms is not None else sum(self.phases_ms.values())


@dataclass
class DecodeRun:
    tokens: list[int]                       # new tokens, in order
    steps: list[StepRecord] = field(default_factory=list)
    seconds: float = 0.0
    margins: list[float] = field(default_factory=list)  # greedy runs: top-1 minus top-2 logit per token
    top_logits: list[float] = field(default_factory=list)  # greedy runs: the top-1 logit per token
    host_cpu: dict = field(default_factory=dict)  # DDTree runs: CPU seconds of this thread and the process, threads
    window: tuple[float, float] | None = None  # DDTree runs: time.perf_counter() at the loop's start and end

    def summary(self) -> dict:
        steps = self.steps
        phases = {p: statistics.mean([s.phases_ms.get(p, 0.0) for s in steps]) for p in PHASES} if steps else {}
        return {
            "new_tokens": len(self.tokens), "steps": len(steps), "seconds": self.seconds,
            "tokens_per_s": len(self.tokens) / self.seconds if self.seconds else None,
            "mean_step_ms": statistics.mean([s.step_ms for s in steps]) if steps else None,
            "median_step_ms": statistics.median([s.step_ms for s in steps]) if steps else None,
            "mean_phase_ms": phases,
            "mean_accepted": statistics.mean([s.new_tokens for s in steps]) if steps else None,
            "accepted_histogram": dict(sorted(Counter(s.new_tokens for s in steps).items())),
            "host_cpu": self.host_cpu,
        }

    def step_dicts(self) -> list[dict]:
        return [asdict(s) for s in self.steps]


def prefill(runner: TargetRunner, tokens: list[int], *, chunk: int = 64) -> None:
    """Write ``tokens`` into the cache after the current prefix, in chain-tree chunks through
    the verify path (each chunk attends to the prefix and causally within itself)."""
    cache = runner.cache
    for start in range(0, len(tokens), chunk):
        part = tokens[start:start + chunk]
        cache.reserve(cache.prefix_len + len(part))
        bucket = runner.load(part, list(range(-1, len(part) - 1)), list(range(len(part))), len(part))
        runner.run(bucket)
        cache.set_prefix_len(cache.prefix_len + len(part))


def restart_at(runner: TargetRunner, prefix_len: int) -> None:
    runner.cache.set_prefix_len(prefix_len)
    runner.cache.truncate(prefix_len)


def greedy_decode(runner: TargetRunner, history: list[int], new_tokens: int, *, rows: int = 1) -> DecodeRun:
    """Plain autoregressive greedy decoding: one new token per forward. ``history``'s last token is
    the pending root (not in the cache); the cache holds everything before it.

    ``rows`` > 1 pads every forward with leaves under the root (never committed, logits ignored),
    the way the verify pads a tree to its budget: with ``rows`` = the budget, every GEMM of the
    greedy forward has the verify's shapes, so the root's row goes through the same kernels and
    accumulation orders (a batch-invariant reference; in exact arithmetic the same function)."""
    cache = runner.cache
    start_len = cache.prefix_len
    run = DecodeRun(tokens=[])
    root = history[-1]
    cache.reserve(cache.prefix_len + rows)
    runner.warm(rows)
    began = time.perf_counter()
    for _ in range(new_tokens):
        cache.reserve(cache.prefix_len + rows)
        logits = runner.run(runner.load([root], [-1], [0], rows))[0].float()
        top2 = torch.topk(logits, 2)
        root = int(top2.indices[0])
        run.margins.append(float(top2.values[0] - top2.values[1]))
        run.top_logits.append(float(top2.values[0]))
        run.tokens.append(root)
        cache.set_prefix_len(cache.prefix_len + 1)
    sync_device(cache.pool.device)
    run.seconds = time.perf_counter() - began
    restart_at(runner, start_len)
    return run


def greedy_walk_inputs(bucket) -> tuple[torch.Tensor, ...]:
    """What the device walk reads from a verified bucket (tree.greedy_path's arguments)."""
    return bucket.tokens, bucket.parents, bucket.picks, bucket.mask, bucket.count


def ddtree_decode(runner: TargetRunner, history: list[int], new_tokens: int, drafter: Drafter, *, budget: int,
                  block_size: int = 16, temperature: float = 0.0, seed: int = 0,
                  sync_phases: bool = False, spin: bool = True) -> DecodeRun:
    """Decode ``new_tokens`` tokens with DDTree; the tree (budget nodes, root included) is padded
    to ``budget`` so every verify replays the same graph. ``sync_phases``, ``spin``: see the module
    notes."""
    cache = runner.cache
    device = cache.pool.device
    start_len = cache.prefix_len
    history = list(history)
    run = DecodeRun(tokens=[])
    generator = torch.Generator().manual_seed(seed)
    clock = _SyncedClock(device) if sync_phases else _OverlappedClock(device, spin=spin)
    commit = AcceptedCommit(cache, budget)
    cache.reserve(cache.prefix_len + budget)
    # The first commit would otherwise load its kernels inside step 1 (about 27 ms at k2-tp8):
    # counted in tokens/s, though not in the median step. The greedy picks are in the verify's graph.
    bucket = runner.warm(budget)
    if temperature > 0:
        commit.warm(bucket.hidden)
    else:
        commit.warm_greedy(greedy_walk_inputs(bucket), bucket.hidden)
    sync_device(device)
    began, thread_began, process_began = time.perf_counter(), time.thread_time(), time.process_time()
    features = None  # the target's final hidden states at the last accepted path, for the drafter
    while len(run.tokens) < new_tokens:
        clock.start()
        host_began = time.thread_time()
        draft = drafter.draft(history, block_size, hidden=features)
        clock.lap("draft")
        tree = build_tree(history[-1], draft.top_tokens, draft.top_logprobs, budget)
        clock.lap("tree")
        cache.reserve(cache.prefix_len + budget)
        tokens = tree.tokens.tolist()
        bucket = runner.load(tokens, tree.parents.tolist(), tree.depths.tolist(), budget)
        clock.lap("mask")
        host_cpu_ms = (time.thread_time() - host_began) * 1e3
        clock.gpu_begin("verify")
        logits = runner.run(bucket)
        clock.gpu_end("verify")
        if temperature > 0:
            clock.wait_for("verify")  # the walk samples the verify's logits on the host
            clock.lap("verify")
            accepted, bonus = walk_sampled(tree, logits[:len(tokens)], temperature, generator)
            clock.lap("walk")
            clock.gpu_begin("commit")
            features = commit(accepted, bucket.hidden)
        else:
            clock.gpu_begin("commit")
            commit.start_greedy(greedy_walk_inputs(bucket), bucket.hidden)  # queued right behind the verify
            clock.gpu_end("commit")
            clock.wait_for("verify")
            clock.lap("verify")
            accepted, bonus, features = commit.finish_greedy(wait=clock.wait)
            clock.lap("walk")
        new_len = cache.prefix_len + len(accepted)
        cache.set_prefix_len(new_len)
        cache.truncate(new_len)
        if temperature > 0:
            clock.gpu_end("commit")
        clock.lap("commit")
        produced = [tokens[node] for node in accepted[1:]] + [bonus]
        history.extend(produced)
        run.tokens.extend(produced)
        run.steps.append(StepRecord(len(tokens), len(produced), dict(clock.times), host_cpu_ms=host_cpu_ms))
        clock.step_done(run.steps[-1])
    clock.finish()
    run.seconds = time.perf_counter() - began
    run.window = (began, began + run.seconds)
    # Host phases that run slower than the CPU time they take waited for the core; other threads'
    # CPU time (process - thread) shows what else ran meanwhile.
    run.host_cpu = {"thread_s": time.thread_time() - thread_began, "process_s": time.process_time() - process_began,
                    "threads": threading.active_count()}
    run.tokens = run.tokens[:new_tokens]
    restart_at(runner, start_len)
    return run


def compare_tokens(candidate: list[int], greedy: DecodeRun) -> dict:
    """Match of a decode against greedy decoding, and the greedy top-2 margin where they part."""
    length = min(len(candidate), len(greedy.tokens))
    diverged = next((i for i in range(length) if candidate[i] != greedy.tokens[i]), None)
    result = {"compared": length, "identical": diverged is None, "first_divergence": diverged,
              "matching_prefix": length if diverged is None else diverged}
    if diverged is not None:
        margins = greedy.margins[:length]
        result["greedy_top2_margin_at_divergence"] = margins[diverged]
        result["greedy_top1_logit_at_divergence"] = greedy.top_logits[diverged]
        result["smallest_greedy_margin"] = min(margins)
        # 0 = the smallest margin of the compared tokens: a near-tie is where bf16 noise decides
        result["margin_rank_at_divergence"] = sorted(margins).index(margins[diverged])
    return result
