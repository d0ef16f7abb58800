"""Harness logic on the CPU: the timer with a fake clock, roofline arithmetic, records, the CLI."""

import json
import os
import subprocess
import sys

import pytest

from harness.measure import records
from harness.measure import roofline
from harness.measure import timing

from conftest import DEVICE


class FakeClock:
    """Virtual milliseconds: each call of the timed function advances time by its duration."""

    def __init__(self):
        self.now_ms = 0.0
        self.flushes = 0

    def event(self):
        clock = self

        class Event:
            def record(self):
                self.at = clock.now_ms

            def elapsed_time(self, other):
                return other.at - self.at

            def synchronize(self):
                pass

        return Event()

    def flush(self):
        self.flushes += 1
        self.now_ms += 100.0  # never counted: outside the events

    def synchronize(self):
        pass


def test_timer_sizes_counts_by_time_and_reports_median_and_iqr():
    clock = FakeClock()
    durations = iter([9.0] + [5.0] * 5 + [2.0] * 10_000)  # first call, 5 estimate calls, then 2 ms
    calls = []

    def fn():
        duration = next(durations)
        calls.append(duration)
        clock.now_ms += duration

    result = timing.time_events(fn, warmup_ms=20, rep_ms=100, min_reps=10, max_reps=1000, clock=clock,
                                read_state=False)
    # The first call is not counted; the estimate is 5 ms -> 20 / 5 = 4 warm-up calls, 100 / 5 = 20 timed.
    assert result.warmup_calls == 4
    assert result.reps == 20
    assert result.median_ms == pytest.approx(2.0)
    assert result.iqr_ms == pytest.approx(0.0)
    assert clock.flushes == 1 + result.reps  # one before the estimate, one before every timed call
    assert len(calls) == 1 + 5 + 4 + 20


def test_timer_clamps_repetitions():
    clock = FakeClock()

    def fn():
        clock.now_ms += 1000.0

    result = timing.time_events(fn, rep_ms=10, min_reps=7, clock=clock, read_state=False)
    assert result.reps == 7 and result.warmup_calls == 1


def test_summarize_median_and_iqr():
    median, iqr = timing.summarize([1.0, 2.0, 3.0, 4.0, 100.0])
    assert median == 3.0 and iqr == pytest.approx(2.0)


def test_state_flags():
    before = {"sm_clock_mhz": 1980, "throttle_reasons": 0}
    assert timing.state_flags(before, {"sm_clock_mhz": 1970, "throttle_reasons": 0}) == []
    flags = timing.state_flags(before, {"sm_clock_mhz": 1500, "throttle_reasons": 0x20})
    assert any("moved" in f for f in flags) and any("throttled after" in f for f in flags)


def test_roofline_arithmetic_matches_design_formulas():
    work = roofline.verify_work([131072], 64, 8)
    keys = 131072 + 64
    assert work.flops == 2 * 512 * keys * 1088
    assert work.bytes_moved == keys * 576 * 2 + 512 * (576 + 512) * 2
    ceilings = roofline.Ceilings("test", copy_tbps=4.25, matmul_tflops=700.0, mma_sync_tflops=500.0)
    # R = 512 > ~110: compute-bound on the H200.
    assert ceilings.floor_ms(work) == pytest.approx(work.flops / 700e12 * 1e3)
    result = roofline.metrics(work, median_ms=2 * ceilings.floor_ms(work), ceilings=ceilings)
    assert result["pct_roofline"] == pytest.approx(50.0)
    assert result["pct_roofline_mma_sync"] == pytest.approx(100 * (work.flops / 500e12 * 1e3) / (2 * ceilings.floor_ms(work)))
    small = roofline.verify_work([131072], 16, 1)  # R = 16: memory-bound
    assert ceilings.floor_ms(small) == pytest.approx(small.bytes_moved / 4.25e12 * 1e3)
    # DESIGN.md: ~0.21 ms floor at L = 131072, T = 64, H = 8 on an H200.
    assert 0.1 < ceilings.floor_ms(work) < 0.3


def test_records_round_trip_with_schema_and_command(tmp_path):
    path = tmp_path / "r.jsonl"
    record = records.make_record("bench", {"variant": "x", "median_ms": 1.5}, command="vk bench --prefix 4096")
    records.append_records(path, [record])
    records.append_records(path, [record])
    loaded = records.read_records(path)
    assert len(loaded) == 2 and loaded[0]["schema_version"] == records.SCHEMA_VERSION
    assert loaded[0]["command"] == "vk bench --prefix 4096"
    assert loaded[0]["environment"]["source_hash"]
    with pytest.raises(ValueError, match=r"keys \['kind'\] are reserved"):
        records.make_record("bench", {"kind": "peer"})
    path.write_text(json.dumps({"schema_version": 99}) + "\n")
    with pytest.raises(ValueError, match="schema_version 99"):
        records.read_records(path)


