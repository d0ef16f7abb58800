"""``commit_accepted``: after verification, move the accepted path's KV rows to contiguous positions.

The tree's T rows sit at positions prefix_len .. prefix_len+T-1 in node order; the accepted path
(root first, nodes increasing along it) must end up at prefix_len .. prefix_len+n-1 so the next
step's prefix is contiguous, whatever the page size. This is the small step that lets the pool use
pages larger than one token.

In place, on the device, no host sync (graph-capturable): entries past a request's accepted length
repeat the root's copy (identical duplicates, so the scatter stays deterministic). Gather then
scatter, so overlapping source and destination rows are safe.
"""

from __future__ import annotations

import torch

from .paging import flat_slots


def commit_accepted(kv_cache: torch.Tensor, block_table: torch.Tensor, prefix_lens: torch.Tensor,
                    accepted: torch.Tensor, accepted_lens: torch.Tensor) -> torch.Tensor:
    """Copy rows of accepted nodes to positions prefix_len + i; return the new prefix lengths.

    kv_cache [num_pages, page_size, D]; block_table [B, max_pages] int32; prefix_lens [B] int32;
    accepted [B, A] node indices, path order (entries past accepted_lens[b] are ignored);
    accepted_lens [B] (>= 1: the root, the previous bonus token, is always kept).
    """
    if accepted.dim() != 2 or accepted.shape[0] != prefix_lens.shape[0]:
        raise ValueError(f"accepted: expected shape [B={prefix_lens.shape[0]}, A], got {tuple(accepted.shape)}")
    if accepted_lens.shape != prefix_lens.shape:
        raise ValueError(f"accepted_lens: expected shape {tuple(prefix_lens.shape)}, got {tuple(accepted_lens.shape)}")
    page_size = kv_cache.shape[1]
    index = torch.arange(accepted.shape[1], device=accepted.device)
    live = index[None, :] < accepted_lens[:, None].to(index.dtype)
    base = prefix_lens.to(torch.int64)[:, None]
    source = base + accepted.to(torch.int64)
    target = base + index[None, :]
    source = torch.where(live, source, source[:, :1])  # dead entries repeat entry 0's copy
    target = torch.where(live, target, target[:, :1])

    flat = kv_cache.view(-1, kv_cache.shape[-1])
    rows = flat.index_select(0, flat_slots(block_table, source, page_size).reshape(-1))
    flat.index_copy_(0, flat_slots(block_table, target, page_size).reshape(-1), rows)
    return (prefix_lens + accepted_lens.to(prefix_lens.dtype)).to(prefix_lens.dtype)
