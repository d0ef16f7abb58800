"""Variant ``gluon_wgmma_sym``: paged split-KV tree-verify attention on Hopper with two symmetric
warpgroups (Gluon), FlashMLA's schedule (``csrc/sm90/decode/dense/splitkv_mla.cuh``) with our tree mask
and work plan. Design and budgets: results/notes/2026-12-07-symmetric-warpgroups.md.

Why: in ``gluon_wgmma_ws`` warpgroup 0 issues 77% of a tile's wgmma and runs the softmax between its S
and its P V, so the tensor pipe idles during every softmax (ncu: 68% busy against FlashMLA's 80%). Here
the tiles of a segment go in pairs (2j, 2j + 1) to warpgroups (0, 1), and each warpgroup issues the same
work per pair:

- warpgroup w: S_w = Q K_w^T of its tile (m64nBLOCK_N, k 576) and its part of the softmax. Warpgroup 0
  folds its tile's row max into the running max and hands over that max, its rescale factor (``scale0``)
  and its P in that max (``p0_ready``); warpgroup 1 folds its own tile in and hands back the final max,
  the factor from warpgroup 0's max to it (``scale1``) and its P in the final max (``p1_ready``).
- warpgroup w then owns columns [w * 256, +256) of O for both tiles: warpgroup 0 runs P_0 V_0 from
  registers, then P_1 V_1 from shared memory; warpgroup 1 runs P_0 V_0 from shared memory as soon as it
  has it, under its own softmax, then P_1 V_1 from registers. So one warpgroup's softmax runs while
  the other's wgmma do, and the first tile's stage is free early.
- stages are fixed: stage 0 holds the pair's first tile, stage 1 its second. Each warpgroup copies the
  KV columns it reads as V: warpgroup 0 columns [0, 256), warpgroup 1 columns [256, 576) (its V half and
  the rope). A half is reloaded for the next pair once its copier's P V of it is done; the S that also
  read it came before the P that P V waited for, so no "free" barrier is needed. Stage 0 is reloaded
  right after the first P Vs (the next pair's first S has about half a pair of lead); stage 1 at the
  pair's end, and warpgroup 1's next S waits for it while warpgroup 0 runs its S and softmax (in pieces: below).

CTA: 64 query rows (row r = node * H + head) against its work of the plan (planner.py), as in
``gluon_wgmma_ws``: a span of the batch's tiles walked segment by segment, or one unit. Shared memory at
BLOCK_N 64 (226 KB with the compiler's scratch, of 227): Q columns [0, 512) in two [64, 256] tiles, two stages of KV as
[BLOCK_N, 256] + [BLOCK_N, 256] + [BLOCK_N, 64], two P tiles [64, BLOCK_N], six row vectors. Q's rope
columns [512, 576) stay in each warpgroup's registers (FlashMLA's ``rQ8``), which is what makes the
second P tile fit. Barriers (mbarriers), phases counted over the CTA's pairs: ready[stage * 3 + piece],
a stage's columns [0, 256) (warpgroup 0's copy), [256, 384) and [384, 576) (warpgroup 1's, in two pieces as
FlashMLA copies a block in nine: the S of the tile warpgroup 1 refilled last starts before all of it has landed;
one arrival per thread of the copying warpgroup and the TMA byte count), q_ready, p0 / p1 (the hand-offs
above), sums (the row sums of both at a segment's end).

A segment with an odd tile count leaves warpgroup 1 no tile in its last pair: it folds nothing into the
max (scale1 = 1), neither warpgroup runs a P V on stage 1, and stage 1's barriers complete without a copy
(each warpgroup waits for its own arrival there, as for every other), so that every barrier completes once a
pair and its phase is the pair count's parity. Positions past the sequence are clamped to its last row when
copied and masked to -inf in S; rows past T x H are clamped and not stored.
Hopper only (sm_90). Launches, plan and combine are ``gluon_wgmma_ws``'s (``launch_planned``).
"""

from __future__ import annotations

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.ampere import async_copy
from triton.experimental.gluon.language.nvidia.hopper import (fence_async_shared, mbarrier, warpgroup_mma,
                                                              warpgroup_mma_wait)
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

from .arch import load_arch
from .gluon_common import (BLOCK_N_CHOICES, CHECK_PAGE_SIZES, CPU_INTERPRETABLE, PAGE_SIZES, copy_rows, cta_barrier,
                           cta_range, launch_dependents, masked_scores, pool_rows, segment_at, tma_async_load,
                           unsupported_reason, wait_for_prior_grids)
