"""The one timer: CUDA events per call, L2 flushed before every repetition, counts sized by time.

Procedure (as triton.testing.do_bench and FlashInfer's bench_gpu_time): run once (compilation and
module load stay out of the numbers), estimate the per-call time from a few flushed calls, warm up
for ``warmup_ms``, then time ``rep_ms`` worth of calls, each preceded by a memset over a buffer
twice the L2 size and bracketed by its own pair of events. Returns the median, the interquartile
range and every sample.

Graph mode captures ``calls_per_graph`` (flush, call) pairs in one CUDA graph, replays it, and
subtracts a graph of flushes alone: the per-call cost a graph-captured decode step sees, without
launch gaps.

The events, the flush and the synchronisation come from a ``clock`` object so the logic can be
tested on the CPU with a fake one.
"""

from __future__ import annotations

import contextlib
import statistics
import subprocess
from dataclasses import dataclass, field
from typing import Callable

import torch

# Throttle-reason bits that mean the clocks were held down (power cap, thermal, hardware slowdown).
_THROTTLE_BITS = 0x04 | 0x08 | 0x20 | 0x40 | 0x80
_CLOCK_MOVED_FRACTION = 0.10


@dataclass
class Timing:
    median_ms: float
    iqr_ms: float
    samples_ms: list[float]
    warmup_calls: int
    mode: str
    gpu_state_before: dict | None = None
    gpu_state_after: dict | None = None
    state_flags: list[str] = field(default_factory=list)

    @property
    def reps(self) -> int:
        return len(self.samples_ms)


def summarize(samples_ms: list[float]) -> tuple[float, float]:
    """(median, interquartile range) of the samples."""
    if len(samples_ms) < 2:
        return (samples_ms[0] if samples_ms else float("nan")), 0.0
    quartiles = statistics.quantiles(samples_ms, n=4, method="inclusive")
    return statistics.median(samples_ms), quartiles[2] - quartiles[0]


class CudaClock:
    """CUDA events, an L2-sized memset and device synchronisation on the current device."""

    def __init__(self, device: torch.device | str | None = None):
        self.device = torch.device(device or "cuda")
        props = torch.cuda.get_device_properties(self.device)
        l2_bytes = getattr(props, "L2_cache_size", 0) or 64 << 20
        self.flush_buffer = torch.empty(2 * l2_bytes, dtype=torch.uint8, device=self.device)

    def event(self):
        return torch.cuda.Event(enable_timing=True)

    def flush(self) -> None:
        self.flush_buffer.zero_()

    def synchronize(self) -> None:
        torch.cuda.synchronize(self.device)


def _repetitions(budget_ms: float, estimate_ms: float, low: int, high: int) -> int:
    return int(min(high, max(low, budget_ms / max(estimate_ms, 1e-6))))


def time_events(fn: Callable[[], object], *, warmup_ms: float = 25.0, rep_ms: float = 200.0,
                min_reps: int = 10, max_reps: int = 2000, estimate_calls: int = 5,
                clock=None, read_state: bool = True, flush: bool = True) -> Timing:
    """Median and IQR of per-call event timings, L2 flushed before each call (unless ``flush=False``)."""
    clock = clock or CudaClock()
    state_before = gpu_state() if read_state else None
    fn()  # first call: compilation, module load, autotuning stay out of the numbers
    clock.synchronize()
    start, end = clock.event(), clock.event()
    clock.flush()
    start.record()
    for _ in range(estimate_calls):
        fn()
    end.record()
    clock.synchronize()
    estimate_ms = start.elapsed_time(end) / estimate_calls
    warmup_calls = _repetitions(warmup_ms, estimate_ms, 1, max_reps)
    reps = _repetitions(rep_ms, estimate_ms, min_reps, max_reps)
    for _ in range(warmup_calls):
        fn()
    starts = [clock.event() for _ in range(reps)]
    ends = [clock.event() for _ in range(reps)]
    for begin, finish in zip(starts, ends):
        if flush:
            clock.flush()
        begin.record()
        fn()
        finish.record()
    clock.synchronize()
    samples = [begin.elapsed_time(finish) for begin, finish in zip(starts, ends)]
    median, iqr = summarize(samples)
    timing = Timing(median, iqr, samples, warmup_calls, "events")
    _attach_state(timing, state_before, gpu_state() if read_state else None)
    return timing


