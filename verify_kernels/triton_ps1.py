"""Variant ``triton_ps1``: the serving-stack baseline, reproduced faithfully (the pathology).

Structure of the "extend attention" kernel that serving stacks run for tree verification over a
page_size=1 KV pool:

- grid (B, H, ceil(T / BLOCK_M)): one program per (request, head, block of BLOCK_M tree nodes), so
  one request with 8 heads and T = 64 launches 16 programs on a 132-SM GPU;
- stage 1 walks the whole committed prefix serially in BLOCK_N-token steps, gathering every key
  row through the token-granular page table (one table load per token), K loaded transposed
  ([D, BLOCK_N]) and V loaded again from the same rows, with no mask;
- stage 2 walks the tree tokens (positions prefix_len ..) with the ancestor bitmask;
- online softmax in fp32, P cast to the input dtype for P.V.

Tiles: Q [BLOCK_M, 512] + Q_rope [BLOCK_M, 64] in registers, K [BLOCK_N, 512] + K_rope
[BLOCK_N, 64] and V [BLOCK_N, 512] per step, acc [BLOCK_M, 512] fp32. Only page_size 1 is
supported: that is the layout this kernel exists to reproduce.
"""

from __future__ import annotations

import triton
import triton.language as tl

from . import triton_common
from .triton_dot import dot
from .contract import ProblemShape

# Runs on the CPU through the Triton interpreter (the CPU test suite).
CPU_INTERPRETABLE = True
PAGE_SIZES = (1,)
# Page sizes `vk check` and the tests exercise for this variant.
CHECK_PAGE_SIZES = (1,)
# The stack's choice for 576-dim heads on sm_90.
DEFAULT_CONFIG = {"BLOCK_M": 32, "BLOCK_N": 64, "num_warps": 8, "num_stages": 1}


@triton.jit
def _attend_tile(acc, m_i, l_i, q, q_rope, KV, slot, col_valid, visible, sm_scale, stride_kv,
                 offs_dv, offs_drope, UPCAST_DOT: tl.constexpr):
    """One BLOCK_N step of online softmax over gathered token rows.

    As upstream: K is gathered "transposed" ([D, BLOCK_N], each column one token row, so lanes
    stride across rows), and V is gathered again from the same rows as [BLOCK_N, D].
    """
    row_offsets = slot.to(tl.int64) * stride_kv
    k = tl.load(KV + row_offsets[None, :] + offs_dv[:, None], mask=col_valid[None, :], other=0.0)
    k_rope = tl.load(KV + row_offsets[None, :] + offs_drope[:, None], mask=col_valid[None, :], other=0.0)
    scores = dot(q, k, tl.zeros([q.shape[0], k.shape[1]], dtype=tl.float32), UPCAST_DOT)
    scores = dot(q_rope, k_rope, scores, UPCAST_DOT)
    scores = tl.where(visible, scores * sm_scale, float("-inf"))
    # Running max first, so exp never overflows; alpha rescales what was accumulated so far.
    m_new = tl.maximum(m_i, tl.max(scores, 1))
    alpha = tl.exp(m_i - m_new)
    p = tl.exp(scores - m_new[:, None])
    l_i = l_i * alpha + tl.sum(p, 1)
    v = tl.load(KV + row_offsets[:, None] + offs_dv[None, :], mask=col_valid[:, None], other=0.0)
    acc = dot(p.to(v.dtype), v, acc * alpha[:, None], UPCAST_DOT)
    return acc, m_new, l_i


