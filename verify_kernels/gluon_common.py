"""What the two Gluon (Hopper wgmma) variants share: tile constants, copy helpers, shape rules and
config completion. Kernel code: it is part of both variants' kernel source hashes."""

from __future__ import annotations

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.ampere import async_copy
from triton.experimental.gluon.language.nvidia.hopper import tma as hopper_tma

from .arch import missing_feature
from .contract import ProblemShape
from .splits import with_kv_splits

CPU_INTERPRETABLE = False  # no CPU interpreter for Gluon: the CPU suite compiles for sm_90
PAGE_SIZES = (16, 32, 64)
CHECK_PAGE_SIZES = (16, 64)
CHECK_CONFIGS = ({}, {"kv_splits": 3, "BLOCK_N": 32}, {"kv_splits": 8})
BLOCK_M = 64
DEFAULT_CONFIG = {"BLOCK_N": 64, "kv_splits": 0}
BLOCK_N_CHOICES = (32, 64)
LOG2E = 1.4426950408889634
LN2 = gl.constexpr(0.6931471805599453)
# Gluon renamed three builtins after Triton 3.6; the same instructions under either name, so one
# source compiles on Triton 3.6 through 3.9 (tests/harness/static/test_static.py, CI).
# The CTA barrier: gl.thread_barrier up to 3.6, gl.barrier from 3.7.
cta_barrier = gl.barrier if hasattr(gl, "barrier") else gl.thread_barrier
# cp.async and TMA copies into shared memory: async_copy_global_to_shared up to 3.8, async_load from
# 3.9 (3.9 keeps the old names as stubs that raise, so the new name is looked for first).
cp_async_load = getattr(async_copy, "async_load", None) or async_copy.async_copy_global_to_shared
tma_async_load = getattr(hopper_tma, "async_load", None) or hopper_tma.async_copy_global_to_shared


@gluon.jit
def copy_rows(smem, base, rows, row_stride, COLS: gl.constexpr, layout: gl.constexpr):
    """cp.async of ``COLS`` columns starting at ``base`` of each row in ``rows`` into ``smem``."""
    cols = gl.arange(0, COLS, layout=gl.SliceLayout(0, layout))
    offsets = gl.expand_dims(rows * row_stride, 1) + gl.expand_dims(cols, 0)
    cp_async_load(smem, base + offsets)


