"""The tables the package ships match the current kernel sources (``vk tuned --check``): a change to
a kernel's files must re-tune or re-stamp (scripts/kernel_ptx_digest.py) its records."""

import pytest

from harness.tune.study import check_winners
from verify_kernels.dispatch import SHIPPED_TUNED_DIR


@pytest.mark.parametrize("table", sorted(SHIPPED_TUNED_DIR.glob("*.yaml")), ids=lambda p: p.name)
def test_shipped_table_is_current(table):
    assert check_winners(table) == []


def test_tuned_compare_lines_up_a_proxy_table_with_the_predicted_one(tmp_path):
    """vk tuned --compare: per shared key both winners, their times and the config keys that differ."""
    import subprocess
    import sys

    import yaml

    from harness.tune.cli import compare_tables

    base = {"variant": "cuda_ws", "l_bucket": 131072, "tree_nodes": 64, "heads": 8, "page_size": 64}
    proxy = {"k1": {**base, "config": {"BLOCK_N": 16, "STAGES": 2}, "median_ms": 0.9, "proxy_for": "sm_120",
                    "measured_on": "nvidia-h200"},
             "k2": {**base, "tree_nodes": 16, "config": {"BLOCK_N": 16, "STAGES": 2}, "median_ms": 0.3,
                    "proxy_for": "sm_120", "measured_on": "nvidia-h200"}}
    predicted = {"p1": {**base, "config": {"BLOCK_N": 16, "STAGES": 3}, "predicted_ms": 0.7, "predicted": True,
                        "arch": "sm_120"}}
    first, second = tmp_path / "proxy.yaml", tmp_path / "predicted.yaml"
    first.write_text(yaml.safe_dump(proxy))
    second.write_text(yaml.safe_dump(predicted))
    (row,) = compare_tables(first, second)
    assert row["differ_in"] == ["STAGES"] and not row["same_config"]
    assert row["first"]["kind"] == "proxy for sm_120 on nvidia-h200" and row["second"]["kind"] == "predicted sm_120"
    assert (row["first"]["ms"], row["second"]["ms"]) == (0.9, 0.7)
    done = subprocess.run([sys.executable, "-m", "harness", "tuned", "--compare", str(first), str(second)],
                          capture_output=True, text=True)
    assert done.returncode == 0 and "STAGES 2/3" in done.stdout


def test_tuned_explain_names_the_record_that_decides_auto(tmp_path):
    """vk tuned --explain: on sm_120 (no measured table) every shape resolves from the proxy table (both
    dtypes timed), else from the predicted one, at its own key or the nearest one, and says which."""
    import os
    import shutil
    import subprocess
    import sys

    def explain(*argv, tuned_dir=None):
        env = {**os.environ, **({"VK_TUNED_DIR": str(tuned_dir)} if tuned_dir else {})}
        done = subprocess.run([sys.executable, "-m", "harness", "tuned", "--explain", "--arch", "sm_120", *argv],
                              capture_output=True, text=True, env=env)
        assert done.returncode == 0, done.stderr
        return done.stdout

    for dtype in ("bfloat16", "float16"):
        proxy = explain("--prefix", "131008", "--tree", "64", "--heads", "8", "--dtype", dtype)  # L + T: that bucket
        assert "cuda_qreg" in proxy and "PROXY record at the same key" in proxy and "proxy-sm_120.yaml" in proxy
    # Without the proxy table (a dtype it did not time reads the same way): the predicted table.
    shutil.copy(SHIPPED_TUNED_DIR / "predicted-sm_120.yaml", tmp_path)
    exact = explain("--prefix", "131008", "--tree", "64", "--heads", "8", tuned_dir=tmp_path)
    assert "cuda_qreg" in exact and "PREDICTED record at the same key" in exact and "predicted-sm_120.yaml" in exact
    # The model predicts cuda_qreg's walks (waves 0 / 1 / 2) alike there: the table says so and takes sm_120's default.
    assert "cannot tell" in exact and "the arch's default config" in exact and "'waves': 2" in exact
    nearest = explain("--prefix", "50000", "--tree", "1", "--heads", "64", "--page-size", "16", tuned_dir=tmp_path)
    assert "at the nearest key (L bucket 32768, T 16, H 16, page 64" in nearest
    between = explain("--prefix", "70000", "--tree", "64", "--heads", "8", tuned_dir=tmp_path)  # 32k, 128k as near
    assert "nearest key (L bucket 131072, T 64, H 8" in between


def test_a_proxy_tune_measures_the_predicted_ties_first():
    from harness.tune.run import predicted_ties
    from harness.tune.study import TuneKey

    key = TuneKey("cuda_ws", "nvidia-h200-proxy-sm_120", 131072, 64, 8, 64, "bfloat16", 131072)
    ties = predicted_ties("sm_120", key)
    assert len(ties) >= 2 and {c["SPLIT_K"] for c in ties} == {0, 1}
    assert predicted_ties("sm_120", TuneKey("cuda_ws", "x", 131072, 3, 8, 64, "bfloat16", 131072)) == []


