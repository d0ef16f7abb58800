"""Roofline arithmetic for one verify call, and the measured ceilings it is judged against.

Per request with prefix L, tree T and H heads (R = T*H rows), Dqk = 576, v_dim = 512, 2-byte data:
- bytes  >= (L + T) * Dqk * 2  (the latent KV, read once)  + R * (Dqk + v_dim) * 2  (q in, out)
- FLOPs   = 2 * R * (L + T) * (Dqk + v_dim)   (Q.K^T and P.V over every visible-or-not key)
The floor is max(bytes / copy bandwidth, FLOPs / matrix rate). Ceilings are measured once per GPU
and cached under results/ceilings/<gpu-sku>.json.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Sequence

from harness.measure.environment import describe_environment, gpu_sku
from harness.measure.paths import results_dir
from harness.measure.timing import time_events

CEILINGS_DIR = results_dir() / "ceilings"


@dataclass(frozen=True)
class Work:
    bytes_moved: float
    flops: float


def verify_work(prefix_lens: Sequence[int], tree_nodes: int, heads: int, *, head_dim: int = 576,
                v_dim: int = 512, element_bytes: int = 2) -> Work:
    """Minimum bytes and FLOPs of one verify call over the given requests."""
    rows = tree_nodes * heads
    keys = sum(length + tree_nodes for length in prefix_lens)
    kv_bytes = keys * head_dim * element_bytes
    io_bytes = len(prefix_lens) * rows * (head_dim + v_dim) * element_bytes
    flops = 2.0 * rows * keys * (head_dim + v_dim)
    return Work(bytes_moved=float(kv_bytes + io_bytes), flops=flops)


@dataclass(frozen=True)
class Ceilings:
    gpu: str
    copy_tbps: float            # device-to-device copy, bytes read + written per second / 1e12
    matmul_tflops: float        # cuBLAS bf16 GEMM on random data
    mma_sync_tflops: float | None = None  # a portable mma.sync micro-kernel, when measured

    def floor_ms(self, work: Work, compute: str = "matmul") -> float:
        rate = self.matmul_tflops if compute == "matmul" else self.mma_sync_tflops
        if rate is None:
            raise ValueError(f"compute: no {compute!r} ceiling measured for {self.gpu}")
        return max(work.bytes_moved / (self.copy_tbps * 1e12), work.flops / (rate * 1e12)) * 1e3


def metrics(work: Work, median_ms: float, ceilings: Ceilings | None) -> dict:
    """Achieved TB/s and TFLOP/s, and % of the roofline floor against each ceiling we have."""
    seconds = median_ms / 1e3
    result = {
        "bytes_moved": work.bytes_moved,
        "flops": work.flops,
        "achieved_tbps": work.bytes_moved / seconds / 1e12 if seconds > 0 else None,
        "achieved_tflops": work.flops / seconds / 1e12 if seconds > 0 else None,
    }
    if ceilings is not None:
        floor = ceilings.floor_ms(work)
        result["floor_ms"] = floor
        result["pct_roofline"] = 100.0 * floor / median_ms if median_ms > 0 else None
        if ceilings.mma_sync_tflops:
            floor_mma = ceilings.floor_ms(work, "mma_sync")
            result["floor_mma_sync_ms"] = floor_mma
            result["pct_roofline_mma_sync"] = 100.0 * floor_mma / median_ms if median_ms > 0 else None
    return result


def ceilings_path(sku: str | None = None) -> Path:
    return CEILINGS_DIR / f"{sku or gpu_sku()}.json"


def load_ceilings(sku: str | None = None) -> Ceilings | None:
    path = ceilings_path(sku)
    if not path.exists():
        return None
    data = json.loads(path.read_text())
    return Ceilings(**{k: data[k] for k in ("gpu", "copy_tbps", "matmul_tflops", "mma_sync_tflops") if k in data})


def save_ceilings(ceilings: Ceilings, procedure: dict) -> Path:
    path = ceilings_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    record = {**asdict(ceilings), "procedure": procedure, "environment": describe_environment()}
    path.write_text(json.dumps(record, indent=2, default=str) + "\n")
    return path


def measure_ceilings(copy_bytes: int = 4 << 30, matmul_size: int = 8192) -> tuple[Ceilings, dict]:
    """Device copy bandwidth and cuBLAS bf16 rate on random data, timed with the harness timer."""
    import torch

    source = torch.empty(copy_bytes // 2, dtype=torch.uint8, device="cuda").random_()
    target = torch.empty_like(source)
    copy = time_events(lambda: target.copy_(source), rep_ms=300)
    copy_tbps = 2 * source.numel() / (copy.median_ms / 1e3) / 1e12
    source = target = None  # free the copy buffers before the matmul (not del: the lambda above names them)
    a = torch.randn(matmul_size, matmul_size, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(matmul_size, matmul_size, device="cuda", dtype=torch.bfloat16)
    c = torch.empty_like(a)
    # Back to back, no flush: a compute ceiling, and its 384 MB of operands exceed any L2 anyway.
    matmul = time_events(lambda: torch.matmul(a, b, out=c), rep_ms=500, flush=False)
    matmul_tflops = 2 * matmul_size**3 / (matmul.median_ms / 1e3) / 1e12
    procedure = {
        "copy": f"device-to-device copy of {copy_bytes // 2} bytes, bytes read + written, median of "
                f"{copy.reps} event-timed calls, L2 flushed (IQR {copy.iqr_ms:.4f} ms)",
        "matmul": f"torch.matmul bf16 {matmul_size}^3 on random N(0,1) data, back to back, median of {matmul.reps} "
                  "calls "
                  f"(IQR {matmul.iqr_ms:.4f} ms)",
    }
    gpu = describe_environment()["gpu"]
    return Ceilings(gpu=gpu, copy_tbps=round(copy_tbps, 3), matmul_tflops=round(matmul_tflops, 1)), procedure
