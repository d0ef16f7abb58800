"""``vk tune --arch A --objective predicted``: Optuna (TPE) over A's statically feasible space with the
predictor's time as the objective, for a GPU we do not have. No GPU is needed.

Studies are named "<variant>|predicted-<arch>|L<bucket>|T|H|ps|dtype" (apart from every measured
study) and record ``timing: predicted``. Keys are the dispatcher's L buckets (4k, 32k, 128k: a 185k
prefix falls in the 128k bucket, so it is predicted at 131072). Each key's winner goes into the
predicted table (``results/predict/predicted-<arch>.yaml`` by default, the layout `variant="auto"`
reads once shipped), marked ``predicted: true`` with the parameters' source and the search.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from harness.measure.paths import results_dir
from harness.static.space import resolve
from harness.tune.study import DEFAULT_STORAGE, tune_key


def run_predicted_tune(args, tune_keys) -> int:
    """``tune_keys(args, label)``: the keys the arguments name (harness.tune.run)."""
    import optuna
    from tabulate import tabulate

    from harness.predict.objective import predicted_evaluator
    from harness.predict.report import write_predicted_table

    if not args.arch:
        raise SystemExit("vk tune: --objective predicted: give --arch, the arch to predict for (e.g. sm_120)")
    if getattr(args, "ragged", None):
        raise SystemExit("vk tune: --objective predicted takes no --ragged (the predictor models one request)")
    if getattr(args, "constrain_to", None) or args.workers > 1 or args.exhaustive:
        raise SystemExit("vk tune: --objective predicted takes no --constrain-to, --workers or --exhaustive")
    storage = args.storage or DEFAULT_STORAGE
    if storage.startswith("sqlite:///"):
        Path(storage.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
    path = args.winners or results_dir() / "predict" / f"predicted-{args.arch}.yaml"
    records, rows, seen = [], [], set()
    for key in tune_keys(args, f"predicted-{args.arch}"):
        if key.study_name in seen:  # 131072 and 185000 share the 128k bucket: one study, at the bucket
            continue
        seen.add(key.study_name)
        key = dataclasses.replace(key, prefix_len=key.l_bucket)
        target = resolve(key.variant, args.arch)
        evaluator = predicted_evaluator(target, prefix_len=key.prefix_len, tree_nodes=key.tree_nodes,
                                        heads=key.heads, fitted_on=args.fitted_on)
        study = tune_key(key, target, storage=storage, trials=args.trials,
                         minutes=args.minutes,
                         seed=args.seed, warm_start=[], timeout_s=args.trial_timeout, rep_ms=args.rep_ms,
                         progress=not args.no_progress, compile=not args.no_compile, timing="predicted",
                         evaluator=evaluator)
        complete = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
        if not complete:
            continue
        best = min(complete, key=lambda t: t.value)
        attrs = best.user_attrs
        distinct = sum("duplicate_of" not in t.user_attrs for t in complete)
        records.append({"variant": key.variant, "arch": args.arch, "fitted_on": args.fitted_on,
                        "prefix_len": key.prefix_len, "tree_nodes": key.tree_nodes, "heads": key.heads,
                        "page_size": key.page_size, "config": dict(best.params),
                        "time_ms": best.value, "bound": attrs.get("bound"), "blocks_per_sm": attrs.get("blocks_per_sm"),
                        "kernel_source_hash": target.source_hash,
                        "search": f"optuna TPE, study {study.study_name}, {distinct} configs predicted"})
        rows.append((key.variant, key.prefix_len, key.tree_nodes, key.heads, f"{best.value:.4f}", attrs.get("bound"),
                     attrs.get("blocks_per_sm"), attrs.get("kv_splits"), distinct,
                     ",".join(f"{k}={v}" for k, v in best.params.items())))
    if records:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_predicted_table(records, path)
        print(f"PREDICTED for {args.arch} (parameters fitted on {args.fitted_on}), not measured:\n")
        print(tabulate(rows, headers=["variant", "L bucket", "T", "H", "predicted ms", "bound", "CTAs/SM", "splits",
                                      "configs", "best config"]))
        print(f"\npredicted table {path}; storage {storage}")
    return 0
