"""Variant ``cuda_coalesced``: the CUDA C++ kernel in cuda/verify_mma.cu, compiled at run time by CuPy.

Paged (16, 32, 64), all T x H rows of a CTA's block through mma.sync on every KV tile, whole pages
loaded with coalesced 16-byte cp.async into a STAGES-deep ring, split-KV with a combine kernel.
Tunables are compile-time macros:

- ``WARPS_M``: row warps; rows per CTA = 16 * WARPS_M;
- ``WARPS_N``: how the tile's S columns and the 512 output columns are split across warps;
- ``BLOCK_N``: KV tokens per tile; ``STAGES``: cp.async pipeline depth;
- ``MIN_BLOCKS``: the __launch_bounds__ minimum blocks per SM;
- ``kv_splits``: 0 = chosen from shapes alone (no host sync), else fixed.

CuPy compiles through NVRTC for the current device's arch and caches the binary on disk (keyed by
source, options and compiler version); modules are also kept in memory per (macros, device).
CuPy is imported only when this variant runs.
"""

from __future__ import annotations

import math
from pathlib import Path

import torch

from .arch import missing_feature
from .contract import ProblemShape
from .cupy_launch import check_config, compiled_functions, external_stream, unsupported_cuda_reason
from .splits import with_kv_splits

SOURCE = Path(__file__).parent / "cuda" / "verify_mma.cu"
PAGE_SIZES = (16, 32, 64)
CHECK_PAGE_SIZES = (16, 64)
CHECK_CONFIGS = ({}, {"BLOCK_N": 32, "kv_splits": 3}, {"WARPS_M": 1, "WARPS_N": 4, "BLOCK_N": 32, "STAGES": 3, "kv_splits": 5})
HEAD_DIM, V_DIM = 576, 512
# Per-arch defaults. sm_120: fits its 99 KB per block with no spills (`vk static --arch sm_120`).
# sm_90: the fastest of the configs timed on an H200 at L = 131072, T = 16 and 64, H = 8
# (results/archive/2026-12-04/bench/cuda-configs-nvidia-h200.jsonl, 2026-12-02, source 44e0fe47618fd72a: a
# run before records carried their commit); 156 KB of shared memory, so sm_90 only.
DEFAULT_CONFIGS = {
    "sm_90": {"WARPS_M": 4, "WARPS_N": 2, "BLOCK_N": 64, "STAGES": 1, "MIN_BLOCKS": 1, "kv_splits": 0},
    "sm_120": {"WARPS_M": 2, "WARPS_N": 2, "BLOCK_N": 16, "STAGES": 2, "MIN_BLOCKS": 1, "kv_splits": 0},
}
DEFAULT_CONFIG = DEFAULT_CONFIGS["sm_120"]
MACROS = ("WARPS_M", "WARPS_N", "BLOCK_N", "STAGES", "MIN_BLOCKS")
COMBINE_THREADS = 128


def smem_bytes(config: dict) -> int:
    """Dynamic shared memory per CTA: Q, the KV ring, P, and two float reductions."""
    rows = 16 * config["WARPS_M"]
    stride = HEAD_DIM + 8
    halves = rows * stride + config["STAGES"] * config["BLOCK_N"] * stride + rows * (config["BLOCK_N"] + 8)
    return 2 * halves + 4 * 2 * config["WARPS_N"] * rows


