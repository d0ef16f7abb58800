"""Variant ``cuda_ws``: the warp-specialized CUDA C++ kernel in cuda/verify_ws.cu, compiled at run
time by CuPy. The portable kernel for GPUs without wgmma (sm_120 first; it runs on sm_90 too).

A producer warp moves whole KV token rows (``cp.async.bulk``, 1152 bytes each) into a STAGES-deep
shared-memory ring and hands slots over with mbarriers; WARPS_M x WARPS_N consumer warps compute
S = Q K^T and O += P V with ``mma.sync`` on every tile, each warp on 16 * ROW_TILES rows. Q sits
in shared memory for the CTA's life. The KV is cut by the planner (planner.py: units of near-equal
length over the whole batch, made on the device) and merged by the shared combine (split_combine.py).
Tunables are compile-time macros:

- ``WARPS_M``, ``ROW_TILES``: rows per CTA = 16 * ROW_TILES * WARPS_M, per warp 16 * ROW_TILES;
- ``WARPS_N``: how a tile's S columns and the 512 output columns are split across warps;
- ``BLOCK_N``: KV tokens per tile; ``STAGES``: slots in the ring;
- ``PRODUCER``: 1 = a producer warp fills the ring (mbarrier hand-offs both ways); 0 = no such
  warp, consumer warp 0 refills the slot the previous tile freed (its registers go to consumers);
- ``MIN_BLOCKS``: CTAs per SM the register cap is set for (shared memory must allow them too);
- ``SPLIT_K``: 1 = the WARPS_N warps of a row split S = Q K^T by head dim (576 / WARPS_N each) and
  sum the partials through shared memory, so each holds whole S rows and keeps P in registers as
  P V's A operand; 0 = they split S by columns and stage P in shared memory (two CTA barriers a tile);
- ``kv_splits``: 0 = the planner's units (no host sync), else that many equal splits per request;
  ``waves``: the most waves of units the planner may cut a badly balanced batch into, or 0: the
  planner's spans rule (one wave of equal spans of the batch's tiles, crossing requests; the kernel
  compiled with ``SPANS`` walks each span's segments);
- ``segment_cost`` (optional, spans rule only; 0 when absent): the positions a segment's set-up weighs in
  the spans' balance (planner.plan_bounds: a gap laid before each request but the first); the kernel is
  then compiled with ``GAPS`` and steps over the gaps.

The output tile a warp holds is 16 * ROW_TILES x 512 / WARPS_N fp32: at most 128 registers per
thread (``config_problems``). Needs sm_90 or newer (bulk copies with mbarrier transaction counts).
"""

from __future__ import annotations

import math
from functools import lru_cache
from pathlib import Path

import torch

from .arch import load_arch, missing_feature
from .contract import ProblemShape
from .cupy_launch import check_config, compiled_functions, external_stream, unsupported_cuda_reason
from . import planner
from .split_combine import launch_combine, partial_buffers
from .splits import sm_count

