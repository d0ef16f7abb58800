"""vk decode --counters: the step's kernels folded by class (harness.decode.counters), on ncu rows
as harness.measure.counters parses them. No GPU needed."""

import json

import pytest

from harness.decode import counters as decode_counters
from harness.measure.counters import METRICS

DURATION, TENSOR, DRAM = METRICS["duration_ns"], METRICS["tensor_pipe_pct"], METRICS["dram_pct"]


def _kernel(name, ns, tensor, dram):
    return {"kernel": name, DURATION: ns, TENSOR: tensor, DRAM: dram, METRICS["dram_bytes"]: ns * 2.0}


def test_kernel_classes():
    assert decode_counters.kernel_class("_ps1_verify_kernel") == "attention"
    assert decode_counters.kernel_class("_combine_kernel") == "attention"
    assert decode_counters.kernel_class("sm90_xmma_gemm_bf16bf16_bf16f32") == "gemm"
    assert decode_counters.kernel_class("nvjet_tst_128x64_64x4") == "gemm"
    assert decode_counters.kernel_class("triton_red_fused_rms_norm_0") == "other"


def test_by_class_shares_and_weighted_percentages():
    kernels = [_kernel("_ps1_verify_kernel", 900.0, 3.0, 1.0), _kernel("sm90_xmma_gemm", 80.0, 50.0, 90.0),
               _kernel("sm90_xmma_gemm", 20.0, 40.0, 80.0), _kernel("rms_norm", 0.0, None, None)]
    rows = decode_counters.by_class(kernels)
    assert set(rows) == {"all", "attention", "gemm", "other"}
    assert rows["attention"]["time_share"] == pytest.approx(0.9)
    assert rows["gemm"]["time_share"] == pytest.approx(0.1)
    assert rows["gemm"]["tensor_pipe_pct"] == pytest.approx((50 * 80 + 40 * 20) / 100)
    assert rows["all"]["tensor_pipe_pct"] == pytest.approx((3 * 900 + 50 * 80 + 40 * 20) / 1000)
    assert rows["other"]["tensor_pipe_pct"] is None and rows["all"]["kernels"] == 4


def test_profile_step_hands_the_point_to_a_separate_process_and_passes_failures_through():
    seen = {}

    def profile(argv, **kwargs):
        seen.update(argv=argv, **kwargs)
        return {"status": "unavailable", "reason": "ncu not found on PATH (Nsight Compute)"}
    settings = {"preset": "k2-tp8", "context": 185000, "budget": 64, "variant": "auto"}
    row = decode_counters.profile_step(settings, profile=profile)
    assert row["status"] == "unavailable"
    assert seen["argv"][1:3] == ["-m", "harness.decode.counters_target"] and json.loads(seen["argv"][3]) == settings
    assert seen["metrics"] == decode_counters.STEP_METRICS and seen["keep_kernels"] is True
    assert seen["whole_graphs"] is True  # the default: the step's graph as one result

    def ok(argv, **kwargs):
        return {"status": "ok", "kernels_raw": [_kernel("_ws_verify_kernel", 10.0, 90.0, 50.0),
                                                _kernel("gemm", 30.0, 50.0, 10.0)],
                "ncu_command": ["ncu"], "metrics_missing": []}
    row = decode_counters.profile_step(settings, profile=ok, by_kernel=True)
    assert row["status"] == "ok" and row["by_class"]["attention"]["tensor_pipe_pct"] == 90.0
    row = decode_counters.profile_step(settings, profile=ok)
    assert row["step"]["tensor_pipe_pct"] == pytest.approx((90 * 10 + 50 * 30) / 40) and "by_class" not in row