def test_a_proxy_table_ships_as_the_arch_table_and_never_mixed(tmp_path, monkeypatch):
    """vk tuned --publish: a proxy tune's winners go to proxy-<arch>.yaml (what GPUs of that arch read
    before the predicted table), not under the proxy GPU's name; proxy and own records never share a table."""
    import yaml

    from harness.tune import cli, study

    monkeypatch.setattr(study, "SHIPPED_TUNED_DIR", tmp_path / "shipped")
    record = {"variant": "cuda_ws", "gpu": "nvidia-h200-proxy-sm_120", "median_ms": 0.9, "proxy_for": "sm_120"}
    table = tmp_path / "nvidia-h200-proxy-sm_120.yaml"
    table.write_text(yaml.safe_dump({"k": record}))
    assert study.publish_winners(table, "sm_120") == tmp_path / "shipped" / "proxy-sm_120.yaml"
    mixed = {"k": record, "own": {**record, "gpu": "nvidia-h200", "proxy_for": None}}
    assert any("mixed" in problem for problem in cli.publish_problems(mixed))
    assert cli.publish_problems({"k": record}) == []


def test_publish_refuses_a_win_over_a_record_timed_at_other_sources(tmp_path, monkeypatch):
    """vk tuned --publish: at a key where one variant beats another's record measured at other library sources
    (a re-stamped record keeps a time from older host code), the pick is not fair and the table is refused unless
    --mixed-sources says so; two variants timed at the same sources publish."""
    import yaml

    from harness.tune import cli

    base = {"gpu": "gpu-x-proxy-sm_90", "proxy_for": "sm_90", "source_hash": "a" * 16, "l_bucket": 32768,
            "tree_nodes": 16, "heads": 8, "page_size": 64, "config": {}}
    key = "gpu-x-proxy-sm_90|L32768|T16|H8|ps64|bfloat16"
    fair = {f"ws|{key}": {**base, "variant": "ws", "median_ms": 0.0375},
            f"sym|{key}": {**base, "variant": "sym", "median_ms": 0.0454}}
    assert cli.cross_source_picks(fair) == []
    unfair = {**fair, f"ws|{key}": {**fair[f"ws|{key}"], "median_ms": 0.0458, "source_hash": "b" * 16}}
    (line,) = cli.cross_source_picks(unfair)
    assert line.startswith(f"{key}: sym (0.0454 ms") and "over ws (0.0458 ms, sources bbbb" in line

    table = tmp_path / "gpu-x-proxy-sm_90.yaml"
    table.write_text(yaml.safe_dump(unfair))
    monkeypatch.setattr(cli, "check_winners", lambda path: [])
    monkeypatch.setattr(cli, "check_source_checkout", lambda flag: None)
    published = []
    monkeypatch.setattr(cli, "publish_winners", lambda path, proxy_for: published.append(proxy_for) or path)
    args = type("Args", (), {"file": table, "publish": True, "mixed_sources": False, "json": False, "compare": None,
                             "explain": False, "check": False})()
    with pytest.raises(SystemExit, match="at 1 keys a variant wins over another's record timed at other library"):
        cli.cmd_tuned(args)
    assert published == []
    args.mixed_sources = True
    assert cli.cmd_tuned(args) == 0 and published == ["sm_90"]


def test_tuned_explain_resolves_the_default_order_for_an_arch_without_a_table():
    """Where no table answers, --explain names the variant the default order runs on that arch (its
    registry features, the variant's page sizes) and why each one before it does not run there."""
    import subprocess
    import sys

    from harness.tune.cli import default_order_pick

    assert default_order_pick("sm_90", 64) == ("gluon_wgmma_ws", [])
    name, passed = default_order_pick("sm_89", 64)  # no wgmma, no bulk copies
    assert name == "triton_splitkv" and len(passed) == 2 and "cp.async.bulk" in passed[-1]
    name, passed = default_order_pick("sm_89", 1)  # a page_size=1 pool
    assert name == "triton_ps1" and "triton_splitkv runs page sizes" in passed[2]
    assert default_order_pick("sm_100", 64)[0] == "cuda_ws"  # Blackwell: no wgmma
    # sm_100 ships no table (sm_89, sm_90 and sm_120 do)
    done = subprocess.run([sys.executable, "-m", "harness", "tuned", "--explain", "--arch", "sm_100",
                           "--prefix", "4000", "--tree", "16", "--heads", "8"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "no table entry; the default order runs cuda_ws" in done.stdout and "needs wgmma" in done.stdout
