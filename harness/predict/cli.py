"""``vk predict`` (one config's predicted time on an arch; ``--check``: the predictor's error against
measured records, say from a real sm_120 card) and ``vk predict-fit`` (fit on measured records,
validate on held-out configs, predict the variant's space on another arch)."""

from __future__ import annotations

import json
from pathlib import Path

from harness.arguments import int_in, int_list_in, json_dict, prefix_lengths
from harness.measure.environment import git_commit
from harness.measure.inputs import InputError, check_output_dir, check_source_checkout
from harness.measure.paths import default_optuna_storage, results_dir
from harness.predict.fitted import PARAMS_DIR, load_params, params_path
from harness.static.space import VariantOnArch, resolve
from verify_kernels import variants
from verify_kernels.arch import known_arches
from verify_kernels.dispatch import SHIPPED_TUNED_DIR, l_bucket, load_tuned


def check_points(points: list[dict], target: VariantOnArch, fitted_on: str) -> tuple[list[dict], dict]:
    """Measured ``points`` of ``target`` (the variant resolved on the arch that measured them) against
    their prediction with the parameters fitted on ``fitted_on``: per shape key (as vk predict-fit
    validates held-out configs, here over all configs) and overall (points, median and worst |% error|,
    Spearman over all)."""
    import numpy as np

    from harness.predict.fit import blocks_per_sm, config_key, predicted_ms, spearman, validate

    params = load_params(target.name, fitted_on)["params"]
    keys = {config_key(p["config"]) for p in points}
    blocks = {key: blocks_per_sm(target, json.loads(key)) for key in keys}
    placed = [p for p in points if blocks[config_key(p["config"])] >= 1]
    rows = validate(placed, target, blocks, params, keys)
    predicted = [predicted_ms(p, target, blocks, params) for p in placed]
    measured = [p["measured_ms"] for p in placed]
    errors = np.abs(np.array(predicted) / np.array(measured) - 1) * 100
    overall = {"variant": target.name, "arch": target.arch, "fitted_on": fitted_on, "points": len(placed),
               "skipped_unplaceable": len(points) - len(placed),
               "median_abs_pct_error": float(np.median(errors)) if len(errors) else None,
               "max_abs_pct_error": float(errors.max()) if len(errors) else None,
               "spearman_all": spearman(predicted, measured) if len(placed) > 1 else None}
    return rows, overall


def proxy_rows(points: list[dict], target: VariantOnArch, fitted_on: str, proxy_for: str) -> list[dict]:
    """Per key of a proxy measurement: Spearman, the predicted pick's measured time over the
    measured best, how many configs the model ties with its pick (within ``MODEL_RESOLUTION``), with the best
    measured time among those ties over the measured best (what a proxy run of the ties would pick),
    and the shipped predicted ``proxy_for`` table's pick over ``proxy_for``'s default config, both
    as measured here. ``target``: the variant resolved on the arch of the GPU that ran the proxy."""
    from harness.predict.fit import blocks_per_sm, config_key, keyed_predictions, spearman
    from harness.predict.report import MODEL_RESOLUTION

    params = load_params(target.name, fitted_on)["params"]
    blocks = {key: blocks_per_sm(target, json.loads(key)) for key in {config_key(p["config"]) for p in points}}
    default = variants.defaults_for(target.module, proxy_for)
    shipped_picks = shipped_predicted_picks(target.name, proxy_for)
    rows = []
    for key, group, predicted, measured in keyed_predictions(points, target, blocks, params):
        best, pick = min(measured), min(range(len(group)), key=predicted.__getitem__)
        ties = [i for i in range(len(group)) if predicted[i] <= predicted[pick] * (1 + MODEL_RESOLUTION)]
        by_config = {config_key(p["config"]): p["measured_ms"] for p in group}
        def measured_ms(config: dict) -> float | None:  # a config completed with proxy_for's defaults (a
            full = {**default, **config}                 # record omits the planner keys it ran at their default)
            return by_config.get(config_key({k: v for k, v in full.items() if k in group[0]["config"]}))

        default_ms = measured_ms({})
        shipped = shipped_picks.get((l_bucket(key[0]), key[1], key[2]))
        shipped_ms = measured_ms(shipped) if shipped else None
        rows.append({"prefix_len": key[0], "tree_nodes": key[1], "heads": key[2], "gpu": key[3], "dtype": key[4],
                     "configs": len(group), "spearman": spearman(predicted, measured),
                     "pick_vs_best": measured[pick] / best,
                     "ties": len(ties), "ties_best_vs_best": min(measured[i] for i in ties) / best,
                     "shipped_vs_default": shipped_ms / default_ms if shipped_ms and default_ms else None})
    return rows