from .gluon_wgmma_ws import (DEFAULT_CONFIG, OPTIONAL_CONFIG, _descriptor_type, _store_half, _tile_layout,
                             complete_config, launch_planned, planned_kernel_spec)

# The same plan keys as gluon_wgmma_ws (the spans rule by default) and its checks.
CHECK_CONFIGS = ({}, {"kv_splits": 3, "BLOCK_N": 32}, {"kv_splits": 8}, {"waves": 1}, {"segment_cost": 320},
                 {"segment_cost": 320, "BLOCK_N": 32})

__all__ = ["BLOCK_N_CHOICES", "CHECK_CONFIGS", "CHECK_PAGE_SIZES", "CPU_INTERPRETABLE", "DEFAULT_CONFIG",
           "OPTIONAL_CONFIG", "PAGE_SIZES", "complete_config", "kernel_specs", "offline_arch_problem", "run",
           "unsupported_reason"]

PARTITION_WARPS = 4  # each partition is one warpgroup; the CTA has 8 warps
COPY_THREADS = gl.constexpr(PARTITION_WARPS * 32)
WORKER_REGISTERS = 256  # warpgroup 1's; warpgroup 0 gets the same (O's half alone is 128 a thread)
WARPGROUP_0 = gl.constexpr(0)  # the partitions' WG argument
WARPGROUP_1 = gl.constexpr(1)
HALF = gl.constexpr(256)  # a warpgroup's O columns, and the width of a Q / KV latent tile
PIECE = gl.constexpr(128)  # warpgroup 1 copies its half in two pieces: columns [256, 384) and [384, 576)


