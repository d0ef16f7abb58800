"""Ragged batches in the bench: points, resume keys, problems, tables (CPU; timing needs the GPU)."""

from harness.bench.peers_report import lengths_cell, shape_key
from harness.bench.report import markdown_table
from harness.bench.sweep import BenchPoint, recorded_points, sweep_points
from harness.measure import records, roofline


def test_ragged_batches_are_points_beside_single_lengths():
    points = sweep_points(["triton_splitkv"], [4096], [64], [8], [64], ragged=[[185_000, 4096, 32_768]])
    single, ragged = points
    assert single.lengths() == [4096] and single.prefix_lens == ()
    assert ragged.lengths() == [185_000, 4096, 32_768] and ragged.prefix_len == 185_000 and ragged.batch == 3


def test_a_ragged_record_resumes_and_reads_as_its_batch():
    (point,) = sweep_points(["triton_splitkv"], [], [16], [8], [64], ragged=[[70, 5, 900]])
    payload = {**point.__dict__, "prefix_lens": list(point.prefix_lens), "config": {}, "status": "ok",
               "median_ms": 0.1, "floor_ms": 0.01, "pct_roofline": 10.0, "variant": "triton_splitkv"}
    record = records.make_record("bench", payload)
    assert recorded_points([record]) == {point}
    assert shape_key(record)[1] == (70, 5, 900) and lengths_cell((70, 5, 900)) == "ragged 70/5/900"
    assert "ragged 70/5/900" in markdown_table([record])
    assert lengths_cell((4096, 4096)) == "4,096"


def test_the_floor_of_a_ragged_batch_is_the_sum_of_its_requests():
    whole = roofline.verify_work([185_000, 4096], 64, 8)
    parts = [roofline.verify_work([length], 64, 8) for length in (185_000, 4096)]
    assert whole.flops == sum(p.flops for p in parts) and whole.bytes_moved == sum(p.bytes_moved for p in parts)


def test_bench_point_defaults_still_describe_a_uniform_batch():
    assert BenchPoint("triton_splitkv", 100, 8, 2, 16, batch=3).lengths() == [100, 100, 100]


def test_a_config_with_optional_keys_is_its_own_point():
    """An optional key (cuda_qreg's EMPTY_BARS) keeps the override: dropped, the point ran the default
    under the experiment's name and --resume took one for the other."""
    base = {"WARPS_M": 2, "BLOCK_N": 32, "STAGES": 4, "MIN_BLOCKS": 1, "kv_splits": 0, "waves": 0}
    points = sweep_points(["cuda_qreg"], [4096], [64], [8], [64], configs=[base, {**base, "EMPTY_BARS": 1}])
    assert [dict(p.config) for p in points] == [base, {**base, "EMPTY_BARS": 1}]
