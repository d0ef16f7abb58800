"""Variant ``triton_splitkv``: paged, head-packed, split-KV tree-verify attention in Triton.

Algorithm (flash-decoding over a paged latent cache, every KV tile reused by all rows it serves):

- rows: the T x H (node, head) query rows of a request are packed into the M dimension,
  row r = node * H + head, so one [BLOCK_N, 576] KV tile feeds BLOCK_M rows at once;
- grid (ceil(T*H / BLOCK_M), plan units): program (m, u) owns rows m*BLOCK_M.. of the request of
  plan unit u and that unit's positions of its sequence (prefix + T); the plan (planner.py) is made
  on the device from prefix_lens, so a ragged batch is cut into near-equal units over all SMs. The
  row block varies fastest, so the programs reading one KV chunk run together and share it in L2;
- the KV tile is loaded once, as 512 latent + 64 rope columns; the latent part is both K (for
  Q.K^T, with the rope part) and V (for P.V);
- tiles wholly inside the committed prefix run without any mask; only the tail (the tiles that
  reach the tree tokens or the sequence end) reads the ancestor bitmask and bounds;
- online softmax in fp32; a request the plan splits writes a normalised partial output and
  log-sum-exp (fp32) per unit and the shared combine merges them; a request of one unit writes ``out``.

The grid and buffers are bounded from shapes alone (planner.plan_bounds) and the plan is read on the
device, so the call needs no host sync and can be captured in a CUDA graph that stays right as the
lengths change; ``kv_splits`` = N > 0 asks for N equal splits per request instead (empty splits
write lse = -inf).

Tiles: Q [BLOCK_M, 512] + [BLOCK_M, 64], K/V [BLOCK_N, 512] + [BLOCK_N, 64], S [BLOCK_M, BLOCK_N]
and acc [BLOCK_M, 512] fp32.
"""

from __future__ import annotations

import triton
import triton.language as tl

from . import triton_common
from .contract import ProblemShape
from . import planner
from .split_combine import launch_combine, partial_buffers
from .splits import sm_count
from .triton_dot import dot

# Runs on the CPU through the Triton interpreter (the CPU test suite).
CPU_INTERPRETABLE = True
PAGE_SIZES = (16, 32, 64)
CHECK_PAGE_SIZES = (16, 64)
# Configs `vk check` and the tests run besides the default: forced splits exercise the combine,
# empty splits and splits that hold only tree tokens even on the small CPU shapes.
CHECK_CONFIGS = ({}, {"kv_splits": 3, "BLOCK_N": 16}, {"kv_splits": 8, "BLOCK_M": 16, "BLOCK_N": 32},
                 {"waves": 4, "BLOCK_N": 16})
# Per-arch defaults. sm_90: the fastest of the configs timed on an H200 at L = 131072, T = 16 and
# 64, H = 8 (results/archive/2026-12-04/bench/splitkv-configs-nvidia-h200.jsonl, 2026-12-02, source
# b8611a6c096aba67: a run before records carried their commit). sm_120 has 99 KB of shared memory
# per block: the largest tiles that compile for it without spills (`vk static --arch sm_120`).
DEFAULT_CONFIGS = {
    "sm_90": {"BLOCK_M": 64, "BLOCK_N": 64, "num_warps": 8, "num_stages": 1, "kv_splits": 0, "waves": 1},
    "sm_120": {"BLOCK_M": 32, "BLOCK_N": 32, "num_warps": 8, "num_stages": 2, "kv_splits": 0, "waves": 1},
}
DEFAULT_CONFIG = DEFAULT_CONFIGS["sm_90"]


