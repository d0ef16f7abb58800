"""``vk report``: the markdown table, reasons and plots."""

import pytest

from harness.measure import records


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


def test_report_adds_the_counters_table_and_the_tensor_plot(tmp_path):
    from harness.bench.report import counters_table, write_report

    baseline = _bench_record("triton_ps1", 185000, 20.0, 1.5)
    baseline["counters"] = {"status": "ok", "tensor_pipe_pct": 3.1, "dram_pct": 1.2, "dram_gbps": 40.0,
                            "l2_hit_pct": 90.0, "smem_pipe_pct": 2.0, "occupancy_pct": 50.0,
                            "top_stalls": [["long_scoreboard", 30.5], ["wait", 1.0]]}
    baseline["power"] = {"status": "ok", "power_w_median": 133.0, "power_w_peak": 140.0, "mem_util_pct_median": 1.0}
    fast = _bench_record("gluon_wgmma_ws", 185000, 0.34, 90.0)
    fast["counters"] = {"status": "unavailable", "reason": "ncu not found on PATH (Nsight Compute)"}
    plain = _bench_record("triton_splitkv", 185000, 1.0, 30.0)
    table = counters_table([baseline, fast, plain])
    lines = [line for line in table.splitlines() if line.startswith("| ")]
    assert len(lines) == 3  # header, the baseline, the row that says why it has no counters
    assert "3.1" in lines[1] and "long_scoreboard 30.5, wait 1.0" in lines[1] and "133" in lines[1]
    assert "ncu not found on PATH" in lines[2]
    assert counters_table([plain]) is None

    path = tmp_path / "bench.jsonl"
    records.append_records(path, [baseline, fast, plain])
    markdown, images = write_report([path], tmp_path / "report" / "counters", "Counters")
    assert "Hardware counters" in markdown.read_text()
    if images:  # matplotlib present
        assert [image.name.rsplit("-", 1)[-1] for image in images] == ["latency.png", "roofline.png", "tensor.png"]