def shipped_predicted_picks(variant: str, arch_name: str) -> dict:
    """The shipped predicted table's config per (L bucket, T, H) at page 64 for ``variant`` on ``arch_name``."""
    return {(r["l_bucket"], r["tree_nodes"], r["heads"]): r["config"]
            for r in load_tuned(f"predicted-{arch_name}", str(SHIPPED_TUNED_DIR)).values()
            if r["variant"] == variant and r["page_size"] == 64}


def write_proxy_validation(rows: list[dict], variant: str, proxy_for: str, fitted_on: str, storage: str,
                           out: Path) -> str:
    """The proxy validation as markdown (issue 35's targets: Spearman >= 0.8 per key, the pick within
    10% of the best at >= 90% of keys), written to ``out``; returns the text."""
    from tabulate import tabulate

    from harness.predict.report import MODEL_RESOLUTION

    spearman_ok = sum(r["spearman"] >= 0.8 for r in rows)
    pick_ok = sum(r["pick_vs_best"] <= 1.10 for r in rows)
    tied = sum(r["ties"] > 1 for r in rows)
    shipped = [r["shipped_vs_default"] for r in rows if r["shipped_vs_default"] is not None]
    table = tabulate([(r["gpu"], r["dtype"], f"{r['prefix_len']:,}", r["tree_nodes"], r["heads"], r["configs"],
                       f"{r['spearman']:.2f}", f"{r['pick_vs_best']:.3f}", r["ties"], f"{r['ties_best_vs_best']:.3f}",
                       "-" if r["shipped_vs_default"] is None else f"{r['shipped_vs_default']:.3f}") for r in rows],
                     headers=["GPU (proxy)", "dtype", "L", "T", "H", "configs", "Spearman", "pick / best",
                              "tied with pick", "best of ties / best", f"shipped {proxy_for} pick / default"],
                     tablefmt="github")
    text = (f"# Predictor validation on the {proxy_for} proxy: {variant}, parameters fitted on {fitted_on}\n\n"
            f"Every {proxy_for}-legal config a proxy tune measured (storage `{storage}`; ranked per GPU and dtype), "
            f"against the predictor's time for the same config on {fitted_on} (that arch's rates and occupancy). "
            "Commit "
            f"{git_commit().get('commit')}; command: `vk predict --variant {variant} --arch {fitted_on} "
            f"--check-proxy {proxy_for} --proxy-storage {storage}`.\n\n{table}\n\n"
            f"Spearman >= 0.8 at {spearman_ok} of {len(rows)} keys; the predicted pick within 10% of the measured "
            f"best at {pick_ok} of {len(rows)} ({100 * pick_ok / max(1, len(rows)):.0f}%; target 90%). The model "
            f"ties its pick with other configs (within {100 * MODEL_RESOLUTION:.0f}%) at {tied} keys: there a proxy "
            "measurement "
            f"of the ties decides (`vk tune --constrain-to` queues them first). The shipped predicted {proxy_for} "
            f"table's pick, measured here, against {proxy_for}'s default config: slower at "
            f"{sum(x > 1.01 for x in shipped)} of {len(shipped)} keys it answers (worst "
            f"{max(shipped, default=1):.2f}x).\n")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    return text


