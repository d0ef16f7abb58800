"""Logical position -> flat pool slot, the one piece of paging arithmetic the host side shares."""

from __future__ import annotations

import torch


def flat_slots(block_table: torch.Tensor, positions: torch.Tensor, page_size: int) -> torch.Tensor:
    """Slot indices into ``kv_cache.view(-1, D)`` for logical ``positions``.

    block_table [max_pages] with positions [N], or [B, max_pages] with positions [B, N].
    """
    positions = positions.to(torch.int64)
    pages = torch.gather(block_table.to(torch.int64), -1, positions // page_size)
    return pages * page_size + positions % page_size
