"""Weights pulled into L2 while the attention kernel leaves HBM idle (an opt-in experiment).

In the verify forward at long context the attention kernel is compute-bound (HBM about 12% busy
at 185k, T 64, H 8) and the GEMMs right after it (W_UV, o_proj, gate_up) are HBM-bound. ``L2Prefetch``
launches, on a side stream forked when the attention starts, a kernel of a few CTAs (the SMs the
attention's one wave leaves free) that waits ``delay_us`` by the GPU's global timer and then
issues bulk L2 prefetches (``cp.async.bulk.prefetch.L2``, sm_90 and later) over the first
``megabytes`` of the weights in the order the GEMMs read them. Timed to land just before the
attention ends, those GEMMs read them from L2. Too early, the KV stream evicts them; too late,
they compete with the GEMMs. A hint: nothing reads its result; the side stream rejoins the main
one at the end of the forward (``join``), so graph capture sees a fork and a join.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

CTAS = 4           # 132 SMs minus the attention's 128 CTAs at T 64 (one wave, one CTA per SM)
CHUNK_BYTES = 1 << 16
MAX_TENSORS = 3


@triton.jit
def _globaltimer():
    return tl.inline_asm_elementwise("mov.u64 $0, %globaltimer;", "=l", [], dtype=tl.int64, is_pure=False, pack=1)


@triton.jit
def _prefetch(base, size):
    tl.inline_asm_elementwise("cp.async.bulk.prefetch.L2.global [$1], $2;\n mov.u32 $0, 0;", "=r,l,r",
                              [base, size], dtype=tl.int32, is_pure=False, pack=1)


@triton.jit
def _l2_prefetch_kernel(ptr0, bytes0, ptr1, bytes1, ptr2, bytes2, delay_ns, CHUNK: tl.constexpr):
    """After ``delay_ns``, CTA c prefetches chunks c, c + CTAs, ... of each range, in range order."""
    begin = _globaltimer()
    while _globaltimer() - begin < delay_ns:
        tl.inline_asm_elementwise("nanosleep.u32 2000;\n mov.u32 $0, 0;", "=r", [], dtype=tl.int32,
                                  is_pure=False, pack=1)
    cta, ctas = tl.program_id(0), tl.num_programs(0)
    for chunk in range(cta, tl.cdiv(bytes0, CHUNK), ctas):
        _prefetch(ptr0.to(tl.int64, bitcast=True) + chunk * CHUNK, tl.minimum(CHUNK, bytes0 - chunk * CHUNK))
    for chunk in range(cta, tl.cdiv(bytes1, CHUNK), ctas):
        _prefetch(ptr1.to(tl.int64, bitcast=True) + chunk * CHUNK, tl.minimum(CHUNK, bytes1 - chunk * CHUNK))
    for chunk in range(cta, tl.cdiv(bytes2, CHUNK), ctas):
        _prefetch(ptr2.to(tl.int64, bitcast=True) + chunk * CHUNK, tl.minimum(CHUNK, bytes2 - chunk * CHUNK))


class L2Prefetch:
    """``start(tensors)`` before the attention, ``join()`` at the end of the forward."""

    def __init__(self, megabytes: float, delay_us: float, device: torch.device):
        if megabytes <= 0 or delay_us < 0:
            raise ValueError(f"l2 prefetch: expected megabytes > 0 and delay_us >= 0, got {megabytes}, {delay_us}")
        if device.type != "cuda" or torch.cuda.get_device_capability(device)[0] < 9:
            raise ValueError(f"l2 prefetch: needs a GPU with cp.async.bulk.prefetch (sm_90 or later), got {device}")
        self.limit = int(megabytes * 2**20)
        self.delay_ns = int(delay_us * 1e3)
        self.stream = torch.cuda.Stream(device)

    def start(self, tensors: list[torch.Tensor]) -> None:
        """Fork the side stream here and queue the prefetch of the first ``megabytes`` of ``tensors``
        (contiguous, in this order)."""
        if len(tensors) > MAX_TENSORS:
            raise ValueError(f"l2 prefetch: at most {MAX_TENSORS} tensors, got {len(tensors)}")
        ranges, left = [], self.limit
        for tensor in tensors:
            if not tensor.is_contiguous() or tensor.data_ptr() % 16:
                raise ValueError("l2 prefetch: tensors must be contiguous and 16-byte aligned")
            size = min(left, tensor.numel() * tensor.element_size()) // 16 * 16
            ranges += [tensor, size]
            left -= size
        ranges += [tensors[0], 0] * (MAX_TENSORS - len(tensors))
        self.stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(self.stream):
            _l2_prefetch_kernel[(CTAS,)](*ranges, self.delay_ns, CHUNK=CHUNK_BYTES, num_warps=1)

    def join(self) -> None:
        torch.cuda.current_stream().wait_stream(self.stream)
