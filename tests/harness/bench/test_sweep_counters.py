"""vk bench --counters: each ok row gets a profiled replay's counters, or the reason there are none;
the timed row is written either way. The GPU parts are replaced by stand-ins (CPU only)."""

import json
from types import SimpleNamespace

import torch

from harness.bench import sweep
from harness.measure import counters as ncu_counters
from harness.measure.records import read_records


def _stub_gpu(monkeypatch):
    monkeypatch.setattr(sweep.roofline, "load_ceilings", lambda: None)
    monkeypatch.setattr(sweep.torch.cuda, "empty_cache", lambda: None)
    problem = SimpleNamespace(arguments=lambda: (), kwargs=lambda: {})
    monkeypatch.setattr(sweep, "make_problem", lambda *a, **k: problem)
    monkeypatch.setattr(sweep, "reference_attention", lambda *a, **k: torch.zeros(1))

    def bench_point(point, problem, reference, ceilings, **kwargs):
        status = "ok" if point.variant != "broken" else "wrong"
        return {"variant": point.variant, "status": status, "median_ms": 1.0}
    monkeypatch.setattr(sweep, "bench_point", bench_point)


def test_rows_are_written_with_the_reason_when_ncu_is_missing(monkeypatch, tmp_path):
    _stub_gpu(monkeypatch)
    monkeypatch.setattr(ncu_counters.shutil, "which", lambda name: None)
    points = [sweep.BenchPoint("triton_splitkv", 4096, 16, 8, 64), sweep.BenchPoint("broken", 4096, 16, 8, 64)]
    out = tmp_path / "bench.jsonl"
    sweep.run_sweep(points, out_path=out, counters=True, progress=False)
    rows = read_records(out)
    assert [r["median_ms"] for r in rows] == [1.0, 1.0]
    assert rows[0]["counters"] == {"status": "unavailable", "reason": "ncu not found on PATH (Nsight Compute)"}
    assert "counters" not in rows[1]  # only ok rows are profiled
    assert sweep.counter_cells(rows[0]) == ("unavailable", "unavailable", "-")


def test_the_profiled_replay_is_a_separate_process_of_the_same_point(monkeypatch, tmp_path):
    _stub_gpu(monkeypatch)
    seen = []

    def profile(argv):
        seen.append(argv)
        return {"status": "ok", "tensor_pipe_pct": 61.0, "dram_pct": 88.0}
    point = sweep.BenchPoint("cuda_ws", 185000, 64, 8, 64, config=(("STAGES", 4),))
    rows = sweep.run_sweep([point], out_path=tmp_path / "b.jsonl", counters=True, progress=False, seed=3,
                           profile=profile)
    assert seen[0][1:3] == ["-m", "harness.bench.counters_target"]
    spec = json.loads(seen[0][3])
    assert spec == {"variant": "cuda_ws", "prefix_len": 185000, "tree_nodes": 64, "heads": 8, "page_size": 64,
                    "batch": 1, "dtype": "bfloat16", "tree": "random", "config": {"STAGES": 4}, "seed": 3,
                    "prefix_lens": []}
    assert sweep.counter_cells(rows[0])[:2] == ("61.0", "88.0")
    assert "tensor %" in sweep.format_table([{**rows[0], "prefix_len": 1, "tree_nodes": 1, "heads": 1,
                                              "page_size": 64}])
