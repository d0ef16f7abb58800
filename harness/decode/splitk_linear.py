"""y = x @ w.T for the decode model's skinny GEMMs (x [M <= 64, K], w [N, K]), bandwidth-bound:
a Triton split-K kernel whose last CTA per column tile reduces the partials in a fixed order.

cuBLAS runs these shapes (M = the tree budget, N and K in the thousands) at 51-67% of the copy
bandwidth on the H200, with a separate split-K reduction kernel for two of them. Here:
- grid (N / BLOCK_N, splits): CTA (n, s) streams the weight tile w[n*BLOCK_N : +BLOCK_N, K range s]
  and the matching columns of x, and computes acc [BLOCK_N, BLOCK_M] = w_tile @ x_tile.T (the
  weight rows are the MMA's M dimension, so wgmma applies even for M = 1);
- it stores acc (float32) to the workspace slot [s, n tile], then takes a ticket on the tile's
  counter; the CTA holding the last ticket adds the slots in split order 0..splits-1 (the sum
  is the same whichever CTA finishes last: deterministic, and independent of timing), writes
  y's tile in x's dtype and resets the counter for the next call (CUDA-graph replays included).
The partials stay in L2 (splits * M * N * 4 bytes, a few MB); only the weights stream from HBM.

Per shape, the tile and split configuration comes from a tuned table (``vk tune-gemm``,
stored with provenance under results/tuned/) or a default that fills the SMs. The op
``splitk_linear`` falls back to ``x @ w.T`` off the GPU, for M > 64 and for dtypes other than
bf16/fp16.

Measured on the H200 (results/README.md): it ties cuBLAS at M = 64 (0.88-1.02x per GEMM) and wins
at M = 1 on three of five (0.95-1.55x); the decode at 185k did not get faster, so the model's default stays cuBLAS.
"""

from __future__ import annotations

import functools
import json
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import triton
import triton.language as tl

from verify_kernels.splits import sm_count
from harness.measure.paths import results_dir
from verify_kernels.kernel_spec import TritonKernelSpec

MAX_ROWS = 64
PREFETCH_STEPS = tl.constexpr(4)


@dataclass(frozen=True)
class SplitKConfig:
    BLOCK_N: int = 128
    BLOCK_K: int = 128
    splits: int = 4
    num_warps: int = 4
    num_stages: int = 4

    def as_dict(self) -> dict:
        return asdict(self)


