"""Variant ``gluon_wgmma_ws``: paged split-KV tree-verify attention on Hopper, warp-specialized (Gluon).

Why warpgroups with roles: the first Hopper kernel (``gluon_wgmma``, retired 2026-12-07) split S = Q K^T
by columns over its two warpgroups, so each issued m64n32 wgmma that read all of Q from shared memory per
32 KV rows. At n32 a wgmma needs more shared-memory bandwidth than tensor time (3 KB per 16 clocks of
math), and both warpgroups stopped at the same barriers for every softmax. Here the warpgroups have
roles, the way FlashMLA's first Hopper kernel splits the work:

- warpgroup 0 (the default partition): S = Q K^T of the whole tile (m64nBLOCK_N, balanced
  shared-memory and tensor time), the online softmax (row reductions inside a warp), hands P and
  the rescale factor to warpgroup 1 through shared memory, then O[:, :256] += P V[:, :256] with P
  from registers;
- warpgroup 1 (the worker partition): copies KV tiles into a 2-stage ring (TMA: a tile's rows
  from one page, 64 x 64 boxes issued by one lane per warp; cp.async, positions clamped, for
  pages smaller than the tile and for the sequence's last partial tile), and computes
  O[:, 256:] += P V[:, 256:] with P read from shared memory, so its half of P V overlaps warpgroup
  0's next S and softmax. TMA instead of cp.async: 9-11% faster at T 64-256 (no addresses, no
  per-row block-table reads, no cp.async issue on the warpgroup that also does P V).

CTA: 64 query rows (row r = node * H + head) against its work of the plan (planner.py): by default
(``waves`` 0) a span of the batch's KV tiles laid end to end, which may cross requests: the CTA walks
it segment by segment (the part inside one request), warpgroup 0 loading that request's Q rows at
each, both warpgroups writing each segment's output (or its partial rows, which the shared combine
merges); with a units rule, one unit of one request. With a ``segment_cost`` (``GAPS``) the plan lays a
gap before each request but the first, so a span that meets many requests gets fewer tiles; a segment's
tiles are those past its request's gap, and a span's last segment may lie inside one: no Q, no tile, no
row-sum hand-off, empty partial rows. Tiles of BLOCK_N positions. Shared memory: Q
[64, 576], 2 x KV [BLOCK_N, 576], P [64, BLOCK_N], the rescale factor and the row sums. Barriers
(mbarriers), their phases counted over the CTA's tiles across segments: kv_ready[stage] (one arrival
per loader thread, and the TMA byte count), kv_free[stage] (both warpgroups done with a stage),
p_ready / p_free (the P hand-off), sums_ready (a segment's row sums for warpgroup 1's normalisation).

Positions past the sequence are clamped to its last row when copied and masked to -inf in S; rows
past T x H are clamped and not stored. The kernel after the plan and the combine after the kernel
are programmatic launches (griddepcontrol), so each is scheduled while the one before ends.
Hopper only (sm_90); the CPU suite compiles it for sm_90, the GPU suite checks it against the oracle.
"""

from __future__ import annotations

import functools

import torch
import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.ampere import async_copy
from triton.experimental.gluon.language.nvidia.hopper import (fence_async_shared, mbarrier, warpgroup_mma,
                                                              warpgroup_mma_wait)
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

from .arch import device_has, load_arch
from . import planner
from .gluon_common import (BLOCK_M, BLOCK_N_CHOICES, CHECK_PAGE_SIZES, CPU_INTERPRETABLE, LN2, LOG2E, PAGE_SIZES,
                           copy_q_rows, copy_rows, cta_barrier, cta_range, launch_dependents, masked_scores, pool_rows,
                           segment_at,
                           tma_async_load, unsupported_reason, wait_for_prior_grids)
from .gluon_common import DEFAULT_CONFIG as _GLUON_DEFAULTS
from .splits import sm_count

