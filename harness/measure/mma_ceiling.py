"""The bf16 mma.sync rate this GPU reaches: the compute ceiling a portable kernel can approach.

verify_kernels/cuda/mma_peak.cu compiled by CuPy; 4 blocks of 8 warps per SM, each warp 8
independent m16n8k16 chains from registers; timed with the harness timer.
"""

from __future__ import annotations

from pathlib import Path

from harness.measure.timing import time_events

SOURCE = Path(__file__).resolve().parent / "mma_peak.cu"
FLOPS_PER_MMA = 2 * 16 * 8 * 16


def measure_mma_sync_tflops(iters: int = 4096, chains: int = 8, blocks_per_sm: int = 4) -> tuple[float, str]:
    import cupy
    import numpy as np
    import torch

    device = torch.cuda.current_device()
    sms = torch.cuda.get_device_properties(device).multi_processor_count
    threads = 256
    with cupy.cuda.Device(device):
        kernel = cupy.RawModule(code=SOURCE.read_text(), options=(f"-DCHAINS={chains}",)).get_function("mma_peak")
    out = torch.empty(sms * blocks_per_sm * threads, device="cuda")
    stream = cupy.cuda.ExternalStream(torch.cuda.current_stream().cuda_stream, device)

    def launch():
        with cupy.cuda.Device(device):
            kernel((sms * blocks_per_sm,), (threads,), (np.uint64(out.data_ptr()), np.int32(iters), np.uint32(7)),
                   stream=stream)

    timing = time_events(launch, rep_ms=300, flush=False)
    mmas = sms * blocks_per_sm * (threads // 32) * iters * chains
    tflops = mmas * FLOPS_PER_MMA / (timing.median_ms / 1e3) / 1e12
    procedure = (f"mma.sync m16n8k16 bf16->fp32 from registers, {sms * blocks_per_sm} blocks x {threads // 32} warps, "
                 f"{chains} chains x {iters} iterations per warp, median of {timing.reps} calls "
                 f"(IQR {timing.iqr_ms:.4f} ms)")
    return round(tflops, 1), procedure