@gluon.jit
def _load_half(kv_v, kv_rope, ready, first, KV, v_desc, rope_desc, table, tile_start, seq_len, WG: gl.constexpr,
               PAGE_SIZE: gl.constexpr, BLOCK_N: gl.constexpr, DV: gl.constexpr, DR: gl.constexpr):
    """Warpgroup WG's columns of one KV tile into a stage: [0, 256) for warpgroup 0, [256, 576) (``kv_v``
    and ``kv_rope``) for warpgroup 1. ``ready[first]`` (count 128) completes when warpgroup 0's have landed;
    warpgroup 1's come in two pieces, columns [256, 384) on ``ready[first]`` and [384, 576) on
    ``ready[first + 1]``, so an S waiting for them starts on the first piece that lands. A tile
    inside one page and the sequence goes by TMA (one thread, the bytes counted by the barrier); any
    other by cp.async of the warpgroup's 128 threads, positions clamped to the sequence's last row."""
    ELEMENT_BYTES: gl.constexpr = KV.dtype.element_ty.primitive_bitwidth // 8
    if (PAGE_SIZE >= BLOCK_N) & (tile_start + BLOCK_N <= seq_len):
        row = gl.load(table + tile_start // PAGE_SIZE) * PAGE_SIZE + tile_start % PAGE_SIZE
        if WG == 0:
            mbarrier.expect(ready.index(first), BLOCK_N * HALF * ELEMENT_BYTES)
            mbarrier.arrive(ready.index(first), count=COPY_THREADS - 1)  # the count is one per copying thread
            tma_async_load(v_desc, [row, 0], ready.index(first), kv_v)
        else:  # two pieces, each on its own barrier: the S waiting for them starts on the first to land
            mbarrier.expect(ready.index(first), BLOCK_N * PIECE * ELEMENT_BYTES)
            mbarrier.arrive(ready.index(first), count=COPY_THREADS - 1)
            tma_async_load(v_desc, [row, 0], ready.index(first), kv_v.slice(0, PIECE, dim=1))
            mbarrier.expect(ready.index(first + 1), BLOCK_N * (PIECE + DR) * ELEMENT_BYTES)
            mbarrier.arrive(ready.index(first + 1), count=COPY_THREADS - 1)
            tma_async_load(v_desc, [row, PIECE], ready.index(first + 1), kv_v.slice(PIECE, PIECE, dim=1))
            tma_async_load(rope_desc, [row, 0], ready.index(first + 1), kv_rope)
    else:
        v_layout: gl.constexpr = gl.BlockedLayout([1, 8], [1, 32], [4, 1], [1, 0])
        copy_rows(kv_v, KV + WG * HALF, pool_rows(table, tile_start, seq_len, PAGE_SIZE, BLOCK_N, v_layout),
                  DV + DR, HALF, v_layout)
        if WG == 1:
            rope_layout: gl.constexpr = gl.BlockedLayout([1, 8], [4, 8], [4, 1], [1, 0])
            copy_rows(kv_rope, KV + DV, pool_rows(table, tile_start, seq_len, PAGE_SIZE, BLOCK_N, rope_layout),
                      DV + DR, DR, rope_layout)
        async_copy.mbarrier_arrive(ready.index(first), increment_count=False)
        if WG == 1:
            async_copy.mbarrier_arrive(ready.index(first + 1), increment_count=False)


@gluon.jit
def _load_stage(kv_lo, kv_hi, kv_rope, ready, stage, KV, lo_desc, hi_desc, rope_desc, table, tile_start, seq_len,
                WG: gl.constexpr, PAGE_SIZE: gl.constexpr, BLOCK_N: gl.constexpr, DV: gl.constexpr, DR: gl.constexpr):
    """Warpgroup WG's half of the tile at ``tile_start`` into ``stage`` (its barriers from ready[3 * stage + WG])."""
    if WG == 0:
        _load_half(kv_lo.index(stage), kv_rope.index(stage), ready, 3 * stage, KV, lo_desc, rope_desc, table,
                   tile_start, seq_len, WG, PAGE_SIZE, BLOCK_N, DV, DR)
    else:
        _load_half(kv_hi.index(stage), kv_rope.index(stage), ready, 3 * stage + 1, KV, hi_desc, rope_desc,
                   table, tile_start, seq_len, WG, PAGE_SIZE, BLOCK_N, DV, DR)


@gluon.jit
def _skip_stage(ready, stage, WG: gl.constexpr):
    """No tile for ``stage`` in the next pair (a segment's odd last tile): complete WG's barrier of it with
    no copy, so that every barrier completes once a pair and its phase is the pair count's parity."""
    mbarrier.arrive(ready.index(3 * stage + WG), count=COPY_THREADS)
    if WG == 1:
        mbarrier.arrive(ready.index(3 * stage + 2), count=COPY_THREADS)


@gluon.jit
def _wait_own_half(ready, stage, phase, WG: gl.constexpr):
    """Until WG's own columns of ``stage`` have landed: warpgroup 0's one barrier, warpgroup 1's two pieces
    (on a segment's odd last tile: the empty stage's arrivals of ``_skip_stage``)."""
    mbarrier.wait(ready.index(3 * stage + WG), phase)
    if WG == 1:
        mbarrier.wait(ready.index(3 * stage + 2), phase)


@gluon.jit
def _fill_stage(kv_lo, kv_hi, kv_rope, ready, stage, tile, n, KV, lo_desc, hi_desc, rope_desc, table, start, seq_len,
                WG: gl.constexpr, PAGE_SIZE: gl.constexpr, BLOCK_N: gl.constexpr, DV: gl.constexpr, DR: gl.constexpr):
    """WG's half of a segment's ``tile`` into ``stage``, or its barrier completed empty past the segment."""
    if tile < n:
        _load_stage(kv_lo, kv_hi, kv_rope, ready, stage, KV, lo_desc, hi_desc, rope_desc, table,
                    start + tile * BLOCK_N, seq_len, WG, PAGE_SIZE, BLOCK_N, DV, DR)
    else:
        _skip_stage(ready, stage, WG)


@gluon.jit
def _opaque_zero():
    """0, as a value the compiler cannot see through. Shared-memory tiles indexed by it keep their wgmma
    descriptors in the tile loop: at a constant address LLVM hoists the descriptors of every k-step out of
    the loop, and they spilled (SASS of the sm_90 compile: 37 descriptor reloads in the tile loops for Q's
    alone, 134 spilled values with constant stages; none with the index)."""
    return gl.inline_asm_elementwise("mov.u32 $0, 0;", "=r", [], dtype=gl.int32, is_pure=False, pack=1)


@gluon.jit
def _scores(q_lo, q_hi, q_rope, kv_lo, kv_hi, kv_rope, ready, stage, phase, s, zero):
    """S = Q K^T of the tile in ``stage`` (m64nBLOCK_N, k 576; ``s``: any tile of S's shape, overwritten;
    ``zero``: ``_opaque_zero()``, Q's tile index). Columns [0, 256) first: in stage 0 they are refilled
    before the rest (warpgroup 0's P V of its tile is the first to finish), and in stage 1 warpgroup 1
    refills the rest right before its S; then warpgroup 1's two pieces, each as soon as it has landed
    (ncu at e6602f1, one barrier for the half: warpgroup 1 waited 4.3% of the samples for stage 1's).
    Returns once S is in registers."""
    mbarrier.wait(ready.index(3 * stage), phase)
    s = warpgroup_mma(q_lo.index(zero), kv_lo.index(stage).permute((1, 0)), s, use_acc=False, is_async=True)
    mbarrier.wait(ready.index(3 * stage + 1), phase)
    s = warpgroup_mma(q_hi.index(zero).slice(0, PIECE, dim=1),
                      kv_hi.index(stage).slice(0, PIECE, dim=1).permute((1, 0)), s, is_async=True)
    mbarrier.wait(ready.index(3 * stage + 2), phase)
    s = warpgroup_mma(q_hi.index(zero).slice(PIECE, PIECE, dim=1),
                      kv_hi.index(stage).slice(PIECE, PIECE, dim=1).permute((1, 0)), s, is_async=True)
    s = warpgroup_mma(q_rope, kv_rope.index(stage).permute((1, 0)), s, is_async=True)
    return warpgroup_mma_wait(num_outstanding=0, deps=(s, ))


@gluon.jit
def _load_q(Q, q_lo, q_hi, request, row_block, num_rows, H, stride_qb, stride_qt, stride_qh, DV: gl.constexpr):
    """Q columns [0, 512) of this block of ``request`` (rows clamped to its last) into the two shared
    tiles by cp.async of warpgroup 0's 128 threads; returns when they have landed and are visible to wgmma."""
    layout: gl.constexpr = gl.BlockedLayout([1, 8], [1, 32], [4, 1], [1, 0])
    r = gl.minimum(row_block * 64 + gl.arange(0, 64, layout=gl.SliceLayout(1, layout)), num_rows - 1)
    rows = (r // H) * stride_qt + (r % H) * stride_qh
    copy_rows(q_lo.index(0), Q + request * stride_qb, rows, 1, HALF, layout)
    copy_rows(q_hi.index(0), Q + request * stride_qb + HALF, rows, 1, HALF, layout)
    async_copy.commit_group()
    async_copy.wait_group(0)
    fence_async_shared()
    cta_barrier()


@gluon.jit
def _q_rope(Q, request, row_block, num_rows, H, stride_qb, stride_qt, stride_qh, DV: gl.constexpr, DR: gl.constexpr,
            operand: gl.constexpr):
    """Q's rope columns of this block of ``request`` in registers, as the A operand of S's last wgmma
    (loaded in that layout: a conversion would take 8 KB of shared memory, which the kernel has not)."""
    r = gl.minimum(row_block * 64 + gl.arange(0, 64, layout=gl.SliceLayout(1, operand)), num_rows - 1)
    cols = DV + gl.arange(0, DR, layout=gl.SliceLayout(0, operand))
    return gl.load(Q + request * stride_qb + gl.expand_dims((r // H) * stride_qt + (r % H) * stride_qh, 1)
                   + gl.expand_dims(cols, 0))


@gluon.jit
def _warpgroup(Q, q_lo, q_hi, kv_lo, kv_hi, kv_rope, p_smem, row_smem, ready, q_ready, p0_ready,
               p1_ready, sums_ready, KV, lo_desc, hi_desc, rope_desc, BlockTable, Plan,
               PrefixLens, TreeMask, Out, PartialOut, PartialLse, scale_log2, stride_qb, stride_qt, stride_qh,
               stride_table_b, stride_mask_b, stride_mask_t, stride_ob, stride_ot, stride_oh, row_block, begin, end,
               first_unit, segments, first_request, T, H, B, WG: gl.constexpr, PAGE_SIZE: gl.constexpr,
               BLOCK_N: gl.constexpr, GAPS: gl.constexpr, DV: gl.constexpr, DR: gl.constexpr):
    """One of the two symmetric warpgroups (WG 0 or 1): per segment its tiles of each pair, its half of
    O for both, its row sums; warpgroup 0 also loads Q's shared tiles and writes the LSE.

    row_smem, six row vectors: 0 warpgroup 0's running max after its tile, 1 scale0, 2 the pair's final max,
    3 scale1, 4 / 5 the row sums of warpgroups 0 / 1 at a segment's end."""
    BLOCK_M: gl.constexpr = 64
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                       instr_shape=[16, BLOCK_N, 16])
    o_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                       instr_shape=[16, HALF, 16])
    p_operand: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=2)
    rope_operand: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=s_layout, k_width=2)
    s_rows: gl.constexpr = gl.SliceLayout(1, s_layout)
    o_rows: gl.constexpr = gl.SliceLayout(1, o_layout)
    num_rows = T * H
    rows_s = row_block * BLOCK_M + gl.arange(0, BLOCK_M, layout=s_rows)
    position = begin
    c = 0   # the CTA's pairs so far: pair c's first tile is in stage c % 2, its second in the other, and every
    #         per-pair barrier completes once a pair, so its phase is c's parity
    sg = 0  # the CTA's segments with tiles so far: q_ready's and sums_ready's phase
    for k in range(segments):
        request = first_request + k
        start, n, splits, laid = segment_at(Plan, request, position, end, B, BLOCK_N, GAPS)
        prefix_len = gl.load(PrefixLens + request)
        seq_len = prefix_len + T
        table = BlockTable + request * stride_table_b
        mask_rows = TreeMask + request * stride_mask_b + (gl.minimum(rows_s, num_rows - 1) // H) * stride_mask_t
        row_valid = rows_s < num_rows
        acc = gl.zeros([BLOCK_M, HALF], gl.float32, layout=o_layout)
        m_run = gl.full([BLOCK_M], float("-inf"), gl.float32, layout=s_rows)
        l_run = gl.zeros([BLOCK_M], gl.float32, layout=s_rows)
        if n > 0:
            # Both warpgroups finished the CTA's earlier segment (its row sums' hand-off): the stages are free.
            st = _opaque_zero()
            _fill_stage(kv_lo, kv_hi, kv_rope, ready, st, 0, n, KV, lo_desc, hi_desc, rope_desc, table, start,
                        seq_len, WG, PAGE_SIZE, BLOCK_N, DV, DR)
            _fill_stage(kv_lo, kv_hi, kv_rope, ready, st + 1, 1, n, KV, lo_desc, hi_desc, rope_desc, table, start,
                        seq_len, WG, PAGE_SIZE, BLOCK_N, DV, DR)
            q_rope = _q_rope(Q, request, row_block, num_rows, H, stride_qb, stride_qt, stride_qh, DV, DR,
                             rope_operand)
            if WG == 0:
                _load_q(Q, q_lo, q_hi, request, row_block, num_rows, H, stride_qb, stride_qt, stride_qh, DV)
                mbarrier.arrive(q_ready)
            else:
                mbarrier.wait(q_ready, sg & 1)
            s = gl.zeros([BLOCK_M, BLOCK_N], gl.float32, layout=s_layout)
            # One call site per wgmma of a warpgroup: every call site keeps its own shared-memory descriptors
            # live across the loop, and two sites of each spilled them.
            for j in range(0, n, 2):
                # Stage and P tile 0 hold the pair's first tile (warpgroup 0's), 1 its second. The indices are
                # opaque: with constant ones LLVM hoists every wgmma descriptor out of the loop and they spill.
                sa = _opaque_zero()
                sb = sa + 1
                phase = c & 1
                has_b = j + 1 < n
                next_pair = j + 2 < n  # (a next pair implies this one has a second tile)
                if WG == 0:
                    s = _scores(q_lo, q_hi, q_rope, kv_lo, kv_hi, kv_rope, ready, sa, phase, s, sa)
                    scores = masked_scores(s, scale_log2, start + j * BLOCK_N, prefix_len, seq_len, mask_rows,
                                           row_valid, BLOCK_N, s_layout)
                    m_first = gl.maximum(m_run, gl.max(scores, 1))
                    m_safe = gl.where(m_first == float("-inf"), 0.0, m_first)  # a row may see nothing yet
                    scale0 = gl.exp2(m_run - m_safe)
                    p = gl.exp2(scores - gl.expand_dims(m_safe, 1))
                    sum_a = gl.sum(p, 1)
                    p_a = p.to(q_lo.dtype)
                    # P of the first tile in the first tile's max, with that max and scale0: warpgroup 1 starts
                    # its P V of this tile at once, before its own softmax.
                    row_smem[0].store(m_first)
                    row_smem[1].store(scale0)
                    p_smem.index(sa).store(p_a)
                    fence_async_shared()
                    cta_barrier()
                    mbarrier.arrive(p0_ready)
                    acc = acc * gl.expand_dims(gl.convert_layout(scale0, o_rows), 1)
                    acc = warpgroup_mma(gl.convert_layout(p_a, p_operand), kv_lo.index(sa), acc, is_async=True)
                    acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc, ))
                    if next_pair:  # stage 0's columns [0, 256) are read (this S and P V): the next pair's first tile
                        _load_stage(kv_lo, kv_hi, kv_rope, ready, sa, KV, lo_desc, hi_desc, rope_desc, table,
                                    start + (j + 2) * BLOCK_N, seq_len, WG, PAGE_SIZE, BLOCK_N, DV, DR)
                    mbarrier.wait(p1_ready, phase)
                    scale1 = row_smem[3].load(s_rows)
                    m_run = row_smem[2].load(s_rows)
                    l_run = l_run * (scale0 * scale1) + sum_a * scale1
                    acc = acc * gl.expand_dims(gl.convert_layout(scale1, o_rows), 1)
                    _wait_own_half(ready, sb, phase, WG)  # (on an odd last tile: empty)
                    if has_b:  # the second tile's P V (an async accumulator may not leave a branch)
                        acc = warpgroup_mma(p_smem.index(sb), kv_lo.index(sb), acc, is_async=True)
                        acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc, ))
                    if next_pair:  # stage 1's columns [0, 256) are read: the next pair's second tile
                        _fill_stage(kv_lo, kv_hi, kv_rope, ready, sb, j + 3, n, KV, lo_desc, hi_desc, rope_desc,
                                    table, start, seq_len, WG, PAGE_SIZE, BLOCK_N, DV, DR)
                else:
                    if has_b:  # S of the second tile while warpgroup 0 runs its S and softmax: it needs no max
                        s = _scores(q_lo, q_hi, q_rope, kv_lo, kv_hi, kv_rope, ready, sb, phase, s, sa)
                    mbarrier.wait(p0_ready, phase)
                    m_first = row_smem[0].load(s_rows)
                    scale0 = row_smem[1].load(s_rows)
                    # The first tile's P V first, in the first tile's max; it runs under this softmax.
                    acc = acc * gl.expand_dims(gl.convert_layout(scale0, o_rows), 1)
                    _wait_own_half(ready, sa, phase, WG)
                    acc = warpgroup_mma(p_smem.index(sa), kv_hi.index(sa), acc, is_async=True)
                    if has_b:
                        scores = masked_scores(s, scale_log2, start + (j + 1) * BLOCK_N, prefix_len, seq_len,
                                               mask_rows, row_valid, BLOCK_N, s_layout)
                        m_run = gl.maximum(m_first, gl.max(scores, 1))
                        m_safe = gl.where(m_run == float("-inf"), 0.0, m_run)
                        scale1 = gl.exp2(m_first - m_safe)
                        p = gl.exp2(scores - gl.expand_dims(m_safe, 1))
                        l_run = l_run * (scale0 * scale1) + gl.sum(p, 1)
                    else:  # no second tile: nothing to fold in
                        m_run = m_first
                        scale1 = gl.full([BLOCK_M], 1.0, gl.float32, layout=s_rows)
                        p = s
                        l_run = l_run * scale0
                    p_b = p.to(q_lo.dtype)
                    row_smem[2].store(m_run)
                    row_smem[3].store(scale1)
                    if has_b:
                        p_smem.index(sb).store(p_b)
                    fence_async_shared()
                    cta_barrier()
                    mbarrier.arrive(p1_ready)  # (without a second tile too: it completes once a pair)
                    acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc, ))
                    if next_pair:  # stage 0's columns [256, 576) are read (its S, then this P V)
                        _load_stage(kv_lo, kv_hi, kv_rope, ready, sa, KV, lo_desc, hi_desc, rope_desc, table,
                                    start + (j + 2) * BLOCK_N, seq_len, WG, PAGE_SIZE, BLOCK_N, DV, DR)
                    acc = acc * gl.expand_dims(gl.convert_layout(scale1, o_rows), 1)
                    _wait_own_half(ready, sb, phase, WG)  # (on an odd last tile: empty)
                    if has_b:
                        acc = warpgroup_mma(gl.convert_layout(p_b, p_operand), kv_hi.index(sb), acc, is_async=True)
                        acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc, ))
                    if next_pair:  # stage 1's columns [256, 576) are read: the next pair's second tile
                        _fill_stage(kv_lo, kv_hi, kv_rope, ready, sb, j + 3, n, KV, lo_desc, hi_desc, rope_desc,
                                    table, start, seq_len, WG, PAGE_SIZE, BLOCK_N, DV, DR)
                c += 1
            # The row sums of both warpgroups, in the last pair's max: each hands its own over.
            row_smem[4 + WG].store(l_run)
            cta_barrier()
            mbarrier.arrive(sums_ready)
            mbarrier.wait(sums_ready, sg & 1)
            l_run = l_run + row_smem[5 - WG].load(s_rows)
            sg += 1
        _store_half(acc, gl.convert_layout(l_run, o_rows), gl.convert_layout(m_run, o_rows), WG, row_block,
                    first_unit + k, splits, request, num_rows, H, Out, PartialOut, PartialLse, stride_ob,
                    stride_ot, stride_oh, WG == 0, DV, o_layout)
        position += laid


