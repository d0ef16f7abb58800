"""Split-KV partial buffers and their merge, for kernels that reuse triton_splitkv's combine kernel."""

from __future__ import annotations

import torch
import triton


def partial_buffers(out: torch.Tensor, kv_splits: int) -> tuple[torch.Tensor, torch.Tensor]:
    """fp32 partial outputs [B * kv_splits * T * H, v_dim] and LSEs for ``out`` [B, T, H, v_dim];
    with one split the kernel writes ``out`` directly and both are ``out`` (unused)."""
    if kv_splits == 1:
        return out, out
    batch, tree_nodes, heads, v_dim = out.shape
    rows = batch * kv_splits * tree_nodes * heads
    return (torch.empty(rows, v_dim, dtype=torch.float32, device=out.device),
            torch.empty(rows, dtype=torch.float32, device=out.device))


def launch_combine(partial_out, partial_lse, out, kv_splits: int) -> None:
    """``out`` [B, T, H, v_dim] from fp32 partial outputs [B * kv_splits * T * H, v_dim] and their
    natural-log LSEs (an empty split has LSE -inf and weighs nothing)."""
    from .triton_splitkv import COMBINE_BLOCK_R, _combine_kernel

    batch, tree_nodes, heads, v_dim = out.shape
    _combine_kernel[(triton.cdiv(tree_nodes * heads, COMBINE_BLOCK_R), batch)](
        partial_out, partial_lse, out, out.stride(0), out.stride(1), out.stride(2), tree_nodes, heads,
        KV_SPLITS=kv_splits, SPLITS_POW2=triton.next_power_of_2(kv_splits), BLOCK_R=COMBINE_BLOCK_R,
        BLOCK_DV=v_dim, num_warps=4,
    )