@triton.jit
def _ps1_verify_kernel(
    Q, KV, BlockTable, PrefixLens, TreeMask, Out,
    sm_scale,
    stride_qb, stride_qt, stride_qh,
    stride_kv,
    stride_table_b,
    stride_mask_b, stride_mask_t,
    stride_ob, stride_ot, stride_oh,
    T,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_DV: tl.constexpr, BLOCK_DROPE: tl.constexpr,
    UPCAST_DOT: tl.constexpr,
):
    request = tl.program_id(0)
    head = tl.program_id(1)
    m_block = tl.program_id(2)

    offs_m = m_block * BLOCK_M + tl.arange(0, BLOCK_M)
    row_valid = offs_m < T
    offs_dv = tl.arange(0, BLOCK_DV)
    offs_drope = BLOCK_DV + tl.arange(0, BLOCK_DROPE)

    q_ptrs = Q + request * stride_qb + offs_m[:, None] * stride_qt + head * stride_qh
    q = tl.load(q_ptrs + offs_dv[None, :], mask=row_valid[:, None], other=0.0)
    q_rope = tl.load(q_ptrs + offs_drope[None, :], mask=row_valid[:, None], other=0.0)
    prefix_len = tl.load(PrefixLens + request)
    table = BlockTable + request * stride_table_b

    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_DV], dtype=tl.float32)

    # Stage 1: the committed prefix, visible to every node; one table entry per token.
    for start_n in range(0, prefix_len, BLOCK_N):
        offs_n = start_n + tl.arange(0, BLOCK_N)
        col_valid = offs_n < prefix_len
        slot = tl.load(table + offs_n, mask=col_valid, other=0)
        acc, m_i, l_i = _attend_tile(acc, m_i, l_i, q, q_rope, KV, slot, col_valid,
                                     col_valid[None, :], sm_scale, stride_kv, offs_dv, offs_drope, UPCAST_DOT)

    # Stage 2: the tree tokens. No bit lies above the diagonal, so columns past this block's last
    # node are never visible and the loop stops there. Rows past T see every column so that no
    # row is all -inf (they are never stored); column 0, the root, is visible to every real node.
    tree_end = tl.minimum(T, (m_block + 1) * BLOCK_M)
    mask_rows = TreeMask + request * stride_mask_b + offs_m[:, None] * stride_mask_t
    for start_n in range(0, tree_end, BLOCK_N):
        offs_n = start_n + tl.arange(0, BLOCK_N)
        col_valid = offs_n < T
        slot = tl.load(table + prefix_len + offs_n, mask=col_valid, other=0)
        words = tl.load(mask_rows + (offs_n // 32)[None, :], mask=row_valid[:, None] & col_valid[None, :], other=0)
        is_ancestor = ((words >> (offs_n % 32)[None, :]) & 1) != 0
        visible = (is_ancestor | (offs_m >= T)[:, None]) & col_valid[None, :]
        acc, m_i, l_i = _attend_tile(acc, m_i, l_i, q, q_rope, KV, slot, col_valid,
                                     visible, sm_scale, stride_kv, offs_dv, offs_drope, UPCAST_DOT)

    acc = acc / l_i[:, None]
    out_ptrs = Out + request * stride_ob + offs_m[:, None] * stride_ot + head * stride_oh + offs_dv[None, :]
    tl.store(out_ptrs, acc.to(Out.dtype.element_ty), mask=row_valid[:, None])


def unsupported_reason(shape: ProblemShape) -> str | None:
    """None if this variant runs ``shape``; otherwise why not."""
    if shape.page_size not in PAGE_SIZES:
        return f"page_size must be 1 (token-granular pool), got {shape.page_size}"
    return triton_common.device_reason(shape) or triton_common.head_split_reason(shape)


def run(q, kv_cache, block_table, prefix_lens, tree_mask, *, sm_scale, v_dim, out, config):
    """Launch the baseline; ``out`` [B, T, H, v_dim] is written in place."""
    batch, tree_nodes, heads, head_dim = q.shape
    grid = (batch, heads, triton.cdiv(tree_nodes, config["BLOCK_M"]))
    _ps1_verify_kernel[grid](
        q, kv_cache, block_table, prefix_lens, tree_mask, out,
        sm_scale,
        q.stride(0), q.stride(1), q.stride(2),
        kv_cache.stride(0),
        block_table.stride(0),
        tree_mask.stride(0), tree_mask.stride(1),
        out.stride(0), out.stride(1), out.stride(2),
        tree_nodes,
        BLOCK_M=config["BLOCK_M"], BLOCK_N=config["BLOCK_N"],
        BLOCK_DV=v_dim, BLOCK_DROPE=head_dim - v_dim,
        UPCAST_DOT=triton_common.upcast_dot(q.dtype),
        num_warps=config["num_warps"], num_stages=config["num_stages"],
    )


def kernel_specs(config: dict, *, page_size: int = 1, dtype: str = "bf16", head_dim: int = 576, v_dim: int = 512,
                 tree_nodes: int = 64, heads: int = 8, table_slots: int = 131072):
    """What `vk static` compiles for ``config``, specialised on the integer arguments of a
    representative launch (B=1, T=64, H=8, a 128k-slot table), as the launcher would."""
    from .kernel_spec import TritonKernelSpec

    pointer = f"*{dtype}"
    words = -(-tree_nodes // 32)
    ints = {"stride_qb": tree_nodes * heads * head_dim, "stride_qt": heads * head_dim, "stride_qh": head_dim,
            "stride_kv": head_dim, "stride_table_b": table_slots, "stride_mask_b": tree_nodes * words,
            "stride_mask_t": words, "stride_ob": tree_nodes * heads * v_dim, "stride_ot": heads * v_dim,
            "stride_oh": v_dim, "T": tree_nodes}
    return [TritonKernelSpec(
        "ps1_verify", _ps1_verify_kernel,
        {"Q": pointer, "KV": pointer, "BlockTable": "*i32", "PrefixLens": "*i32", "TreeMask": "*i32", "Out": pointer},
        {"BLOCK_M": config["BLOCK_M"], "BLOCK_N": config["BLOCK_N"], "BLOCK_DV": v_dim,
         "BLOCK_DROPE": head_dim - v_dim, "UPCAST_DOT": False},
        config["num_warps"], config["num_stages"], int_values=ints,
    )]