@triton.jit
def _load_kv_tile(KV, table, positions, valid, PAGE_SIZE: tl.constexpr, ROW_STRIDE: tl.constexpr,
                  offs_dv, offs_drope):
    """Rows at ``positions`` of one request: latent [BLOCK_N, DV] and rope [BLOCK_N, DROPE]."""
    page = tl.load(table + positions // PAGE_SIZE, mask=valid, other=0)
    row_offsets = (page.to(tl.int64) * PAGE_SIZE + positions % PAGE_SIZE) * ROW_STRIDE
    latent = tl.load(KV + row_offsets[:, None] + offs_dv[None, :], mask=valid[:, None], other=0.0)
    rope = tl.load(KV + row_offsets[:, None] + offs_drope[None, :], mask=valid[:, None], other=0.0)
    return latent, rope


@triton.jit
def _splitkv_verify_kernel(
    Q, KV, BlockTable, PrefixLens, TreeMask, Plan, PartialOut, PartialLse, Out,
    sm_scale,
    stride_qb, stride_qt, stride_qh,
    stride_table_b,
    stride_mask_b, stride_mask_t,
    stride_ob, stride_ot, stride_oh,
    T, H, B,
    PAGE_SIZE: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    BLOCK_DV: tl.constexpr, BLOCK_DROPE: tl.constexpr, B_POW2: tl.constexpr,
    UPCAST_DOT: tl.constexpr,
):
    tl.static_assert(BLOCK_N % 16 == 0)
    row_block = tl.program_id(0)
    unit = tl.program_id(1)
    request, split, start, chunk, splits, units = planner.unit_of(Plan, unit, B, B_POW2)
    if unit >= units:  # past the plan: the grid is sized for the longest plan the shapes allow
        return
    ROW_STRIDE: tl.constexpr = BLOCK_DV + BLOCK_DROPE

    rows = row_block * BLOCK_M + tl.arange(0, BLOCK_M)
    num_rows = T * H
    row_valid = rows < num_rows
    node = rows // H
    head = rows % H
    offs_dv = tl.arange(0, BLOCK_DV)
    offs_drope = BLOCK_DV + tl.arange(0, BLOCK_DROPE)
    offs_n = tl.arange(0, BLOCK_N)

    q_ptrs = Q + request * stride_qb + node[:, None] * stride_qt + head[:, None] * stride_qh
    q = tl.load(q_ptrs + offs_dv[None, :], mask=row_valid[:, None], other=0.0)
    q_rope = tl.load(q_ptrs + offs_drope[None, :], mask=row_valid[:, None], other=0.0)

    prefix_len = tl.load(PrefixLens + request)
    seq_len = prefix_len + T
    table = BlockTable + request * stride_table_b
    end = tl.minimum(start + chunk, seq_len)
    # Tiles below this position hold committed prefix only: no mask, no bounds.
    unmasked_end = tl.maximum(start, tl.minimum(end, (prefix_len // BLOCK_N) * BLOCK_N))

    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_DV], dtype=tl.float32)
    all_columns = tl.full([BLOCK_N], 1, tl.int1)

    for tile_start in range(start, unmasked_end, BLOCK_N):
        positions = tile_start + offs_n
        latent, rope = _load_kv_tile(KV, table, positions, all_columns, PAGE_SIZE, ROW_STRIDE,
                                     offs_dv, offs_drope)
        scores = dot(q, tl.trans(latent), tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32), UPCAST_DOT)
        scores = dot(q_rope, tl.trans(rope), scores, UPCAST_DOT) * sm_scale
        # Online softmax: new running max, rescale what was accumulated, add this tile.
        m_new = tl.maximum(m_i, tl.max(scores, 1))
        alpha = tl.exp(m_i - m_new)
        p = tl.exp(scores - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = dot(p.to(latent.dtype), latent, acc * alpha[:, None], UPCAST_DOT)
        m_i = m_new

    mask_rows = TreeMask + request * stride_mask_b + node[:, None] * stride_mask_t
    for tile_start in range(unmasked_end, end, BLOCK_N):
        positions = tile_start + offs_n
        in_sequence = positions < seq_len
        tree_column = positions - prefix_len
        in_tree = tree_column >= 0
        latent, rope = _load_kv_tile(KV, table, positions, in_sequence, PAGE_SIZE, ROW_STRIDE,
                                     offs_dv, offs_drope)
        scores = dot(q, tl.trans(latent), tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32), UPCAST_DOT)
        scores = dot(q_rope, tl.trans(rope), scores, UPCAST_DOT) * sm_scale
        words = tl.load(mask_rows + (tree_column // 32)[None, :],
                        mask=row_valid[:, None] & (in_tree & in_sequence)[None, :], other=0)
        is_ancestor = ((words >> (tree_column % 32)[None, :]) & 1) != 0
        visible = (is_ancestor | ~in_tree[None, :]) & in_sequence[None, :]
        scores = tl.where(visible, scores, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(scores, 1))
        # A row may see nothing in this split (its ancestors lie in another): keep exp() finite.
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        alpha = tl.exp(m_i - m_safe)
        p = tl.exp(scores - m_safe[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = dot(p.to(latent.dtype), latent, acc * alpha[:, None], UPCAST_DOT)
        m_i = m_new

    has_mass = l_i > 0
    out_tile = acc / tl.where(has_mass, l_i, 1.0)[:, None]
    if splits == 1:
        out_ptrs = Out + request * stride_ob + node[:, None] * stride_ot + head[:, None] * stride_oh
        tl.store(out_ptrs + offs_dv[None, :], out_tile.to(Out.dtype.element_ty), mask=row_valid[:, None])
    else:
        partial_row = unit * num_rows + rows
        tl.store(PartialOut + partial_row.to(tl.int64)[:, None] * BLOCK_DV + offs_dv[None, :], out_tile,
                 mask=row_valid[:, None])
        lse = tl.where(has_mass, m_i + tl.log(tl.where(has_mass, l_i, 1.0)), float("-inf"))
        tl.store(PartialLse + partial_row, lse, mask=row_valid)



def unsupported_reason(shape: ProblemShape) -> str | None:
    if shape.page_size not in PAGE_SIZES:
        return f"page_size must be one of {PAGE_SIZES}, got {shape.page_size}"
    return triton_common.device_reason(shape) or triton_common.head_split_reason(shape)


def complete_config(config: dict, shape: ProblemShape) -> dict:
    """Check the tiles and ``kv_splits`` (0: the planner's balanced rule; N: N splits per request)."""
    for key in ("BLOCK_M", "BLOCK_N"):
        if not (triton_common.is_power_of_two(config[key]) and config[key] >= 16):
            raise ValueError(f"config: {key} must be a power of two >= 16, got {config[key]}")
    return planner.check_plan_config(config)


def run(q, kv_cache, block_table, prefix_lens, tree_mask, *, sm_scale, v_dim, out, config):
    """Plan on the device, launch the split-KV kernel, then the combine unless every request has one
    unit for sure (kv_splits = 1); ``out`` written in place."""
    batch, tree_nodes, heads, head_dim = q.shape
    row_blocks = triton.cdiv(tree_nodes * heads, config["BLOCK_M"])
    page_size = kv_cache.shape[1]
    bounds = planner.plan_bounds(batch=batch, row_blocks=row_blocks, capacity=block_table.shape[1] * page_size,
                                 block_n=config["BLOCK_N"], sms=sm_count(q.device), kv_splits=config["kv_splits"],
                                 waves=config["waves"])
    plan = planner.make_plan(prefix_lens, tree_nodes, bounds)
    partial_out, partial_lse = partial_buffers(out, bounds.max_units)
    _splitkv_verify_kernel[(row_blocks, bounds.max_units)](
        q, kv_cache, block_table, prefix_lens, tree_mask, plan, partial_out, partial_lse, out,
        sm_scale,
        q.stride(0), q.stride(1), q.stride(2),
        block_table.stride(0),
        tree_mask.stride(0), tree_mask.stride(1),
        out.stride(0), out.stride(1), out.stride(2),
        tree_nodes, heads, batch,
        PAGE_SIZE=page_size, BLOCK_M=config["BLOCK_M"], BLOCK_N=config["BLOCK_N"],
        BLOCK_DV=v_dim, BLOCK_DROPE=head_dim - v_dim, B_POW2=triton.next_power_of_2(batch),
        UPCAST_DOT=triton_common.upcast_dot(q.dtype),
        num_warps=config["num_warps"], num_stages=config["num_stages"],
    )
    if config["kv_splits"] != 1:
        launch_combine(partial_out, partial_lse, plan, out, bounds.max_units, bounds.max_splits)


def kernel_specs(config: dict, *, page_size: int = 64, dtype: str = "bf16", head_dim: int = 576, v_dim: int = 512,
                 tree_nodes: int = 64, heads: int = 8, table_pages: int = 2048):
    """What `vk static` compiles for ``config``: the main kernel (the combine is tiny), specialised
    on the integer arguments of a representative launch (B=1, T=64, H=8, a 128k-token table)."""
    from .kernel_spec import TritonKernelSpec

    pointer = f"*{dtype}"
    rows = tree_nodes * heads
    ints = {"stride_qb": rows * head_dim, "stride_qt": heads * head_dim, "stride_qh": head_dim,
            "stride_table_b": table_pages, "stride_mask_b": tree_nodes * -(-tree_nodes // 32),
            "stride_mask_t": -(-tree_nodes // 32), "stride_ob": rows * v_dim, "stride_ot": heads * v_dim,
            "stride_oh": v_dim, "T": tree_nodes, "H": heads, "B": 1}
    return [TritonKernelSpec(
        "splitkv_verify", _splitkv_verify_kernel,
        {"Q": pointer, "KV": pointer, "BlockTable": "*i32", "PrefixLens": "*i32", "TreeMask": "*i32",
         "Plan": "*i32", "PartialOut": "*fp32", "PartialLse": "*fp32", "Out": pointer},
        {"PAGE_SIZE": page_size, "BLOCK_M": config["BLOCK_M"], "BLOCK_N": config["BLOCK_N"], "BLOCK_DV": v_dim,
         "BLOCK_DROPE": head_dim - v_dim, "B_POW2": 1, "UPCAST_DOT": False},
        config["num_warps"], config["num_stages"], int_values=ints,
    )]
