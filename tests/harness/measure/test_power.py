"""The NVML sampler (harness.measure.power) on a fake NVML: samples, summary, and no NVML."""

import time
from types import SimpleNamespace

import pytest

from harness.measure.power import PowerSampler


class FakeNvml:
    """Power rising 100 W -> 400 W by 100 W per reading; utilisation in step with it."""

    def __init__(self):
        self.readings = 0

    def nvmlDeviceGetHandleByIndex(self, index):
        return f"handle{index}"

    def nvmlDeviceGetPowerUsage(self, handle):
        assert handle == "handle0"
        self.readings += 1
        return min(self.readings, 4) * 100_000  # mW

    def nvmlDeviceGetUtilizationRates(self, handle):
        step = min(self.readings, 4)
        return SimpleNamespace(gpu=25 * step, memory=step)


def test_sampler_summarises_median_and_peak_of_its_readings():
    nvml = FakeNvml()
    with PowerSampler(0.001, nvml=nvml, device_index=0) as sampler:
        time.sleep(0.05)
    summary = sampler.summary()
    assert summary["status"] == "ok" and summary["source"] == "nvml"
    assert summary["samples"] == len(sampler.samples) >= 5
    assert summary["power_w_peak"] == 400.0 and summary["sm_util_pct_peak"] == 100.0
    assert summary["mem_util_pct_peak"] == 4.0
    assert summary["power_w_median"] == 400.0  # most readings are past the ramp
    assert sampler.samples[0][1] == 100.0  # the first reading is taken on entry
    assert summary["span_s"] > 0


def test_sampler_without_nvml_says_why_and_the_run_goes_on():
    class Broken:
        def nvmlDeviceGetHandleByIndex(self, index):
            raise RuntimeError("NVML Shared Library Not Found")

    with PowerSampler(nvml=Broken(), device_index=0) as sampler:
        pass
    summary = sampler.summary()
    assert summary["status"] == "unavailable" and "NVML Shared Library Not Found" in summary["reason"]


def test_sampler_that_loses_nvml_mid_run_keeps_what_it_read():
    nvml = FakeNvml()
    calls = {"n": 0}
    original = nvml.nvmlDeviceGetPowerUsage

    def flaky(handle):
        calls["n"] += 1
        if calls["n"] > 2:
            raise RuntimeError("GPU is lost")
        return original(handle)
    nvml.nvmlDeviceGetPowerUsage = flaky
    with PowerSampler(0.001, nvml=nvml, device_index=0) as sampler:
        time.sleep(0.03)
    summary = sampler.summary()
    assert summary["status"] == "ok" and summary["samples"] == 2 and "GPU is lost" in summary["reason"]
    assert summary["power_w_median"] == pytest.approx(150.0)


def test_summary_over_a_window_keeps_only_its_samples():
    sampler = PowerSampler(nvml=FakeNvml(), device_index=0)
    sampler.samples = [(0.0, 50.0, 0.0, 0.0), (1.0, 300.0, 100.0, 20.0), (2.0, 310.0, 100.0, 22.0),
                       (3.0, 60.0, 0.0, 0.0)]
    summary = sampler.summary(window=(0.5, 2.5))
    assert summary["samples"] == 2 and summary["power_w_median"] == 305.0 and summary["sm_util_pct_median"] == 100.0
    assert sampler.summary(window=(5.0, 6.0)) == {"status": "unavailable", "reason": "no samples in the window"}
