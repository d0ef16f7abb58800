"""The commit phase of a DDTree step as one CUDA graph per budget.

After the walk, the accepted path's KV rows move to contiguous positions in every layer
(``commit_accepted`` over the pool viewed as [layers * pages, page, D], one block-table row per
layer) and the path's final hidden states are gathered for the drafter. Eagerly that is a dozen
small launches plus an upload from pageable memory; here the path, padded to the budget with the
root (``commit_accepted`` ignores entries past the length), and its length go up in one pinned
copy, and one graph replay does the rest. The CPU path runs the same function eagerly.

Greedy decoding does not upload the path at all: ``start_greedy`` replays a graph that walks the
tree on the device (``ddtree.greedy_path``, from the verify graph's picks) and commits the path it
finds, and ``finish_greedy`` reads the path and the bonus token back in one copy. The host never
sits between the verify and the commit.
"""

from __future__ import annotations

import torch

from verify_kernels import commit_accepted

from .ddtree import greedy_path
from .kv_pool import PagedKVCache


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
        self._greedy_graph: torch.cuda.CUDAGraph | None = None
        self._greedy_inputs: tuple | None = None  # (address, shape) of each input the graph reads
        self._greedy_result: torch.Tensor | None = None  # [budget + 2]: path, length, bonus
        self._greedy_features: torch.Tensor | None = None

    def _commit(self, hidden: torch.Tensor) -> torch.Tensor:
        cache = self.cache
        layers = cache.pool.shape[0]
        path = self._path[:self.budget]
        commit_accepted(cache.pool.view(-1, cache.page_size, cache.pool.shape[-1]), cache.block_table + self._layer_offsets,
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
            raise ValueError(f"accepted: expected the root (0) and at most {self.budget - 1} more nodes, got {accepted}")
        if not self._path.is_cuda:
            self._upload(accepted)
            return self._commit(hidden)[:len(accepted)]
        self.warm(hidden)
        self._upload(accepted)
        self._graph.replay()
        return self._features[:len(accepted)]

    def _walk_and_commit(self, tree: tuple[torch.Tensor, ...], hidden: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        result = greedy_path(*tree)  # [T + 2]: the path padded with the root, its length, the bonus token
        self._path.copy_(result[:self.budget + 1])
        return result, self._commit(hidden)

    def warm_greedy(self, tree: tuple[torch.Tensor, ...], hidden: torch.Tensor) -> None:
        """Capture the greedy walk-and-commit graph for the bucket's static inputs ``tree``
        (tokens, parents, picks [T], tree_mask, count, with T = the budget) and ``hidden``. Its warm-up
        run walks and commits whatever the bucket holds, which moves tree rows only (positions
        prefix_len .. prefix_len + T - 1, none of them committed). A no-op on the CPU."""
        if tree[0].shape[0] != self.budget:
            raise ValueError(f"tree: expected a bucket of the budget's {self.budget} nodes, got {tree[0].shape[0]}")
        inputs = tuple((tensor.data_ptr(), tuple(tensor.shape)) for tensor in (*tree, hidden))
        if not self._path.is_cuda or (self._greedy_graph is not None and self._greedy_inputs == inputs):
            return
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            self._walk_and_commit(tree, hidden)
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            self._greedy_result, self._greedy_features = self._walk_and_commit(tree, hidden)
        self._greedy_graph, self._greedy_inputs = graph, inputs

    def start_greedy(self, tree: tuple[torch.Tensor, ...], hidden: torch.Tensor) -> None:
        """Launch the greedy walk over the verified tree and the commit of the path it accepts (one
        graph replay on the GPU, queued behind the verify; eager on the CPU). ``tree`` and
        ``hidden`` as in ``warm_greedy``. The caller then advances the prefix length by the path's
        length, which ``finish_greedy`` returns."""
        if not self._path.is_cuda:
            self._greedy_result, self._greedy_features = self._walk_and_commit(tree, hidden)
            return
        self.warm_greedy(tree, hidden)
        self._greedy_graph.replay()

    def finish_greedy(self) -> tuple[list[int], int, torch.Tensor]:
        """(accepted nodes from the root, bonus token, their rows of ``hidden``) of the last
        ``start_greedy``: one device-to-host copy, which waits for the walk."""
        if self._greedy_result is None:
            raise RuntimeError("finish_greedy: no greedy walk was started")
        values = self._greedy_result.tolist()
        length = values[self.budget]
        return values[:length], values[self.budget + 1], self._greedy_features[:length]
