"""``vk decode`` end to end on the tiny CPU model, and the path-noise script."""

import json
import statistics
import subprocess
import sys

from decode_setup import _vk_decode_tiny_cpu



def test_vk_decode_tiny_cpu_check_lossless(tmp_path):
    out = tmp_path / "decode.jsonl"
    completed = _vk_decode_tiny_cpu(out, "--check-lossless", "--context", "50", "--budget", "24", "--new-tokens", "20",
                                    "--page-size", "16")
    assert completed.returncode == 0, completed.stderr[-2000:]
    assert "identical" in completed.stdout
    (record,) = [json.loads(line) for line in out.read_text().splitlines()]
    assert record["kind"] == "decode" and record["lossless"]["identical"] and "decode" in record["command"]
    assert set(record["mean_phase_ms"]) == {"draft", "tree", "mask", "verify", "walk", "commit"}


def test_vk_decode_times_each_run_both_ways_and_the_report_keeps_the_overlapped_one(tmp_path):
    from harness.decode.report import primary_runs, write_decode_report

    out = tmp_path / "decode.jsonl"
    completed = _vk_decode_tiny_cpu(out, "--context", "20", "--budget", "8,24", "--new-tokens", "12", "--page-size",
                                    "16", "--phase-timing", "overlapped", "synced", "overlapped-blocking")
    assert completed.returncode == 0, completed.stderr[-2000:]
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(r["budget"], r["phase_timing"]) for r in records] == [
        (8, "overlapped"), (8, "synced"), (8, "overlapped-blocking"),
        (24, "overlapped"), (24, "synced"), (24, "overlapped-blocking")]
    assert records[0]["tokens"] == records[1]["tokens"] == records[2]["tokens"]
    assert "reference synced" in completed.stdout and "reference blocking" in completed.stdout
    older = {**records[1], "budget": 40}  # a synced record with no overlapped twin (older than the option)
    del older["phase_timing"]
    assert primary_runs(records + [older]) == [records[0], records[3], older]
    text = write_decode_report([out], tmp_path / "report", "tiny")[0].read_text()
    assert "best budget at context 20" in text


def test_vk_decode_repeats_each_run_and_the_report_gives_their_spread(tmp_path):
    from harness.decode.report import repeated_steps, write_decode_report

    out = tmp_path / "decode.jsonl"
    completed = _vk_decode_tiny_cpu(out, "--context", "20", "--budget", "8", "--new-tokens", "10", "--page-size", "16",
                                    "--repeats", "3")
    assert completed.returncode == 0, completed.stderr[-2000:]
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["repeat"] for r in records] == [0, 1, 2]
    assert records[0]["tokens"] == records[1]["tokens"] == records[2]["tokens"]
    steps = [r["median_step_ms"] for r in records]
    assert repeated_steps(records) == {(20, 8, "reference"): steps}
    text = write_decode_report([out], tmp_path / "report", "tiny")[0].read_text()
    assert f"3 runs, step median of the runs {statistics.median(steps):.2f} ms" in text
    bad = _vk_decode_tiny_cpu(None, "--repeats", "0", timeout=120)
    assert bad.returncode != 0 and "--repeats: expected at least 1, got 0" in bad.stderr


def test_vk_decode_fails_when_cpu_float32_tokens_differ(monkeypatch):
    import harness.decode.run
    from harness.cli import build_parser

    diverged = {"device": "cpu", "dtype": "float32", "context": 0, "variant": "reference", "budget": 8,
                "status": "error", "reason": "-", "lossless": {"identical": False}}
    monkeypatch.setattr(harness.decode.run, "run_matrix", lambda args, command: [{**diverged, "status": "ok"}])
    args = build_parser().parse_args(["decode", "--check-lossless", "--json"])
    assert args.func(args) == 1
    monkeypatch.setattr(harness.decode.run, "run_matrix",
                        lambda args, command: [{**diverged, "status": "ok", "dtype": "bfloat16", "device": "cuda"}])
    assert args.func(args) == 0  # bf16 on the GPU: reported, not failed


def test_vk_decode_drafts_on_the_host_and_on_the_device_in_one_run(tmp_path):
    out = tmp_path / "decode.jsonl"
    completed = _vk_decode_tiny_cpu(out, "--check-lossless", "--context", "20", "--budget", "16", "--new-tokens", "16",
                                    "--draft-on", "host", "device", "--phase-timing", "overlapped", "synced")
    assert completed.returncode == 0, completed.stderr[-2000:]
    records = [json.loads(line) for line in out.read_text().splitlines()]
    # The device loop is timed overlapped only: three runs, not four.
    assert [(r["draft_on"], r["phase_timing"]) for r in records] == [
        ("host", "overlapped"), ("host", "synced"), ("device", "overlapped")]
    assert all(r["lossless"]["identical"] for r in records)
    assert "device-draft" in completed.stdout


def test_vk_decode_refuses_device_drafting_without_the_oracle():
    completed = _vk_decode_tiny_cpu(None, "--draft-on", "device", "--drafter", "ngram", timeout=120)
    assert completed.returncode != 0 and "--draft-on device" in completed.stderr


def test_path_noise_script_in_float32(tmp_path):
    """scripts/decode_noise.py: in float32 on the CPU the greedy (T = 1) and chain-verify paths give
    the same argmax everywhere and logits within float32 noise."""
    out = tmp_path / "noise.json"
    completed = subprocess.run([sys.executable, "scripts/decode_noise.py", "--preset", "tiny", "--context", "0,70",
                                "--tokens", "10", "--variant", "reference", "--device", "cpu", "--out", str(out)],
                               capture_output=True, text=True, timeout=300)
    assert completed.returncode == 0, completed.stderr[-2000:]
    rows = json.loads(out.read_text())["rows"]
    assert [r["context"] for r in rows] == [0, 70]
    for row in rows:
        assert len(row["deltas"]) == 10 and row["disagreements"] == [] and all(row["agree"])
        assert row["max_delta"] < 1e-3 * max(1.0, row["median_margin"]), row