SOURCE = Path(__file__).parent / "cuda" / "verify_ws.cu"
PAGE_SIZES = (16, 32, 64)
CHECK_PAGE_SIZES = (16, 64)
HEAD_DIM, V_DIM = 576, 512
ROW_PAD = HEAD_DIM + 8
BARRIER_BYTES = 128
MACROS = ("WARPS_M", "ROW_TILES", "WARPS_N", "BLOCK_N", "STAGES", "MIN_BLOCKS", "PRODUCER", "SPLIT_K")
# Optional keys and the value the kernel takes when they are not named (variants.config_keys): a config without
# them compiles as before they existed. ``segment_cost`` is a plan key: the kernel only learns GAPS from it.
OPTIONAL_CONFIG = {"segment_cost": 0}
# Per-arch defaults, each the fastest of its arch's space timed on an H200 at L >= 131072
# (results/bench/cuda_ws-side-by-side-nvidia-h200.jsonl, cuda_ws-sm120-proxy-nvidia-h200.jsonl).
# sm_120: 48 rows, a two-slot ring of 16-token tiles, 98 KB (fits 99 KB per block, no spills).
# sm_90: 48 rows, a four-slot ring of 32-token tiles, 214 KB (sm_90 only).
# Both walk the planner's spans (waves 0): 7-12% faster than the units rule (waves 2) on ragged batches
# and short contexts, equal at 185000 / 64 / 8 (H100, results/bench/ws-spans-at-432f47f-*); the tuned
# records measured at the units rule say "waves": 2.
DEFAULT_CONFIGS = {
    "sm_90": {"WARPS_M": 3, "ROW_TILES": 1, "WARPS_N": 2, "BLOCK_N": 32, "STAGES": 4, "MIN_BLOCKS": 1, "PRODUCER": 1,
              "SPLIT_K": 1, "kv_splits": 0, "waves": 0},
    "sm_120": {"WARPS_M": 3, "ROW_TILES": 1, "WARPS_N": 2, "BLOCK_N": 16, "STAGES": 2, "MIN_BLOCKS": 1, "PRODUCER": 1,
               "SPLIT_K": 1, "kv_splits": 0, "waves": 0},
}
DEFAULT_CONFIG = DEFAULT_CONFIGS["sm_120"]
# Both hand-off schemes, one and many splits, 16- to 64-token tiles, two CTAs per SM; the spans walk
# (waves 0, the default) with each hand-off scheme, its ring's phases running on across segments, and
# the units rule (waves 2) the tuned records measured; gaps (segment_cost) of 20 tiles and of 256, which
# leaves whole spans inside a gap.
CHECK_CONFIGS = (
    {**DEFAULT_CONFIGS["sm_120"], "kv_splits": 3},
    {"WARPS_M": 2, "BLOCK_N": 16, "STAGES": 3, "kv_splits": 0},
    {"WARPS_M": 1, "ROW_TILES": 2, "WARPS_N": 4, "BLOCK_N": 64, "STAGES": 2, "PRODUCER": 1, "kv_splits": 5},
    {"WARPS_M": 2, "BLOCK_N": 16, "STAGES": 2, "MIN_BLOCKS": 2, "PRODUCER": 0, "SPLIT_K": 0, "kv_splits": 1},
    {"WARPS_M": 2, "WARPS_N": 4, "BLOCK_N": 32, "STAGES": 3, "SPLIT_K": 1, "kv_splits": 2},
    {"WARPS_M": 4, "BLOCK_N": 32, "STAGES": 3, "SPLIT_K": 0, "kv_splits": 0},
    {**DEFAULT_CONFIGS["sm_120"], "waves": 2},
    {"WARPS_M": 2, "BLOCK_N": 16, "STAGES": 3, "PRODUCER": 0, "SPLIT_K": 0, "kv_splits": 0, "waves": 0},
    {**DEFAULT_CONFIGS["sm_120"], "segment_cost": 320},
    {"WARPS_M": 2, "BLOCK_N": 16, "STAGES": 3, "PRODUCER": 0, "SPLIT_K": 0, "kv_splits": 0, "waves": 0,
     "segment_cost": 4096},
)


def rows_per_cta(config: dict) -> int:
    return 16 * config["ROW_TILES"] * config["WARPS_M"]


def threads(config: dict) -> int:
    """Consumer warps plus the producer warp, if any."""
    return 32 * (config["WARPS_M"] * config["WARPS_N"] + config["PRODUCER"])


def smem_bytes(config: dict) -> int:
    """Dynamic shared memory per CTA: mbarriers, Q, the KV ring, P (SPLIT_K: every consumer warp's
    fp32 partial S instead), and two float reductions."""
    rows, block_n = rows_per_cta(config), config["BLOCK_N"]
    halves = rows * ROW_PAD + config["STAGES"] * block_n * ROW_PAD
    exchange = 4 * config["WARPS_N"] * rows * block_n if config["SPLIT_K"] else 2 * rows * (block_n + 8)
    return BARRIER_BYTES + 2 * halves + exchange + 4 * 2 * config["WARPS_N"] * rows


