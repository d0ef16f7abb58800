"""Seeded verify-attention problems laid out the way a serving stack's paged pool looks.

Physical pages are shuffled across requests, spare pages and every slot past a request's last
position hold NaN, and unused block-table entries point at NaN pages: a kernel that reads a slot it
does not own, or lets a masked value into P.V, produces NaN instead of a plausible answer.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Sequence

import torch

from . import trees
from .reference import gather_request_rows

DEFAULT_SM_SCALE = 1.0 / math.sqrt(192.0)  # DeepSeek-V3 / Kimi K2: qk_nope 128 + rope 64
SPARE_PAGES = 2


@dataclass(frozen=True)
class VerifyProblem:
    """One verify-attention call's arguments plus what generated them."""

    q: torch.Tensor            # [B, T, H, Dqk]
    kv_cache: torch.Tensor     # [num_pages, page_size, Dqk]
    block_table: torch.Tensor  # [B, max_pages] int32
    prefix_lens: torch.Tensor  # [B] int32
    tree_mask: torch.Tensor    # [B, T, ceil(T/32)] int32
    parents: torch.Tensor      # [B, T] int64
    sm_scale: float
    v_dim: int
    seed: int
    tree_kind: str

    @property
    def page_size(self) -> int:
        return self.kv_cache.shape[1]

    @property
    def shape_summary(self) -> str:
        batch, nodes, heads, _ = self.q.shape
        lens = self.prefix_lens.tolist()
        prefix = lens[0] if len(set(lens)) == 1 else lens
        return (f"B={batch} L={prefix} T={nodes} H={heads} ps={self.page_size} "
                f"{str(self.q.dtype).removeprefix('torch.')} {self.tree_kind}")

    def arguments(self) -> tuple:
        return (self.q, self.kv_cache, self.block_table, self.prefix_lens, self.tree_mask)

    def kwargs(self) -> dict:
        return {"sm_scale": self.sm_scale, "v_dim": self.v_dim}

    def logical_rows(self, request: int) -> torch.Tensor:
        """Request's KV rows in logical order: [prefix_len + T, Dqk]."""
        count = int(self.prefix_lens[request]) + self.q.shape[1]
        return gather_request_rows(self.kv_cache, self.block_table[request], count)

    def with_page_size(self, page_size: int, seed: int | None = None) -> "VerifyProblem":
        """The same logical content laid out in a fresh shuffled pool of ``page_size`` pages."""
        rows = [self.logical_rows(b) for b in range(self.q.shape[0])]
        kv_cache, block_table = _lay_out(rows, page_size, self.kv_cache.dtype, self.kv_cache.device,
                                         self.seed if seed is None else seed)
        return replace(self, kv_cache=kv_cache, block_table=block_table)

    def to(self, device: torch.device | str) -> "VerifyProblem":
        return replace(self, **{name: getattr(self, name).to(device) for name in
                                ("q", "kv_cache", "block_table", "prefix_lens", "tree_mask", "parents")})


def _lay_out(rows: Sequence[torch.Tensor], page_size: int, dtype: torch.dtype, device, seed: int):
    """Scatter each request's logical rows over shuffled pages of a NaN-filled pool."""
    if page_size < 1:
        raise ValueError(f"page_size: expected a positive int, got {page_size}")
    pages_needed = [math.ceil(r.shape[0] / page_size) for r in rows]
    max_pages = max(pages_needed) + 1  # one spare logical page: tables are rarely exactly full
    num_pages = sum(pages_needed) + SPARE_PAGES
    head_dim = rows[0].shape[1]
    generator = torch.Generator().manual_seed(seed + 7919)
    physical = torch.randperm(num_pages, generator=generator)
    kv_cache = torch.full((num_pages, page_size, head_dim), float("nan"), dtype=dtype, device=device)
    # Unused table entries point at a spare (all-NaN) page, as a stale table would.
    spare = physical[-1].item()
    block_table = torch.full((len(rows), max_pages), spare, dtype=torch.int32)
    next_page = 0
    for b, request_rows in enumerate(rows):
        pages = physical[next_page:next_page + pages_needed[b]]
        next_page += pages_needed[b]
        block_table[b, :len(pages)] = pages.to(torch.int32)
        count = request_rows.shape[0]
        position = torch.arange(count)
        kv_cache[pages[position // page_size].to(device), (position % page_size).to(device)] = request_rows.to(dtype)
    return kv_cache, block_table.to(device)


def make_problem(
    prefix_lens: int | Sequence[int],
    tree_nodes: int,
    heads: int,
    *,
    page_size: int = 64,
    batch: int | None = None,
    tree: str = "random",
    dtype: torch.dtype = torch.bfloat16,
    device: torch.device | str = "cpu",
    seed: int = 0,
    head_dim: int = 576,
    v_dim: int = 512,
    q_scale: float = 1.0,
    sm_scale: float = DEFAULT_SM_SCALE,
) -> VerifyProblem:
    """A seeded problem: N(0, 1) latent KV rows, N(0, q_scale^2) queries, a tree of ``tree`` kind.

    ``prefix_lens`` is one length (repeated ``batch`` times, default 1) or one per request.
    ``q_scale`` > 1 gives large logits (peaked softmax) to stress the running max.
    """
    if isinstance(prefix_lens, int):
        prefix_lens = [prefix_lens] * (batch or 1)
    elif batch is not None and batch != len(prefix_lens):
        raise ValueError(f"batch: expected {len(prefix_lens)} (one per prefix length), got {batch}")
    prefix_lens = list(prefix_lens)
    if not prefix_lens or min(prefix_lens) < 0:
        raise ValueError(f"prefix_lens: expected non-negative lengths, got {prefix_lens}")
    device = torch.device(device)
    generator = torch.Generator().manual_seed(seed)
    parents = torch.stack([trees.make_tree(tree, tree_nodes, generator) for _ in prefix_lens])
    device_generator = torch.Generator(device=device).manual_seed(seed)

    def randn(*size, scale=1.0):
        return (torch.randn(*size, generator=device_generator, device=device, dtype=torch.float32)
                * scale).to(dtype)

    rows = [randn(length + tree_nodes, head_dim) for length in prefix_lens]
    kv_cache, block_table = _lay_out(rows, page_size, dtype, device, seed)
    q = randn(len(prefix_lens), tree_nodes, heads, head_dim, scale=q_scale)
    return VerifyProblem(
        q=q, kv_cache=kv_cache, block_table=block_table,
        prefix_lens=torch.tensor(prefix_lens, dtype=torch.int32, device=device),
        tree_mask=trees.parents_to_mask(parents).to(device), parents=parents.to(device),
        sm_scale=sm_scale, v_dim=v_dim, seed=seed, tree_kind=tree,
    )
