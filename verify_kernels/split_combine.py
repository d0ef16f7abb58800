"""The split-KV combine every Triton, Gluon and CuPy split variant shares: fp32 partial buffers indexed
by plan unit (verify_kernels/planner.py), natural-log LSEs, and one merge kernel: a program per row of
one request and column block of v_dim (``combine_grid``), its splits' LSEs in registers at once, their
partial rows ``split_tile`` at a time.

Partial row of (unit u, row r): u * T * H + r. A request whose plan gives it one split was written to
``out`` by the attention kernel itself; the combine leaves it alone.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from dataclasses import dataclass

from .arch import device_has
from .splits import sm_count

# A combine of few rows (a short tree: T x H = 128 rows, 66 splits) with one program per row leaves most SMs idle
# and each busy one with a few loads in flight: on an H200 it ran ~20 us after the attention kernel at 131072 / 16
# / 8. Cutting each row's v_dim into column blocks until the grid holds PROGRAMS_PER_SM programs per SM ran it in
# ~6 us (1.15x the whole call; results/notes/2026-12-06-short-trees.md).
PROGRAMS_PER_SM = 16
MAX_COLUMN_BLOCKS = 16
FLOATS_PER_THREAD = 32  # partial values a thread holds per load: split_tile x column block / (32 x warps)


@dataclass(frozen=True)
class CombineGrid:
    """The combine's launch: ``column_blocks`` programs per (row, request), ``warps`` each, ``split_tile``
    partial rows per load."""

    column_blocks: int
    warps: int
    split_tile: int


def combine_grid(rows: int, v_dim: int, sms: int) -> CombineGrid:
    """Column blocks (powers of two, at most MAX_COLUMN_BLOCKS, each at least 32 columns) until ``rows``
    (T x H x B) x blocks reaches PROGRAMS_PER_SM x ``sms``; up to 4 warps a program (one per 128 columns),
    and as many partial rows a load as FLOATS_PER_THREAD allows, a power of two (one row of 512 columns: 4 warps,
    8 rows, the launch before column blocks)."""
    blocks = 1
    while blocks < MAX_COLUMN_BLOCKS and rows * blocks < PROGRAMS_PER_SM * sms and v_dim % (64 * blocks) == 0:
        blocks *= 2
    columns = v_dim // blocks
    warps = max(1, min(4, columns // 128))
    rows_per_load = max(1, FLOATS_PER_THREAD * 32 * warps // columns)
    return CombineGrid(blocks, warps, 1 << (rows_per_load.bit_length() - 1))  # a power of two (tl.arange)


@triton.jit
def _combine_kernel(PartialOut, PartialLse, Plan, Out, stride_ob, stride_ot, stride_oh, T, H, max_units,
                    SPLITS_POW2: tl.constexpr, SPLIT_TILE: tl.constexpr, BLOCK_DV: tl.constexpr, DV: tl.constexpr,
                    PDL: tl.constexpr):
    """Columns [c x BLOCK_DV, (c + 1) x BLOCK_DV) of one row of one request (c: program axis 2):
    out = sum_s exp(lse_s - m) O_s / sum_s exp(lse_s - m) over its splits. All LSEs are read at once;
    the partial rows SPLIT_TILE at a time, independent loads in flight. PDL: launched programmatically,
    so it first waits for the attention kernel's partial rows."""
    row = tl.program_id(0)
    request = tl.program_id(1)
    column = tl.program_id(2) * BLOCK_DV
    if PDL:
        tl.extra.cuda.gdc_wait()
    first = tl.load(Plan + request)
    count = tl.minimum(tl.load(Plan + request + 1), max_units) - first  # never past the buffers
    if count > 1:
        num_rows = T * H
        splits = tl.arange(0, SPLITS_POW2)
        lse = tl.load(PartialLse + (first + splits) * num_rows + row, mask=splits < count, other=float("-inf"))
        m = tl.max(lse, 0)
        m = tl.where(m == float("-inf"), 0.0, m)  # every split empty: all weights 0
        total = tl.sum(tl.exp(lse - m), 0)
        offs_dv = column + tl.arange(0, BLOCK_DV)
        acc = tl.zeros([BLOCK_DV], dtype=tl.float32)
        for tile in range(0, count, SPLIT_TILE):
            unit = first + tile + tl.arange(0, SPLIT_TILE)
            live = tile + tl.arange(0, SPLIT_TILE) < count
            lse_tile = tl.load(PartialLse + unit * num_rows + row, mask=live, other=float("-inf"))
            partial_rows = (unit * num_rows + row).to(tl.int64)
            # An empty split (lse -inf) weighs nothing, whatever its partial row holds.
            partial = tl.load(PartialOut + partial_rows[:, None] * DV + offs_dv[None, :],
                              mask=(live & (lse_tile > float("-inf")))[:, None], other=0.0)
            acc += tl.sum(tl.exp(lse_tile - m)[:, None] * partial, 0)
        acc = acc / tl.where(total > 0, total, 1.0)
        node = row // H
        head = row % H
        tl.store(Out + request * stride_ob + node * stride_ot + head * stride_oh + offs_dv,
                 acc.to(Out.dtype.element_ty))


def partial_buffers(out: torch.Tensor, max_units: int) -> tuple[torch.Tensor, torch.Tensor]:
    """fp32 partial outputs [max_units * T * H, v_dim] and their LSEs [max_units * T * H] for ``out``
    [B, T, H, v_dim]: bounded by the plan's unit count, allocated per call (in a captured graph, once)."""
    _, tree_nodes, heads, v_dim = out.shape
    rows = max_units * tree_nodes * heads
    return (torch.empty(rows, v_dim, dtype=torch.float32, device=out.device),
            torch.empty(rows, dtype=torch.float32, device=out.device))


def launch_combine(partial_out, partial_lse, plan: torch.Tensor, out: torch.Tensor, max_units: int,
                   max_splits: int, grid: CombineGrid | None = None) -> None:
    """``out`` [B, T, H, v_dim] from the partial outputs of the plan's units (natural-log LSEs);
    ``max_splits``: the most units one request can have (planner.PlanBounds.max_splits); ``grid``: the
    launch (default ``combine_grid`` for this GPU). Where the GPU has griddepcontrol the launch is
    programmatic: scheduled while the attention kernel ends."""
    batch, tree_nodes, heads, v_dim = out.shape
    grid = grid or combine_grid(batch * tree_nodes * heads, v_dim, sm_count(out.device))
    pdl = device_has(out.device, "griddepcontrol")
    _combine_kernel[(tree_nodes * heads, batch, grid.column_blocks)](
        partial_out, partial_lse, plan, out, out.stride(0), out.stride(1), out.stride(2), tree_nodes, heads,
        max_units, SPLITS_POW2=triton.next_power_of_2(max(2, max_splits)), SPLIT_TILE=grid.split_tile,
        BLOCK_DV=v_dim // grid.column_blocks, DV=v_dim, PDL=pdl, num_warps=grid.warps,
        **({"launch_pdl": True} if pdl else {}),
    )
