"""variant="auto": tuned winners picked from shapes alone, defaults with one warning otherwise."""

import warnings

import pytest
import torch
import yaml

from verify_kernels import dispatch, make_problem, reference_attention, verify_attention
from verify_kernels.api import select_variant
from verify_kernels.contract import check_arguments

from conftest import DEVICE


def _shape(problem):
    return check_arguments(*problem.arguments(), **problem.kwargs())


@pytest.fixture
def tuned_dir(tmp_path, monkeypatch):
    monkeypatch.setattr(dispatch, "TUNED_DIR", tmp_path)
    dispatch.load_tuned.cache_clear()
    dispatch._warned.clear()
    yield tmp_path
    dispatch.load_tuned.cache_clear()


def test_l_bucket_is_the_power_of_two_below():
    assert [dispatch.l_bucket(n) for n in (1, 4096, 4224, 131200, 185064)] == [1024, 4096, 4096, 131072, 131072]


def test_auto_picks_the_fastest_tuned_record(tuned_dir):
    problem = make_problem([100], 9, 2, page_size=16, device=DEVICE, seed=3)
    shape = _shape(problem)
    bucket = dispatch.l_bucket(shape.max_pages * shape.page_size)
    base = {"l_bucket": bucket, "tree_nodes": 9, "heads": 2, "page_size": 16, "dtype": "bfloat16"}
    records = {
        "slow": {**base, "variant": "triton_splitkv", "config": {"BLOCK_M": 32}, "median_ms": 2.0},
        "fast": {**base, "variant": "triton_splitkv", "config": {"BLOCK_M": 16, "BLOCK_N": 16, "kv_splits": 3},
                 "median_ms": 1.0},
        "other_shape": {**base, "heads": 4, "variant": "triton_ps1", "config": {}, "median_ms": 0.1},
    }
    (tuned_dir / f"{dispatch.device_sku(shape.device)}.yaml").write_text(yaml.safe_dump(records))
    assert select_variant("auto", shape) == ("triton_splitkv", {"BLOCK_M": 16, "BLOCK_N": 16, "kv_splits": 3})
    out = verify_attention(*problem.arguments(), **problem.kwargs())  # auto, with the tuned config
    reference = reference_attention(*problem.arguments(), **problem.kwargs())
    assert float((out.double() - reference.double()).norm() / reference.double().norm()) < 1e-2


def test_auto_without_records_warns_once_and_uses_the_default_order(tuned_dir):
    problem = make_problem([10], 3, 1, page_size=16, device=DEVICE)
    shape = _shape(problem)
    with pytest.warns(UserWarning, match="no tuned record"):
        name, config = select_variant("auto", shape)
    assert config is None and name in ("triton_splitkv", "cuda_coalesced")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        select_variant("auto", shape)  # the same key does not warn again


def test_explicit_config_wins_over_the_tuned_one(tuned_dir):
    problem = make_problem([40], 5, 1, page_size=16, device=DEVICE)
    shape = _shape(problem)
    base = {"l_bucket": dispatch.l_bucket(shape.max_pages * 16), "tree_nodes": 5, "heads": 1, "page_size": 16,
            "dtype": "bfloat16", "variant": "triton_splitkv", "median_ms": 1.0}
    (tuned_dir / f"{dispatch.device_sku(shape.device)}.yaml").write_text(
        yaml.safe_dump({"k": {**base, "config": {"BLOCK_M": 999}}}))
    # The tuned config is invalid here on purpose: passing a config must bypass it.
    out = verify_attention(*problem.arguments(), **problem.kwargs(), config={"BLOCK_M": 16})
    assert out.shape == (1, 5, 1, 512) and not torch.isnan(out).any()