def config_problems(config: dict) -> list[str]:
    """Structural rules of the kernel's static_asserts, its register budget and launch limits."""
    values = [config[k] for k in MACROS]
    if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in values) or 0 in values[:-2]:
        return [f"{', '.join(MACROS[:-2])} must be positive ints and {' and '.join(MACROS[-2:])} 0 or 1, "
                f"got {dict(zip(MACROS, values))}"]
    warps_m, row_tiles, warps_n, block_n, stages, min_blocks, producer, split_k = values
    problems = []
    for name, value in (("PRODUCER", producer), ("SPLIT_K", split_k)):
        if value not in (0, 1):
            problems.append(f"{name} must be 0 or 1, got {value}")
    if not producer and (stages < 2 or warps_n < 2 or split_k):
        problems.append(f"PRODUCER=0 needs STAGES >= 2, WARPS_N >= 2 and SPLIT_K=0, got STAGES={stages}, "
                        f"WARPS_N={warps_n}, SPLIT_K={split_k}")
    if split_k and (HEAD_DIM // 16) % warps_n:
        problems.append(f"SPLIT_K splits 36 k-steps over WARPS_N warps, got WARPS_N={warps_n}")
    if warps_m > 14:
        problems.append(f"WARPS_M must be <= 14 (named barriers), got {warps_m}")
    if block_n % 16:
        problems.append(f"BLOCK_N must be a multiple of 16, got {block_n}")
    if block_n % warps_n or (block_n // warps_n) % 8:
        problems.append(f"BLOCK_N / WARPS_N must be a multiple of 8, got {block_n}/{warps_n}")
    elif (block_n // warps_n) // 8 != 1 and ((block_n // warps_n) // 8) % 2:
        problems.append(f"BLOCK_N / WARPS_N / 8 must be 1 or even, got {block_n}/{warps_n}/8")
    if V_DIM % warps_n or (V_DIM // warps_n) % 16:
        problems.append(f"512 / WARPS_N must be a multiple of 16, got WARPS_N={warps_n}")
    accumulators = 16 * row_tiles * (V_DIM // warps_n) // 32
    if accumulators > 128:
        problems.append(f"output tile of {16 * row_tiles} x {V_DIM // warps_n} fp32 per warp needs {accumulators} "
                        "registers per thread (> 128): raise WARPS_N or lower ROW_TILES")
    if threads(config) > 1024:
        problems.append(f"{threads(config)} threads per block > 1024")
    if stages > 8:
        problems.append(f"STAGES must be <= 8 (the mbarrier block), got {stages}")
    return problems


def unsupported_reason(shape: ProblemShape) -> str | None:
    return missing_feature(shape, "bulk_copy", "cp.async.bulk with mbarriers") or unsupported_cuda_reason(shape, PAGE_SIZES)



def split_rule(config: dict) -> dict:
    """CTAs per SM the planner fills (MIN_BLOCKS: registers are capped for that many), one wave; the
    predictor still models ``kv_splits`` = 0 by this rule (``splits.kv_splits_for``), not by the plan."""
    return {"ctas_per_sm": config["MIN_BLOCKS"], "one_wave": True}


def complete_config(config: dict, shape: ProblemShape) -> dict:
    """Check the config against the kernel's rules and the GPU; ``kv_splits`` 0 is the planner's."""
    check_config(config_problems(config), smem_bytes(config), shape)
    return planner.check_plan_config(config, spans=True)


def macros(config: dict) -> dict:
    """The kernel's compile-time macros: the tunables, ``SPANS`` where the plan is the spans rule and
    ``GAPS`` where it names a ``segment_cost`` (each named only then, so a config without them compiles
    exactly as before)."""
    return {**{k: config[k] for k in MACROS}, **planner.walk_macros(config)}


@lru_cache(maxsize=None)
def _zero_row(dtype: torch.dtype, device_index: int) -> torch.Tensor:
    """576 zeros the kernel copies into tile rows past the sequence (kept for the process's life)."""
    return torch.zeros(HEAD_DIM, dtype=dtype, device=torch.device("cuda", device_index))


def run(q, kv_cache, block_table, prefix_lens, tree_mask, *, sm_scale, v_dim, out, config):
    """Plan on the device, launch the kernel over the plan's units (or spans), then the shared combine
    unless kv_splits = 1; ``out`` written in place."""
    import cupy
    import numpy as np

    batch, tree_nodes, heads, _ = q.shape
    row_blocks = math.ceil(tree_nodes * heads / rows_per_cta(config))
    page_size = kv_cache.shape[1]
    bounds = planner.plan_bounds(batch=batch, row_blocks=row_blocks, capacity=block_table.shape[1] * page_size,
                                 block_n=config["BLOCK_N"], sms=sm_count(q.device), kv_splits=config["kv_splits"],
                                 ctas_per_sm=split_rule(config)["ctas_per_sm"], waves=config["waves"],
                                 segment_cost=config.get("segment_cost", 0))
    plan = planner.make_plan(prefix_lens, tree_nodes, bounds)
    device_index = q.device.index if q.device.index is not None else torch.cuda.current_device()
    (kernel,) = compiled_functions(SOURCE, ("verify_ws",), tuple(macros(config).items()), q.dtype == torch.float16,
                                   device_index)
    shared = smem_bytes(config)
    if kernel.max_dynamic_shared_size_bytes < shared:
        kernel.max_dynamic_shared_size_bytes = shared
    partial_out, partial_lse = partial_buffers(out, bounds.max_units)
    i32, i64, ptr = np.int32, np.int64, np.uint64
    stream = external_stream(torch.cuda.current_stream(q.device).cuda_stream, device_index)
    with cupy.cuda.Device(device_index):
        kernel((row_blocks, bounds.grid), (threads(config),), (
            ptr(q.data_ptr()), ptr(kv_cache.data_ptr()), ptr(block_table.data_ptr()), ptr(prefix_lens.data_ptr()),
            ptr(tree_mask.data_ptr()), ptr(out.data_ptr()), ptr(partial_out.data_ptr()), ptr(partial_lse.data_ptr()),
            i64(q.stride(0)), i64(q.stride(1)), i64(q.stride(2)),
            i64(out.stride(0)), i64(out.stride(1)), i64(out.stride(2)),
            i32(block_table.stride(0)), i32(tree_mask.stride(0)), i32(tree_mask.stride(1)),
            i32(tree_nodes), i32(heads), i32(page_size), ptr(plan.data_ptr()), i32(batch),
            np.float32(sm_scale * math.log2(math.e)), ptr(_zero_row(q.dtype, device_index).data_ptr()),
        ), shared_mem=shared, stream=stream)
    if config["kv_splits"] != 1:
        launch_combine(partial_out, partial_lse, plan, out, bounds.max_units, bounds.max_splits)


def tile_work(config: dict) -> dict:
    """What one CTA does per KV tile, for performance models: mma.sync m16n8k16 count, bytes through
    the shared-memory pipe (ldmatrix reads, the bulk copy's writes, P or the partial-S exchange),
    barriers, the warps the CTA keeps resident, the row copies a compute warp issues (consumer warp 0's
    BLOCK_N without a producer warp), and the kv_splits rule (``split_rule``)."""
    rows, block_n = rows_per_cta(config), config["BLOCK_N"]
    warps_n, row_tiles, split_k = config["WARPS_N"], config["ROW_TILES"], config["SPLIT_K"]
    consumers = config["WARPS_M"] * warps_n
    s_cols = block_n if split_k else block_n // warps_n
    k_steps = (HEAD_DIM // 16) // (warps_n if split_k else 1)
    qk = consumers * k_steps * (row_tiles * 512 + s_cols * 32)
    pv = consumers * (block_n // 16) * ((0 if split_k else row_tiles * 512) + (V_DIM // warps_n) * 32)
    staging = consumers * row_tiles * 16 * block_n * 4 * warps_n if split_k else 2 * 2 * rows * block_n
    return {"rows": rows, "block_n": block_n, "mma": rows * block_n * (HEAD_DIM + V_DIM) * 2 // 4096,
            "smem_bytes": qk + pv + staging + block_n * HEAD_DIM * 2, "barriers": 2,
            "warps": consumers + config["PRODUCER"], "copies_by_compute_warps": 0 if config["PRODUCER"] else block_n,
            "split_rule": split_rule(config)}


def offline_arch_problem(arch: str) -> str | None:
    """Why ``kernel_specs`` cannot compile for ``arch`` (None: it can): bulk copies need sm_90+."""
    return None if load_arch(arch).has("bulk_copy") else f"cuda_ws needs cp.async.bulk and mbarrier transactions, {arch} has none"


def kernel_specs(config: dict):
    """What `vk static` compiles for ``config`` with nvcc (the combine is the shared Triton one)."""
    from .kernel_spec import CudaKernelSpec

    return [CudaKernelSpec("verify_ws", SOURCE, macros(config), dynamic_smem=smem_bytes(config),
                           threads=threads(config))]
