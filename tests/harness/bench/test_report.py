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