@pytest.mark.parametrize("dtype, source, table_name, key", [
    (torch.bfloat16, "PROXY", "proxy-sm_120",
     "cuda_qreg|nvidia-h100-80gb-hbm3-proxy-sm_120|L131072|T64|H8|ps64|bfloat16"),
    (torch.float16, "PROXY", "proxy-sm_120",
     "cuda_qreg|nvidia-h100-80gb-hbm3-proxy-sm_120|L131072|T64|H8|ps64|float16"),
])
def test_auto_on_a_faked_sm120_gpu_uses_the_shipped_arch_tables_and_warns_once(monkeypatch, dtype, source, table_name,
                                                                               key):
    """No measured table for the card: the proxy tune's winner for sm_120 (bf16 and fp16, both measured),
    announced once per key."""
    monkeypatch.setattr(dispatch, "TUNED_DIR", dispatch.SHIPPED_TUNED_DIR)
    monkeypatch.setattr(dispatch, "device_sku", lambda device=None: "nvidia-rtx-pro-6000-blackwell-workstation-edition")
    monkeypatch.setattr(dispatch, "device_arch", lambda device: "sm_120")
    dispatch.load_tuned.cache_clear()
    dispatch._warned.clear()
    shape = _shape(make_problem([131072 - 64], 64, 8, page_size=64, seed=0, dtype=dtype))
    with pytest.warns(UserWarning, match=f"{source} winner for sm_120"):
        name, config = dispatch.tuned_choice(shape)
    record = yaml.safe_load((dispatch.SHIPPED_TUNED_DIR / f"{table_name}.yaml").read_text())[key]
    assert (name, config) == (record["variant"], record["config"])
    assert record.get("predicted") is True if source == "PREDICTED" else record["proxy_for"] == "sm_120"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert dispatch.tuned_choice(shape) == (name, config)  # warned once
    dispatch.load_tuned.cache_clear()


def test_no_predicted_table_off_the_gpu(tuned_dir):
    shape = _shape(make_problem([100], 8, 2, page_size=16, seed=1))
    assert dispatch.device_arch(shape.device) is None
    with pytest.warns(UserWarning, match="no tuned record"):
        assert dispatch.tuned_choice(shape) is None


@pytest.mark.parametrize("arch, dtype, source", [
    ("sm_120", "bfloat16", "proxy"), ("sm_120", "float16", "proxy"),
    ("sm_90", "bfloat16", "proxy"), ("sm_90", "float16", "proxy"),
    ("sm_89", "bfloat16", "proxy"), ("sm_89", "float16", "proxy"),
])
def test_auto_picks_a_table_entry_for_every_serving_shape(monkeypatch, arch, dtype, source):
    """Issue 35's grid as a card without a measured table sees it (an RTX PRO 6000, an H200 or H20, an
    L40S): L 2k-262k x T 1-256 x H 8/16/64 x pages 16/64, one request or a batch, all resolve from the
    arch's table (the nearest key), never the bare default order: each arch's proxy tune timed both dtypes
    (the predicted sm_120 table answers only a dtype the proxy lacks)."""
    monkeypatch.setattr(dispatch, "TUNED_DIR", dispatch.SHIPPED_TUNED_DIR)
    dispatch.load_tuned.cache_clear()
    table = dispatch.load_tuned(f"{source}-{arch}", str(dispatch.SHIPPED_TUNED_DIR))
    for length in (2048, 4096, 16384, 32768, 65536, 131072, 185000, 262144):
        for nodes in (1, 16, 32, 64, 128, 256):
            for heads in (8, 16, 64):
                for page_size, batch in ((16, 1), (64, 1), (64, 6)):
                    choice = dispatch.choose("a-card-without-a-table", arch, dispatch.l_bucket(length),
                                             nodes, heads, page_size, dtype, batch)
                    assert choice.source == source and choice.record in table.values(), (length, nodes, heads)
                    exact = (choice.record["l_bucket"], choice.record["tree_nodes"], choice.record["heads"],
                             choice.record["page_size"], choice.record.get("batch", 1)) == (
                        dispatch.l_bucket(length), nodes, heads, page_size, batch)
                    assert (choice.distance == 0) == exact
    dispatch.load_tuned.cache_clear()


def test_the_nearest_key_decides_and_dtype_must_match(tuned_dir):
    base = {"variant": "triton_splitkv", "config": {}, "page_size": 64}
    table = {"near": {**base, "l_bucket": 32768, "tree_nodes": 64, "heads": 8, "dtype": "bfloat16", "median_ms": 2.0},
             "far": {**base, "l_bucket": 4096, "tree_nodes": 16, "heads": 8, "dtype": "bfloat16", "median_ms": 0.1},
             "fp16": {**base, "l_bucket": 65536, "tree_nodes": 64, "heads": 8, "dtype": "float16", "median_ms": 0.5}}
    (tuned_dir / "some-gpu.yaml").write_text(yaml.safe_dump(table))
    choice = dispatch.choose("some-gpu", None, 65536, 64, 8, 64, "bfloat16")
    assert choice.record == table["near"] and choice.distance == 1.0 and choice.source == "measured"
    assert dispatch.choose("some-gpu", None, 65536, 64, 8, 64, "float16").record == table["fp16"]
    assert dispatch.choose("other-gpu", None, 65536, 64, 8, 64, "bfloat16").source == "default order"


