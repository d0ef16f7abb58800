"""EXPERIMENT, not registered: it is correct and 40-55% slower than ``gluon_wgmma_ws`` on the H200
(results/README.md, "The seesaw order, tried"). Paged split-KV tree-verify attention on Hopper, two
KV tiles per step in FlashMLA's "seesaw" order (Gluon).

Why it was tried: in ``gluon_wgmma_ws`` one warpgroup computes every S = Q K^T and every softmax, so
the tensor cores wait while it exponentiates (about 10% of its time at 185k). Here the two
warpgroups take turns, the way FlashMLA's second Hopper kernel does
(docs/20250422-new-kernel-deep-dive.md there). Tiles come in pairs (K0 in stage 0, K1 in stage 1;
in MLA V is the first 512 columns of K). Warpgroup 0 owns O's left half (columns 0..255),
warpgroup 1 the right half. Per pair, with m the running row max both keep:

- warpgroup 0: S0 = Q K0^T; m0 = max(m, rowmax S0); P0 = exp(S0 - m0), also into shared memory;
  O_L = O_L * e^(m - m0) + P0 V0_L; then, once warpgroup 1 has published P1 and m1,
  O_L = O_L * e^(m0 - m1) + P1 V1_L;
- warpgroup 1: S1 = Q K1^T, then (m0 from warpgroup 0) m1 = max(m0, rowmax S1),
  P1 = exp(S1 - m1), also into shared memory; O_R = O_R * e^(m - m0) + P0 V0_R; then
  O_R = O_R * e^(m0 - m1) + P1 V1_R.

Each warpgroup sums its own P; the two sums are added at the end. S is computed in 64-column
chunks, each with its own ready barrier. The warpgroup whose P V last reads a stage's chunks copies
the next pair's tile into them (cp.async), so a stage's left half refills before its right half.
A tile's P goes into that stage's rope chunk (64 x 64 bf16, free once S has read it): shared
memory holds Q [64, 576] and 2 x KV [64, 576], 216 KB. An odd split's last pair computes on a
stand-in tile (real rows) whose scores are masked. ``loader.diff`` gives the copies to a third
warpgroup instead.

CTA: 64 query rows (row r = node * H + head of one request) against one KV split, tiles of 64
positions. Positions past the sequence are clamped to its last row when copied and masked to -inf
in S; rows past T x H are clamped and not stored.
"""

from __future__ import annotations

import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.ampere import async_copy
from triton.experimental.gluon.language.nvidia.hopper import (fence_async_shared, mbarrier, warpgroup_mma,
                                                              warpgroup_mma_wait)

from verify_kernels.contract import ProblemShape
from verify_kernels.gluon_wgmma_ws import _copy_rows, _pool_rows, _store_half, unsupported_reason  # noqa: F401
from verify_kernels.splits import MAX_KV_SPLITS, choose_kv_splits, sm_count

CPU_INTERPRETABLE = False
PAGE_SIZES = (16, 32, 64)
CHECK_PAGE_SIZES = (16, 64)
CHECK_CONFIGS = ({}, {"kv_splits": 3}, {"kv_splits": 8})
BLOCK_M = 64
BLOCK_N = 64
PARTITION_WARPS = 4        # each consumer partition is one warpgroup
WORKER_REGISTERS = 240      # warpgroup 1; warpgroup 0 gets the rest
DEFAULT_CONFIG = {"kv_splits": 0}
LOG2E = 1.4426950408889634
CHUNKS = gl.constexpr(9)   # 64-column chunks of a KV row: 8 latent, then the rope


