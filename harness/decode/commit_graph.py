"""The commit phase of a DDTree step as one CUDA graph per budget.

After the walk, the accepted path's KV rows move to contiguous positions in every layer
(``commit_accepted`` over the pool viewed as [layers * pages, page, D], one block-table row per
layer) and the path's final hidden states are gathered for the drafter. Eagerly that is a dozen
small launches plus an upload from pageable memory; here the path, padded to the budget with the
root (``commit_accepted`` ignores entries past the length), and its length go up in one pinned
copy, and one graph replay does the rest. The CPU path runs the same function eagerly.

Greedy decoding does not upload the path at all: ``start_greedy`` queues, behind the verify, a
graph that walks the tree on the device (``tree.greedy_path``, from the verify graph's picks),
a copy of the path and bonus token to pinned memory, and the commit's graph; ``finish_greedy``
waits for that copy only, so the commit runs while the host drafts the next step.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable

import torch

from verify_kernels import commit_accepted

from harness.decode.tree import greedy_path
from harness.decode.kv_pool import PagedKVCache


class AcceptedCommit:
    def __init__(self, cache: PagedKVCache, budget: int):
        device = cache.pool.device
        layers, pages = cache.pool.shape[:2]
        self.cache, self.budget = cache, budget
        self._layer_offsets = (torch.arange(layers, device=device, dtype=torch.int32) * pages)[:, None]
        self._path = torch.zeros(budget + 1, dtype=torch.int32, device=device)  # [path padded to budget, length]
        self._host = torch.zeros(budget + 1, dtype=torch.int32, pin_memory=device.type == "cuda")
        self._uploaded: torch.cuda.Event | None = None
        self._graph: torch.cuda.CUDAGraph | None = None
        self._graph_hidden: torch.Tensor | None = None
        self._features: torch.Tensor | None = None
        self._greedy_path = walk_result  # compiled on the GPU by warm_greedy
        self._greedy_graphs: tuple[torch.cuda.CUDAGraph, torch.cuda.CUDAGraph] | None = None
        self._greedy_inputs: tuple | None = None  # (address, shape) of each input the graphs read
        self._greedy_result: torch.Tensor | None = None  # [2 budget + 3] on the device: walk_result
        self._advance_prefix = False  # the commit also advances the device prefix length (warm_greedy)
        self._greedy_host: torch.Tensor | None = None    # its copy on the host (pinned on the GPU)
        self._greedy_read: torch.cuda.Event | None = None  # that copy is done
        self._greedy_features: torch.Tensor | None = None

    def _commit(self, hidden: torch.Tensor) -> torch.Tensor:
        cache = self.cache
        layers = cache.pool.shape[0]
        path = self._path[:self.budget]
        commit_accepted(cache.pool.view(-1, cache.page_size, cache.pool.shape[-1]),
                        cache.block_table + self._layer_offsets,
                        cache.prefix_lens.expand(layers).contiguous(), path[None].expand(layers, -1),
                        self._path[self.budget:].expand(layers))
        return hidden.index_select(0, path.to(torch.int64))

    def _upload(self, accepted: list[int]) -> None:
        if self._uploaded is not None:
            self._uploaded.synchronize()  # the previous upload has left the host buffer
        padded = accepted + [0] * (self.budget - len(accepted)) + [len(accepted)]
        self._host.copy_(torch.tensor(padded, dtype=torch.int32))
        self._path.copy_(self._host, non_blocking=True)
        if self._path.is_cuda:
            self._uploaded = torch.cuda.Event()
            self._uploaded.record()

    def _capture(self, hidden: torch.Tensor) -> None:
        """Warm up and capture with the root alone (a copy of a row onto itself: harmless, since a
        real commit must not run twice: its targets can be later entries' sources)."""
        self._upload([0])
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            self._commit(hidden)
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            self._features = self._commit(hidden)
        self._graph, self._graph_hidden = graph, hidden

    def warm(self, hidden: torch.Tensor) -> None:
        """Capture the commit's graph for ``hidden`` (the verify bucket's final hidden states) before
        anything is timed: the first capture loads and compiles its kernels (tens of ms). A no-op
        on the CPU, where the commit runs eagerly."""
        if self._path.is_cuda and (self._graph is None or self._graph_hidden is not hidden):
            self._capture(hidden)

    def __call__(self, accepted: list[int], hidden: torch.Tensor) -> torch.Tensor:
        """Commit ``accepted`` (tree nodes from the root, increasing) at the cache's prefix length;
        returns their rows of ``hidden`` [T, hidden] (the verify's final hidden states). The caller
        then advances the prefix length by len(accepted)."""
        if not 1 <= len(accepted) <= self.budget or accepted[0] != 0:
            raise ValueError(f"accepted: expected the root (0) and at most {self.budget - 1} more nodes, got "
                             f"{accepted}")
        if not self._path.is_cuda:
            self._upload(accepted)
            return self._commit(hidden)[:len(accepted)]
        self.warm(hidden)
        self._upload(accepted)
        self._graph.replay()
        return self._features[:len(accepted)]

    # Greedy decoding: the walk on the device (two graphs: walk, then commit), no path upload.

    def _walk(self, tree: tuple[torch.Tensor, ...]) -> torch.Tensor:
        result = self._greedy_path(*tree)  # [2T + 3]: see walk_result
        self._path.copy_(result[:self.budget + 1])
        return result

    def warm_greedy(self, tree: tuple[torch.Tensor, ...], hidden: torch.Tensor, *,
                    advance_prefix: bool = False) -> None:
        """Capture the greedy walk's graph and its commit's graph for the bucket's static inputs
        ``tree`` (tokens, parents, picks [T], tree_mask, count, with T = the budget) and ``hidden``.
        On the GPU the walk goes through torch.compile (a few fused kernels instead of about 40
        small ones; eager, with a warning, if compiling fails). The warm-up run walks and commits
        whatever the bucket holds, which moves tree rows only (positions prefix_len ..
        prefix_len + T - 1, none of them committed). ``advance_prefix``: the commit's graph also
        adds the path's length to the cache's device prefix length (the host then only mirrors
        it: the device-drafting loop). A no-op on the CPU."""
        if tree[0].shape[0] != self.budget:
            raise ValueError(f"tree: expected a bucket of the budget's {self.budget} nodes, "
                             f"got {tree[0].shape[0]}")
        inputs = (advance_prefix, *((tensor.data_ptr(), tuple(tensor.shape)) for tensor in (*tree, hidden)))
        self._advance_prefix = advance_prefix
        if not self._path.is_cuda or (self._greedy_graphs is not None and self._greedy_inputs == inputs):
            return
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            self._greedy_path = _compiled_greedy_path(tree)
            self._walk(tree)
            self._commit(hidden)
        torch.cuda.current_stream().wait_stream(stream)
        walk_graph, commit_graph = torch.cuda.CUDAGraph(), torch.cuda.CUDAGraph()
        with torch.cuda.graph(walk_graph):
            self._greedy_result = self._walk(tree)
        with torch.cuda.graph(commit_graph):
            self._greedy_features = self._commit(hidden)
            if advance_prefix:
                self.advance_prefix()
        self._greedy_graphs, self._greedy_inputs = (walk_graph, commit_graph), inputs
        self._greedy_host = self.result_buffer()
        self._greedy_read = torch.cuda.Event()

    def start_greedy(self, tree: tuple[torch.Tensor, ...], hidden: torch.Tensor) -> None:
        """Queue, behind the verify, the greedy walk over the verified tree, the copy of its result
        to the host, and the commit of the path (so the host can draft while the commit runs);
        eager on the CPU. ``tree`` and ``hidden`` as in ``warm_greedy``. The caller then advances
        the prefix length by the path's length, which ``finish_greedy`` returns."""
        self.warm_greedy(tree, hidden)
        if not self._path.is_cuda:
            self._greedy_host = self.result_buffer()
        self.queue_walk(tree, self._greedy_host, self._greedy_read)
        self.queue_commit(hidden)

    def advance_prefix(self) -> None:
        """The cache's device prefix length += the walked path's length (no host sync)."""
        self.cache.prefix_lens.add_(self._path[self.budget:])

    def result_buffer(self) -> torch.Tensor:
        """A host buffer for ``queue_walk`` (pinned on the GPU path): [2T + 3] int64, as walk_result."""
        return torch.empty(2 * self.budget + 3, dtype=torch.int64, pin_memory=self._path.is_cuda)

    @property
    def walk_result(self) -> torch.Tensor | None:
        """The last walk's result on the device (walk_result's layout; None before warm_greedy on
        the GPU); its bonus slot (T + 1) is the next step's root."""
        return self._greedy_result

    def queue_walk(self, tree: tuple[torch.Tensor, ...], host: torch.Tensor,
                   read: torch.cuda.Event | None = None) -> None:
        """Queue the walk (its graph on the GPU, after warm_greedy for the same ``tree``) and the
        copy of its result into ``host``; ``read`` is recorded after the copy. Eager on the CPU."""
        if not self._path.is_cuda:
            self._greedy_result = self._walk(tree)
            host.copy_(self._greedy_result)
            return
        self._greedy_graphs[0].replay()
        host.copy_(self._greedy_result, non_blocking=True)
        if read is not None:
            read.record()

    def queue_commit(self, hidden: torch.Tensor) -> None:
        """Queue the commit of the last queued walk's path (its graph on the GPU), with the prefix
        advance if warm_greedy asked for it. Eager on the CPU."""
        if self._path.is_cuda:
            self._greedy_graphs[1].replay()
            return
        self._greedy_features = self._commit(hidden)
        if self._advance_prefix:
            self.advance_prefix()

    def finish_greedy(self, wait: Callable[[torch.cuda.Event], None] | None = None
                      ) -> tuple[list[int], int, torch.Tensor]:
        """(accepted nodes from the root, bonus token, their rows of ``hidden``) of the last
        ``start_greedy``; waits for the walk and its copy, not for the commit, with ``wait(event)``
        (default: ``event.synchronize()``)."""
        if self._greedy_host is None:
            raise RuntimeError("finish_greedy: no greedy walk was started")
        if self._greedy_read is not None:
            (wait or torch.cuda.Event.synchronize)(self._greedy_read)
        values = self._greedy_host.tolist()
        length = values[self.budget]
        return values[:length], values[self.budget + 1], self._greedy_features[:length]


def walk_result(tokens: torch.Tensor, parents: torch.Tensor, picks: torch.Tensor, tree_mask: torch.Tensor,
                count: torch.Tensor) -> torch.Tensor:
    """[2T + 3] int64: ``greedy_path`` ([T + 2]: the path padded with the root, its length, the
    bonus token), then the path's tokens [T] and the tree's real node count: all the host needs
    to know of a step when the tree was built on the device."""
    path = greedy_path(tokens, parents, picks, tree_mask, count)
    return torch.cat([path, tokens[path[:tokens.shape[0]]], count.view(1)])


def _compiled_greedy_path(tree: tuple[torch.Tensor, ...]):
    """``walk_result`` through torch.compile, compiled (and run once) for ``tree``'s shapes; the
    eager function, with a warning, if Inductor fails (that costs speed, not correctness)."""
    walk = torch.compile(walk_result, dynamic=False, fullgraph=True)
    try:
        walk(*tree)
    except Exception as error:  # noqa: BLE001 - any compiler failure falls back to the same function, eager
        warnings.warn(f"greedy_path: torch.compile failed ({type(error).__name__}: {error}); the walk runs eagerly")
        return walk_result
    return walk