@gluon.jit
def copy_q_rows(q_lat, q_rope, Q, row_block, num_rows, H, stride_qt, stride_qh, DV: gl.constexpr,
                DR: gl.constexpr, lat_layout: gl.constexpr, rope_layout: gl.constexpr):
    """cp.async of a 64-row block of one request's Q (``Q``: the request's first row; row r = node * H
    + head, clamped to the last row) into its latent and rope tiles."""
    BLOCK_M: gl.constexpr = 64
    last_row = num_rows - 1
    r_lat = gl.minimum(row_block * BLOCK_M + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, lat_layout)), last_row)
    copy_rows(q_lat, Q, (r_lat // H) * stride_qt + (r_lat % H) * stride_qh, 1, DV, lat_layout)
    r_rope = gl.minimum(row_block * BLOCK_M + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, rope_layout)), last_row)
    copy_rows(q_rope, Q + DV, (r_rope // H) * stride_qt + (r_rope % H) * stride_qh, 1, DR, rope_layout)


@gluon.jit
def pool_rows(table, tile_start, seq_len, PAGE_SIZE: gl.constexpr, BLOCK_N: gl.constexpr, layout: gl.constexpr):
    """Pool rows of positions [tile_start, +BLOCK_N) of one request, clamped to its last row."""
    positions = gl.minimum(tile_start + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(1, layout)), seq_len - 1)
    page = gl.load(table + positions // PAGE_SIZE)
    return page.to(gl.int64) * PAGE_SIZE + positions % PAGE_SIZE


@gluon.jit
def masked_scores(s, scale_log2, tile_start, prefix_len, seq_len, mask_rows, row_valid, BLOCK_N: gl.constexpr,
                  s_layout: gl.constexpr):
    """An S tile in log2 units, -inf where a row may not look: past the sequence, and in the tree part
    where the column is not the row's ancestor (``mask_rows``: each row's bitmask words). Only tiles
    that reach the tree read the bitmask."""
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
def plan_unit(Plan, unit, B, B_POW2: gl.constexpr, num_warps: gl.constexpr):
    """verify_kernels/planner.py's ``unit_of`` for Gluon kernels (the plan's layout is documented
    there): (request, first position, chunk, splits of the request, units in the plan); request is
    clamped to B - 1 past the plan, where the caller runs no tile."""
    layout: gl.constexpr = gl.BlockedLayout([1], [32], [num_warps], [0])
    b = gl.arange(0, B_POW2, layout=layout)
    ends = gl.load(Plan + 1 + b, mask=b < B, other=2147483647)
    request = gl.minimum(gl.sum((ends <= unit).to(gl.int32), 0), B - 1)
    first_unit = gl.load(Plan + request)
    splits = gl.load(Plan + request + 1) - first_unit
    chunk = gl.load(Plan + B + 1)
    return request, (unit - first_unit) * chunk, chunk, splits, gl.load(Plan + B)


@gluon.jit
def wait_for_prior_grids():
    """griddepcontrol.wait: in a kernel launched programmatically (``launch_pdl``), wait until the
    grids before it have finished and their writes are visible (a no-op otherwise)."""
    gl.inline_asm_elementwise("griddepcontrol.wait; // $0", "=r", [], dtype=gl.int32, is_pure=False, pack=1)


@gluon.jit
def launch_dependents():
    """griddepcontrol.launch_dependents: the next grid, if launched programmatically, may be
    scheduled now (it waits for this one with ``wait_for_prior_grids`` before reading its output)."""
    gl.inline_asm_elementwise("griddepcontrol.launch_dependents; // $0", "=r", [], dtype=gl.int32, is_pure=False,
                              pack=1)


@gluon.jit
def cta_range(Plan, cta, B, B_POW2: gl.constexpr, BLOCK_N: gl.constexpr, SPANS: gl.constexpr,
              num_warps: gl.constexpr):
    """CTA ``cta``'s work in the batch's tiles laid end to end (planner.py's plan layout):
    (first tile, end tile, its first unit, its segments, the request of its first segment). Spans
    rule: tiles [cta * span, + span), crossing requests, its k-th segment in request first + k
    (every request has a tile); a units rule: its unit's tiles (none past the plan; one segment,
    maybe empty: a fixed split past its request still writes its empty partial rows). Call it
    before the warps specialize.

    The spans rule counts over the requests' first tiles in chunks that every thread holds whole
    (each thread loads the same CHUNK words and sums them in its registers): a sum across threads
    goes through shuffles, whose result ptxas cannot prove warp-uniform, so the segment loop it
    bounds ran off the uniform datapath, the tile loops lost their uniform registers and spilled
    once B was not 1 (ncu: 1.6 M local requests, 10-13% of a ragged batch's time)."""
    total = gl.load(Plan + 2 * B + 2)
    chunk_tiles = gl.load(Plan + B + 1) // BLOCK_N
    if SPANS:
        CHUNK: gl.constexpr = min(B_POW2, 32)
        offsets = gl.arange(0, CHUNK, layout=gl.BlockedLayout([CHUNK], [32], [num_warps], [0]))
        begin = gl.minimum(cta * chunk_tiles, total)
        end = gl.minimum(begin + chunk_tiles, total)
        first_unit = cta
        inside = 0  # requests starting strictly inside the range
        request = 0
        for first in range(0, B, CHUNK):
            b = first + offsets
            tile_start = gl.load(Plan + B + 2 + b, mask=b < B, other=0)
            inner = (b >= 1) & (b < B)
            first_unit += gl.sum((inner & (tile_start < begin) & (tile_start % chunk_tiles != 0)).to(gl.int32), 0)
            inside += gl.sum((inner & (tile_start > begin) & (tile_start < end)).to(gl.int32), 0)
            request += gl.sum((inner & (tile_start <= begin)).to(gl.int32), 0)
        segments = gl.where(begin < end, 1 + inside, 0)
    else:
        request, start, chunk, splits, units = plan_unit(Plan, cta, B, B_POW2, num_warps)
        begin = gl.load(Plan + B + 2 + request) + start // BLOCK_N
        end = gl.maximum(gl.minimum(begin + chunk_tiles, gl.load(Plan + B + 3 + request)), begin)
        first_unit = cta
        segments = (cta < units).to(gl.int32)
    return begin, end, first_unit, segments, request


@gluon.jit
def segment_at(Plan, request, position, end, B, BLOCK_N: gl.constexpr, GAPS: gl.constexpr):
    """The segment of ``request`` starting at laid tile ``position`` of a CTA's range ending at ``end``
    (``cta_range``): (its first position in the request, its tiles, units of the request, the laid tiles
    it spans: the walk's step). With ``GAPS`` (the plan's ``segment_cost``) the tiles of the gap laid
    before the request are none of its: a segment inside the gap has no tile (planner.reference_segment
    states it). Scalars only."""
    if GAPS:
        laid_start = gl.load(Plan + B + 2 + request)
        stop = gl.minimum(end, gl.load(Plan + B + 3 + request))
        gap = gl.where(request >= 1, gl.load(Plan + 2 * B + 3), 0)
        first = gl.maximum(position - laid_start - gap, 0)
        return (first * BLOCK_N, gl.maximum(stop - laid_start - gap - first, 0),
                gl.load(Plan + request + 1) - gl.load(Plan + request), gl.maximum(stop - position, 0))
    start = (position - gl.load(Plan + B + 2 + request)) * BLOCK_N
    tiles = gl.maximum(gl.minimum(end, gl.load(Plan + B + 3 + request)) - position, 0)
    return start, tiles, gl.load(Plan + request + 1) - gl.load(Plan + request), tiles


def unsupported_reason(shape: ProblemShape) -> str | None:
    if shape.device.type != "cuda":
        return f"needs a CUDA Hopper GPU (wgmma, sm_90), got {shape.device}"
    if reason := missing_feature(shape, "wgmma", "wgmma (a Hopper GPU, sm_90)"):
        return reason
    if (shape.head_dim, shape.v_dim) != (576, 512):
        return f"needs the MLA head (Dqk 576, v_dim 512), got Dqk {shape.head_dim}, v_dim {shape.v_dim}"
    if shape.page_size not in PAGE_SIZES:
        return f"page_size must be one of {PAGE_SIZES}, got {shape.page_size}"
    return None


def complete_config(config: dict, shape: ProblemShape) -> dict:
    """Check BLOCK_N and fill ``kv_splits`` = 0 (auto) from shapes alone."""
    if config["BLOCK_N"] not in BLOCK_N_CHOICES:
        raise ValueError(f"config: BLOCK_N must be one of {BLOCK_N_CHOICES}, got {config['BLOCK_N']}")
    # One CTA per SM (224 KB of shared memory at BLOCK_N 64): as many splits as fill one wave.
    return with_kv_splits(config, shape, BLOCK_M, ctas_per_sm=1, one_wave=True)