# waves 0: the planner's spans rule (planner.plan_bounds): one CTA per SM, each walking an equal span
# of the batch's tiles across request boundaries.
DEFAULT_CONFIG = {**_GLUON_DEFAULTS, "waves": planner.SPANS}
# gluon_common's three, and the units rule the spans replaced: one wave at BLOCK_N 64, two at BLOCK_N 32.
# Optional keys and the value the kernel takes when they are not named (variants.config_keys): ``segment_cost``,
# the positions a segment's set-up weighs in the spans rule's balance (planner.plan_bounds; 0: none, and the
# kernel compiles without GAPS, exactly as before the key existed).
OPTIONAL_CONFIG = {"segment_cost": 0}
# gluon_common's three, the units rule the spans replaced (one wave at BLOCK_N 64, two at BLOCK_N 32) and the
# spans with gaps (FlashMLA's five 64-token blocks a split; 32-token tiles, so a gap of ten).
CHECK_CONFIGS = ({}, {"kv_splits": 3, "BLOCK_N": 32}, {"kv_splits": 8}, {"waves": 1}, {"waves": 2, "BLOCK_N": 32},
                 {"segment_cost": 320}, {"segment_cost": 320, "BLOCK_N": 32})

# The variant interface (verify_kernels/variants.py); what it shares with gluon_wgmma_sym comes from gluon_common.
__all__ = ["BLOCK_N_CHOICES", "CHECK_CONFIGS", "CHECK_PAGE_SIZES", "CPU_INTERPRETABLE", "DEFAULT_CONFIG",
           "OPTIONAL_CONFIG", "PAGE_SIZES", "complete_config", "kernel_specs", "offline_arch_problem", "run",
           "unsupported_reason"]

PARTITION_WARPS = 4  # each partition is one warpgroup; the CTA has 8 warps
LOADER_THREADS = gl.constexpr(PARTITION_WARPS * 32)
WORKER_REGISTERS = 232