@triton.jit
def _splitk_kernel(x_ptr, w_ptr, y_ptr, part_ptr, count_ptr, M, N, K, stride_xm, stride_wn, stride_ym,
                   k_per_split, splits,
                   BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                   EVEN_N: tl.constexpr, EVEN_K: tl.constexpr, PDL: tl.constexpr):
    tile = tl.program_id(0)
    split = tl.program_id(1)
    rows_n = tile * BLOCK_N + tl.arange(0, BLOCK_N)
    rows_m = tl.arange(0, BLOCK_M)
    cols_k = tl.arange(0, BLOCK_K)
    k_begin = split * k_per_split
    k_end = tl.minimum(k_begin + k_per_split, K)
    if PDL:
        # the weights do not depend on the previous kernel: put the first PREFETCH_STEPS K steps of
        # this CTA's rows in flight to L2 (one bulk prefetch per row), then wait for x
        span = tl.minimum(k_end - k_begin, PREFETCH_STEPS * BLOCK_K)
        row_starts = (w_ptr + tl.minimum(rows_n, N - 1) * stride_wn + k_begin).to(tl.int64, bitcast=True)
        tl.inline_asm_elementwise("cp.async.bulk.prefetch.L2.global [$1], $2;\n mov.u32 $0, 0;", "=r,l,r",
                                  [row_starts, tl.full([BLOCK_N], 0, tl.int32) + span * 2], dtype=tl.int32,
                                  is_pure=False, pack=1)
        tl.extra.cuda.gdc_wait()
    acc = tl.zeros([BLOCK_N, BLOCK_M], dtype=tl.float32)
    for k in range(k_begin, k_end, BLOCK_K):
        ks = k + cols_k
        w_ptrs = w_ptr + rows_n[:, None] * stride_wn + ks[None, :]
        x_ptrs = x_ptr + rows_m[None, :] * stride_xm + ks[:, None]
        if EVEN_N and EVEN_K:
            w = tl.load(w_ptrs)
        else:
            w = tl.load(w_ptrs, mask=(rows_n[:, None] < N) & (ks[None, :] < K), other=0.0)
        if EVEN_K:
            x = tl.load(x_ptrs, mask=rows_m[None, :] < M, other=0.0)
        else:
            x = tl.load(x_ptrs, mask=(rows_m[None, :] < M) & (ks[:, None] < K), other=0.0)
        acc = tl.dot(w, x, acc)
    if PDL:
        tl.extra.cuda.gdc_launch_dependents()  # the next kernel may launch; its wait covers our stores

    # workspace [splits, N tiles, BLOCK_N, BLOCK_M] float32: this CTA's slot, then a ticket
    tile_offsets = tl.arange(0, BLOCK_N)[:, None] * BLOCK_M + rows_m[None, :]
    tiles = tl.num_programs(0)
    slot = part_ptr + (split * tiles + tile) * (BLOCK_N * BLOCK_M)
    tl.store(slot + tile_offsets, acc)
    tl.debug_barrier()  # every thread's partial is written before the ticket releases them
    ticket = tl.atomic_add(count_ptr + tile, 1, sem="acq_rel", scope="gpu")
    if ticket == splits - 1:
        tl.debug_barrier()
        total = tl.zeros([BLOCK_N, BLOCK_M], dtype=tl.float32)
        for s in range(0, splits):
            total += tl.load(part_ptr + (s * tiles + tile) * (BLOCK_N * BLOCK_M) + tile_offsets,
                             cache_modifier=".cg")
        y_ptrs = y_ptr + rows_m[None, :] * stride_ym + rows_n[:, None]
        tl.store(y_ptrs, total.to(y_ptr.dtype.element_ty), mask=(rows_m[None, :] < M) & (rows_n[:, None] < N))
        tl.atomic_xchg(count_ptr + tile, 0, sem="relaxed", scope="gpu")


_COUNTERS: dict[torch.device, torch.Tensor] = {}
_COUNTER_SLOTS = 1 << 14


def _counters(device: torch.device, tiles: int) -> torch.Tensor:
    """One zeroed int32 ticket counter per column tile, per device, kept across calls (every call
    leaves them at zero). Created outside CUDA-graph capture (the decode warms up first)."""
    if tiles > _COUNTER_SLOTS:
        raise ValueError(f"splitk_linear: at most {_COUNTER_SLOTS} column tiles, got {tiles}")
    counters = _COUNTERS.get(device)
    if counters is None:
        if device.type == "cuda" and torch.cuda.is_current_stream_capturing():
            raise RuntimeError("splitk_linear: first call inside CUDA-graph capture; call it once eagerly first")
        counters = _COUNTERS[device] = torch.zeros(_COUNTER_SLOTS, dtype=torch.int32, device=device)
    return counters


def split_plan(K: int, config: SplitKConfig) -> tuple[int, int]:
    """(k_per_split, splits actually launched): whole BLOCK_K steps per split, no empty split."""
    steps = triton.cdiv(K, config.BLOCK_K)
    per_split = triton.cdiv(steps, max(1, min(config.splits, steps)))
    return per_split * config.BLOCK_K, triton.cdiv(steps, per_split)


def block_rows(M: int) -> int:
    return max(16, triton.next_power_of_2(M))


