"""``vk decode-report``: tables, speed-ups, the best budget, plots."""

import json

import pytest

from decode_setup import _vk_decode_tiny_cpu


def test_decode_report_table_speedups_and_plots(tmp_path):
    from harness.decode.report import speedups_over_baseline, write_decode_report
    from harness.measure.records import append_records

    out = tmp_path / "decode.jsonl"
    completed = _vk_decode_tiny_cpu(out, "--context", "20,40", "--budget", "8,24", "--new-tokens", "12",
                                    "--page-size", "16")
    assert completed.returncode == 0, completed.stderr[-2000:]
    records = [json.loads(line) for line in out.read_text().splitlines()]
    baseline = {**records[0], "variant": "triton_ps1", "median_step_ms": 2 * records[0]["median_step_ms"]}
    append_records(out, [baseline])
    assert speedups_over_baseline(records + [baseline]) == {0: pytest.approx(2.0)}
    written = write_decode_report([out], tmp_path / "report", "tiny")
    text = written[0].read_text()
    assert "2.0x faster than triton_ps1" in text and "best budget at context 20" in text
    assert all(path.stat().st_size > 1000 for path in written[1:])


def test_best_budget_judges_each_run_against_the_greedy_run_its_drafter_followed():
    """With --batch-invariant-greedy the oracle drafter follows the padded greedy run: a run that
    parts from T = 1 greedy at a near-tie but matches the padded run stays in the best-budget
    choice; a run that parts from the run its drafter followed is left out."""
    from harness.decode.report import _best_budget
    from harness.decode.run import PADDED_GREEDY

    same, parted = {"identical": True}, {"identical": False, "first_divergence": 2}
    records = [
        {"context": 1, "variant": "auto", "budget": 16, "tokens_per_s": 100.0, "lossless": same},
        {"context": 1, "variant": "auto", "budget": 32, "tokens_per_s": 300.0, "lossless": parted,
         "drafter_reference": PADDED_GREEDY, "lossless_batch_invariant": same},
        {"context": 1, "variant": "auto", "budget": 64, "tokens_per_s": 500.0, "lossless": same,
         "drafter_reference": PADDED_GREEDY, "lossless_batch_invariant": parted},
        {"context": 1, "variant": "auto", "budget": 128, "tokens_per_s": 900.0, "lossless": parted,
         "drafter_reference": "greedy"},
    ]
    assert _best_budget(records)[1]["budget"] == 32