def test_a_measured_table_outranks_the_proxy_and_the_proxy_the_predicted(tuned_dir):
    base = {"variant": "cuda_ws", "config": {}, "l_bucket": 32768, "tree_nodes": 64, "heads": 8, "page_size": 64}
    tables = {"predicted-sm_120": {"p": {**base, "predicted_ms": 0.1}},
              "proxy-sm_120": {"x": {**base, "dtype": "bfloat16", "median_ms": 0.2, "proxy_for": "sm_120"}},
              "my-gpu": {"m": {**base, "dtype": "bfloat16", "median_ms": 0.3}}}
    for name, table in tables.items():
        (tuned_dir / f"{name}.yaml").write_text(yaml.safe_dump(table))
    assert dispatch.choose("my-gpu", "sm_120", 32768, 64, 8, 64, "bfloat16").source == "measured"
    assert dispatch.choose("other-gpu", "sm_120", 32768, 64, 8, 64, "bfloat16").source == "proxy"
    assert dispatch.choose("other-gpu", "sm_120", 32768, 64, 8, 64, "float16").source == "predicted"
    assert dispatch.choose("other-gpu", None, 32768, 64, 8, 64, "bfloat16").source == "default order"


def test_times_of_different_timing_modes_never_compete(tuned_dir):
    """issue 35: a table mixing events and graph-replay records compares graph-replay records where a
    key has both (events times carry launch gaps); a key of one mode compares them all."""
    base = {"config": {}, "page_size": 64, "dtype": "bfloat16", "tree_nodes": 64, "heads": 8}
    table = {"events": {**base, "variant": "triton_splitkv", "l_bucket": 32768, "median_ms": 0.1},
             "graph": {**base, "variant": "cuda_ws", "l_bucket": 32768, "median_ms": 0.3, "timing": "graph"},
             "graph2": {**base, "variant": "gluon_wgmma_ws", "l_bucket": 32768, "median_ms": 0.2, "timing": "graph"},
             "old": {**base, "variant": "triton_splitkv", "l_bucket": 4096, "median_ms": 0.1, "timing": "events"},
             "old2": {**base, "variant": "cuda_coalesced", "l_bucket": 4096, "median_ms": 0.05}}
    (tuned_dir / "some-gpu.yaml").write_text(yaml.safe_dump(table))
    assert dispatch.choose("some-gpu", None, 32768, 64, 8, 64, "bfloat16").record == table["graph2"]
    assert dispatch.choose("some-gpu", None, 4096, 64, 8, 64, "bfloat16").record == table["old2"]


def test_a_batch_prefers_the_record_of_a_ragged_batch_of_about_its_size(tuned_dir):
    """issue 33: vk tune --ragged records carry their batch's size; auto matches batches by it, and
    one request keeps the one-request record of the same key."""
    base = {"config": {}, "page_size": 64, "dtype": "bfloat16", "tree_nodes": 64, "heads": 8, "l_bucket": 131072}
    table = {"one": {**base, "variant": "gluon_wgmma_ws", "median_ms": 0.3},
             "eight": {**base, "variant": "cuda_ws", "median_ms": 0.9, "batch": 8,
                       "prefix_lens": [131072, 64, 900, 4096, 17000, 33000, 70000, 110000]}}
    (tuned_dir / "some-gpu.yaml").write_text(yaml.safe_dump(table))
    one = dispatch.choose("some-gpu", None, 131072, 64, 8, 64, "bfloat16")
    assert one.record == table["one"] and one.distance == 0
    assert dispatch.choose("some-gpu", None, 131072, 64, 8, 64, "bfloat16", batch=8).record == table["eight"]
    four = dispatch.choose("some-gpu", None, 131072, 64, 8, 64, "bfloat16", batch=4)
    assert four.record == table["eight"] and four.distance == 1.0  # log2(8 / 4) against log2(4 / 1)
