"""The predictor on hand-checked cases, the fit's helpers and the CLI (the arch records it reads:
tests/kernels/test_arch.py)."""

import json
import math
import subprocess
import sys

import pytest

from harness.predict.fit import blocks_per_sm, spearman
from harness.predict.model import predict
from harness.static.space import resolve
from verify_kernels import cuda_ws
from verify_kernels.arch import load_arch

WS_90, WS_120 = resolve("cuda_ws", "sm_90"), resolve("cuda_ws", "sm_120")

EXACT = {"tensor_efficiency": 1.0, "smem_efficiency": 1.0, "saturating_warps": 1.0, "tile_overhead_cycles": 0.0,
         "fixed_us": 0.0, "copy_issue_cycles": 0.0}


def test_shared_memory_bound_tile_by_hand():
    """48 rows x 32-token tiles, one CTA, one split, 10 tiles: 10 x 325,632 B / 128 B per clock."""
    config = {**cuda_ws.DEFAULT_CONFIGS["sm_90"], "kv_splits": 1}
    work = cuda_ws.tile_work(config)
    assert (work["rows"], work["mma"], work["smem_bytes"]) == (48, 816, 325632)
    result = predict(WS_90, config, prefix_len=314, tree_nodes=6, heads=8, blocks_per_sm=1, params=EXACT)
    assert (result.ctas, result.waves, result.tiles_per_cta, result.bound) == (1, 1, 10, "shared memory")
    assert math.isclose(result.time_ms, 10 * 325632 / 128 / 1.98e6, rel_tol=1e-9)


def test_tensor_bound_on_the_slower_tensor_arch():
    """The same work is tensor-bound where mma.sync does ~1,000 FLOP per SM-clock (sm_120), not 2,487."""
    config = {**cuda_ws.DEFAULT_CONFIGS["sm_90"], "kv_splits": 1}
    on_120 = predict(WS_120, config, prefix_len=314, tree_nodes=6, heads=8, blocks_per_sm=1, params=EXACT)
    assert on_120.bound == "tensor"
    assert math.isclose(on_120.time_ms, 10 * 816 * 4096 / 1031 / 2.6e6, rel_tol=1e-9)


def test_a_second_wave_costs_a_second_round():
    """48 rows: T 6 x H 8 is one row block; 132 splits fill one wave of the H200, 133 start a second."""
    config = cuda_ws.DEFAULT_CONFIGS["sm_90"]
    runs = {splits: predict(WS_90, {**config, "kv_splits": splits}, prefix_len=131072, tree_nodes=6, heads=8,
                            blocks_per_sm=1, params=EXACT) for splits in (132, 133)}
    assert (runs[132].waves, runs[133].waves) == (1, 2)
    tiles = runs[133].tiles_per_cta
    combine_bytes = 133 * 48 * 513 * 4 + 48 * 512 * 2  # fp32 partials and LSEs read, the output written
    expected = 2 * tiles * 325632 / 128 / 1.98e6 + combine_bytes / 4.27e9
    assert math.isclose(runs[133].time_ms, expected, rel_tol=1e-9)


def test_register_limited_occupancy_feeds_the_latency_term():
    """A config the static model limits by registers to 2 CTAs per SM runs 2 resident where CTAs allow."""
    config = {"WARPS_M": 2, "ROW_TILES": 1, "WARPS_N": 2, "BLOCK_N": 16, "STAGES": 2, "MIN_BLOCKS": 1, "PRODUCER": 0,
              "SPLIT_K": 0, "kv_splits": 0}
    blocks = blocks_per_sm(WS_90, config)  # the committed static cache: limiter registers
    assert blocks == 2
    params = {**EXACT, "saturating_warps": 8.0}
    config = {**config, "kv_splits": 16}  # 16 row blocks x 16 splits = 256 CTAs: two per SM where they fit
    two = predict(WS_90, config, prefix_len=131072, tree_nodes=64, heads=8, blocks_per_sm=2, params=params)
    one = predict(WS_90, config, prefix_len=131072, tree_nodes=64, heads=8, blocks_per_sm=1, params=params)
    assert two.warps_per_sm == 8 and one.warps_per_sm == 4 and two.time_ms < one.time_ms


