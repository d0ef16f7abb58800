"""Variant ``gluon_wgmma``: paged split-KV tree-verify attention on Hopper's warpgroup MMA (Gluon).

Why a third kernel: the Triton split-KV kernel chains two dots, and Triton then lays the first
one (S = Q K^T) over its 8 warps as [8, 1]; with 64 rows both warpgroups compute the same S, so
Q K^T (53% of the FLOPs) runs twice. Gluon states the layouts instead: here S is [4, 2], each
warpgroup computes half of the tile's columns, and O is [4, 2], each warpgroup owns 256 of the
512 output columns.

CTA (8 warps = 2 warpgroups): 64 query rows (row r = node * H + head of one request) against one
KV split, walked in tiles of BLOCK_N positions:

- shared memory: Q [64, 512] + [64, 64] once; 2 stages of KV [BLOCK_N, 512] + [BLOCK_N, 64]
  (one tile is K, all 576 columns, and V, its first 512); P [64, BLOCK_N];
- tile i + 1 is copied (cp.async, 16-byte chunks, whole rows of a page) while tile i computes;
- S = Q K^T: two wgmma (latent, rope), warpgroup w owns columns [w BLOCK_N/2, +BLOCK_N/2);
- online softmax in fp32 base 2; only tiles that reach the tree read the ancestor bitmask;
- P goes to shared memory (each warpgroup needs all its columns), O += P V: wgmma, warpgroup w
  owns output columns [256 w, +256) (128 fp32 registers per thread).

Positions past the sequence are clamped to its last row when copied (finite data, never a NaN
from an unused pool slot) and masked to -inf in S. Rows past T x H are clamped the same way and
not stored. kv_splits and the combine are shared with triton_splitkv.

Hopper only (sm_90): wgmma does not exist on sm_80 or sm_120. No CPU interpreter for Gluon, so
the CPU suite compiles it for sm_90 and the GPU suite checks it against the oracle.
"""

from __future__ import annotations

import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.ampere import async_copy
from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared, warpgroup_mma, warpgroup_mma_wait

from . import planner
from .arch import load_arch
from .gluon_common import (BLOCK_M, BLOCK_N_CHOICES, CHECK_CONFIGS, CHECK_PAGE_SIZES, CPU_INTERPRETABLE,
                           DEFAULT_CONFIG, LN2, LOG2E, PAGE_SIZES, complete_config, copy_rows, cta_barrier,
                           masked_scores, pool_rows, unsupported_reason)
from .split_combine import launch_combine, partial_buffers

# The variant interface (verify_kernels/variants.py); what it shares with gluon_wgmma_ws comes from gluon_common.
__all__ = ["BLOCK_N_CHOICES", "CHECK_CONFIGS", "CHECK_PAGE_SIZES", "CPU_INTERPRETABLE", "DEFAULT_CONFIG",
           "PAGE_SIZES", "complete_config", "kernel_specs", "offline_arch_problem", "run", "unsupported_reason"]

NUM_WARPS = 8


@gluon.jit
def _issue_kv_tile(lat_smem, rope_smem, KV, table, tile_start, seq_len, PAGE_SIZE: gl.constexpr,
                   BLOCK_N: gl.constexpr, DV: gl.constexpr, DR: gl.constexpr,
                   lat_layout: gl.constexpr, rope_layout: gl.constexpr):
    """cp.async one KV tile (latent and rope columns) into a stage."""
    lat_rows = pool_rows(table, tile_start, seq_len, PAGE_SIZE, BLOCK_N, lat_layout)
    copy_rows(lat_smem, KV, lat_rows, DV + DR, DV, lat_layout)
    rope_rows = pool_rows(table, tile_start, seq_len, PAGE_SIZE, BLOCK_N, rope_layout)
    copy_rows(rope_smem, KV + DV, rope_rows, DV + DR, DR, rope_layout)