def cmd_predict(args) -> int:
    from harness.predict.fit import blocks_per_sm
    from harness.predict.model import predict, tile_work_of

    try:
        target = resolve(args.variant, args.arch)
        tile_work_of(target)
    except ValueError as error:
        raise SystemExit(f"vk predict: {error}") from None
    if args.check_proxy:
        from harness.predict.fit import proxy_points

        try:
            points = proxy_points(args.proxy_storage, args.variant, args.check_proxy)
        except InputError as error:  # StorageError too
            raise SystemExit(f"vk predict: --proxy-storage: {error}") from None
        rows = proxy_rows(points, target, args.fitted_on, args.check_proxy)
        out = results_dir() / "predict" / f"proxy-validation-{args.variant}-{args.check_proxy}.md"
        check_output_dir(out.parent, "results folder")
        print(write_proxy_validation(rows, args.variant, args.check_proxy, args.fitted_on, args.proxy_storage, out))
        print(f"wrote {out}")
        return 0
    if args.check:
        from tabulate import tabulate
        from harness.predict.fit import measured_points

        points = measured_points(args.check, target)
        if not points:
            raise SystemExit(f"vk predict: --check: no ok records of {args.variant!r} in "
                             f"{[str(p) for p in args.check]}")
        rows, overall = check_points(points, target, args.fitted_on)
        print(tabulate([(f"{r['prefix_len']:,}", r["tree_nodes"], r["heads"], r["configs"], f"{r['spearman']:.2f}",
                         f"{r['predicted_best_vs_best']:.3f}", f"{r['median_abs_pct_error']:.1f}") for r in rows],
                       headers=["L", "T", "H", "configs", "Spearman", "predicted-best / best", "median |% error|"]))
        print(json.dumps(overall))
        return 0
    fitted = load_params(args.variant, args.fitted_on)
    config = dict(target.defaults)
    unknown = sorted(set(args.config or {}) - set(config))
    if unknown:
        raise SystemExit(f"vk predict: --config: unknown keys {unknown} for {args.variant}; expected {sorted(config)}")
    config.update(args.config or {})
    problems = variants.optional(target.module, "config_problems")(config)
    if problems:
        raise SystemExit(f"vk predict: --config: {'; '.join(problems)}")
    blocks = blocks_per_sm(target, config)
    for length in args.prefix:
        for nodes in args.tree:
            for heads in args.heads:
                result = predict(target, config, prefix_len=length, tree_nodes=nodes, heads=heads,
                                 blocks_per_sm=blocks, params=fitted["params"])
                print(json.dumps({"arch": args.arch, "predicted": True, "fitted_on": args.fitted_on,
                                  "variant": args.variant,
                                  "config": config, "prefix_len": length, "tree_nodes": nodes, "heads": heads,
                                  **result.as_dict()}))
    return 0


def cmd_predict_fit(args) -> int:
    import yaml

    from harness.predict.fit import fit, measured_points, split_configs, validate
    from harness.predict.model import tile_work_of
    from harness.predict.report import write_validation

    if args.shipped_params and (args.records or args.study):
        raise SystemExit("vk predict-fit: --shipped-params fits nothing: give no --records or --study with it")
    if not args.shipped_params and not (args.records or args.study):
        raise SystemExit("vk predict-fit: give --records (bench JSONL), --study (vk tune studies) or both")
    try:
        fitted_target = resolve(args.variant, args.fitted_on)
        tile_work_of(fitted_target)
        predicted_targets = [resolve(args.variant, arch) for arch in args.predict_for or []]
    except ValueError as error:
        raise SystemExit(f"vk predict-fit: {error}") from None
    if args.ship:
        check_source_checkout("--ship")
    if args.shipped_params:
        out_dir = results_dir() / "predict"
        check_output_dir(out_dir, "results folder")
        out_dir.mkdir(parents=True, exist_ok=True)
        shipped = load_params(args.variant, args.fitted_on)
        _predict_tables(args, predicted_targets, shipped["params"], shipped["validation"], out_dir)
        return 0
    points = measured_points(args.records, fitted_target) if args.records else []
    for study in args.study or []:
        from harness.predict.fit import study_points

        if study.split("|")[0] != args.variant:
            raise SystemExit(f"vk predict-fit: --study {study!r} is not a study of --variant {args.variant!r}")
        points += study_points(args.storage, study)
    if not points:
        raise SystemExit(f"vk predict-fit: no ok measurements of {args.variant!r} in the given records or study")
    train, held_out = split_configs(points)
    fitted = fit(points, fitted_target, train, trials=args.trials)
    rows = validate(points, fitted_target, fitted["blocks"], fitted["params"], held_out)
    out_dir = results_dir() / "predict"
    check_output_dir(out_dir, "results folder")
    out_dir.mkdir(parents=True, exist_ok=True)
    record = {"variant": args.variant, "fitted_on": args.fitted_on, "params": fitted["params"],
              "train_loss_mean_squared_log": fitted["train_loss"], "training_points": fitted["training_points"],
              "records": [str(p) for p in args.records or []], "study": args.study,
              "storage": args.storage if args.study else None, "git_commit": git_commit().get("commit"),
              "train_configs": sorted(train), "held_out_configs": sorted(held_out), "validation": rows}
    # The fit goes under results/ (never into the installed package); --ship copies it into the package.
    fitted_path = out_dir / "params" / params_path(args.variant, args.fitted_on).name
    fitted_path.parent.mkdir(parents=True, exist_ok=True)
    fitted_path.write_text(yaml.safe_dump(record, sort_keys=False))
    if args.ship:
        import shutil

        PARAMS_DIR.mkdir(exist_ok=True)
        shutil.copyfile(fitted_path, params_path(args.variant, args.fitted_on))
        print(f"shipped {params_path(args.variant, args.fitted_on)}: vk predict reads these parameters")
    markdown = write_validation(points, fitted_target, fitted, rows, held_out, out_dir)
    print(markdown.read_text())
    _predict_tables(args, predicted_targets, fitted["params"], rows, out_dir)
    print(f"wrote {fitted_path} and {out_dir}; held-out configs: {len(held_out)}, "
          f"training configs: {len(train)} (configs compared without kv_splits)")
    return 0