def test_cli_help_needs_torch_only():
    completed = subprocess.run([sys.executable, "-c",
                                "import sys, harness.cli as c; sys.exit(c.main(['--help']))"],
                               capture_output=True, text=True)
    assert completed.returncode == 0 and "check" in completed.stdout
    imported = subprocess.run([sys.executable, "-c",
                               "import sys, verify_kernels, harness.cli; "
                               "print(sorted(m for m in ('triton', 'cupy', 'optuna') if m in sys.modules))"],
                              capture_output=True, text=True, check=True)
    assert imported.stdout.strip() == "[]"


def test_vk_check_cli(tmp_path):
    """On a CPU machine this runs the interpreter; on the GPU host the same cases on the GPU."""
    out = tmp_path / "check.jsonl"
    completed = subprocess.run([sys.executable, "-m", "harness", "check", "--device", DEVICE, "--quick",
                                "--variants", "triton_ps1", "--cases",
                                "prefix_0", "page_edge", "--no-progress", "--out", str(out)],
                               capture_output=True, text=True,
                               env={**os.environ, "TRITON_INTERPRET": "1" if DEVICE == "cpu" else "0"})
    assert completed.returncode == 0, completed.stdout + completed.stderr
    assert "2 passed, 0 failed" in completed.stdout
    assert [r["status"] for r in records.read_records(out)] == ["pass", "pass"]


def test_sdpa_peer_matches_oracle():
    from harness.bench.peers import PEERS
    from verify_kernels import make_problem, reference_attention

    problem = make_problem([70, 5], 9, 2, page_size=16, seed=1, device=DEVICE)
    out = PEERS["sdpa_gathered"](problem)()
    reference = reference_attention(*problem.arguments(), **problem.kwargs())
    assert float((out.double() - reference.double()).norm() / reference.double().norm()) < 1e-2


def test_flashinfer_peer_says_why_it_is_unavailable():
    from harness.bench.peers import PEERS, PeerUnavailable
    from verify_kernels import make_problem

    with pytest.raises(PeerUnavailable, match="flashinfer"):
        PEERS["flashinfer"](make_problem([5], 3, 1, page_size=16))


def _bench_record(variant, length, median, pct, status="ok", reason=""):
    payload = {"variant": variant, "prefix_len": length, "tree_nodes": 64, "heads": 8, "batch": 1,
               "page_size": 64, "config": {}, "status": status, "reason": reason, "mode": "events"}
    if status == "ok":
        payload.update(median_ms=median, iqr_ms=median / 100, pct_roofline=pct, floor_ms=median * pct / 100)
    return records.make_record("bench", payload, command="vk bench --prefix 4096,32768")


def test_report_renders_table_reasons_and_plots(tmp_path):
    pytest.importorskip("matplotlib")
    from harness.bench.report import write_report

    path = tmp_path / "bench.jsonl"
    records.append_records(path, [
        _bench_record("triton_ps1", 4096, 0.5, 1.2), _bench_record("triton_splitkv", 4096, 0.05, 12.0),
        _bench_record("triton_ps1", 32768, 4.0, 1.3), _bench_record("triton_splitkv", 32768, 0.3, 17.5),
        _bench_record("flex_attention", 4096, None, None, "unavailable", "FlexAttention failed for Dqk=576"),
    ])
    markdown, images = write_report([path], tmp_path / "report" / "quick", "Quick sweep")
    text = markdown.read_text()
    assert "| triton_ps1" in text or "triton_ps1 " in text
    assert "0.050 (12.0%)" in text and "4.000 (1.3%)" in text
    assert "`flex_attention` (unavailable): FlexAttention failed for Dqk=576" in text
    assert "Reproduce: `vk bench --prefix 4096,32768`" in text
    assert all(image.exists() and image.stat().st_size > 1000 for image in images)


def test_ab_script_loads_a_registered_variant_and_a_kernel_file(tmp_path):
    """scripts/ab_verify_kernels.py: 'variant:json' and 'file=PATH:json' contenders (a copy of a
    variant module loaded from a file keeps its relative imports)."""
    import importlib.util
    import shutil
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    spec = importlib.util.spec_from_file_location("ab_verify_kernels", root / "scripts" / "ab_verify_kernels.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    label, module, config = script.load_contender('triton_splitkv:{"BLOCK_N": 32}')
    assert module.__name__ == "verify_kernels.triton_splitkv" and config == {"BLOCK_N": 32}
    copy = tmp_path / "splitkv_before.py"
    shutil.copy(root / "verify_kernels" / "triton_splitkv.py", copy)
    label, module, config = script.load_contender(f"file={copy}:")
    assert label.startswith("splitkv_before") and config == {} and hasattr(module, "run")
    assert module is not script.load_contender("triton_splitkv")[1]