def time_graph(fn: Callable[[], object], *, calls_per_graph: int = 20, replays: int = 30,
               flush: bool = True, read_state: bool = True, budget_ms: float | None = None,
               capture_scope: Callable[[], contextlib.AbstractContextManager] | None = None) -> Timing:
    """Per-call time from CUDA-graph replays of (flush, fn) x calls_per_graph, minus flushes alone.

    ``fn`` must be capturable: no host sync (pass preallocated outputs where it can).
    ``budget_ms``: cap the timed calls near this much GPU time for slow calls, from one call timed
    after warm-up: calls_per_graph and replays shrink (to at least 2 and 5), never grow.
    ``capture_scope``: a context each capture's calls run in (verify_kernels.plan_once: one plan a graph,
    as a decode step plans once for its layers).
    """
    clock = CudaClock()
    state_before = gpu_state() if read_state else None
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):  # warm up outside capture, on a side stream as PyTorch advises
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(stream)
    clock.synchronize()
    if budget_ms is not None:
        begin, finish = clock.event(), clock.event()
        begin.record()
        fn()
        finish.record()
        finish.synchronize()
        calls = _repetitions(budget_ms, begin.elapsed_time(finish), 10, calls_per_graph * replays)
        calls_per_graph = max(2, min(calls_per_graph, calls // 5))
        replays = max(5, min(replays, calls // calls_per_graph))

    def capture(body) -> torch.cuda.CUDAGraph:
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph), (capture_scope or contextlib.nullcontext)():
            for _ in range(calls_per_graph):
                body()
        return graph

    def with_flush():
        if flush:
            clock.flush()
        fn()

    work_graph = capture(with_flush)
    flush_graph = capture(clock.flush) if flush else None

    def replay_ms(graph) -> list[float]:
        graph.replay()
        clock.synchronize()
        samples = []
        for _ in range(replays):
            begin, finish = clock.event(), clock.event()
            begin.record()
            graph.replay()
            finish.record()
            finish.synchronize()
            samples.append(begin.elapsed_time(finish) / calls_per_graph)
        return samples

    work = replay_ms(work_graph)
    flush_only = statistics.median(replay_ms(flush_graph)) if flush_graph is not None else 0.0
    samples = [max(0.0, sample - flush_only) for sample in work]
    median, iqr = summarize(samples)
    timing = Timing(median, iqr, samples, 3, "graph")
    _attach_state(timing, state_before, gpu_state() if read_state else None)
    return timing


def _attach_state(timing: Timing, before: dict | None, after: dict | None) -> None:
    timing.gpu_state_before, timing.gpu_state_after = before, after
    timing.state_flags = state_flags(before, after)


def state_flags(before: dict | None, after: dict | None) -> list[str]:
    """Reasons to distrust a timing: clocks that moved or throttling seen around it."""
    if not before or not after:
        return []
    flags = []
    sm_before, sm_after = before.get("sm_clock_mhz"), after.get("sm_clock_mhz")
    if sm_before and sm_after and abs(sm_after - sm_before) > _CLOCK_MOVED_FRACTION * sm_before:
        flags.append(f"sm clock moved {sm_before} -> {sm_after} MHz")
    for label, state in (("before", before), ("after", after)):
        reasons = state.get("throttle_reasons")
        if reasons is not None and reasons & _THROTTLE_BITS:
            flags.append(f"throttled {label} (reasons 0x{reasons:x})")
    return flags


def gpu_state() -> dict | None:
    """SM/memory clocks, temperature and throttle reasons, through NVML or nvidia-smi; None if neither."""
    try:
        import pynvml  # nvidia-ml-py

        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(torch.cuda.current_device() if torch.cuda.is_available() else 0)
        return {
            "sm_clock_mhz": pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM),
            "mem_clock_mhz": pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_MEM),
            "temperature_c": pynvml.nvmlDeviceGetTemperature(handle, pynvml.NVML_TEMPERATURE_GPU),
            "throttle_reasons": pynvml.nvmlDeviceGetCurrentClocksEventReasons(handle),
            "source": "nvml",
        }
    except Exception:
        pass
    query = "clocks.sm,clocks.mem,temperature.gpu,clocks_event_reasons.active"
    try:
        completed = subprocess.run(["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader,nounits"],
                                   capture_output=True, text=True, timeout=10, check=True)
        sm, mem, temp, reasons = (x.strip() for x in completed.stdout.splitlines()[0].split(","))
        return {"sm_clock_mhz": int(sm), "mem_clock_mhz": int(mem), "temperature_c": int(temp),
                "throttle_reasons": int(reasons, 16), "source": "nvidia-smi"}
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        return None
