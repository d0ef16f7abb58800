"""The split-KV combine every Triton, Gluon and CuPy split variant shares: fp32 partial buffers indexed
by plan unit (verify_kernels/planner.py), natural-log LSEs, and one merge kernel (a program per
BLOCK_R rows of one request, its splits merged online in registers).

Partial row of (unit u, row r): u * T * H + r. A request whose plan gives it one split was written to
``out`` by the attention kernel itself; the combine leaves it alone.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

COMBINE_BLOCK_R = 4


@triton.jit
def _combine_kernel(PartialOut, PartialLse, Plan, Out, stride_ob, stride_ot, stride_oh, T, H, max_units,
                    BLOCK_R: tl.constexpr, BLOCK_DV: tl.constexpr):
    """out = sum_s exp(lse_s - m) O_s / sum_s exp(lse_s - m) over the request's splits, online in m."""
    row_block = tl.program_id(0)
    request = tl.program_id(1)
    first = tl.load(Plan + request)
    last = tl.minimum(tl.load(Plan + request + 1), max_units)  # never past the buffers, whatever the plan says
    if last - first > 1:
        num_rows = T * H
        rows = row_block * BLOCK_R + tl.arange(0, BLOCK_R)
        row_valid = rows < num_rows
        offs_dv = tl.arange(0, BLOCK_DV)
        m_i = tl.full([BLOCK_R], float("-inf"), dtype=tl.float32)
        total = tl.zeros([BLOCK_R], dtype=tl.float32)
        acc = tl.zeros([BLOCK_R, BLOCK_DV], dtype=tl.float32)
        for unit in range(first, last):
            partial_row = unit * num_rows + rows
            lse = tl.load(PartialLse + partial_row, mask=row_valid, other=float("-inf"))
            # An empty split (lse -inf) weighs nothing; keep exp() finite while every split so far is empty.
            m_new = tl.maximum(m_i, lse)
            m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
            alpha = tl.exp(m_i - m_safe)
            weight = tl.exp(lse - m_safe)
            partial = tl.load(PartialOut + partial_row.to(tl.int64)[:, None] * BLOCK_DV + offs_dv[None, :],
                              mask=row_valid[:, None] & (lse > float("-inf"))[:, None], other=0.0)
            acc = acc * alpha[:, None] + weight[:, None] * partial
            total = total * alpha + weight
            m_i = m_new
        acc = acc / tl.where(total > 0, total, 1.0)[:, None]
        node = rows // H
        head = rows % H
        out_ptrs = Out + request * stride_ob + node[:, None] * stride_ot + head[:, None] * stride_oh + offs_dv[None, :]
        tl.store(out_ptrs, acc.to(Out.dtype.element_ty), mask=row_valid[:, None])


def partial_buffers(out: torch.Tensor, max_units: int) -> tuple[torch.Tensor, torch.Tensor]:
    """fp32 partial outputs [max_units * T * H, v_dim] and their LSEs [max_units * T * H] for ``out``
    [B, T, H, v_dim]: bounded by the plan's unit count, allocated per call (in a captured graph, once)."""
    _, tree_nodes, heads, v_dim = out.shape
    rows = max_units * tree_nodes * heads
    return (torch.empty(rows, v_dim, dtype=torch.float32, device=out.device),
            torch.empty(rows, dtype=torch.float32, device=out.device))


def fixed_plan(batch: int, kv_splits: int, device) -> torch.Tensor:
    """The plan of a kernel that launches ``kv_splits`` splits for every request (units b * kv_splits + s):
    what the combine needs of it (verify_kernels/planner.py's layout, chunk unused)."""
    return torch.arange(0, (batch + 2) * kv_splits, kv_splits, dtype=torch.int32, device=device)


def launch_combine(partial_out, partial_lse, plan: torch.Tensor, out: torch.Tensor, max_units: int) -> None:
    """``out`` [B, T, H, v_dim] from the partial outputs of the plan's units (natural-log LSEs)."""
    batch, tree_nodes, heads, v_dim = out.shape
    _combine_kernel[(triton.cdiv(tree_nodes * heads, COMBINE_BLOCK_R), batch)](
        partial_out, partial_lse, plan, out, out.stride(0), out.stride(1), out.stride(2), tree_nodes, heads,
        max_units, BLOCK_R=COMBINE_BLOCK_R, BLOCK_DV=v_dim, num_warps=4,
    )
