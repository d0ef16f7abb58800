"""The target model's verify forward over a (padded) tree, bound to a paged KV cache and one
attention variant, eager or replayed from a CUDA graph per tree-size bucket.

A forward over T nodes (node 0 is the root, parents before children):
- node i's latent row is written to position prefix_len + i of every layer (slots from the block
  table, on the device), its RoPE position is prefix_len + depth(i);
- every layer calls ``verify_attention`` (or, for ``attention="reference"``, the float64 oracle:
  the CPU/fp32 path, since the kernels are bf16/fp16 only) with the tree's ancestor mask;
- the logits of all T nodes come back; their final hidden states stay in the bucket (``hidden``),
  for a drafter conditioned on the target's features.

A tree with fewer nodes than its bucket is padded with leaves under the root (token 0); their rows
are written past the real nodes and never committed, and their logits are ignored.

CUDA graphs: the static inputs (tokens, depths, parents and the node count in one buffer, and the
mask) live in the bucket; the block table and prefix lengths are the cache's own device tensors,
updated in place between steps, so one capture per bucket serves every step.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from verify_kernels import plan_once, reference_attention, verify_attention
from verify_kernels import trees

from harness.decode.kv_pool import PagedKVCache
from harness.decode.model import MLAModel
from harness.measure.timing import time_graph
from verify_kernels import contract, variants
from verify_kernels.api import select_variant


@dataclass
class _Bucket:
    nodes: int
    ids: torch.Tensor      # [3T + 1] int64: tokens, depths, parents, the real node count (one upload)
    mask: torch.Tensor     # [1, T, ceil(T/32)] int32
    offsets: torch.Tensor  # [T] int64: 0..T-1
    host_ids: torch.Tensor   # ``ids`` on the host (pinned on the GPU path)
    host_mask: torch.Tensor  # [1, T, ceil(T/32)] int32 on the host (pinned on the GPU path)
    uploaded: torch.cuda.Event | None = None  # the last copies out of host_ids / host_mask
    graph: torch.cuda.CUDAGraph | None = None
    logits: torch.Tensor | None = None
    picks: torch.Tensor | None = None    # [T] int64: argmax of the logits (the greedy picks), in the graph
    hidden: torch.Tensor | None = None   # [T, hidden] final hidden states of the last run

    @property
    def tokens(self) -> torch.Tensor:
        return self.ids[:self.nodes]

    @property
    def depths(self) -> torch.Tensor:
        return self.ids[self.nodes:2 * self.nodes]

    @property
    def parents(self) -> torch.Tensor:
        """[T] int64, -1 for the root; the padding's parent is the root."""
        return self.ids[2 * self.nodes:3 * self.nodes]

    @property
    def count(self) -> torch.Tensor:
        """[1] int64: the real nodes of the loaded tree (the rest is padding)."""
        return self.ids[3 * self.nodes:]


