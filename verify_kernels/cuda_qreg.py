"""Variant ``cuda_qreg``: the portable kernel of the second generation (cuda/verify_qreg.cu, compiled
at run time by CuPy): mma.sync with Q held in registers, so that shared memory carries only K/V, one
partial-S exchange and P (design and arithmetic: results/notes/2026-12-04-portable-kernel-design.md).

A CTA is WARPS_M row groups of 4 warps, 32 query rows per group. Warp ``wn`` of a group keeps Q's
head dims [144 wn, +144) of the group's rows in registers and computes their partial S; the four
partials meet in shared memory, where warp ``wn`` owns the softmax of rows [8 wn, +8) and writes P;
then every warp computes O += P V for its 128 output columns. The KV ring (bulk-copied token rows,
mbarriers) is refilled by every warp, its share of a tile's rows once the slot is free (a CTA-wide
barrier or the slot's own mbarrier, ``EMPTY_BARS``): no producer warp, so 8 warps of 255 registers fit
an SM. The KV is cut by the planner (planner.py) and merged by the shared combine (split_combine.py).
Tunables are compile-time macros:

- ``WARPS_M``: row groups per CTA (rows per CTA = 32 WARPS_M);
- ``BLOCK_N``: KV tokens per tile; ``STAGES``: slots in the ring;
- ``MIN_BLOCKS``: CTAs per SM the register allocation is bounded for;
- ``EMPTY_BARS`` (sm_90's default 1, sm_120's 0; records from before 2026-12-06 ran 0 where their config
  lacks it): 0 = a tile's first barrier is CTA-wide and frees the last tile's slot; 1 or 2 = that barrier
  is the row group's and each slot has an "empty" mbarrier (one arrival per warp after its P V), waited
  before the refill of the tile that many tiles back, so row groups run unlocked;
- ``kv_splits``: 0 = the planner's units (no host sync), else that many equal splits per request;
  ``waves``: the most waves of units the planner may cut a badly balanced batch into, or 0 for the
  spans rule (CTA ranges across requests; the kernel is then compiled with ``SPANS`` and walks each
  span's segments);
- ``segment_cost`` (optional, spans rule only; 0 when absent): the positions a segment's set-up weighs in
  the spans' balance (planner.plan_bounds: a gap laid before each request but the first); the kernel is
  then compiled with ``GAPS`` and steps over the gaps.

Needs sm_90 or newer (bulk copies with mbarrier transaction counts): sm_90 and sm_120.
"""

from __future__ import annotations

import math
from functools import lru_cache
from pathlib import Path

import torch

from . import planner
from .arch import load_arch, missing_feature
from .contract import ProblemShape
from .cupy_launch import check_config, compiled_functions, external_stream, unsupported_cuda_reason
from .split_combine import launch_combine, partial_buffers
from .splits import sm_count