@gluon.jit
def _sym_verify_kernel(
    Q, KV, LoDesc, HiDesc, RopeDesc, BlockTable, PrefixLens, TreeMask, Plan, PartialOut, PartialLse, Out,
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
    half_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_M, HALF], dtype)
    kv_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_N, HALF], dtype)
    row_layout: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, [0])

    row_block = gl.program_id(0)
    cta = gl.program_id(1)
    q_lo = gl.allocate_shared_memory(dtype, [1, BLOCK_M, HALF], half_layout)  # [1, ...]: see _scores
    q_hi = gl.allocate_shared_memory(dtype, [1, BLOCK_M, HALF], half_layout)
    kv_lo = gl.allocate_shared_memory(dtype, [2, BLOCK_N, HALF], kv_layout)
    kv_hi = gl.allocate_shared_memory(dtype, [2, BLOCK_N, HALF], kv_layout)
    kv_rope = gl.allocate_shared_memory(dtype, [2, BLOCK_N, DR],
                                        gl.NVMMASharedLayout.get_default_for([BLOCK_N, DR], dtype))
    p_smem = gl.allocate_shared_memory(dtype, [2, BLOCK_M, BLOCK_N],
                                       gl.NVMMASharedLayout.get_default_for([BLOCK_M, BLOCK_N], dtype))
    row_smem = (gl.allocate_shared_memory(gl.float32, [BLOCK_M], row_layout),
                gl.allocate_shared_memory(gl.float32, [BLOCK_M], row_layout),
                gl.allocate_shared_memory(gl.float32, [BLOCK_M], row_layout),
                gl.allocate_shared_memory(gl.float32, [BLOCK_M], row_layout),
                gl.allocate_shared_memory(gl.float32, [BLOCK_M], row_layout),
                gl.allocate_shared_memory(gl.float32, [BLOCK_M], row_layout))
    ready = gl.allocate_shared_memory(gl.int64, [6, 1], mbarrier.MBarrierLayout())
    q_ready = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    p0_ready = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    p1_ready = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    sums_ready = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    for i in gl.static_range(6):
        mbarrier.init(ready.index(i), count=COPY_THREADS)  # TMA: 1 with the byte count + 127; cp.async: 1 each
    mbarrier.init(q_ready, count=1)
    mbarrier.init(p0_ready, count=1)
    mbarrier.init(p1_ready, count=1)
    mbarrier.init(sums_ready, count=2)  # one per warpgroup
    fence_async_shared()
    cta_barrier()
    if PDL:  # launched programmatically: the set-up above overlapped the plan kernel, which the plan needs
        wait_for_prior_grids()
        launch_dependents()  # the combine may be scheduled; it waits for this grid before it reads
    begin, end, first_unit, segments, first_request = cta_range(Plan, cta, B, B_POW2, BLOCK_N, SPANS, 4)

    # Both partitions run _warpgroup; its arguments written out for each (a tuple built by concatenation
    # would hand the constexprs over as plain ints, which warp_specialize cannot pass to a worker).
    gl.warp_specialize([
        (_warpgroup, (Q, q_lo, q_hi, kv_lo, kv_hi, kv_rope, p_smem, row_smem, ready, q_ready, p0_ready,
                      p1_ready, sums_ready, KV, LoDesc, HiDesc, RopeDesc, BlockTable, Plan,
                      PrefixLens, TreeMask, Out, PartialOut, PartialLse, scale_log2, stride_qb, stride_qt, stride_qh,
                      stride_table_b, stride_mask_b, stride_mask_t, stride_ob, stride_ot, stride_oh, row_block, begin,
                      end, first_unit, segments, first_request, T, H, B, WARPGROUP_0, PAGE_SIZE, BLOCK_N, GAPS, DV,
                      DR)),
        (_warpgroup, (Q, q_lo, q_hi, kv_lo, kv_hi, kv_rope, p_smem, row_smem, ready, q_ready, p0_ready,
                      p1_ready, sums_ready, KV, LoDesc, HiDesc, RopeDesc, BlockTable, Plan,
                      PrefixLens, TreeMask, Out, PartialOut, PartialLse, scale_log2, stride_qb, stride_qt, stride_qh,
                      stride_table_b, stride_mask_b, stride_mask_t, stride_ob, stride_ot, stride_oh, row_block, begin,
                      end, first_unit, segments, first_request, T, H, B, WARPGROUP_1, PAGE_SIZE, BLOCK_N, GAPS, DV,
                      DR)),
    ], [4], [WORKER_REGS])