@gluon.jit
def _masked_scores(s, scale_log2, tile_start, prefix_len, seq_len, mask_rows, row_valid, BLOCK_N: gl.constexpr,
                   s_layout: gl.constexpr):
    """S in base-2 units with the tree's ancestor mask and the sequence end applied (-inf where a
    row may not look). Only tiles that reach the tree read the bitmask."""
    scores = s * scale_log2
    if tile_start + BLOCK_N > prefix_len:
        positions = tile_start + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, s_layout))
        in_sequence = positions < seq_len
        column = positions - prefix_len
        in_tree = (column >= 0) & in_sequence
        word_ptrs = gl.expand_dims(mask_rows, 1) + gl.expand_dims(gl.maximum(column, 0) // 32, 0)
        words = gl.load(word_ptrs, mask=gl.expand_dims(in_tree, 0) & gl.expand_dims(row_valid, 1), other=0)
        is_ancestor = ((words >> gl.expand_dims(gl.maximum(column, 0) % 32, 0)) & 1) != 0
        visible = (is_ancestor | gl.expand_dims(column < 0, 0)) & gl.expand_dims(in_sequence, 0)
        scores = gl.where(visible, scores, float("-inf"))
    return scores


@gluon.jit
def _finite(m):
    """The row max to subtract: 0 where a row has seen nothing yet (m = -inf)."""
    return gl.where(m == float("-inf"), 0.0, m)


@gluon.jit
def _s_chunk(s, q_lat, kv_lat, kv_ready, stage, phase, c: gl.constexpr, USE_ACC: gl.constexpr):
    """S += Q[:, chunk c] K[:, chunk c]^T once chunk c of the tile in ``stage`` has landed."""
    mbarrier.wait(kv_ready.index(stage * CHUNKS + c), phase)
    fence_async_shared()
    return warpgroup_mma(q_lat.slice(c * 64, 64, dim=1), kv_lat.index(stage).slice(c * 64, 64, dim=1).permute((1, 0)),
                         s, use_acc=USE_ACC, is_async=True)


@gluon.jit
def _tile_s(q_lat, q_rope, kv_lat, kv_rope, kv_ready, stage, phase, s_zero, FIRST: gl.constexpr,
            DV: gl.constexpr):
    """S = Q K^T of the tile in ``stage``, chunk by chunk as the copies land. The latent chunks go
    in two halves, ``FIRST`` (0 or 1) first: the half whose stage chunks are refilled first."""
    HALF: gl.constexpr = DV // 128
    s = _s_chunk(s_zero, q_lat, kv_lat, kv_ready, stage, phase, FIRST * HALF, False)
    for j in gl.static_range(1, HALF):
        s = _s_chunk(s, q_lat, kv_lat, kv_ready, stage, phase, FIRST * HALF + j, True)
    for j in gl.static_range(HALF):
        s = _s_chunk(s, q_lat, kv_lat, kv_ready, stage, phase, (1 - FIRST) * HALF + j, True)
    mbarrier.wait(kv_ready.index(stage * CHUNKS + DV // 64), phase)
    fence_async_shared()
    s = warpgroup_mma(q_rope, kv_rope.index(stage).permute((1, 0)), s, is_async=True)
    return warpgroup_mma_wait(num_outstanding=0, deps=(s, ))


@gluon.jit
def _wait_chunks(kv_ready, stage, phase, FIRST: gl.constexpr, COUNT: gl.constexpr):
    """Wait for chunks FIRST .. FIRST + COUNT - 1 of the tile in ``stage`` (the other warpgroup's S
    has waited for them already; this orders the copies before this warpgroup's own reads)."""
    for i in gl.static_range(COUNT):
        mbarrier.wait(kv_ready.index(stage * CHUNKS + FIRST + i), phase)
    fence_async_shared()


@gluon.jit
def _left_partition(q_lat, q_rope, kv_lat, kv_rope, kv_ready, m0_ready, p1_ready, p0_taken, p1_taken, sums_ready,
                    l1_ready, m0_smem, m1_smem, sums_smem, KV, table, Out, PartialOut, PartialLse, scale_log2,
                    mask_rows_base, stride_mask_t, stride_ob, stride_ot, stride_oh, row_block, split, request,
                    num_rows, H, prefix_len, seq_len, start, num_tiles, PAGE_SIZE: gl.constexpr, DV: gl.constexpr,
                    DR: gl.constexpr, KV_SPLITS: gl.constexpr):
    """Warpgroup 0: S0, its softmax, O_L (P0 V0_L, then P1 V1_L), the row sums' total and the LSE."""
    BLOCK_M: gl.constexpr = 64
    BLOCK_N: gl.constexpr = 64
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                       instr_shape=[16, BLOCK_N, 16])
    o_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                       instr_shape=[16, DV // 2, 16])
    p_operand: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=2)
    o_rows: gl.constexpr = gl.SliceLayout(1, o_layout)
    rows_s = row_block * BLOCK_M + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, s_layout))
    row_valid = rows_s < num_rows
    mask_rows = mask_rows_base + (gl.minimum(rows_s, num_rows - 1) // H) * stride_mask_t
    m = gl.full([BLOCK_M], float("-inf"), gl.float32, layout=gl.SliceLayout(1, s_layout))
    l = gl.zeros([BLOCK_M], gl.float32, layout=gl.SliceLayout(1, s_layout))
    acc = gl.zeros([BLOCK_M, DV // 2], gl.float32, layout=o_layout)
    s_zero = gl.zeros([BLOCK_M, BLOCK_N], gl.float32, layout=s_layout)
    num_pairs = (num_tiles + 1) // 2
    for k in range(num_pairs):
        phase = k & 1
        s = _tile_s(q_lat, q_rope, kv_lat, kv_rope, kv_ready, 0, phase, s_zero, 0, DV)
        scores = _masked_scores(s, scale_log2, start + 2 * k * BLOCK_N, prefix_len, seq_len, mask_rows, row_valid,
                                BLOCK_N, s_layout)
        m0 = gl.maximum(m, gl.max(scores, 1))
        scale0 = gl.exp2(m - _finite(m0))
        p0 = gl.exp2(scores - gl.expand_dims(_finite(m0), 1))
        l = l * scale0 + gl.sum(p0, 1)
        p0 = p0.to(q_lat.dtype)
        mbarrier.wait(p0_taken, phase ^ 1)  # warpgroup 1 is done with the previous P0
        kv_rope.index(0).store(p0)          # P0 takes K0's rope chunk, which S0 has read
        m0_smem.store(m0)
        fence_async_shared()
        gl.thread_barrier()
        mbarrier.arrive(m0_ready)
        acc = acc * gl.expand_dims(gl.convert_layout(scale0, o_rows), 1)
        acc = warpgroup_mma(gl.convert_layout(p0, p_operand), kv_lat.index(0).slice(0, DV // 2, dim=1), acc,
                            is_async=True)
        acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc, ))
        gl.thread_barrier()
        if k + 1 < num_pairs:  # V0_L is read: tile 2k+2's left half goes into stage 0
            rows = _tile_rows(table, 2 * k + 2, seq_len, start, PAGE_SIZE)
            _copy_chunks(kv_lat, kv_rope, kv_ready, 0, KV, rows, 0, DV // 128, DV, DR)
        # P1 and m1 from warpgroup 1 (m1 = m0 when the pair has no second tile).
        mbarrier.wait(p1_ready, phase)
        m1 = m1_smem.load(gl.SliceLayout(1, s_layout))
        scale1 = gl.exp2(m0 - _finite(m1))
        l = l * scale1
        m = m1
        acc = acc * gl.expand_dims(gl.convert_layout(scale1, o_rows), 1)
        _wait_chunks(kv_ready, 1, phase, 0, DV // 128)
        acc = warpgroup_mma(kv_rope.index(1), kv_lat.index(1).slice(0, DV // 2, dim=1), acc, is_async=True)
        acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc, ))
        gl.thread_barrier()
        if k + 1 < num_pairs:  # V1_L and P1 are read: tile 2k+3's left half and rope into stage 1
            rows = _tile_rows(table, 2 * k + 3, seq_len, start, PAGE_SIZE)
            _copy_chunks(kv_lat, kv_rope, kv_ready, 1, KV, rows, 0, DV // 128, DV, DR)
            _copy_chunks(kv_lat, kv_rope, kv_ready, 1, KV, rows, DV // 64, 1, DV, DR)
        mbarrier.arrive(p1_taken)
    # The row sums: this warpgroup's plus warpgroup 1's (both relative to the same final max).
    mbarrier.wait(l1_ready, 0)
    l = l + sums_smem.load(gl.SliceLayout(1, s_layout))
    gl.thread_barrier()
    sums_smem.store(l)
    gl.thread_barrier()
    mbarrier.arrive(sums_ready)
    _store_half(acc, gl.convert_layout(l, o_rows), gl.convert_layout(m, o_rows), 0, row_block, split, request,
                num_rows, H, Out, PartialOut, PartialLse, stride_ob, stride_ot, stride_oh, True, KV_SPLITS, DV,
                o_layout)


@gluon.jit
def _right_partition(q_lat, q_rope, kv_lat, kv_rope, kv_ready, m0_ready, p1_ready, p0_taken, p1_taken, sums_ready,
                     l1_ready, m0_smem, m1_smem, sums_smem, KV, table, Out, PartialOut, PartialLse, scale_log2,
                     mask_rows_base, stride_mask_t, stride_ob, stride_ot, stride_oh, row_block, split, request,
                     num_rows, H, prefix_len, seq_len, start, num_tiles, PAGE_SIZE: gl.constexpr, DV: gl.constexpr,
                     DR: gl.constexpr, KV_SPLITS: gl.constexpr):
    """Warpgroup 1: S1, its softmax, O_R (P0 V0_R, then P1 V1_R)."""
    BLOCK_M: gl.constexpr = 64
    BLOCK_N: gl.constexpr = 64
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                       instr_shape=[16, BLOCK_N, 16])
    o_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                       instr_shape=[16, DV // 2, 16])
    p_operand: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=2)
    o_rows: gl.constexpr = gl.SliceLayout(1, o_layout)
    rows_s = row_block * BLOCK_M + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, s_layout))
    row_valid = rows_s < num_rows
    mask_rows = mask_rows_base + (gl.minimum(rows_s, num_rows - 1) // H) * stride_mask_t
    m = gl.full([BLOCK_M], float("-inf"), gl.float32, layout=gl.SliceLayout(1, s_layout))
    l = gl.zeros([BLOCK_M], gl.float32, layout=gl.SliceLayout(1, s_layout))
    acc = gl.zeros([BLOCK_M, DV // 2], gl.float32, layout=o_layout)
    s_zero = gl.zeros([BLOCK_M, BLOCK_N], gl.float32, layout=s_layout)
    num_pairs = (num_tiles + 1) // 2
    for k in range(num_pairs):
        phase = k & 1
        # An odd split's last pair has no second tile: stage 1 then holds a stand-in tile (real rows,
        # so P1 = 0 times them is 0) whose scores are all masked.
        s = _tile_s(q_lat, q_rope, kv_lat, kv_rope, kv_ready, 1, phase, s_zero, 1, DV)
        scores = _masked_scores(s, scale_log2, start + (2 * k + 1) * BLOCK_N, prefix_len, seq_len, mask_rows,
                                row_valid, BLOCK_N, s_layout)
        scores = scores + gl.where(2 * k + 1 < num_tiles, 0.0, float("-inf"))
        mbarrier.wait(m0_ready, phase)
        m0 = m0_smem.load(gl.SliceLayout(1, s_layout))
        m1 = gl.maximum(m0, gl.max(scores, 1))
        scale0 = gl.exp2(m - _finite(m0))
        scale1 = gl.exp2(m0 - _finite(m1))
        p1 = gl.exp2(scores - gl.expand_dims(_finite(m1), 1))
        l = (l * scale0) * scale1 + gl.sum(p1, 1)
        m = m1
        p1 = p1.to(q_lat.dtype)
        mbarrier.wait(p1_taken, phase ^ 1)  # warpgroup 0 is done with the previous P1
        kv_rope.index(1).store(p1)          # P1 takes K1's rope chunk, which S1 has read
        m1_smem.store(m1)
        fence_async_shared()
        gl.thread_barrier()
        mbarrier.arrive(p1_ready)
        # O_R = (O_R * scale0 + P0 V0_R) * scale1 + P1 V1_R
        acc = acc * gl.expand_dims(gl.convert_layout(scale0, o_rows), 1)
        _wait_chunks(kv_ready, 0, phase, DV // 128, DV // 128)
        acc = warpgroup_mma(kv_rope.index(0), kv_lat.index(0).slice(DV // 2, DV // 2, dim=1), acc, is_async=True)
        acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc, ))
        gl.thread_barrier()
        mbarrier.arrive(p0_taken)
        if k + 1 < num_pairs:  # V0_R and P0 are read: tile 2k+2's right half and rope into stage 0
            rows = _tile_rows(table, 2 * k + 2, seq_len, start, PAGE_SIZE)
            _copy_chunks(kv_lat, kv_rope, kv_ready, 0, KV, rows, DV // 128, DV // 128 + 1, DV, DR)
        acc = acc * gl.expand_dims(gl.convert_layout(scale1, o_rows), 1)
        acc = warpgroup_mma(gl.convert_layout(p1, p_operand), kv_lat.index(1).slice(DV // 2, DV // 2, dim=1), acc,
                            is_async=True)
        acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc, ))
        gl.thread_barrier()
        if k + 1 < num_pairs:  # V1_R is read: tile 2k+3's right half into stage 1
            rows = _tile_rows(table, 2 * k + 3, seq_len, start, PAGE_SIZE)
            _copy_chunks(kv_lat, kv_rope, kv_ready, 1, KV, rows, DV // 128, DV // 128, DV, DR)
    sums_smem.store(l)
    gl.thread_barrier()
    mbarrier.arrive(l1_ready)
    mbarrier.wait(sums_ready, 0)
    sums = sums_smem.load(o_rows)
    # The running max is only read for the LSE, which warpgroup 0 writes: ``sums`` stands in for it.
    _store_half(acc, sums, sums, 1, row_block, split, request, num_rows, H, Out, PartialOut, PartialLse, stride_ob,
                stride_ot, stride_oh, False, KV_SPLITS, DV, o_layout)


@gluon.jit
def _copy_chunk(kv_lat, kv_rope, kv_ready, stage, KV, rows, c: gl.constexpr, DV: gl.constexpr, DR: gl.constexpr):
    """cp.async chunk c of a tile (DV // 64 = the rope) into ``stage``; each of the warp's threads
    arrives on the chunk's ready barrier when its copies land."""
    layout: gl.constexpr = gl.BlockedLayout([1, 8], [4, 8], [4, 1], [1, 0])
    if c == DV // 64:
        _copy_rows(kv_rope.index(stage), KV + DV, rows, DV + DR, DR, layout)
    else:
        _copy_rows(kv_lat.index(stage).slice(c * 64, 64, dim=1), KV + c * 64, rows, DV + DR, 64, layout)
    async_copy.mbarrier_arrive(kv_ready.index(stage * CHUNKS + c), increment_count=False)


@gluon.jit
def _copy_chunks(kv_lat, kv_rope, kv_ready, stage, KV, rows, FIRST: gl.constexpr, COUNT: gl.constexpr,
                 DV: gl.constexpr, DR: gl.constexpr):
    """Chunks FIRST .. FIRST + COUNT - 1 of a tile."""
    for i in gl.static_range(COUNT):
        _copy_chunk(kv_lat, kv_rope, kv_ready, stage, KV, rows, FIRST + i, DV, DR)


@gluon.jit
def _tile_rows(table, tile, seq_len, start, PAGE_SIZE: gl.constexpr):
    """Pool rows of tile ``tile`` of the split, in the chunk copy layout (the block-table reads)."""
    layout: gl.constexpr = gl.BlockedLayout([1, 8], [4, 8], [4, 1], [1, 0])
    return _pool_rows(table, start + tile * 64, seq_len, PAGE_SIZE, 64, layout)


@gluon.jit
def _seesaw_verify_kernel(
    Q, KV, BlockTable, PrefixLens, TreeMask, PartialOut, PartialLse, Out,
    scale_log2,
    stride_qb, stride_qt, stride_qh,
    stride_table_b,
    stride_mask_b, stride_mask_t,
    stride_ob, stride_ot, stride_oh,
    T, H, split_len,
    PAGE_SIZE: gl.constexpr, DV: gl.constexpr, DR: gl.constexpr, KV_SPLITS: gl.constexpr,
    WORKER_REGS: gl.constexpr,
):
    BLOCK_M: gl.constexpr = 64
    BLOCK_N: gl.constexpr = 64
    dtype: gl.constexpr = KV.dtype.element_ty
    lat_layout: gl.constexpr = gl.BlockedLayout([1, 8], [1, 32], [4, 1], [1, 0])
    rope_layout: gl.constexpr = gl.BlockedLayout([1, 8], [4, 8], [4, 1], [1, 0])
    row_layout: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, [0])

    row_block = gl.program_id(0)
    split = gl.program_id(1)
    request = gl.program_id(2)
    num_rows = T * H
    prefix_len = gl.load(PrefixLens + request)
    seq_len = prefix_len + T
    table = BlockTable + request * stride_table_b
    start = split * split_len
    end = gl.minimum(start + split_len, seq_len)
    num_tiles = (gl.maximum(end - start, 0) + BLOCK_N - 1) // BLOCK_N

    q_lat = gl.allocate_shared_memory(dtype, [BLOCK_M, DV], gl.NVMMASharedLayout.get_default_for([BLOCK_M, DV], dtype))
    q_rope = gl.allocate_shared_memory(dtype, [BLOCK_M, DR], gl.NVMMASharedLayout.get_default_for([BLOCK_M, DR], dtype))
    kv_lat = gl.allocate_shared_memory(dtype, [2, BLOCK_N, DV],
                                       gl.NVMMASharedLayout.get_default_for([BLOCK_N, DV], dtype))
    kv_rope = gl.allocate_shared_memory(dtype, [2, BLOCK_N, DR],
                                        gl.NVMMASharedLayout.get_default_for([BLOCK_N, DR], dtype))
    m0_smem = gl.allocate_shared_memory(gl.float32, [BLOCK_M], row_layout)
    m1_smem = gl.allocate_shared_memory(gl.float32, [BLOCK_M], row_layout)
    sums_smem = gl.allocate_shared_memory(gl.float32, [BLOCK_M], row_layout)
    kv_ready = gl.allocate_shared_memory(gl.int64, [2 * 9, 1], mbarrier.MBarrierLayout())
    signals = gl.allocate_shared_memory(gl.int64, [6, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(2 * 9):
        mbarrier.init(kv_ready.index(i), count=32 * 4)  # one cp.async arrival per thread of a warpgroup
    for i in gl.static_range(6):
        mbarrier.init(signals.index(i), count=1)
    m0_ready = signals.index(0)
    p1_ready = signals.index(1)
    p0_taken = signals.index(2)
    p1_taken = signals.index(3)
    sums_ready = signals.index(4)
    l1_ready = signals.index(5)

    # Q rows of this block (clamped to the last row), before the partitions part.
    last_row = num_rows - 1
    r_lat = gl.minimum(row_block * BLOCK_M + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, lat_layout)), last_row)
    _copy_rows(q_lat, Q + request * stride_qb, (r_lat // H) * stride_qt + (r_lat % H) * stride_qh, 1, DV, lat_layout)
    r_rope = gl.minimum(row_block * BLOCK_M + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, rope_layout)), last_row)
    _copy_rows(q_rope, Q + request * stride_qb + DV, (r_rope // H) * stride_qt + (r_rope % H) * stride_qh, 1, DR,
               rope_layout)
    async_copy.commit_group()
    async_copy.wait_group(0)
    fence_async_shared()
    gl.thread_barrier()
    # Tiles 0 and 1, whole; later tiles are copied by the warpgroup whose P V last reads a stage's chunks.
    if num_tiles > 0:
        _copy_chunks(kv_lat, kv_rope, kv_ready, 0, KV, _tile_rows(table, 0, seq_len, start, PAGE_SIZE), 0, CHUNKS,
                     DV, DR)
        _copy_chunks(kv_lat, kv_rope, kv_ready, 1, KV, _tile_rows(table, 1, seq_len, start, PAGE_SIZE), 0, CHUNKS,
                     DV, DR)

    mask_rows_base = TreeMask + request * stride_mask_b
    gl.warp_specialize([
        (_left_partition, (q_lat, q_rope, kv_lat, kv_rope, kv_ready, m0_ready, p1_ready, p0_taken, p1_taken, sums_ready,
                              l1_ready, m0_smem, m1_smem, sums_smem, KV, table, Out, PartialOut, PartialLse,
                              scale_log2, mask_rows_base, stride_mask_t, stride_ob, stride_ot, stride_oh, row_block,
                              split, request, num_rows, H, prefix_len, seq_len, start, num_tiles, PAGE_SIZE, DV, DR,
                              KV_SPLITS)),
        (_right_partition, (q_lat, q_rope, kv_lat, kv_rope, kv_ready, m0_ready, p1_ready, p0_taken, p1_taken, sums_ready,
                              l1_ready, m0_smem, m1_smem, sums_smem, KV, table, Out, PartialOut, PartialLse,
                              scale_log2, mask_rows_base, stride_mask_t, stride_ob, stride_ot, stride_oh, row_block,
                              split, request, num_rows, H, prefix_len, seq_len, start, num_tiles, PAGE_SIZE, DV, DR,
                              KV_SPLITS)),
    ], [4], [WORKER_REGS])


def complete_config(config: dict, shape: ProblemShape) -> dict:
    """Fill ``kv_splits`` = 0 (auto) from shapes alone: one CTA per SM, as many splits as fill one wave."""
    if not config["kv_splits"]:
        splits = choose_kv_splits(shape, BLOCK_M, BLOCK_N, sm_count(shape.device), ctas_per_sm=1, one_wave=True)
        config = {**config, "kv_splits": splits}
    if not 1 <= config["kv_splits"] <= MAX_KV_SPLITS:
        raise ValueError(f"config: kv_splits must be 0 (auto) or 1..{MAX_KV_SPLITS}, got {config['kv_splits']}")
    return config


def run(q, kv_cache, block_table, prefix_lens, tree_mask, *, sm_scale, v_dim, out, config):
    """Launch the kernel (and the shared combine when kv_splits > 1); ``out`` written in place."""
    from verify_kernels.split_combine import launch_combine, partial_buffers

    batch, tree_nodes, heads, head_dim = q.shape
    kv_splits = config["kv_splits"]
    page_size = kv_cache.shape[1]
    split_len = triton.cdiv(triton.cdiv(block_table.shape[1] * page_size, kv_splits), BLOCK_N) * BLOCK_N
    partial_out, partial_lse = partial_buffers(out, kv_splits)
    _seesaw_verify_kernel[(triton.cdiv(tree_nodes * heads, BLOCK_M), kv_splits, batch)](
        q, kv_cache, block_table, prefix_lens, tree_mask, partial_out, partial_lse, out,
        sm_scale * LOG2E,
        q.stride(0), q.stride(1), q.stride(2),
        block_table.stride(0),
        tree_mask.stride(0), tree_mask.stride(1),
        out.stride(0), out.stride(1), out.stride(2),
        tree_nodes, heads, split_len,
        PAGE_SIZE=page_size, DV=v_dim, DR=head_dim - v_dim, KV_SPLITS=kv_splits,
        WORKER_REGS=WORKER_REGISTERS, num_warps=PARTITION_WARPS,
    )
    if kv_splits > 1:
        launch_combine(partial_out, partial_lse, out, kv_splits)


def kernel_specs(config: dict, *, page_size: int = 64, dtype: str = "bf16", tree_nodes: int = 64, heads: int = 8,
                 table_pages: int = 2048):
    """What `vk static` compiles for ``config`` (sm_90 only), specialised like a representative
    launch (B=1, T=64, H=8, a 128k-token table)."""
    from harness.static.triton_compile import TritonKernelSpec

    pointer = f"*{dtype}"
    kv_splits = max(2, config.get("kv_splits") or 2)
    split_len = -(-(-(-table_pages * page_size // kv_splits)) // BLOCK_N) * BLOCK_N
    rows = tree_nodes * heads
    words = -(-tree_nodes // 32)
    ints = {"stride_qb": rows * 576, "stride_qt": heads * 576, "stride_qh": 576, "stride_table_b": table_pages,
            "stride_mask_b": tree_nodes * words, "stride_mask_t": words, "stride_ob": rows * 512,
            "stride_ot": heads * 512, "stride_oh": 512, "T": tree_nodes, "H": heads, "split_len": split_len}
    return [TritonKernelSpec(
        "seesaw_verify", _seesaw_verify_kernel,
        {"Q": pointer, "KV": pointer, "BlockTable": "*i32", "PrefixLens": "*i32", "TreeMask": "*i32",
         "PartialOut": "*fp32", "PartialLse": "*fp32", "Out": pointer},
        {"PAGE_SIZE": page_size, "DV": 512, "DR": 64, "KV_SPLITS": kv_splits, "WORKER_REGS": WORKER_REGISTERS},
        PARTITION_WARPS, 1, float_args=("scale_log2",), int_values=ints,
    )]


def static_resources(config: dict, arch: str):
    """(kernel name, ResourceUsage) for `vk static`: sm_90 compiles; other arches have no wgmma."""
    if arch != "sm_90":
        raise ValueError(f"gluon_seesaw needs wgmma (sm_90), which {arch} does not have")
    from dataclasses import replace

    from harness.static.triton_compile import compile_resources

    threads = 2 * PARTITION_WARPS * 32
    return [(spec.name, replace(compile_resources(spec, arch), threads=threads)) for spec in kernel_specs(config)]