SOURCE = Path(__file__).parent / "cuda" / "verify_qreg.cu"
PAGE_SIZES = (16, 32, 64)
CHECK_PAGE_SIZES = (16, 64)
HEAD_DIM, V_DIM = 576, 512
DIM_WARPS, GROUP_ROWS = 4, 32
ROW_PITCH = HEAD_DIM + 8
BARRIER_BYTES = 128
MACROS = ("WARPS_M", "BLOCK_N", "STAGES", "MIN_BLOCKS")
# Optional keys (compile-time macros) and the value the kernel takes when the macro is not passed: a config
# that leaves them at it compiles as before they existed (macros() names them only where they differ).
# ``segment_cost`` is a plan key: the kernel only learns GAPS from it.
OPTIONAL_CONFIG = {"EMPTY_BARS": 0, "segment_cost": 0}
OPTIONAL_MACROS = ("EMPTY_BARS",)
# Per-arch defaults before any tune: the largest ring the arch's shared memory holds at the tile that
# compiles without spills there (sm_120: 16-token tiles, 82 KB of its 99 KB; a fourth slot needs 100.4 KB).
# sm_90 walks the planner's spans (waves 0): 2-17% faster than the units rule at all 8 shapes timed, ragged
# batches and short trees; sm_120's 16-token tiles keep the units rule (waves 0 was 7% slower at 4 of 8
# as the proxy; its tune picks per key): H100, results/bench/qreg-spans-nvidia-h100-80gb-hbm3.jsonl.
# sm_90 frees ring slots by their own mbarriers (EMPTY_BARS 1): 2-8% faster at all 9 shapes timed; sm_120
# keeps the CTA-wide barrier (EMPTY_BARS 0 was 2-5% faster as the proxy at all 4): H100,
# results/bench/qreg-configs-levers-nvidia-h100-80gb-hbm3.jsonl. Both name it, so that a config of one arch
# run on the other's card (a proxy run) takes its own arch's value, not the card's.
DEFAULT_CONFIGS = {
    "sm_90": {"WARPS_M": 2, "BLOCK_N": 32, "STAGES": 4, "MIN_BLOCKS": 1, "kv_splits": 0, "waves": 0, "EMPTY_BARS": 1},
    "sm_120": {"WARPS_M": 2, "BLOCK_N": 16, "STAGES": 3, "MIN_BLOCKS": 1, "kv_splits": 0, "waves": 2, "EMPTY_BARS": 0},
}
DEFAULT_CONFIG = DEFAULT_CONFIGS["sm_120"]
# One and two row groups, 16-, 32- and 64-token tiles, two-slot rings, two CTAs per SM, one-tile and
# multi-tile units, fixed splits; gaps (segment_cost) of 10 tiles and of 256, which leaves whole spans
# inside a gap.
CHECK_CONFIGS = (
    {**DEFAULT_CONFIGS["sm_120"], "kv_splits": 3},
    {"WARPS_M": 1, "BLOCK_N": 32, "STAGES": 2, "MIN_BLOCKS": 2, "kv_splits": 0},
    {"WARPS_M": 2, "BLOCK_N": 32, "STAGES": 2, "kv_splits": 5},
    {"WARPS_M": 1, "BLOCK_N": 16, "STAGES": 3, "kv_splits": 1},
    {"WARPS_M": 2, "BLOCK_N": 32, "STAGES": 2, "kv_splits": 7},
    {"WARPS_M": 1, "BLOCK_N": 64, "STAGES": 2, "kv_splits": 0},
    {**DEFAULT_CONFIGS["sm_120"], "waves": 0},
    {"WARPS_M": 1, "BLOCK_N": 32, "STAGES": 2, "MIN_BLOCKS": 2, "kv_splits": 0, "waves": 0},
    {**DEFAULT_CONFIGS["sm_90"], "EMPTY_BARS": 0},
    {**DEFAULT_CONFIGS["sm_120"], "EMPTY_BARS": 2, "kv_splits": 3},
    {**DEFAULT_CONFIGS["sm_90"], "segment_cost": 320},
    {**DEFAULT_CONFIGS["sm_120"], "waves": 0, "segment_cost": 4096},
)


def rows_per_cta(config: dict) -> int:
    return GROUP_ROWS * config["WARPS_M"]


def threads(config: dict) -> int:
    return 32 * DIM_WARPS * config["WARPS_M"]


def smem_bytes(config: dict) -> int:
    """Dynamic shared memory per CTA: mbarriers and slot counters, the KV ring, every warp's fp32
    partial S, P, and one float per row (the rescale factor, then 1 / l)."""
    rows, block_n = rows_per_cta(config), config["BLOCK_N"]
    ring = 2 * config["STAGES"] * block_n * ROW_PITCH
    partial_s = 4 * DIM_WARPS * rows * (block_n + 8)
    return BARRIER_BYTES + ring + partial_s + 2 * rows * (block_n + 8) + 4 * rows


def config_problems(config: dict) -> list[str]:
    """Structural rules of the kernel's static_asserts (registers and spills are the static model's)."""
    sizes = MACROS[:4]
    values = [config[k] for k in sizes]
    if not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in values):
        return [f"{', '.join(sizes)} must be positive ints, got {dict(zip(sizes, values))}"]
    warps_m, block_n, stages, min_blocks = values
    problems = []
    if block_n not in (16, 32, 64):
        problems.append(f"BLOCK_N must be 16, 32 or 64, got {block_n}")
    if not 2 <= stages <= 10:
        problems.append(f"STAGES must be 2 .. 10 (the mbarrier block), got {stages}")
    if block_n % (DIM_WARPS * warps_m):
        problems.append(f"BLOCK_N must be a multiple of the CTA's {DIM_WARPS * warps_m} warps (each copies its "
                        f"share of a tile), got {block_n}")
    if warps_m > 14:
        problems.append(f"WARPS_M must be <= 14 (named barriers), got {warps_m}")
    empty_bars = config.get("EMPTY_BARS", 0)
    if empty_bars not in (0, 1, 2) or isinstance(empty_bars, bool):
        problems.append(f"EMPTY_BARS must be 0, 1 or 2 (the refill's lag in tiles), got {empty_bars!r}")
    elif empty_bars and not (empty_bars < stages <= 8):
        problems.append(f"EMPTY_BARS {empty_bars} needs {empty_bars} < STAGES <= 8 (full and empty mbarriers "
                        f"in {BARRIER_BYTES} bytes), got STAGES {stages}")
    if DIM_WARPS * warps_m * min_blocks > 8:
        problems.append(f"{DIM_WARPS * warps_m} warps x {min_blocks} CTAs per SM > 8 warps: each needs ~255 "
                        "registers per thread (Q and O in registers)")
    return problems