def splitk_matmul(x: torch.Tensor, w: torch.Tensor, config: SplitKConfig, out: torch.Tensor | None = None,
                  pdl: bool = False) -> torch.Tensor:
    """x [M, K] @ w[N, K].T -> [M, N] in x's dtype, with ``config``; M <= 64, unit stride along K.

    ``pdl`` (Hopper and later): launched as a programmatic dependent of the previous kernel; each
    CTA prefetches the start of its weight rows into L2 before it waits for that kernel to finish
    (x may be its output), and lets the next kernel launch once its own loads are done."""
    if x.dim() != 2 or w.dim() != 2 or x.shape[1] != w.shape[1]:
        raise ValueError(f"splitk_matmul: expected x [M, K] and w [N, K], got {tuple(x.shape)} and {tuple(w.shape)}")
    M, K = x.shape
    N = w.shape[0]
    if not 1 <= M <= MAX_ROWS:
        raise ValueError(f"splitk_matmul: expected 1 <= M <= {MAX_ROWS} rows, got {M}")
    if x.dtype != w.dtype or x.dtype not in (torch.bfloat16, torch.float16):
        raise ValueError(f"splitk_matmul: expected x and w both bfloat16 or both float16, got {x.dtype} and {w.dtype}")
    if pdl and not (x.is_cuda and torch.cuda.get_device_capability(x.device)[0] >= 9):
        raise ValueError("splitk_matmul: pdl=True needs a CUDA GPU of compute capability 9.0 or later")
    if pdl and (w.data_ptr() % 16 or w.stride(0) % 8 or K % 8):
        # the bulk L2 prefetch of each weight row needs 16-byte aligned starts and lengths
        raise ValueError(f"splitk_matmul: pdl=True needs w 16-byte aligned with row stride and K multiples of 8 "
                         f"elements, got address % 16 = {w.data_ptr() % 16}, stride {w.stride(0)}, K {K}")
    x = x if x.stride(1) == 1 else x.contiguous()
    w = w if w.stride(1) == 1 else w.contiguous()
    BLOCK_M = block_rows(M)
    k_per_split, splits = split_plan(K, config)
    tiles = triton.cdiv(N, config.BLOCK_N)
    y = out if out is not None else torch.empty(M, N, dtype=x.dtype, device=x.device)
    partials = torch.empty(splits * tiles * config.BLOCK_N * BLOCK_M, dtype=torch.float32, device=x.device)
    _splitk_kernel[(tiles, splits)](
        x, w, y, partials, _counters(x.device, tiles), M, N, K, x.stride(0), w.stride(0), y.stride(0),
        k_per_split, splits, BLOCK_M=BLOCK_M, BLOCK_N=config.BLOCK_N, BLOCK_K=config.BLOCK_K,
        EVEN_N=N % config.BLOCK_N == 0, EVEN_K=K % config.BLOCK_K == 0, PDL=pdl,
        num_warps=config.num_warps, num_stages=config.num_stages, **({"launch_pdl": True} if pdl else {}))
    return y


H100_SMEM_PER_BLOCK = 227 * 1024


def shared_bytes(config: SplitKConfig, block_m: int, element_bytes: int = 2) -> int:
    """Shared memory of the copy pipeline: num_stages buffers of the weight tile [BLOCK_N, BLOCK_K]
    and the x tile [BLOCK_K, BLOCK_M] (what Triton 3.6 allocates for this kernel on sm_90)."""
    return config.num_stages * (config.BLOCK_N + block_m) * config.BLOCK_K * element_bytes


def default_config(N: int, K: int, sm_count: int, block_m: int = MAX_ROWS,
                   smem_per_block: int = H100_SMEM_PER_BLOCK) -> SplitKConfig:
    """BLOCK_N 128 with the deepest copy pipeline that fits ``smem_per_block`` (BLOCK_K 128 with 3-4
    stages, else BLOCK_K 64 with 2-4: on a 99 KB sm_120 block too), and the fewest splits that
    give every SM a CTA."""
    fitting = [SplitKConfig(BLOCK_K=block_k, num_stages=stages)
               for block_k, stage_options in ((128, (4, 3)), (64, (4, 3, 2)))
               for stages in stage_options]
    base = next((c for c in fitting if shared_bytes(c, block_m) + 1024 <= smem_per_block), None)
    if base is None:
        raise ValueError(f"splitk default config: no tile fits {smem_per_block} bytes of shared memory per block")
    tiles = triton.cdiv(N, base.BLOCK_N)
    splits = max(1, min(triton.cdiv(sm_count, tiles), triton.cdiv(K, base.BLOCK_K)))
    return SplitKConfig(BLOCK_N=base.BLOCK_N, BLOCK_K=base.BLOCK_K, splits=splits, num_stages=base.num_stages)


