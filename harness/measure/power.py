"""Power, SM and memory-controller utilisation sampled through NVML on a side thread over a run.

The seed's probe, reproduced: during the 1.4 s decode steps the card drew 133 W of 600 W with the
memory controller 1.2% busy while nvidia-smi claimed 99.8% "SM utilisation". ``PowerSampler``
reads ``nvmlDeviceGetPowerUsage`` (mW) and ``nvmlDeviceGetUtilizationRates`` (``gpu``: the share
of time a kernel ran, what nvidia-smi calls SM utilisation; ``memory``: the share of time device
memory was read or written) every ``interval_s`` and summarises them as median and peak.

NVML updates utilisation over its own window (1/6 s to 1 s, by GPU), so samples a few ms apart
repeat values: the median is over the run, not finer than that window. Power is the driver's
averaged reading. The sampler never raises: without NVML its summary says why.
"""

from __future__ import annotations

import statistics
import threading
import time


def _nvml():
    import pynvml  # nvidia-ml-py

    pynvml.nvmlInit()
    return pynvml


class PowerSampler:
    """``with PowerSampler() as sampler: ...`` then ``sampler.summary()``.

    ``nvml`` (a module with pynvml's functions) and ``handle`` can be given, for tests and for
    another device; by default pynvml and the current CUDA device.
    """

    def __init__(self, interval_s: float = 0.005, *, nvml=None, handle=None, device_index: int | None = None):
        self.interval_s = interval_s
        self.samples: list[tuple[float, float, float, float]] = []  # (t_s, watts, sm_pct, memory_pct)
        self.reason = ""
        self._nvml, self._handle = nvml, handle
        self._device_index = device_index
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> "PowerSampler":
        try:
            if self._nvml is None:
                self._nvml = _nvml()
            if self._handle is None:
                index = self._device_index
                if index is None:
                    import torch

                    index = torch.cuda.current_device() if torch.cuda.is_available() else 0
                self._handle = self._nvml.nvmlDeviceGetHandleByIndex(index)
            self._sample()  # fail here, not on the thread
        except Exception as error:  # no NVML, no permission, no device: the run goes on without samples
            self.reason = f"NVML unavailable: {type(error).__name__}: {error}"[:300]
            return self
        self._thread = threading.Thread(target=self._loop, name="vk-power-sampler", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            try:
                self._sample()  # the run's last state
            except Exception:
                pass

    def _sample(self) -> None:
        watts = self._nvml.nvmlDeviceGetPowerUsage(self._handle) / 1000.0
        rates = self._nvml.nvmlDeviceGetUtilizationRates(self._handle)
        self.samples.append((time.perf_counter(), watts, float(rates.gpu), float(rates.memory)))

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self._sample()
            except Exception as error:
                self.reason = f"NVML sampling stopped: {type(error).__name__}: {error}"[:300]
                return

    def summary(self, window: tuple[float, float] | None = None) -> dict:
        """Median and peak power (W), SM-busy % and memory-controller %, the sample count and the
        span; or ``{"status": "unavailable", "reason": ...}``. ``window`` (time.perf_counter
        seconds): only the samples taken inside it, say a decode loop's steps without its warm-up."""
        samples = self.samples
        if window is not None:
            samples = [sample for sample in samples if window[0] <= sample[0] <= window[1]]
        if not samples:
            return {"status": "unavailable",
                    "reason": self.reason or "no samples" + (" in the window" if window else "")}
        _, watts, sm, memory = zip(*samples)
        out = {"status": "ok", "samples": len(samples), "interval_ms": self.interval_s * 1e3,
               "span_s": round(samples[-1][0] - samples[0][0], 4),
               "power_w_median": statistics.median(watts), "power_w_peak": max(watts),
               "sm_util_pct_median": statistics.median(sm), "sm_util_pct_peak": max(sm),
               "mem_util_pct_median": statistics.median(memory), "mem_util_pct_peak": max(memory),
               "source": "nvml"}
        if self.reason:
            out["reason"] = self.reason
        return out