class TargetRunner:
    def __init__(self, model: MLAModel, cache: PagedKVCache, *, attention: str = "auto", use_graphs: bool = True):
        self.model, self.cache, self.attention = model, cache, attention
        device = cache.pool.device
        self.use_graphs = use_graphs and device.type == "cuda"
        self._buckets: dict[int, _Bucket] = {}

    def _bucket(self, nodes: int) -> _Bucket:
        if nodes not in self._buckets:
            device = self.cache.pool.device
            mask = trees.parents_to_mask(trees.chain_tree(nodes))
            pinned = device.type == "cuda"
            self._buckets[nodes] = _Bucket(
                nodes, torch.zeros(3 * nodes + 1, dtype=torch.int64, device=device), mask.to(device),
                torch.arange(nodes, dtype=torch.int64, device=device),
                torch.zeros(3 * nodes + 1, dtype=torch.int64, pin_memory=pinned),
                torch.zeros(mask.shape, dtype=torch.int32, pin_memory=pinned))
        return self._buckets[nodes]

    def attend(self, q: torch.Tensor, layer: int, mask: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        cache = self.cache
        arguments = (q, cache.layer(layer), cache.block_table, cache.prefix_lens, mask)
        if self.attention == "reference":
            return reference_attention(*arguments, sm_scale=self.model.config.sm_scale, validate=False).to(q.dtype)
        return verify_attention(*arguments, sm_scale=self.model.config.sm_scale, variant=self.attention,
                                validate=False, out=out)

    def _forward(self, bucket: _Bucket) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """One forward over the bucket's tree: its layers' verify calls share one plan (``plan_once``)."""
        with plan_once():
            return self._forward_layers(bucket)

    def _forward_layers(self, bucket: _Bucket) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        cache = self.cache
        base = cache.prefix_lens[0].to(torch.int64)
        slots = cache.slots(base + bucket.offsets)
        hidden = self.model.forward(
            bucket.tokens, base + bucket.depths,
            write_rows=lambda layer, rows: cache.write_rows(layer, slots, rows),
            attention=lambda q, layer: self.attend(q, layer, bucket.mask))
        logits = self.model.logits(hidden)
        return hidden, logits, logits.argmax(dim=-1)

    def load(self, tokens: list[int], parents: list[int], depths: list[int], bucket_nodes: int) -> _Bucket:
        """Put a tree into the bucket's static inputs, padded to ``bucket_nodes`` (leaves under the
        root): the mask built on the host (trees.ancestor_words), then two asynchronous copies out
        of pinned buffers (the ids written through a NumPy view: no tensor built per step)."""
        count = len(tokens)
        if not 1 <= count <= bucket_nodes:
            raise ValueError(f"tree: expected 1..{bucket_nodes} nodes for this bucket, got {count}")
        if len(parents) != count or len(depths) != count:
            raise ValueError(f"tree: expected {count} parents and depths (one per token), got {len(parents)} "
                             f"and {len(depths)}")
        pad = bucket_nodes - count
        bucket = self._bucket(bucket_nodes)
        if bucket.uploaded is not None:
            bucket.uploaded.synchronize()  # the previous upload has left the host buffers
        ids = bucket.host_ids.numpy()
        ids[:] = 0
        ids[:count] = tokens
        ids[bucket_nodes:bucket_nodes + count] = depths
        ids[bucket_nodes + count:2 * bucket_nodes] = 1
        ids[2 * bucket_nodes:2 * bucket_nodes + count] = parents
        ids[3 * bucket_nodes] = count
        bucket.host_mask.copy_(trees.ancestor_words(parents + [0] * pad))
        bucket.ids.copy_(bucket.host_ids, non_blocking=True)
        bucket.mask.copy_(bucket.host_mask, non_blocking=True)
        if bucket.ids.is_cuda:
            bucket.uploaded = torch.cuda.Event()
            bucket.uploaded.record()
        return bucket

    def run(self, bucket: _Bucket) -> torch.Tensor:
        """Logits [T, vocab] of the loaded tree (their argmax in ``bucket.picks``); pages for
        prefix_len + T must be reserved."""
        if self.cache.capacity < self.cache.prefix_len + bucket.nodes:
            raise RuntimeError(f"KV cache: {self.cache.prefix_len + bucket.nodes} rows needed, "
                               f"{self.cache.capacity} reserved")
        if not self.use_graphs:
            bucket.hidden, bucket.logits, bucket.picks = self._forward(bucket)
            return bucket.logits
        if bucket.graph is None:
            self._capture(bucket)
        bucket.graph.replay()
        return bucket.logits

    def _capture(self, bucket: _Bucket) -> None:
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):  # compile and warm up outside capture, as PyTorch advises
            for _ in range(2):
                self._forward(bucket)
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            bucket.hidden, bucket.logits, bucket.picks = self._forward(bucket)
        bucket.graph = graph

    def warm(self, bucket_nodes: int) -> _Bucket:
        """Compile (and on the GPU capture) the bucket before anything is timed, and return it (its
        ``hidden`` is the tensor every later run of the bucket writes); pages for prefix_len +
        bucket_nodes must be reserved. Writes rows past the prefix only."""
        bucket = self.load([0] * bucket_nodes, list(range(-1, bucket_nodes - 1)), list(range(bucket_nodes)),
                           bucket_nodes)
        self.run(bucket)
        if self.cache.pool.device.type == "cuda":
            torch.cuda.synchronize()
        return bucket

    def kernel(self, bucket_nodes: int) -> dict | None:
        """The variant and config the verify calls of this bucket run ("auto" resolved the way
        verify_attention resolves it); None for the float64 oracle."""
        if self.attention == "reference":
            return None

        cache, config = self.cache, self.model.config
        q = torch.empty(1, bucket_nodes, config.heads, config.latent_dim, dtype=cache.pool.dtype,
                        device=cache.pool.device)
        shape = contract.check_arguments(q, cache.layer(0), cache.block_table, cache.prefix_lens,
                                         self._bucket(bucket_nodes).mask, sm_scale=config.sm_scale,
                                         v_dim=config.kv_lora)
        name, tuned = select_variant(self.attention, shape)
        return {"variant": name, "config": variants.resolve_config(name, variants.load_variant(name), tuned, shape)}

    def attention_ms(self, bucket_nodes: int) -> float | None:
        """Median time of the attention calls of one forward (all layers) at this bucket size and
        the current prefix length, from CUDA-graph replay with L2 flushed; None on the CPU."""
        if self.cache.pool.device.type != "cuda" or self.attention == "reference":
            return None

        config = self.model.config
        bucket = self._bucket(bucket_nodes)
        generator = torch.Generator(device=self.cache.pool.device).manual_seed(0)
        q = torch.randn(1, bucket_nodes, config.heads, config.latent_dim, generator=generator,
                        device=self.cache.pool.device, dtype=self.cache.pool.dtype)
        outs = [torch.empty(1, bucket_nodes, config.heads, config.kv_lora, device=q.device, dtype=q.dtype)
                for _ in range(config.layers)]

        def all_layers():
            with plan_once():  # one plan for the forward's layers, as _forward makes
                for layer in range(config.layers):
                    self.attend(q, layer, bucket.mask, out=outs[layer])

        return time_graph(all_layers, calls_per_graph=1, replays=5, read_state=False).median_ms