def kernel_spec(config: SplitKConfig, block_m: int, N: int, K: int, pdl: bool = False):
    """The launch of ``config`` as harness/static/triton_compile.py compiles it offline (bf16, x and w
    contiguous, the launcher's specialisation for these N and K)."""

    k_per_split, splits = split_plan(K, config)
    return TritonKernelSpec(
        "splitk_linear", _splitk_kernel,
        {"x_ptr": "*bf16", "w_ptr": "*bf16", "y_ptr": "*bf16", "part_ptr": "*fp32", "count_ptr": "*i32"},
        {"BLOCK_M": block_m, "BLOCK_N": config.BLOCK_N, "BLOCK_K": config.BLOCK_K, "EVEN_N": N % config.BLOCK_N == 0,
         "EVEN_K": K % config.BLOCK_K == 0, "PDL": pdl},
        config.num_warps, config.num_stages, float_args=(),
        int_values={"M": block_m, "N": N, "K": K, "stride_xm": K, "stride_wn": K, "stride_ym": N,
                    "k_per_split": k_per_split, "splits": splits})


class SplitKTable:
    """Configs per (BLOCK_M, N, K) from a tuned JSON file ({"configs": [{"block_m", "n", "k",
    "config"}, ...]}, as vk tune-gemm writes it); ``default_config`` for the others."""

    def __init__(self, path: str | Path | None = None):
        self.path = Path(path) if path else None
        self._configs: dict[tuple[int, int, int], SplitKConfig] = {}
        if self.path is not None:
            data = json.loads(self.path.read_text())
            for entry in data["configs"]:
                self._configs[(entry["block_m"], entry["n"], entry["k"])] = SplitKConfig(**entry["config"])

    def config(self, M: int, N: int, K: int, sm_count: int, smem_per_block: int = H100_SMEM_PER_BLOCK) -> SplitKConfig:
        return (self._configs.get((block_rows(M), N, K))
                or default_config(N, K, sm_count, block_rows(M), smem_per_block))


def tuned_table_path(gpu_sku: str) -> Path:
    """Where vk tune-gemm stores the table for a GPU (results/tuned/splitk-linear-SKU.json)."""

    return results_dir() / "tuned" / f"splitk-linear-{gpu_sku}.json"


@functools.lru_cache(maxsize=None)
def _table(path: str) -> SplitKTable:
    return SplitKTable(path or None)


@functools.lru_cache(maxsize=None)
def _smem_per_block(device: torch.device) -> int:
    """Opt-in shared memory per block of a CUDA device."""
    return torch.cuda.get_device_properties(device).shared_memory_per_block_optin


@torch.library.custom_op("vk_decode::splitk_linear", mutates_args=())
def splitk_linear(x: torch.Tensor, w: torch.Tensor, table: str, pdl: bool = False) -> torch.Tensor:
    """x [M, K] @ w [N, K].T through ``splitk_matmul`` with the config of ``table`` (a path, or ""
    for the defaults) where it applies (CUDA, bf16/fp16, M <= 64), else through torch. An opaque
    op to torch.compile: the config is picked from the concrete M at run time, so every tree-size
    bucket shares one compiled graph."""
    M, K = x.shape
    if not x.is_cuda or x.dtype not in (torch.bfloat16, torch.float16) or M > MAX_ROWS:
        return x @ w.T
    config = _table(table).config(M, w.shape[0], K, sm_count(x.device), _smem_per_block(x.device))
    return splitk_matmul(x, w, config, pdl=pdl)


@splitk_linear.register_fake
def _splitk_linear_shape(x: torch.Tensor, w: torch.Tensor, table: str, pdl: bool = False) -> torch.Tensor:
    return x.new_empty(x.shape[0], w.shape[0])


class SplitKLinear:
    """``linear(x, w)`` = x @ w.T over x [..., K] through the ``splitk_linear`` op (the model's GEMMs
    with ``gemm="splitk"``); ``pdl``: programmatic dependent launches (see ``splitk_matmul``)."""

    def __init__(self, table: str | Path | None = None, pdl: bool = False):
        self.table = str(table) if table else ""
        self.pdl = pdl

    def __call__(self, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        y = splitk_linear(x.reshape(-1, x.shape[-1]), w, self.table, self.pdl and x.is_cuda)
        return y.view(*x.shape[:-1], w.shape[0])
