"""Fit the predictor's parameters (``model.parameters_for``) on measured records of one GPU (bench records,
tune studies or both) and validate it on held-out configs; predict a variant's whole search space on
another arch.

Fitting: Optuna (TPE, seeded) minimises the mean squared log ratio of predicted to measured time over
the training configs. Held out: every third distinct config (sorted), never seen by the fit. Per
shape key (L, T, H) the validation reports the Spearman rank correlation over held-out configs,
the measured time of the predicted-best held-out config against the measured best, and the median
absolute % error.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from harness.measure.inputs import InputError
from harness.measure.optuna_storage import load_study
from harness.measure.records import read_records
from harness.static.resources import static_rows
from harness.static.space import VariantOnArch, compile_key, static_cache
from verify_kernels.planner import PLAN_KEYS

from .model import parameters_for, predict, tile_work_of

SEARCH = {"tensor_efficiency": (0.2, 1.0), "smem_efficiency": (0.2, 1.0), "saturating_warps": (1.0, 64.0),
          "tile_overhead_cycles": (0.0, 4000.0), "fixed_us": (0.0, 30.0), "copy_issue_cycles": (0.0, 400.0)}


def blocks_per_sm(target: VariantOnArch, config: dict) -> int:
    """CTAs per SM of ``config`` on the target's arch from the static model's cache (``vk static --space``
    fills it) where it was made for this kernel, model and compilers, else compiled."""
    row = static_cache(target)["rows"].get(compile_key(target, config))
    if row is None:
        row = static_rows(target, [config], allow_spills=target.spills_allowed)[0]
    return int(row.get("blocks_per_sm") or 0)


def measured_points(paths: list[Path], target: VariantOnArch) -> list[dict]:
    """ok records of the target's variant: shape, resolved config (kv_splits as the launch chose it),
    median. A record whose config is not the variant's current tunables (an older kernel's) is refused."""
    variant = target.name
    tunables = set(target.module.DEFAULT_CONFIG) - set(PLAN_KEYS)  # what the kernel compiles
    points = []
    for path in paths:
        for index, record in enumerate(read_records(path, "bench", flag="records"), 1):
            if record.get("variant") != variant or record.get("status") != "ok":
                continue
            config = record.get("resolved_config") or {}
            if not tunables <= set(config):
                raise InputError(f"records: {path}: bench record {index} of {variant}: its config has keys "
                                 f"{sorted(config)}, the variant compiles {sorted(tunables)} (an older kernel?)")
            points.append({"prefix_len": record["prefix_len"], "tree_nodes": record["tree_nodes"],
                           "heads": record["heads"], "batch": record.get("batch", 1), "page_size": record["page_size"],
                           "prefix_lens": record.get("prefix_lens"),  # a ragged batch's lengths
                           "config": config, "measured_ms": record["median_ms"], "source": path.name,
                           "gpu": record.get("environment", {}).get("gpu"), "dtype": record.get("dtype")})
    return points


def study_points(storage: str, study_name: str) -> list[dict]:
    """The complete trials of a ``vk tune`` study (say an exhaustive one) as measured points: the
    study's key for the shape, each trial's config over the defaults the study ran at (its ``defaults``
    attribute, where it has one: a default changed since then does not re-label its trials; kv_splits 0:
    the kernel's rule, which the model applies on the fitted arch) and median."""
    import optuna

    study = load_study(storage, study_name)
    key = study.user_attrs.get("key")
    if not key:
        raise InputError(f"--study: {study_name!r} has no key attribute (not a vk tune study)")
    defaults = study.user_attrs.get("defaults", {})
    return [{"prefix_len": key["prefix_len"], "tree_nodes": key["tree_nodes"], "heads": key["heads"], "batch": 1,
             "page_size": key["page_size"], "config": {**defaults, **trial.params}, "measured_ms": trial.value,
             "source": study_name, "gpu": key.get("gpu"), "dtype": key.get("dtype")}
            for trial in study.trials
            if trial.state == optuna.trial.TrialState.COMPLETE and "duplicate_of" not in trial.user_attrs]


def proxy_points(storage: str, variant: str, proxy_for: str) -> list[dict]:
    """Every config a proxy tune (``vk tune --constrain-to proxy_for``) measured for ``variant``, over
    all its keys: the studies named "<variant>|<gpu>-proxy-<arch>|..." (not archived ones)."""
    import optuna

    from harness.measure.optuna_storage import open_storage

    names = [name for name in optuna.get_all_study_names(open_storage(storage, must_exist=True))
             if name.startswith(f"{variant}|") and f"-proxy-{proxy_for}|" in name and "|kernel " not in name
             and not name.endswith("|exhaustive")]
    if not names:
        raise InputError(f"no proxy study of {variant} for {proxy_for} in {storage}")
    return [point for name in sorted(names) for point in study_points(storage, name)]


def config_key(config: dict) -> str:
    return json.dumps({k: v for k, v in sorted(config.items()) if k != "kv_splits"})


def split_configs(points: list[dict]) -> tuple[set, set]:
    keys = sorted({config_key(p["config"]) for p in points})
    held_out = set(keys[1::3])
    return set(keys) - held_out, held_out


def predicted_ms(point: dict, target: VariantOnArch, blocks: dict, params: dict) -> float:
    """The prediction for a measured point, at the kv_splits the launch resolved."""
    return predict(target, point["config"], prefix_len=point["prefix_len"], tree_nodes=point["tree_nodes"],
                   heads=point["heads"], blocks_per_sm=blocks[config_key(point["config"])], params=params,
                   batch=point["batch"], page_size=point["page_size"], prefix_lens=point.get("prefix_lens")).time_ms


def fit(points: list[dict], target: VariantOnArch, train: set, trials: int = 400) -> dict:
    """The parameters (Optuna TPE over ``SEARCH``) that fit the ``train`` configs' points, measured on
    the target's arch."""
    import optuna

    blocks = {key: blocks_per_sm(target, json.loads(key)) for key in {config_key(p["config"]) for p in points}}
    training = [p for p in points if config_key(p["config"]) in train and blocks[config_key(p["config"])] >= 1]
    names = parameters_for(tile_work_of(target)(target.module.DEFAULT_CONFIG))

    def loss(trial) -> float:
        params = {name: trial.suggest_float(name, *SEARCH[name]) for name in names}
        errors = [math.log(predicted_ms(p, target, blocks, params) / p["measured_ms"]) for p in training]
        return float(np.mean(np.square(errors)))

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(sampler=optuna.samplers.TPESampler(seed=0))
    study.optimize(loss, n_trials=trials)
    return {"params": study.best_params, "train_loss": study.best_value, "blocks": blocks,
            "training_points": len(training)}


def spearman(a: list[float], b: list[float]) -> float:
    """Spearman's rho (average ranks for ties)."""
    def ranks(values):
        values = np.asarray(values, dtype=float)
        order = values.argsort()
        ranked = np.empty(len(values))
        ranked[order] = np.arange(len(values))
        for value in np.unique(values):  # ties share their mean rank
            ranked[values == value] = ranked[values == value].mean()
        return ranked

    ra, rb = ranks(a), ranks(b)
    if ra.std() == 0 or rb.std() == 0:
        return float("nan")
    return float(np.corrcoef(ra, rb)[0, 1])


def measurement_key(point: dict) -> tuple:
    """What one ranking compares configs within: the shape (L, T, H), the GPU that timed it and the dtype
    (two GPUs' or two dtypes' times at one shape never share a Spearman)."""
    return point["prefix_len"], point["tree_nodes"], point["heads"], str(point.get("gpu")), str(point.get("dtype"))


def keyed_predictions(points: list[dict], target: VariantOnArch, blocks: dict, params: dict, keep=None):
    """Per measurement key (L, T, H, GPU, dtype), in order: (key, group, predicted ms, measured ms) over the
    points whose config places a CTA (and that ``keep`` admits, if given); keys with fewer than two are skipped."""
    for key in sorted({measurement_key(p) for p in points}):
        group = [p for p in points if measurement_key(p) == key
                 and blocks[config_key(p["config"])] >= 1 and (keep is None or keep(p))]
        if len(group) >= 2:
            yield (key, group, [predicted_ms(p, target, blocks, params) for p in group],
                   [p["measured_ms"] for p in group])


def validate(points: list[dict], target: VariantOnArch, blocks: dict, params: dict, held_out: set) -> list[dict]:
    """Per shape key over held-out configs: Spearman, predicted-best's measured / measured best, median |% error|."""
    rows = []
    for key, group, predicted, measured in keyed_predictions(points, target, blocks, params,
                                                             lambda p: config_key(p["config"]) in held_out):
        chosen = int(np.argmin(predicted))
        rows.append({"prefix_len": key[0], "tree_nodes": key[1], "heads": key[2], "gpu": key[3], "dtype": key[4],
                     "configs": len(group), "spearman": spearman(predicted, measured),
                     "predicted_best_vs_best": measured[chosen] / min(measured),
                     "median_abs_pct_error":
                         float(np.median(np.abs(np.array(predicted) / np.array(measured) - 1)) * 100)})
    return rows