def kv_descriptors(kv_cache, block_n: int, v_dim: int):
    """TMA descriptors of the pool as rows [num_pages * page_size, Dqk]: columns [0, 256) (a box of 256),
    [256, 512) (a box of 128 columns: warpgroup 1 copies them in two pieces) and the rope columns [512, 576),
    each box ``block_n`` rows in the kernel's shared-memory layout."""
    rows = kv_cache.view(-1, kv_cache.shape[-1])
    rope_dim = rows.shape[1] - v_dim
    half = v_dim // 2
    return (TensorDescriptor(rows, [rows.shape[0], half], [rows.shape[1], 1], [block_n, half],
                             _tile_layout(block_n, half, kv_cache.dtype)),
            TensorDescriptor(rows[:, half:], [rows.shape[0], half], [rows.shape[1], 1], [block_n, PIECE.value],
                             _tile_layout(block_n, PIECE.value, kv_cache.dtype)),
            TensorDescriptor(rows[:, v_dim:], [rows.shape[0], rope_dim], [rows.shape[1], 1], [block_n, rope_dim],
                             _tile_layout(block_n, rope_dim, kv_cache.dtype)))


def run(q, kv_cache, block_table, prefix_lens, tree_mask, *, sm_scale, v_dim, out, config):
    """Plan on the device, launch the kernel, then the shared combine unless kv_splits = 1; ``out``
    written in place (``gluon_wgmma_ws.launch_planned``)."""
    if v_dim != 2 * HALF.value:
        raise ValueError(f"v_dim: gluon_wgmma_sym needs {2 * HALF.value}, got {v_dim}")
    launch_planned(_sym_verify_kernel, kv_descriptors(kv_cache, config["BLOCK_N"], v_dim), q, kv_cache, block_table,
                   prefix_lens, tree_mask, sm_scale=sm_scale, v_dim=v_dim, out=out, config=config,
                   worker_regs=WORKER_REGISTERS)


def kernel_specs(config: dict, *, page_size: int = 64, dtype: str = "bf16", tree_nodes: int = 64, heads: int = 8,
                 table_pages: int = 2048):
    """What `vk static` compiles for ``config`` (sm_90 only), specialised like a representative
    launch (B=1, T=64, H=8, a 128k-token table)."""
    block_n = config["BLOCK_N"]
    descriptors = {"LoDesc": _descriptor_type(dtype, block_n, HALF.value),
                   "HiDesc": _descriptor_type(dtype, block_n, PIECE.value),
                   "RopeDesc": _descriptor_type(dtype, block_n, 64)}
    return [planned_kernel_spec("sym_verify", _sym_verify_kernel, descriptors, config, WORKER_REGISTERS,
                                page_size=page_size, dtype=dtype, tree_nodes=tree_nodes, heads=heads,
                                table_pages=table_pages)]


def offline_arch_problem(arch: str) -> str | None:
    """Why ``kernel_specs`` cannot compile for ``arch`` (None: it can): arches without wgmma (all but sm_90)."""
    return None if load_arch(arch).has("wgmma") else f"gluon_wgmma_sym needs wgmma (sm_90), which {arch} does not have"