@gluon.jit
def _wgmma_verify_kernel(
    Q, KV, BlockTable, PrefixLens, TreeMask, PartialOut, PartialLse, Out,
    scale_log2,
    stride_qb, stride_qt, stride_qh,
    stride_table_b,
    stride_mask_b, stride_mask_t,
    stride_ob, stride_ot, stride_oh,
    T, H, split_len,
    PAGE_SIZE: gl.constexpr, BLOCK_N: gl.constexpr, DV: gl.constexpr, DR: gl.constexpr,
    KV_SPLITS: gl.constexpr,
):
    BLOCK_M: gl.constexpr = 64
    dtype: gl.constexpr = KV.dtype.element_ty
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 2],
                                                       instr_shape=[16, BLOCK_N // 2, 16])
    o_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 2],
                                                       instr_shape=[16, DV // 2, 16])
    lat_layout: gl.constexpr = gl.BlockedLayout([1, 8], [1, 32], [8, 1], [1, 0])
    rope_layout: gl.constexpr = gl.BlockedLayout([1, 8], [4, 8], [8, 1], [1, 0])
    lat_smem_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_N, DV], dtype)
    rope_smem_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_N, DR], dtype)
    q_lat_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_M, DV], dtype)
    q_rope_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_M, DR], dtype)
    p_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_M, BLOCK_N], dtype)

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

    q_lat = gl.allocate_shared_memory(dtype, [BLOCK_M, DV], q_lat_layout)
    q_rope = gl.allocate_shared_memory(dtype, [BLOCK_M, DR], q_rope_layout)
    kv_lat = gl.allocate_shared_memory(dtype, [2, BLOCK_N, DV], lat_smem_layout)
    kv_rope = gl.allocate_shared_memory(dtype, [2, BLOCK_N, DR], rope_smem_layout)
    p_smem = gl.allocate_shared_memory(dtype, [BLOCK_M, BLOCK_N], p_layout)

    # Q rows of this block (clamped to the last row) and the first tile: one cp.async group.
    last_row = num_rows - 1
    r_lat = gl.minimum(row_block * BLOCK_M + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, lat_layout)), last_row)
    copy_rows(q_lat, Q + request * stride_qb, (r_lat // H) * stride_qt + (r_lat % H) * stride_qh, 1, DV, lat_layout)
    r_rope = gl.minimum(row_block * BLOCK_M + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, rope_layout)), last_row)
    copy_rows(q_rope, Q + request * stride_qb + DV, (r_rope // H) * stride_qt + (r_rope % H) * stride_qh, 1, DR,
               rope_layout)
    _issue_kv_tile(kv_lat.index(0), kv_rope.index(0), KV, table, start, seq_len, PAGE_SIZE, BLOCK_N, DV, DR,
                   lat_layout, rope_layout)
    async_copy.commit_group()

    rows_s = row_block * BLOCK_M + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, s_layout))
    node_s = gl.minimum(rows_s, num_rows - 1) // H
    mask_rows = TreeMask + request * stride_mask_b + node_s * stride_mask_t
    m_i = gl.full([BLOCK_M], float("-inf"), gl.float32, layout=gl.SliceLayout(1, s_layout))
    l_i = gl.zeros([BLOCK_M], gl.float32, layout=gl.SliceLayout(1, s_layout))
    acc = gl.zeros([BLOCK_M, DV], gl.float32, layout=o_layout)
    s_zero = gl.zeros([BLOCK_M, BLOCK_N], gl.float32, layout=s_layout)

    for i in range(num_tiles):
        stage = i % 2
        async_copy.wait_group(0)
        fence_async_shared()
        cta_barrier()  # tile i visible to all; every warp is done with tile i - 1 and P
        if i + 1 < num_tiles:
            _issue_kv_tile(kv_lat.index(1 - stage), kv_rope.index(1 - stage), KV, table,
                           start + (i + 1) * BLOCK_N, seq_len, PAGE_SIZE, BLOCK_N, DV, DR, lat_layout, rope_layout)
        async_copy.commit_group()
        lat = kv_lat.index(stage)
        s = warpgroup_mma(q_lat, lat.permute((1, 0)), s_zero, use_acc=False, is_async=True)
        s = warpgroup_mma(q_rope, kv_rope.index(stage).permute((1, 0)), s, is_async=True)
        s = warpgroup_mma_wait(num_outstanding=0, deps=(s, ))
        scores = masked_scores(s, scale_log2, start + i * BLOCK_N, prefix_len, seq_len, mask_rows, rows_s < num_rows,
                               BLOCK_N, s_layout)

        m_new = gl.maximum(m_i, gl.max(scores, 1))
        m_safe = gl.where(m_new == float("-inf"), 0.0, m_new)  # a row may see nothing in this split
        alpha = gl.exp2(m_i - m_safe)
        p = gl.exp2(scores - gl.expand_dims(m_safe, 1))
        l_i = l_i * alpha + gl.sum(p, 1)
        m_i = m_new
        acc = acc * gl.expand_dims(gl.convert_layout(alpha, gl.SliceLayout(1, o_layout)), 1)
        p_smem.store(p.to(dtype))
        fence_async_shared()
        cta_barrier()  # both halves of P written before either warpgroup reads all of it
        acc = warpgroup_mma(p_smem, lat, acc, is_async=True)
        acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc, ))

    async_copy.wait_group(0)
    l_o = gl.convert_layout(l_i, gl.SliceLayout(1, o_layout))
    has_mass = l_o > 0
    out_tile = acc / gl.expand_dims(gl.where(has_mass, l_o, 1.0), 1)
    rows_o = row_block * BLOCK_M + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, o_layout))
    cols_o = gl.arange(0, DV, layout=gl.SliceLayout(0, o_layout))
    row_valid = gl.expand_dims(rows_o < num_rows, 1)
    if KV_SPLITS == 1:
        out_row = request * stride_ob + (rows_o // H) * stride_ot + (rows_o % H) * stride_oh
        gl.store(Out + gl.expand_dims(out_row, 1) + gl.expand_dims(cols_o, 0), out_tile.to(dtype), mask=row_valid)
    else:
        partial_row = (request * KV_SPLITS + split) * num_rows + rows_o
        gl.store(PartialOut + gl.expand_dims(partial_row.to(gl.int64) * DV, 1) + gl.expand_dims(cols_o, 0),
                 out_tile, mask=row_valid)
        m_o = gl.convert_layout(m_i, gl.SliceLayout(1, o_layout))
        lse = gl.where(has_mass, (m_o + gl.log2(gl.where(has_mass, l_o, 1.0))) * LN2, float("-inf"))
        gl.store(PartialLse + partial_row, lse, mask=rows_o < num_rows)


def run(q, kv_cache, block_table, prefix_lens, tree_mask, *, sm_scale, v_dim, out, config):
    """Launch the wgmma kernel (and the shared combine when kv_splits > 1); ``out`` written in place."""
    batch, tree_nodes, heads, head_dim = q.shape
    rows = tree_nodes * heads
    block_n, kv_splits = config["BLOCK_N"], config["kv_splits"]
    page_size = kv_cache.shape[1]
    capacity = block_table.shape[1] * page_size
    split_len = triton.cdiv(triton.cdiv(capacity, kv_splits), block_n) * block_n
    partial_out, partial_lse = partial_buffers(out, batch * kv_splits) if kv_splits > 1 else (out, out)
    grid = (triton.cdiv(rows, BLOCK_M), kv_splits, batch)
    _wgmma_verify_kernel[grid](
        q, kv_cache, block_table, prefix_lens, tree_mask, partial_out, partial_lse, out,
        sm_scale * LOG2E,
        q.stride(0), q.stride(1), q.stride(2),
        block_table.stride(0),
        tree_mask.stride(0), tree_mask.stride(1),
        out.stride(0), out.stride(1), out.stride(2),
        tree_nodes, heads, split_len,
        PAGE_SIZE=page_size, BLOCK_N=block_n, DV=v_dim, DR=head_dim - v_dim, KV_SPLITS=kv_splits,
        num_warps=NUM_WARPS,
    )
    if kv_splits > 1:
        launch_combine(partial_out, partial_lse, planner.fixed_plan(batch, kv_splits, out.device), out,
                       batch * kv_splits, kv_splits)


def kernel_specs(config: dict, *, page_size: int = 64, dtype: str = "bf16", tree_nodes: int = 64, heads: int = 8,
                 table_pages: int = 2048):
    """What `vk static` compiles for ``config`` (sm_90 only; other arches fail to compile wgmma),
    specialised like a representative launch (B=1, T=64, H=8, a 128k-token table)."""
    from .kernel_spec import TritonKernelSpec

    pointer = f"*{dtype}"
    kv_splits = max(2, config.get("kv_splits") or 2)
    block_n = config["BLOCK_N"]
    split_len = -(-(-(-table_pages * page_size // kv_splits)) // block_n) * block_n
    rows = tree_nodes * heads
    words = -(-tree_nodes // 32)
    ints = {"stride_qb": rows * 576, "stride_qt": heads * 576, "stride_qh": 576, "stride_table_b": table_pages,
            "stride_mask_b": tree_nodes * words, "stride_mask_t": words, "stride_ob": rows * 512,
            "stride_ot": heads * 512, "stride_oh": 512, "T": tree_nodes, "H": heads, "split_len": split_len}
    return [TritonKernelSpec(
        "wgmma_verify", _wgmma_verify_kernel,
        {"Q": pointer, "KV": pointer, "BlockTable": "*i32", "PrefixLens": "*i32", "TreeMask": "*i32",
         "PartialOut": "*fp32", "PartialLse": "*fp32", "Out": pointer},
        {"PAGE_SIZE": page_size, "BLOCK_N": block_n, "DV": 512, "DR": 64, "KV_SPLITS": kv_splits},
        NUM_WARPS, 1, float_args=("scale_log2",), int_values=ints,
    )]


def offline_arch_problem(arch: str) -> str | None:
    """Why ``kernel_specs`` cannot compile for ``arch`` (None: it can). Arches without wgmma (all
    but sm_90), and LLVM aborts the process rather than raising, so they are refused before compiling."""
    return None if load_arch(arch).has("wgmma") else f"gluon_wgmma needs wgmma (sm_90), which {arch} does not have"
