"""Merge of split-KV partial outputs for kernels that reuse triton_splitkv's combine kernel."""

from __future__ import annotations

import triton


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