def test_spearman():
    assert spearman([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert spearman([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)
    assert spearman([1, 1, 2], [1, 2, 3]) == pytest.approx(0.866, abs=1e-3)


def test_fitted_parameters_and_validation_are_committed():
    import yaml

    from harness.predict.cli import params_path

    fitted = yaml.safe_load(params_path("cuda_ws", "sm_90").read_text())
    assert set(fitted["params"]) == {"tensor_efficiency", "smem_efficiency", "saturating_warps",
                                     "tile_overhead_cycles", "fixed_us", "copy_issue_cycles"}
    assert fitted["held_out_configs"] and not set(fitted["held_out_configs"]) & set(fitted["train_configs"])
    assert len(fitted["validation"]) == 12  # the tune's 9 keys and the bench's three at 185000


def test_the_copies_a_compute_warp_issues_cost_round_time():
    """Without a producer warp, cuda_ws's warp 0 issues the tile's BLOCK_N row copies, cuda_qreg's warps
    a share each: copy_issue_cycles per copy of the busiest warp joins each round; a variant that
    declares copies needs the parameter, one that does not (cuda_coalesced) predicts without it."""
    config = {**cuda_ws.DEFAULT_CONFIGS["sm_90"], "kv_splits": 1}
    assert cuda_ws.tile_work(config)["copies_by_compute_warps"] == 0
    no_producer = {**config, "PRODUCER": 0}
    assert cuda_ws.tile_work(no_producer)["copies_by_compute_warps"] == config["BLOCK_N"]
    from verify_kernels import cuda_coalesced, cuda_qreg

    assert cuda_qreg.tile_work(cuda_qreg.DEFAULT_CONFIGS["sm_90"])["copies_by_compute_warps"] == 32 // 8
    arch = load_arch("sm_90")
    shape = {"prefix_len": 314, "tree_nodes": 6, "heads": 8, "blocks_per_sm": 1}
    free = predict(WS_90, no_producer, params=EXACT, **shape)
    priced = predict(WS_90, no_producer, params={**EXACT, "copy_issue_cycles": 100.0}, **shape)
    tiles = free.tiles_per_cta
    assert math.isclose(priced.time_ms - free.time_ms, tiles * 100 * 32 / (arch.clock_ghz * 1e6), rel_tol=1e-9)
    five = {k: v for k, v in EXACT.items() if k != "copy_issue_cycles"}
    with pytest.raises(ValueError, match="copy_issue_cycles"):
        predict(WS_90, config, params=five, **shape)
    coalesced = resolve("cuda_coalesced", "sm_90")
    assert predict(coalesced, cuda_coalesced.DEFAULT_CONFIG, params=five, **shape).time_ms > 0


def test_vk_predict_prints_a_predicted_record():
    done = subprocess.run([sys.executable, "-m", "harness", "predict", "--arch", "sm_120", "--prefix", "131072",
                           "--tree", "64", "--heads", "8"], capture_output=True, text=True, check=True)
    record = json.loads(done.stdout.splitlines()[0])
    assert record["predicted"] is True and record["arch"] == "sm_120" and record["time_ms"] > 0


def test_vk_predict_refuses_a_variant_without_tile_work():
    done = subprocess.run([sys.executable, "-m", "harness", "predict", "--variant", "triton_splitkv"],
                          capture_output=True, text=True)
    assert done.returncode == 2 and "vk predict" in done.stderr


def test_predict_check_reports_the_error_against_records(tmp_path):
    """vk predict --check: records whose times are exactly twice the prediction give 100% error,
    a perfect ranking, and the predicted best is the measured best."""
    from pathlib import Path

    from harness.predict.cli import check_points, load_params
    from harness.predict.fit import blocks_per_sm as blocks_of, config_key, measured_points, predicted_ms

    source = Path(__file__).resolve().parents[3] / "results" / "bench" / "cuda_ws-side-by-side-nvidia-h200.jsonl"
    params = load_params("cuda_ws", "sm_90")["params"]
    lines = []
    for line in source.read_text().splitlines():
        record = json.loads(line)
        if record.get("variant") != "cuda_ws" or record.get("status") != "ok":
            continue
        point = measured_points([source], WS_90)[0] | {
            "prefix_len": record["prefix_len"], "tree_nodes": record["tree_nodes"], "heads": record["heads"],
            "batch": record.get("batch", 1), "page_size": record["page_size"], "config": record["resolved_config"]}
        blocks = {config_key(point["config"]): blocks_of(WS_90, point["config"])}
        record["median_ms"] = 2 * predicted_ms(point, WS_90, blocks, params)
        lines.append(json.dumps(record))
    doubled = tmp_path / "doubled.jsonl"
    doubled.write_text("\n".join(lines) + "\n")
    rows, overall = check_points(measured_points([doubled], WS_90), WS_90, "sm_90")
    assert overall["points"] == len(lines) > 0 and overall["median_abs_pct_error"] == pytest.approx(50.0)
    assert overall["spearman_all"] == pytest.approx(1.0)
    assert all(row["predicted_best_vs_best"] == pytest.approx(1.0) for row in rows)


def test_proxy_validation_reads_every_proxy_study(tmp_path):
    """vk predict --check-proxy: a proxy tune's studies whose times are the sm_90 prediction reversed
    in rank give Spearman -1 and a pick slower than the best; archived studies are not read."""
    optuna = pytest.importorskip("optuna")
    from harness.predict.cli import load_params, proxy_rows
    from harness.predict.fit import blocks_per_sm as blocks_of, config_key, predicted_ms, proxy_points
    from harness.tune.study import feasible_space

    _, feasible, _ = feasible_space(WS_120, progress=False, compile=False)
    configs = [c.config for c in feasible.values()][:5]
    params = load_params("cuda_ws", "sm_90")["params"]
    storage = f"sqlite:///{tmp_path / 'proxy.db'}"
    for name, reverse in (("cuda_ws|gpu-proxy-sm_120|L4096|T16|H8|ps64|bfloat16", True),
                          ("cuda_ws|gpu-proxy-sm_120|L4096|T16|H8|ps64|bfloat16|kernel old graph", False)):
        study = optuna.create_study(study_name=name, storage=storage)
        study.set_user_attr("key", {"prefix_len": 4096, "tree_nodes": 16, "heads": 8, "page_size": 64})
        for config in configs:
            point = {"prefix_len": 4096, "tree_nodes": 16, "heads": 8, "batch": 1, "page_size": 64, "config": config}
            blocks = {config_key(config): blocks_of(WS_90, config)}
            time = predicted_ms(point, WS_90, blocks, params)
            study.add_trial(optuna.trial.create_trial(
                params=config, value=1 / time if reverse else time,
                distributions={k: optuna.distributions.CategoricalDistribution(sorted({c[k] for c in configs}))
                               for k in config}))
    points = proxy_points(storage, "cuda_ws", "sm_120")
    assert len(points) == len(configs)
    (row,) = proxy_rows(points, WS_90, "sm_90", "sm_120")
    assert row["configs"] == len(configs) and row["spearman"] < -0.9 and row["pick_vs_best"] > 1


def test_predict_check_refuses_files_without_records(tmp_path):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    done = subprocess.run([sys.executable, "-m", "harness", "predict", "--check", str(empty), "--arch", "sm_90"],
                          capture_output=True, text=True)
    assert done.returncode == 2 and "empty.jsonl: expected JSON Lines records, got an empty file" in done.stderr
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1


def test_cuda_coalesced_tile_work_by_hand():
    """WARPS_M 2, WARPS_N 2, BLOCK_N 32: 4 warps of 16 rows; S columns 16 and output columns 256 each."""
    from verify_kernels import cuda_coalesced

    work = cuda_coalesced.tile_work({"WARPS_M": 2, "WARPS_N": 2, "BLOCK_N": 32, "STAGES": 2, "MIN_BLOCKS": 1,
                                     "kv_splits": 0})
    qk = 4 * 36 * (512 + 16 * 32)      # per warp and k-step: Q's 16x16 fragment, K's 16 columns
    pv = 4 * 2 * (512 + 256 * 32)      # per warp and k-step: P's fragment, V's 256 columns
    assert work == {"rows": 32, "block_n": 32, "mma": 32 * 32 * 1088 * 2 // 4096,
                    "smem_bytes": qk + pv + 32 * 32 * 2 + 32 * 1152, "barriers": 4, "warps": 4,
                    "split_rule": {}}


def test_predict_uses_each_variants_split_rule():
    """kv_splits 0: cuda_ws takes one wave of MIN_BLOCKS CTAs per SM, cuda_coalesced the default
    power-of-two rule, as their complete_config does."""
    from verify_kernels.splits import kv_splits_for

    arch = load_arch("sm_90")
    coalesced = {"WARPS_M": 4, "WARPS_N": 2, "BLOCK_N": 64, "STAGES": 1, "MIN_BLOCKS": 1, "kv_splits": 0}
    got = predict(resolve("cuda_coalesced", "sm_90"), coalesced, prefix_len=131072, tree_nodes=16, heads=8,
                  blocks_per_sm=1, params=EXACT).kv_splits
    capacity = (-(-(131072 + 16) // 64) + 1) * 64
    assert got == kv_splits_for(capacity, 128, 1, 64, 64, arch.sms)
    ws = dict(cuda_ws.DEFAULT_CONFIGS["sm_90"], kv_splits=0)
    got = predict(WS_90, ws, prefix_len=131072, tree_nodes=16, heads=8, blocks_per_sm=1, params=EXACT).kv_splits
    assert got == kv_splits_for(capacity, 128, 1, cuda_ws.rows_per_cta(ws), ws["BLOCK_N"], arch.sms,
                                ctas_per_sm=ws["MIN_BLOCKS"], one_wave=True)


def test_fit_reads_a_tune_study_and_the_predicted_table_keeps_other_variants(tmp_path):
    import optuna
    import yaml

    from harness.predict.fit import study_points
    from harness.predict.report import write_predicted_table

    storage = f"sqlite:///{tmp_path / 's.db'}"
    study = optuna.create_study(study_name="cuda_coalesced|gpu|L32768|T64|H8|ps64|bfloat16|exhaustive",
                                storage=storage)
    study.set_user_attr("key", {"prefix_len": 32768, "tree_nodes": 64, "heads": 8, "page_size": 64})
    for value, block_n in ((0.5, 16), (0.7, 32)):
        study.enqueue_trial({"BLOCK_N": block_n})
        study.optimize(lambda trial: trial.suggest_categorical("BLOCK_N", [16, 32]) and value, n_trials=1)
    points = study_points(storage, study.study_name)
    assert [(p["config"], p["measured_ms"], p["prefix_len"]) for p in points] == [
        ({"BLOCK_N": 16}, 0.5, 32768), ({"BLOCK_N": 32}, 0.7, 32768)]

    table = tmp_path / "predicted.yaml"
    table.write_text(yaml.safe_dump({"cuda_ws|sm_120|predicted|L4096|T16|H8|ps64": {"variant": "cuda_ws", "x": 1}}))
    record = {"variant": "cuda_coalesced", "arch": "sm_120", "fitted_on": "sm_90", "prefix_len": 4096,
              "tree_nodes": 16, "heads": 8, "page_size": 64, "config": {"BLOCK_N": 16}, "time_ms": 0.03,
              "bound": "tensor", "blocks_per_sm": 1, "kernel_source_hash": "0123"}
    write_predicted_table([record], table)
    written = yaml.safe_load(table.read_text())
    assert set(written) == {"cuda_ws|sm_120|predicted|L4096|T16|H8|ps64",
                            "cuda_coalesced|sm_120|predicted|L4096|T16|H8|ps64"}


def test_a_predicted_table_says_when_the_model_cannot_tell_configs_apart():
    """Within MODEL_RESOLUTION of the best: tied; the arch's default is taken when it is among them,
    else the fastest prediction; a clear winner has no ties."""
    from types import SimpleNamespace

    from harness.predict.report import MODEL_RESOLUTION, pick_among_ties

    def scored(*times):
        return [({"A": i}, SimpleNamespace(time_ms=t)) for i, t in enumerate(times)]

    (config, _), ties = pick_among_ties(scored(1.0, 1.0 + MODEL_RESOLUTION / 2, 2.0), default={"A": 1})
    assert config == {"A": 1} and len(ties["configs"]) == 2 and "default" in ties["decided_by"]
    (config, _), ties = pick_among_ties(scored(1.01, 1.0, 1.005), default={"A": 7})
    assert config == {"A": 1} and len(ties["configs"]) == 3 and "measure them" in ties["decided_by"]
    (config, _), ties = pick_among_ties(scored(1.0, 1.5), default={"A": 1})
    assert config == {"A": 0} and ties is None


def test_a_planned_variant_is_predicted_over_the_planners_units():
    """cuda_ws runs on the planner: under its units rule (waves 2) a ragged batch's CTAs are row blocks x
    the plan's units (its long request cut into many, its short one into few), and its longest unit sets
    the tiles."""
    from verify_kernels import planner

    config = {**cuda_ws.DEFAULT_CONFIGS["sm_90"], "waves": 2}
    arch, lengths, nodes, heads = load_arch("sm_90"), [185000, 4096, 32768], 64, 8
    result = predict(WS_90, config, prefix_len=max(lengths), tree_nodes=nodes, heads=heads, blocks_per_sm=1,
                     params=EXACT, prefix_lens=lengths)
    row_blocks = math.ceil(nodes * heads / cuda_ws.rows_per_cta(config))
    capacity = (math.ceil((max(lengths) + nodes) / 64) + 1) * 64
    bounds = planner.plan_bounds(batch=3, row_blocks=row_blocks, capacity=capacity, block_n=config["BLOCK_N"],
                                 sms=arch.sms, kv_splits=0, ctas_per_sm=config["MIN_BLOCKS"], waves=config["waves"])
    starts, chunk = planner.reference_plan(lengths, nodes, bounds)
    assert result.ctas == row_blocks * starts[-1] and result.tiles_per_cta == chunk // config["BLOCK_N"]
    assert result.kv_splits == max(b - a for a, b in zip(starts, starts[1:])) > 1


def test_a_predicted_pick_replaces_the_default_only_beyond_the_fits_held_out_error():
    """issue 35: picks the model predicted a few % faster ran slower than the default on the proxy.
    The default stays unless the pick's predicted gain exceeds the margin; the record says what it gave up."""
    from types import SimpleNamespace

    from harness.predict.report import held_out_error, keep_default_within

    scored = [({"A": i}, SimpleNamespace(time_ms=t)) for i, t in enumerate((1.0, 1.05, 1.2))]
    kept, note = keep_default_within(scored[0], scored, default={"A": 1}, margin=0.08)
    assert kept is scored[1] and note["pick"] == {"A": 0} and abs(note["predicted_gain_of_pick"] - 0.05) < 1e-9
    assert keep_default_within(scored[0], scored, default={"A": 2}, margin=0.08) == (scored[0], None)
    assert keep_default_within(scored[0], scored, default={"A": 0}, margin=0.08) == (scored[0], None)
    twin = [*scored, ({"A": 0}, SimpleNamespace(time_ms=1.0))]  # a space listing a config twice
    assert keep_default_within(scored[0], twin, default={"A": 0}, margin=0.08) == (scored[0], None)
    assert keep_default_within(scored[0], scored, default={"A": 9}, margin=0.08) == (scored[0], None)  # not feasible
    assert held_out_error([{"median_abs_pct_error": e} for e in (8.0, 5.0, 12.0)]) == 0.12
    with pytest.raises(ValueError, match="held-out"):
        held_out_error([])


def test_a_fit_and_a_predicted_table_read_the_variant_only_through_the_resolved_target(tmp_path, monkeypatch):
    """issue 36: vk predict-fit resolves the variant once per arch (module, space, kernel source hash,
    defaults) and passes the object down; the fit, its validation and the predicted table read none again.
    The static model's cache is filled first: a config it has not compiled is compiled by name."""
    from pathlib import Path

    from harness.predict.fit import fit, measured_points, split_configs, validate
    from harness.predict.fitted import load_params
    from harness.predict.report import predicted_space
    from harness.static import space as space_module
    from verify_kernels import variants

    space_module.static_feasibility(WS_120, progress=False)

    source = Path(__file__).resolve().parents[3] / "results" / "bench" / "cuda_ws-side-by-side-nvidia-h200.jsonl"

    def again(*args, **kwargs):
        raise AssertionError("read again instead of taken from the target")
    for module, name in ((space_module, "kernel_source_hash"), (space_module, "_read_space"),
                         (variants, "load_variant"), (variants, "defaults_for")):
        monkeypatch.setattr(module, name, again)
    points = measured_points([source], WS_90)
    train, held_out = split_configs(points)
    fitted = fit(points, WS_90, train, trials=3)
    assert fitted["training_points"] > 0 and set(fitted["params"]) == set(EXACT)
    validate(points, WS_90, fitted["blocks"], fitted["params"], held_out)
    table = predicted_space(WS_120, load_params("cuda_ws", "sm_90")["params"], "sm_90", tmp_path, margin=0.07)
    records = [json.loads(line) for line in (tmp_path / "cuda_ws-sm_120-predicted.jsonl").read_text().splitlines()]
    assert table.exists() and {r["kernel_source_hash"] for r in records} == {WS_120.source_hash}


def test_blocks_per_sm_reads_only_a_cache_made_for_this_kernel(tmp_path, monkeypatch):
    """A static cache row from another kernel source is not used: the config is compiled instead."""
    from harness.predict import fit
    from harness.static import space

    target = resolve("cuda_ws", "sm_90")
    config = dict(target.defaults)
    row = {"blocks_per_sm": 7}
    cache = {**space.static_cache(target), "rows": {space._compile_key(config): row}}
    monkeypatch.setattr(space, "STATIC_CACHE_DIR", tmp_path)
    monkeypatch.setattr(fit, "static_rows", lambda *args, **kwargs: [{"blocks_per_sm": 3}])
    space.static_cache_path(target).write_text(json.dumps(cache))
    assert blocks_per_sm(target, config) == 7
    space.static_cache_path(target).write_text(json.dumps({**cache, "kernel_source_hash": "0" * 16}))
    assert blocks_per_sm(target, config) == 3


def test_two_gpus_or_two_dtypes_never_share_a_ranking():
    """A proxy storage holds studies of several GPUs (the H200's, the H100's) and both dtypes at one shape:
    each ranking (Spearman, the pick) is within one GPU and one dtype."""
    from harness.predict.fit import measurement_key

    point = {"prefix_len": 4096, "tree_nodes": 16, "heads": 8, "gpu": "nvidia-h200-proxy-sm_120", "dtype": "bfloat16"}
    keys = {measurement_key(point), measurement_key({**point, "gpu": "nvidia-h100-80gb-hbm3-proxy-sm_120"}),
            measurement_key({**point, "dtype": "float16"})}
    assert len(keys) == 3