def unsupported_reason(shape: ProblemShape) -> str | None:
    return missing_feature(shape, "bulk_copy", "cp.async.bulk with mbarriers") or unsupported_cuda_reason(shape, PAGE_SIZES)



def split_rule(config: dict) -> dict:
    """CTAs per SM the planner fills (MIN_BLOCKS), one wave."""
    return {"ctas_per_sm": config["MIN_BLOCKS"], "one_wave": True}


def complete_config(config: dict, shape: ProblemShape) -> dict:
    """Check the config against the kernel's rules and the GPU; ``kv_splits`` 0 is the planner's."""
    check_config(config_problems(config), smem_bytes(config), shape)
    return planner.check_plan_config(config, spans=True)


def macros(config: dict) -> dict:
    """The kernel's compile-time macros: the tunables, ``SPANS`` where the plan is the spans rule, ``GAPS``
    where it names a ``segment_cost`` and the optional macros where they differ from their default (each named
    only then, so a config without them compiles exactly as before)."""
    optional = {k: config[k] for k in OPTIONAL_MACROS if config.get(k, OPTIONAL_CONFIG[k]) != OPTIONAL_CONFIG[k]}
    return {**{k: config[k] for k in MACROS}, **planner.walk_macros(config), **optional}


@lru_cache(maxsize=None)
def _zero_row(dtype: torch.dtype, device_index: int) -> torch.Tensor:
    """576 zeros the kernel copies into tile rows past the sequence (kept for the process's life)."""
    return torch.zeros(HEAD_DIM, dtype=dtype, device=torch.device("cuda", device_index))


def run(q, kv_cache, block_table, prefix_lens, tree_mask, *, sm_scale, v_dim, out, config):
    """Plan on the device, launch the kernel over the plan's units (or spans), then the shared combine unless
    kv_splits = 1; ``out`` written in place."""
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
    (kernel,) = compiled_functions(SOURCE, ("verify_qreg",), tuple(macros(config).items()),
                                   q.dtype == torch.float16, device_index)
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
    the shared-memory pipe (K and V ldmatrix reads, the partial-S stores and the owners' reads, P's
    stores and ldmatrix reads, the bulk copy's writes), barriers (one CTA-wide, one the row group's), the warps
    the CTA keeps resident, the row copies each warp issues (its share of the tile), and the split rule.
    Q is in registers: no Q bytes per tile."""
    rows, block_n = rows_per_cta(config), config["BLOCK_N"]
    warps = DIM_WARPS * config["WARPS_M"]
    k_bytes = warps * block_n * (HEAD_DIM // DIM_WARPS) * 2
    v_bytes = warps * block_n * (V_DIM // DIM_WARPS) * 2
    partial_s = 2 * DIM_WARPS * rows * block_n * 4  # written once, read once by the row's owner
    p_bytes = rows * block_n * 2 + DIM_WARPS * rows * block_n * 2
    return {"rows": rows, "block_n": block_n, "mma": rows * block_n * (HEAD_DIM + V_DIM) * 2 // 4096,
            "smem_bytes": k_bytes + v_bytes + partial_s + p_bytes + block_n * HEAD_DIM * 2, "barriers": 2,
            "warps": warps, "copies_by_compute_warps": block_n // warps, "split_rule": split_rule(config)}


def offline_arch_problem(arch: str) -> str | None:
    """Why ``kernel_specs`` cannot compile for ``arch`` (None: it can): bulk copies need sm_90+."""
    return None if load_arch(arch).has("bulk_copy") else f"cuda_qreg needs cp.async.bulk and mbarrier transactions, {arch} has none"


def kernel_specs(config: dict):
    """What `vk static` compiles for ``config`` with nvcc (the combine is the shared Triton one)."""
    from .kernel_spec import CudaKernelSpec

    return [CudaKernelSpec("verify_qreg", SOURCE, macros(config), dynamic_smem=smem_bytes(config),
                           threads=threads(config))]