def _predict_tables(args, targets: list[VariantOnArch], params: dict, validation: list[dict], out_dir: Path) -> None:
    """Each of ``targets`` (the variant resolved on each --predict-for arch) predicted over its space with
    ``params`` (results/predict/), shipped with --ship; a pick replaces the arch's default only where
    predicted faster by more than the fit's held-out error (``validation``)."""
    import shutil

    from harness.predict.report import held_out_error, predicted_space

    margin = held_out_error(validation)
    for target in targets:
        table = predicted_space(target, params, args.fitted_on, out_dir, margin)
        print(table.read_text())
        if args.ship:
            shipped = SHIPPED_TUNED_DIR / f"predicted-{target.arch}.yaml"
            shutil.copyfile(out_dir / f"predicted-{target.arch}.yaml", shipped)
            print(f"shipped {shipped}: variant='auto' on {target.arch} without measured records reads it")


def add_commands(sub) -> None:
    """Register this package's subcommands on the ``vk`` parser."""
    predict = sub.add_parser("predict", help="predicted time of a config on an arch (no GPU needed)")
    predict.add_argument("--arch", default="sm_120", choices=known_arches(),
                         help="an arch of the registry (verify_kernels/arches/)")
    predict.add_argument("--variant", default="cuda_ws", help="a variant that declares tile_work")
    predict.add_argument("--config", type=json_dict, help="config overrides over the arch's default")
    predict.add_argument("--prefix", type=prefix_lengths, default=[131072], help="prefix lengths L")
    predict.add_argument("--tree", type=int_list_in(1, 1024), default=[64], help="tree sizes T")
    predict.add_argument("--heads", type=int_list_in(1, 128), default=[8], help="heads H")
    predict.add_argument("--fitted-on", default="sm_90", choices=known_arches(),
                         help="the arch whose measurements fitted the parameters")
    predict.add_argument("--check", type=Path, nargs="+", metavar="RECORDS",
                         help="bench JSONL files measured on --arch: report the predictor's error against them "
                              "(per shape: Spearman, predicted-best / best, median |%% error|) instead of predicting")
    predict.add_argument("--check-proxy", choices=known_arches(), metavar="ARCH",
                         help="validate on a proxy tune instead: every config `vk tune --constrain-to ARCH` measured "
                              "(--proxy-storage) against its prediction on --arch, this GPU's arch; writes "
                              "results/predict/proxy-validation-<variant>-<ARCH>.md")
    predict.add_argument("--proxy-storage", default="sqlite:///results/tuned/optuna-proxy-sm_120.db",
                         help="the Optuna storage of the proxy tune")
    predict.set_defaults(func=cmd_predict)

    fit = sub.add_parser("predict-fit", help="fit the predictor on records, validate on held-out configs")
    fit.add_argument("--records", type=Path, nargs="+", help="bench JSONL files of one GPU")
    fit.add_argument("--study", nargs="+", help="and/or vk tune studies' names (e.g. a tune's keys) in --storage")
    fit.add_argument("--storage", default=default_optuna_storage(), help="the Optuna storage of --study")
    fit.add_argument("--variant", default="cuda_ws", help="a variant that declares tile_work")
    fit.add_argument("--fitted-on", default="sm_90", choices=known_arches(),
                     help="the arch of the GPU that measured the records")
    fit.add_argument("--predict-for", nargs="*", default=["sm_120"], choices=known_arches(),
                     help="archs whose search space to predict")
    fit.add_argument("--trials", type=int_in(1), default=400, help="Optuna trials of the fit")
    fit.add_argument("--shipped-params", action="store_true",
                     help="no fit: predict the --predict-for tables with the shipped parameters (harness/predict/"
                          "params/), e.g. after a change to how a table picks its winner")
    fit.add_argument("--ship", action="store_true",
                     help="also copy the fitted parameters (harness/predict/params/) and each predicted table "
                          "(verify_kernels/tuned/predicted-<arch>.yaml) into the package: from a source checkout only; "
                          "without it everything goes under results/predict/")
    fit.set_defaults(func=cmd_predict_fit)
