"""ncu counters (harness.measure.counters): parsing its raw CSV, folding kernels into one row, and
the rows that say why when ncu is missing, not permitted or lacks a metric. No GPU needed."""

import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest

from harness.measure import counters

SAMPLE = Path(__file__).parent / "data" / "ncu-raw-sample.csv"


def test_parse_csv_skips_log_lines_and_units_and_reads_numbers_with_separators():
    kernels = counters.parse_csv(SAMPLE.read_text())
    assert [k["kernel"] for k in kernels] == ["_ws_verify_kernel", "_combine_kernel"]
    first = kernels[0]
    assert first["gpu__time_duration.sum"] == 812544.0
    assert first["dram__bytes.sum"] == 214032384.0
    assert first[counters.METRICS["tensor_pipe_pct"]] == pytest.approx(60.12)


def test_summarize_sums_time_and_bytes_and_weights_percentages_by_duration():
    row = counters.summarize(counters.parse_csv(SAMPLE.read_text()))
    d1, d2 = 812544.0, 7456.0
    assert row["kernels"] == 2
    assert row["duration_us"] == pytest.approx((d1 + d2) / 1e3)
    assert row["tensor_pipe_pct"] == pytest.approx((60.12 * d1 + 0.0 * d2) / (d1 + d2))
    assert row["dram_pct"] == pytest.approx((88.4 * d1 + 10.0 * d2) / (d1 + d2))
    assert row["dram_gbps"] == pytest.approx((214032384 + 1048576) / (d1 + d2))  # bytes per ns = GB/s
    assert row["occupancy_pct"] == pytest.approx((12.49 * d1 + 40.0 * d2) / (d1 + d2))
    # long_scoreboard: (3.2 d1 + 9.0 d2) / (d1 + d2) ~ 3.25 tops math_pipe_throttle (2.4 d1 / total)
    assert [reason for reason, _ in row["top_stalls"]] == ["long_scoreboard", "math_pipe_throttle", "wait"]
    assert row["per_kernel"][1]["kernel"] == "_combine_kernel"


def test_summarize_with_a_metric_missing_everywhere_gives_none_not_zero():
    kernels = [{"kernel": "k", "gpu__time_duration.sum": 10.0}]
    row = counters.summarize(kernels)
    assert row["tensor_pipe_pct"] is None and row["dram_gbps"] is None and row["top_stalls"] == []


def _fake_run(outputs):
    """subprocess.run stand-in returning the queued (returncode, stdout, stderr) and keeping the commands."""
    calls = []

    def run(command, **kwargs):
        calls.append(command)
        code, out, err = outputs.pop(0)
        return SimpleNamespace(returncode=code, stdout=out, stderr=err)
    return run, calls


def test_profile_without_ncu_says_so(monkeypatch):
    monkeypatch.setattr(counters.shutil, "which", lambda name: None)
    row = counters.profile(["python3", "-c", "pass"])
    assert row == {"status": "unavailable", "reason": "ncu not found on PATH (Nsight Compute)"}


def test_profile_not_permitted_says_so():
    run, _ = _fake_run([(1, "", "==ERROR== ERR_NVGPUCTRPERM - The user does not have permission")])
    row = counters.profile(["target"], ncu="/usr/bin/ncu", run=run)
    assert row["status"] == "unavailable" and "ERR_NVGPUCTRPERM" in row["reason"]


def test_profile_drops_a_metric_the_gpu_lacks_and_retries_once():
    lacking = counters.STALL_METRICS["imc_miss"]
    run, calls = _fake_run([(1, "", f'==ERROR== Failed to find metric "{lacking}"'), (0, SAMPLE.read_text(), "")])
    row = counters.profile(["python3", "target.py"], ncu="ncu", run=run)
    assert row["status"] == "ok" and row["metrics_missing"] == [lacking]
    first, second = (call[call.index("--metrics") + 1] for call in calls[:2])
    assert lacking in first and lacking not in second
    assert calls[1][:9] == ["ncu", "--clock-control", "none", "--nvtx", "--nvtx-include", "vk_counters/", "--csv",
                            "--page", "raw"] and calls[1][-2:] == ["python3", "target.py"]


def test_profile_failure_and_timeout_are_rows_with_reasons():
    run, _ = _fake_run([(3, "", "==ERROR== the application returned an error")])
    row = counters.profile(["t"], ncu="ncu", run=run)
    assert row["status"] == "error" and "exit 3" in row["reason"] and "0 kernels" in row["reason"]

    def slow(command, **kwargs):
        raise subprocess.TimeoutExpired(command, 1)
    row = counters.profile(["t"], ncu="ncu", run=slow, timeout_s=1)
    assert row["status"] == "error" and "past 1 s" in row["reason"]


def test_parse_a_real_h200_capture():
    """ncu 2025 on the H200 (scripts/gpu_counters.sh, cuda_ws at 131072 / 64 / 8): its NVTX and
    device-attribute columns are read past, its two kernels (the verify kernel and the combine) kept."""
    capture = Path(__file__).parent / "data" / "ncu-raw-h200-cuda_ws.csv"
    kernels = counters.parse_csv(capture.read_text())
    assert [k["kernel"] for k in kernels] == ["verify_ws", "_combine_kernel"]
    row = counters.summarize(kernels)
    assert 30 < row["tensor_pipe_pct"] < 45 and 60 < row["smem_pipe_pct"] < 80
    assert row["duration_us"] == pytest.approx(sum(k["gpu__time_duration.sum"] for k in kernels) / 1e3)
    assert [reason for reason, _ in row["top_stalls"]][:2] == ["wait", "short_scoreboard"]