def config_problems(config: dict) -> list[str]:
    """Structural rules of the kernel's static_asserts and launch limits."""
    problems = []
    warps_m, warps_n, block_n, stages = (config[k] for k in ("WARPS_M", "WARPS_N", "BLOCK_N", "STAGES"))
    if not all(isinstance(v, int) and v >= 1 for v in (warps_m, warps_n, block_n, stages, config["MIN_BLOCKS"])):
        problems.append("WARPS_M, WARPS_N, BLOCK_N, STAGES and MIN_BLOCKS must be positive ints")
        return problems
    if block_n % 16:
        problems.append(f"BLOCK_N must be a multiple of 16, got {block_n}")
    if (block_n // warps_n) % 8 or block_n % warps_n:
        problems.append(f"BLOCK_N / WARPS_N must be a multiple of 8, got {block_n}/{warps_n}")
    elif (block_n // warps_n) // 8 not in (1,) and ((block_n // warps_n) // 8) % 2:
        problems.append("BLOCK_N / WARPS_N / 8 must be 1 or even")
    if V_DIM % warps_n or (V_DIM // warps_n) % 16:
        problems.append(f"512 / WARPS_N must be a multiple of 16, got WARPS_N={warps_n}")
    if 32 * warps_m * warps_n > 1024:
        problems.append(f"{32 * warps_m * warps_n} threads per block > 1024")
    if stages < 1:
        problems.append("STAGES must be >= 1")
    return problems


def unsupported_reason(shape: ProblemShape) -> str | None:
    return missing_feature(shape, "mma_sync", "mma.sync") or unsupported_cuda_reason(shape, PAGE_SIZES)


def split_rule(config: dict) -> dict:
    """How kv_splits = 0 is chosen (``splits.choose_kv_splits``'s options): the default power of two."""
    return {}


def complete_config(config: dict, shape: ProblemShape) -> dict:
    check_config(config_problems(config), smem_bytes(config), shape)
    return with_kv_splits(config, shape, 16 * config["WARPS_M"], **split_rule(config))


def run(q, kv_cache, block_table, prefix_lens, tree_mask, *, sm_scale, v_dim, out, config):
    import cupy
    import numpy as np

    batch, tree_nodes, heads, _ = q.shape
    rows = tree_nodes * heads
    page_size = kv_cache.shape[1]
    kv_splits = config["kv_splits"]
    capacity = block_table.shape[1] * page_size
    block_n = config["BLOCK_N"]
    split_len = math.ceil(math.ceil(capacity / kv_splits) / block_n) * block_n
    device_index = q.device.index if q.device.index is not None else torch.cuda.current_device()
    main, combine = compiled_functions(SOURCE, ("verify_mma", "verify_combine"), tuple((k, config[k]) for k in MACROS),
                                       q.dtype == torch.float16, device_index)
    shared = smem_bytes(config)
    if main.max_dynamic_shared_size_bytes < shared:
        main.max_dynamic_shared_size_bytes = shared
    if kv_splits > 1:
        partial_out = torch.empty(batch * kv_splits * rows, V_DIM, dtype=torch.float32, device=q.device)
        partial_lse = torch.empty(batch * kv_splits * rows, dtype=torch.float32, device=q.device)
    else:
        partial_out = partial_lse = out  # unused by the kernel
    i32, i64, ptr = np.int32, np.int64, np.uint64
    stream = external_stream(torch.cuda.current_stream(q.device).cuda_stream, device_index)
    with cupy.cuda.Device(device_index):
        grid = (math.ceil(rows / (16 * config["WARPS_M"])), kv_splits, batch)
        main(grid, (32 * config["WARPS_M"] * config["WARPS_N"],), (
            ptr(q.data_ptr()), ptr(kv_cache.data_ptr()), ptr(block_table.data_ptr()), ptr(prefix_lens.data_ptr()),
            ptr(tree_mask.data_ptr()), ptr(out.data_ptr()), ptr(partial_out.data_ptr()), ptr(partial_lse.data_ptr()),
            i64(q.stride(0)), i64(q.stride(1)), i64(q.stride(2)),
            i64(out.stride(0)), i64(out.stride(1)), i64(out.stride(2)),
            i32(block_table.stride(0)), i32(tree_mask.stride(0)), i32(tree_mask.stride(1)),
            i32(tree_nodes), i32(heads), i32(page_size), i32(kv_splits), i32(split_len),
            np.float32(sm_scale * math.log2(math.e)),
        ), shared_mem=shared, stream=stream)
        if kv_splits > 1:
            combine((rows, batch), (COMBINE_THREADS,), (
                ptr(partial_out.data_ptr()), ptr(partial_lse.data_ptr()), ptr(out.data_ptr()),
                i64(out.stride(0)), i64(out.stride(1)), i64(out.stride(2)),
                i32(tree_nodes), i32(heads), i32(kv_splits),
            ), stream=stream)


def tile_work(config: dict) -> dict:
    """What one CTA does per KV tile, for performance models (harness/predict): mma.sync m16n8k16
    count, bytes through the shared-memory pipe (each warp's ldmatrix of Q and K for S, of P and V
    for P V; P's staging writes; the tile's cp.async writes), CTA barriers, resident warps, and the
    kv_splits rule (``split_rule``)."""
    rows, block_n = 16 * config["WARPS_M"], config["BLOCK_N"]
    warps = config["WARPS_M"] * config["WARPS_N"]
    s_cols, o_cols = block_n // config["WARPS_N"], V_DIM // config["WARPS_N"]
    qk = warps * (HEAD_DIM // 16) * (512 + s_cols * 32)
    pv = warps * (block_n // 16) * (512 + o_cols * 32)
    return {"rows": rows, "block_n": block_n, "mma": rows * block_n * (HEAD_DIM + V_DIM) * 2 // 4096,
            "smem_bytes": qk + pv + rows * block_n * 2 + block_n * HEAD_DIM * 2,
            "barriers": 3 + (config["WARPS_N"] > 1), "warps": warps, "split_rule": split_rule(config)}


def kernel_specs(config: dict):
    """What `vk static` compiles for ``config`` with nvcc (the combine is tiny)."""
    from .kernel_spec import CudaKernelSpec

    return [CudaKernelSpec("verify_mma", SOURCE, {k: config[k] for k in MACROS}, dynamic_smem=smem_bytes(config),
                           threads=32 * config["WARPS_M"] * config["WARPS_N"])]
