"""The split-KV combine that every Triton and Gluon split variant shares: fp32 partial buffers and
the LSE merge kernel (one program per BLOCK_R rows of one request, all splits of a row in registers)."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

COMBINE_BLOCK_R = 4


@triton.jit
def _combine_kernel(PartialOut, PartialLse, Out, stride_ob, stride_ot, stride_oh, T, H,
                    KV_SPLITS: tl.constexpr, SPLITS_POW2: tl.constexpr, BLOCK_R: tl.constexpr,
                    BLOCK_DV: tl.constexpr):
    """Merge the splits of BLOCK_R rows: out = sum_s exp(lse_s - max) O_s / sum_s exp(lse_s - max)."""
    row_block = tl.program_id(0)
    request = tl.program_id(1)
    num_rows = T * H
    rows = row_block * BLOCK_R + tl.arange(0, BLOCK_R)
    row_valid = rows < num_rows
    splits = tl.arange(0, SPLITS_POW2)
    partial_rows = (request * KV_SPLITS + splits[None, :]) * num_rows + rows[:, None]  # [BLOCK_R, S]
    lse = tl.load(PartialLse + partial_rows, mask=row_valid[:, None] & (splits < KV_SPLITS)[None, :],
                  other=float("-inf"))
    lse_max = tl.max(lse, 1)
    lse_max = tl.where(lse_max == float("-inf"), 0.0, lse_max)
    weights = tl.exp(lse - lse_max[:, None])  # empty splits weigh 0
    total = tl.sum(weights, 1)
    offs_dv = tl.arange(0, BLOCK_DV)
    acc = tl.zeros([BLOCK_R, BLOCK_DV], dtype=tl.float32)
    for s in tl.static_range(KV_SPLITS):
        weight = tl.sum(tl.where(splits[None, :] == s, weights, 0.0), 1)
        row = (request * KV_SPLITS + s) * num_rows + rows
        partial = tl.load(PartialOut + row.to(tl.int64)[:, None] * BLOCK_DV + offs_dv[None, :],
                          mask=row_valid[:, None], other=0.0)
        acc += weight[:, None] * partial
    acc = acc / total[:, None]
    node = rows // H
    head = rows % H
    out_ptrs = Out + request * stride_ob + node[:, None] * stride_ot + head[:, None] * stride_oh + offs_dv[None, :]
    tl.store(out_ptrs, acc.to(Out.dtype.element_ty), mask=row_valid[:, None])



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
    batch, tree_nodes, heads, v_dim = out.shape
    _combine_kernel[(triton.cdiv(tree_nodes * heads, COMBINE_BLOCK_R), batch)](
        partial_out, partial_lse, out, out.stride(0), out.stride(1), out.stride(2), tree_nodes, heads,
        KV_SPLITS=kv_splits, SPLITS_POW2=triton.next_power_of_2(kv_splits), BLOCK_R=COMBINE_BLOCK_R,
        BLOCK_DV=v_dim, num_warps=4,
    )