@gluon.jit
def _load_tile(kv_lat, kv_rope, kv_ready, stage, KV, lat_desc, rope_desc, table, tile_start, seq_len,
               PAGE_SIZE: gl.constexpr, BLOCK_N: gl.constexpr, DV: gl.constexpr, DR: gl.constexpr):
    """Copy one KV tile into ``stage``; kv_ready[stage] (count 128) completes when it has landed.

    A whole tile inside one page and the sequence goes by TMA: two bulk copies (latent, rope) of
    BLOCK_N pool rows issued by one thread, the bytes counted by the barrier. Any other tile (pages
    smaller than BLOCK_N, the sequence's last partial tile) goes by cp.async with its positions
    clamped to the last row, so no row past the sequence (NaN in unused slots) reaches P V.
    """
    if (PAGE_SIZE >= BLOCK_N) & (tile_start + BLOCK_N <= seq_len):
        row = gl.load(table + tile_start // PAGE_SIZE) * PAGE_SIZE + tile_start % PAGE_SIZE
        mbarrier.expect(kv_ready.index(stage), BLOCK_N * (DV + DR) * KV.dtype.element_ty.primitive_bitwidth // 8)
        mbarrier.arrive(kv_ready.index(stage), count=LOADER_THREADS - 1)  # the count is one per loader thread
        tma_async_load(lat_desc, [row, 0], kv_ready.index(stage), kv_lat.index(stage))
        tma_async_load(rope_desc, [row, 0], kv_ready.index(stage), kv_rope.index(stage))
    else:
        lat_layout: gl.constexpr = gl.BlockedLayout([1, 8], [1, 32], [4, 1], [1, 0])
        rope_layout: gl.constexpr = gl.BlockedLayout([1, 8], [4, 8], [4, 1], [1, 0])
        lat_rows = pool_rows(table, tile_start, seq_len, PAGE_SIZE, BLOCK_N, lat_layout)
        copy_rows(kv_lat.index(stage), KV, lat_rows, DV + DR, DV, lat_layout)
        rope_rows = pool_rows(table, tile_start, seq_len, PAGE_SIZE, BLOCK_N, rope_layout)
        copy_rows(kv_rope.index(stage), KV + DV, rope_rows, DV + DR, DR, rope_layout)
        # Each loader thread's arrival (no increment: the barrier counts one per thread) lands when its
        # copies have. The earlier form (every thread's arrival incrementing the pending count, then a
        # named barrier and one plain arrival) made synccheck report "Missing wait" and "Barrier
        # overflow" and stop the kernel; this one is synccheck-clean and as fast
        # (results/notes/2026-12-03-sanitizer-reports.md).
        async_copy.mbarrier_arrive(kv_ready.index(stage), increment_count=False)


@gluon.jit
def _softmax_tile(s, m_i, l_i, scale_log2, tile_start, prefix_len, seq_len, mask_rows, row_valid,
                  BLOCK_N: gl.constexpr, s_layout: gl.constexpr):
    """Online softmax (fp32, base 2) of one S tile: P, the new running max and sum, and alpha, the
    factor that rescales O."""
    scores = masked_scores(s, scale_log2, tile_start, prefix_len, seq_len, mask_rows, row_valid, BLOCK_N, s_layout)
    m_new = gl.maximum(m_i, gl.max(scores, 1))
    m_safe = gl.where(m_new == float("-inf"), 0.0, m_new)  # a row may see nothing in this split
    alpha = gl.exp2(m_i - m_safe)
    p = gl.exp2(scores - gl.expand_dims(m_safe, 1))
    return p, m_new, l_i * alpha + gl.sum(p, 1), alpha


@gluon.jit
def _store_half(acc, sums, m_i, half, row_block, unit, splits, request, num_rows, H, Out, PartialOut, PartialLse,
                stride_ob, stride_ot, stride_oh, WRITE_LSE: gl.constexpr, DV: gl.constexpr, o_layout: gl.constexpr):
    """Normalise and store output columns [half * DV/2, +DV/2) of the block (and the LSE once): into
    ``out`` when the request has one unit, else into the unit's partial rows."""
    BLOCK_M: gl.constexpr = 64
    has_mass = sums > 0
    out_tile = acc / gl.expand_dims(gl.where(has_mass, sums, 1.0), 1)
    rows_o = row_block * BLOCK_M + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, o_layout))
    cols_o = half * (DV // 2) + gl.arange(0, DV // 2, layout=gl.SliceLayout(0, o_layout))
    row_valid = gl.expand_dims(rows_o < num_rows, 1)
    if splits == 1:
        out_row = request * stride_ob + (rows_o // H) * stride_ot + (rows_o % H) * stride_oh
        gl.store(Out + gl.expand_dims(out_row, 1) + gl.expand_dims(cols_o, 0), out_tile.to(Out.dtype.element_ty),
                 mask=row_valid)
    else:
        partial_row = unit * num_rows + rows_o
        gl.store(PartialOut + gl.expand_dims(partial_row.to(gl.int64) * DV, 1) + gl.expand_dims(cols_o, 0),
                 out_tile, mask=row_valid)
        if WRITE_LSE:
            lse = gl.where(has_mass, (m_i + gl.log2(gl.where(has_mass, sums, 1.0))) * LN2, float("-inf"))
            gl.store(PartialLse + partial_row, lse, mask=rows_o < num_rows)


@gluon.jit
def _load_q(Q, q_lat, q_rope, request, row_block, num_rows, H, stride_qb, stride_qt, stride_qh,
            DV: gl.constexpr, DR: gl.constexpr):
    """Q rows of this block of ``request`` (clamped to its last row) into shared memory, by cp.async
    of warpgroup 0's 128 threads; returns when they have landed and are visible to wgmma."""
    lat_layout: gl.constexpr = gl.BlockedLayout([1, 8], [1, 32], [4, 1], [1, 0])
    rope_layout: gl.constexpr = gl.BlockedLayout([1, 8], [4, 8], [4, 1], [1, 0])
    copy_q_rows(q_lat, q_rope, Q + request * stride_qb, row_block, num_rows, H, stride_qt, stride_qh, DV, DR,
                lat_layout, rope_layout)
    async_copy.commit_group()
    async_copy.wait_group(0)
    fence_async_shared()
    cta_barrier()


@gluon.jit
def _scores_partition(Q, q_lat, q_rope, kv_lat, kv_rope, p_smem, alpha_smem, sums_smem, kv_ready, kv_free, p_ready,
                      p_free, sums_ready, Plan, PrefixLens, TreeMask, Out, PartialOut, PartialLse, scale_log2,
                      stride_qb, stride_qt, stride_qh, stride_mask_b, stride_mask_t, stride_ob, stride_ot, stride_oh,
                      row_block, begin, end, first_unit, segments, first_request, T, H, B, BLOCK_N: gl.constexpr,
                      GAPS: gl.constexpr, DV: gl.constexpr, DR: gl.constexpr):
    """Warpgroup 0: per segment, its Q rows; per tile, S, softmax, the P hand-off and the left half of O."""
    BLOCK_M: gl.constexpr = 64
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                       instr_shape=[16, BLOCK_N, 16])
    o_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                       instr_shape=[16, DV // 2, 16])
    p_operand: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=2)
    num_rows = T * H
    rows_s = row_block * BLOCK_M + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, s_layout))
    s_zero = gl.zeros([BLOCK_M, BLOCK_N], gl.float32, layout=s_layout)
    position = begin
    done = 0  # tiles of the CTA's earlier segments: the ring's and the P hand-off's running count
    for k in range(segments):
        request = first_request + k
        start, num_tiles, splits, laid = segment_at(Plan, request, position, end, B, BLOCK_N, GAPS)
        prefix_len = gl.load(PrefixLens + request)
        seq_len = prefix_len + T
        if GAPS:  # a segment inside a gap has no tile (only a span's last can be one): no Q rows either
            if num_tiles > 0:
                _load_q(Q, q_lat, q_rope, request, row_block, num_rows, H, stride_qb, stride_qt, stride_qh, DV, DR)
        else:
            _load_q(Q, q_lat, q_rope, request, row_block, num_rows, H, stride_qb, stride_qt, stride_qh, DV, DR)
        mask_rows = TreeMask + request * stride_mask_b + (gl.minimum(rows_s, num_rows - 1) // H) * stride_mask_t
        m_i = gl.full([BLOCK_M], float("-inf"), gl.float32, layout=gl.SliceLayout(1, s_layout))
        l_i = gl.zeros([BLOCK_M], gl.float32, layout=gl.SliceLayout(1, s_layout))
        acc = gl.zeros([BLOCK_M, DV // 2], gl.float32, layout=o_layout)
        for i in range(num_tiles):
            tile = done + i
            stage = tile % 2
            mbarrier.wait(kv_ready.index(stage), (tile // 2) & 1)
            fence_async_shared()
            lat = kv_lat.index(stage)
            s = warpgroup_mma(q_lat, lat.permute((1, 0)), s_zero, use_acc=False, is_async=True)
            s = warpgroup_mma(q_rope, kv_rope.index(stage).permute((1, 0)), s, is_async=True)
            s = warpgroup_mma_wait(num_outstanding=0, deps=(s, ))
            p, m_i, l_i, alpha = _softmax_tile(s, m_i, l_i, scale_log2, start + i * BLOCK_N, prefix_len, seq_len,
                                               mask_rows, rows_s < num_rows, BLOCK_N, s_layout)
            p = p.to(q_lat.dtype)
            # The P hand-off. racecheck reports alpha_smem's store here against its load in the loader
            # (P itself goes by stmatrix / ldmatrix, which racecheck does not flag); the order it misses:
            # each warpgroup's 128 threads meet at their own named barrier (cta_barrier), then one thread
            # arrives on the mbarrier (release, CTA scope); the other warpgroup's try_wait on that phase
            # acquires. So every load of P(i - 1) / alpha(i - 1) precedes, through p_free, every store of
            # P(i) / alpha(i), and every store precedes, through p_ready, the loads of P(i) / alpha(i).
            # With this hand-off behind CTA-wide barriers instead (barrier.sync N, every thread;
            # experiments/sanitizer/cta_handoff*.diff) racecheck reports nothing on alpha_smem, and
            # reports the row sums there, which sums_ready hands off exactly as p_ready does here: it
            # flags the mbarrier ordering, not a missing one (results/notes/2026-12-03-sanitizer-reports.md).
            mbarrier.wait(p_free, (tile & 1) ^ 1)  # warpgroup 1 has read P(tile - 1)
            p_smem.store(p)
            alpha_smem.store(alpha)
            cta_barrier()
            mbarrier.arrive(p_ready)
            acc = acc * gl.expand_dims(gl.convert_layout(alpha, gl.SliceLayout(1, o_layout)), 1)
            acc = warpgroup_mma(gl.convert_layout(p, p_operand), lat.slice(0, DV // 2, dim=1), acc, is_async=True)
            acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc, ))
            cta_barrier()
            mbarrier.arrive(kv_free.index(stage))
        if GAPS:
            # A segment without tiles hands no row sums (warpgroup 1 may still read the last segment's, and
            # nothing orders this store after it): its partial rows are empty whatever the sums.
            if num_tiles > 0:
                mbarrier.wait(p_free, (done + num_tiles - 1) & 1)
                sums_smem.store(l_i)
                cta_barrier()
                mbarrier.arrive(sums_ready)
        else:
            if num_tiles > 0:
                # Warpgroup 1 has read this segment's last P, hence the previous segment's row sums.
                mbarrier.wait(p_free, (done + num_tiles - 1) & 1)
            sums_smem.store(l_i)
            cta_barrier()
            mbarrier.arrive(sums_ready)
        _store_half(acc, gl.convert_layout(l_i, gl.SliceLayout(1, o_layout)),
                    gl.convert_layout(m_i, gl.SliceLayout(1, o_layout)), 0, row_block, first_unit + k, splits, request,
                    num_rows, H, Out, PartialOut, PartialLse, stride_ob, stride_ot, stride_oh, True, DV, o_layout)
        done += num_tiles
        position += laid


@gluon.jit
def _loader_partition(kv_lat, kv_rope, p_smem, alpha_smem, sums_smem, kv_ready, kv_free, p_ready, p_free,
                      sums_ready, KV, lat_desc, rope_desc, BlockTable, Plan, PrefixLens, Out, PartialOut, PartialLse,
                      stride_table_b, stride_ob, stride_ot, stride_oh, row_block, begin, end, first_unit, segments,
                      first_request, T, H, B, PAGE_SIZE: gl.constexpr, BLOCK_N: gl.constexpr, GAPS: gl.constexpr,
                      DV: gl.constexpr, DR: gl.constexpr):
    """Warpgroup 1: the KV tile copies and the right half of O, segment by segment."""
    BLOCK_M: gl.constexpr = 64
    o_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                       instr_shape=[16, DV // 2, 16])
    p_operand: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=2)
    num_rows = T * H
    position = begin
    done = 0
    for k in range(segments):
        request = first_request + k
        start, num_tiles, splits, laid = segment_at(Plan, request, position, end, B, BLOCK_N, GAPS)
        seq_len = gl.load(PrefixLens + request) + T
        table = BlockTable + request * stride_table_b
        acc = gl.zeros([BLOCK_M, DV // 2], gl.float32, layout=o_layout)
        for j in gl.static_range(2):  # the segment's first two tiles, once both warpgroups freed their stages
            if j < num_tiles:
                tile = done + j
                if tile >= 2:
                    mbarrier.wait(kv_free.index(tile % 2), ((tile - 2) // 2) & 1)
                _load_tile(kv_lat, kv_rope, kv_ready, tile % 2, KV, lat_desc, rope_desc, table, start + j * BLOCK_N,
                           seq_len, PAGE_SIZE, BLOCK_N, DV, DR)
        for i in range(num_tiles):
            tile = done + i
            stage = tile % 2
            mbarrier.wait(p_ready, tile & 1)
            p = p_smem.load(p_operand)
            alpha = alpha_smem.load(gl.SliceLayout(1, o_layout))
            cta_barrier()
            mbarrier.arrive(p_free)
            mbarrier.wait(kv_ready.index(stage), (tile // 2) & 1)
            fence_async_shared()
            acc = acc * gl.expand_dims(alpha, 1)
            acc = warpgroup_mma(p, kv_lat.index(stage).slice(DV // 2, DV // 2, dim=1), acc, is_async=True)
            acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc, ))
            cta_barrier()
            mbarrier.arrive(kv_free.index(stage))
            if i + 2 < num_tiles:
                mbarrier.wait(kv_free.index(stage), (tile // 2) & 1)  # warpgroup 0 is done with it too
                _load_tile(kv_lat, kv_rope, kv_ready, stage, KV, lat_desc, rope_desc, table,
                           start + (i + 2) * BLOCK_N, seq_len, PAGE_SIZE, BLOCK_N, DV, DR)
        if GAPS:  # a segment without tiles (a span's last) gets no row sums: its partial rows are zeros
            sums = gl.zeros([BLOCK_M], gl.float32, layout=gl.SliceLayout(1, o_layout))
            if num_tiles > 0:
                mbarrier.wait(sums_ready, k & 1)
                sums = sums_smem.load(gl.SliceLayout(1, o_layout))
        else:
            mbarrier.wait(sums_ready, k & 1)
            sums = sums_smem.load(gl.SliceLayout(1, o_layout))
        # The running max is only read for the LSE, which warpgroup 0 writes: ``sums`` stands in for it.
        _store_half(acc, sums, sums, 1, row_block, first_unit + k, splits, request, num_rows, H, Out, PartialOut,
                    PartialLse, stride_ob, stride_ot, stride_oh, False, DV, o_layout)
        done += num_tiles
        position += laid


@gluon.jit
def _ws_verify_kernel(
    Q, KV, LatDesc, RopeDesc, BlockTable, PrefixLens, TreeMask, Plan, PartialOut, PartialLse, Out,
    scale_log2,
    stride_qb, stride_qt, stride_qh,
    stride_table_b,
    stride_mask_b, stride_mask_t,
    stride_ob, stride_ot, stride_oh,
    T, H, B,
    PAGE_SIZE: gl.constexpr, BLOCK_N: gl.constexpr, DV: gl.constexpr, DR: gl.constexpr,
    B_POW2: gl.constexpr, SPANS: gl.constexpr, PDL: gl.constexpr, WORKER_REGS: gl.constexpr, GAPS: gl.constexpr,
):
    BLOCK_M: gl.constexpr = 64
    dtype: gl.constexpr = KV.dtype.element_ty
    row_layout: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, [0])

    row_block = gl.program_id(0)
    cta = gl.program_id(1)
    q_lat = gl.allocate_shared_memory(dtype, [BLOCK_M, DV], gl.NVMMASharedLayout.get_default_for([BLOCK_M, DV], dtype))
    q_rope = gl.allocate_shared_memory(dtype, [BLOCK_M, DR], gl.NVMMASharedLayout.get_default_for([BLOCK_M, DR], dtype))
    kv_lat = gl.allocate_shared_memory(dtype, [2, BLOCK_N, DV],
                                       gl.NVMMASharedLayout.get_default_for([BLOCK_N, DV], dtype))
    kv_rope = gl.allocate_shared_memory(dtype, [2, BLOCK_N, DR],
                                        gl.NVMMASharedLayout.get_default_for([BLOCK_N, DR], dtype))
    p_smem = gl.allocate_shared_memory(dtype, [BLOCK_M, BLOCK_N],
                                       gl.NVMMASharedLayout.get_default_for([BLOCK_M, BLOCK_N], dtype))
    alpha_smem = gl.allocate_shared_memory(gl.float32, [BLOCK_M], row_layout)
    sums_smem = gl.allocate_shared_memory(gl.float32, [BLOCK_M], row_layout)
    kv_ready = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    kv_free = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    p_ready = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    p_free = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    sums_ready = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    for stage in gl.static_range(2):
        mbarrier.init(kv_ready.index(stage), count=LOADER_THREADS)  # TMA: 1 with the byte count + 127; cp.async: 1 each
        mbarrier.init(kv_free.index(stage), count=2)        # one per warpgroup
    mbarrier.init(p_ready, count=1)
    mbarrier.init(p_free, count=1)
    mbarrier.init(sums_ready, count=1)
    fence_async_shared()
    cta_barrier()
    if PDL:  # launched programmatically: the set-up above overlapped the plan kernel, which the plan needs
        wait_for_prior_grids()
        launch_dependents()  # the combine may be scheduled; it waits for this grid before it reads
    begin, end, first_unit, segments, first_request = cta_range(Plan, cta, B, B_POW2, BLOCK_N, SPANS, 4)

    gl.warp_specialize([
        (_scores_partition, (Q, q_lat, q_rope, kv_lat, kv_rope, p_smem, alpha_smem, sums_smem, kv_ready, kv_free,
                             p_ready, p_free, sums_ready, Plan, PrefixLens, TreeMask, Out, PartialOut, PartialLse,
                             scale_log2, stride_qb, stride_qt, stride_qh, stride_mask_b, stride_mask_t, stride_ob,
                             stride_ot, stride_oh, row_block, begin, end, first_unit, segments, first_request, T, H, B,
                             BLOCK_N, GAPS, DV, DR)),
        (_loader_partition, (kv_lat, kv_rope, p_smem, alpha_smem, sums_smem, kv_ready, kv_free, p_ready, p_free,
                             sums_ready, KV, LatDesc, RopeDesc, BlockTable, Plan, PrefixLens, Out, PartialOut,
                             PartialLse, stride_table_b, stride_ob, stride_ot, stride_oh, row_block, begin, end,
                             first_unit, segments, first_request, T, H, B, PAGE_SIZE, BLOCK_N, GAPS, DV, DR)),
    ], [4], [WORKER_REGS])


@functools.lru_cache(maxsize=None)
def _tile_layout(rows: int, columns: int, dtype: torch.dtype):
    """The kernel's shared-memory layout of a [rows, columns] tile (built once: about 20 us each)."""
    return gl.NVMMASharedLayout.get_default_for([rows, columns], gl.bfloat16 if dtype == torch.bfloat16
                                                else gl.float16)


def kv_descriptors(kv_cache, block_n: int, v_dim: int):
    """TMA descriptors of the pool as rows [num_pages * page_size, Dqk]: the latent columns and the
    rope columns, each a box of ``block_n`` rows in the kernel's shared-memory layout."""
    rows = kv_cache.view(-1, kv_cache.shape[-1])
    rope_dim = rows.shape[1] - v_dim
    return (TensorDescriptor(rows, [rows.shape[0], v_dim], [rows.shape[1], 1], [block_n, v_dim],
                             _tile_layout(block_n, v_dim, kv_cache.dtype)),
            TensorDescriptor(rows[:, v_dim:], [rows.shape[0], rope_dim], [rows.shape[1], 1], [block_n, rope_dim],
                             _tile_layout(block_n, rope_dim, kv_cache.dtype)))


def complete_config(config: dict, shape) -> dict:
    """Check BLOCK_N and the plan keys (``kv_splits`` 0 with ``waves`` 0: the planner's spans, one CTA
    per SM at BLOCK_N 64's 224 KB of shared memory; ``waves`` N: its units rule; ``kv_splits`` N: N
    splits per request; ``segment_cost``: a non-negative int, with the spans rule only)."""
    if config["BLOCK_N"] not in BLOCK_N_CHOICES:
        raise ValueError(f"config: BLOCK_N must be one of {BLOCK_N_CHOICES}, got {config['BLOCK_N']}")
    return planner.check_plan_config(config, spans=True)


def run(q, kv_cache, block_table, prefix_lens, tree_mask, *, sm_scale, v_dim, out, config):
    """Plan on the device, launch the kernel, then the shared combine unless kv_splits = 1; ``out``
    written in place (``launch_planned``)."""
    launch_planned(_ws_verify_kernel, kv_descriptors(kv_cache, config["BLOCK_N"], v_dim), q, kv_cache, block_table,
                   prefix_lens, tree_mask, sm_scale=sm_scale, v_dim=v_dim, out=out, config=config,
                   worker_regs=WORKER_REGISTERS)


def launch_planned(kernel, descriptors, q, kv_cache, block_table, prefix_lens, tree_mask, *, sm_scale, v_dim, out,
                   config, worker_regs):
    """The launches of a planned Gluon kernel (this one and ``gluon_wgmma_sym``): the plan on the device,
    ``kernel`` (Q, KV, its TMA ``descriptors``, then the arguments below, in this kernel's order) on one CTA
    per SM, then the shared combine unless kv_splits = 1. Each launch after the plan is programmatic where
    the GPU has it: it is scheduled while the one before ends and waits for it on the device."""
    from .split_combine import launch_combine, partial_buffers

    batch, tree_nodes, heads, head_dim = q.shape
    block_n = config["BLOCK_N"]
    row_blocks = triton.cdiv(tree_nodes * heads, BLOCK_M)
    bounds = planner.plan_bounds(batch=batch, row_blocks=row_blocks, capacity=block_table.shape[1] * kv_cache.shape[1],
                                 block_n=block_n, sms=sm_count(q.device), kv_splits=config["kv_splits"],
                                 ctas_per_sm=1, waves=config["waves"], segment_cost=config.get("segment_cost", 0))
    pdl = device_has(q.device, "griddepcontrol")
    plan = planner.make_plan(prefix_lens, tree_nodes, bounds, launch_dependents=pdl)
    partial_out, partial_lse = partial_buffers(out, bounds.max_units)
    kernel[(row_blocks, bounds.grid)](
        q, kv_cache, *descriptors, block_table, prefix_lens, tree_mask, plan, partial_out, partial_lse, out,
        sm_scale * LOG2E,
        q.stride(0), q.stride(1), q.stride(2),
        block_table.stride(0),
        tree_mask.stride(0), tree_mask.stride(1),
        out.stride(0), out.stride(1), out.stride(2),
        tree_nodes, heads, batch,
        PAGE_SIZE=kv_cache.shape[1], BLOCK_N=block_n, DV=v_dim, DR=head_dim - v_dim,
        B_POW2=triton.next_power_of_2(batch), SPANS=bool(bounds.spans), PDL=pdl, WORKER_REGS=worker_regs,
        GAPS=planner.lays_gaps(config), num_warps=PARTITION_WARPS, launch_pdl=pdl,
    )
    if config["kv_splits"] != 1:
        launch_combine(partial_out, partial_lse, plan, out, bounds.max_units, bounds.max_splits)


def _descriptor_type(dtype: str, block_rows: int, columns: int) -> str:
    """The signature type Triton gives a TensorDescriptor argument from ``kv_descriptors``."""
    layout = _tile_layout(block_rows, columns, {"bf16": torch.bfloat16, "fp16": torch.float16}[dtype])
    return f"tensordesc<{dtype}[{block_rows}, {columns}],{layout}>"


def kernel_specs(config: dict, *, page_size: int = 64, dtype: str = "bf16", tree_nodes: int = 64, heads: int = 8,
                 table_pages: int = 2048):
    """What `vk static` compiles for ``config`` (sm_90 only), specialised like a representative
    launch (B=1, T=64, H=8, a 128k-token table)."""
    block_n = config["BLOCK_N"]
    descriptors = {"LatDesc": _descriptor_type(dtype, block_n, 512), "RopeDesc": _descriptor_type(dtype, block_n, 64)}
    return [planned_kernel_spec("ws_verify", _ws_verify_kernel, descriptors, config, WORKER_REGISTERS,
                                page_size=page_size, dtype=dtype, tree_nodes=tree_nodes, heads=heads,
                                table_pages=table_pages)]


def planned_kernel_spec(name, kernel, descriptors: dict, config: dict, worker_regs: int, *, page_size: int,
                        dtype: str, tree_nodes: int, heads: int, table_pages: int):
    """The ``TritonKernelSpec`` of a kernel ``launch_planned`` launches (``descriptors``: its TMA descriptor
    arguments' names and signature types, in order)."""
    from .kernel_spec import TritonKernelSpec

    pointer = f"*{dtype}"
    rows = tree_nodes * heads
    words = -(-tree_nodes // 32)
    ints = {"stride_qb": rows * 576, "stride_qt": heads * 576, "stride_qh": 576, "stride_table_b": table_pages,
            "stride_mask_b": tree_nodes * words, "stride_mask_t": words, "stride_ob": rows * 512,
            "stride_ot": heads * 512, "stride_oh": 512, "T": tree_nodes, "H": heads, "B": 1}
    return TritonKernelSpec(
        name, kernel,
        {"Q": pointer, "KV": pointer, **descriptors, "BlockTable": "*i32", "PrefixLens": "*i32",
         "TreeMask": "*i32", "Plan": "*i32", "PartialOut": "*fp32", "PartialLse": "*fp32", "Out": pointer},
        {"PAGE_SIZE": page_size, "BLOCK_N": config["BLOCK_N"], "DV": 512, "DR": 64, "B_POW2": 1,
         "SPANS": planner.walks_spans({**DEFAULT_CONFIG, **config}),
         "PDL": True, "WORKER_REGS": worker_regs, "GAPS": planner.lays_gaps(config)},
        PARTITION_WARPS, 1, float_args=("scale_log2",), int_values=ints,
        threads=2 * PARTITION_WARPS * 32,  # the launch's num_warps is the default partition's; the worker adds 4
    )


def offline_arch_problem(arch: str) -> str | None:
    """Why ``kernel_specs`` cannot compile for ``arch`` (None: it can). Arches without wgmma (all
    but sm_90), and LLVM aborts the process rather than raising, so they are refused before compiling."""
    return None if load_arch(arch).has("wgmma") else f"gluon_wgmma_ws needs wgmma (sm_90), which {arch} does not have"
