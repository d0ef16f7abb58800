"""Tuning quality: how many trials TPE needs to come within 3% of the exhaustive best.

Input: a study in which every feasible config of one key was measured (`vk tune` on a space small
enough to enumerate, e.g. with --trials set to the space size after enqueueing everything). Each
seed replays TPE against that table (no GPU needed): a proposal outside the table is pruned and
costs nothing, a proposal inside it costs one trial. Reported: the median over seeds of the trials
needed, and that as a fraction of the table.
"""

from __future__ import annotations

import json
import statistics

from harness.measure.figures import finish, saved_figure
from harness.measure.inputs import InputError
from harness.measure.optuna_storage import load_study


def measured_table(storage: str, study_name: str) -> tuple[dict[str, float], dict[str, list]]:
    import optuna

    study = load_study(storage, study_name)
    table, values = {}, {}
    for trial in study.get_trials(states=(optuna.trial.TrialState.COMPLETE,)):
        table[json.dumps(trial.params, sort_keys=True)] = trial.value
        for name, value in trial.params.items():
            values.setdefault(name, [])
            if value not in values[name]:
                values[name].append(value)
    if not table:
        raise InputError(f"--study: {study_name!r} has no completed trials")
    return table, values


def replay(table: dict[str, float], values: dict[str, list], *, seed: int, within: float,
           max_trials: int) -> list[float]:
    """TPE (seeded) replayed against the table until it measures a config within ``within`` of
    the best: the best value so far after each measured trial (its length is the trials needed)."""
    import optuna

    target = min(table.values()) * (1 + within)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(sampler=optuna.samplers.TPESampler(seed=seed))
    best_so_far: list[float] = []
    seen: dict[str, float] = {}
    for _ in range(50 * max_trials):  # proposals, pruned ones included: bounded
        if len(best_so_far) >= max_trials:
            break
        trial = study.ask()
        config = {name: trial.suggest_categorical(name, options) for name, options in values.items()}
        key = json.dumps(config, sort_keys=True)
        if key not in table:
            study.tell(trial, state=optuna.trial.TrialState.PRUNED)
            continue
        if key not in seen:
            seen[key] = table[key]
            best_so_far.append(min(table[key], best_so_far[-1]) if best_so_far else table[key])
        study.tell(trial, table[key])
        if table[key] <= target:
            break
    return best_so_far


def trials_to_reach(storage: str, study_name: str, *, seeds: int = 5, within: float = 0.03) -> dict:
    table, values = measured_table(storage, study_name)
    curves = [replay(table, values, seed=seed, within=within, max_trials=len(table)) for seed in range(seeds)]
    counts = [len(curve) for curve in curves]
    median = statistics.median(counts)
    return {"study": study_name, "space_size": len(table), "within": within, "trials_per_seed": counts,
            "median_trials": median, "fraction_of_space": median / len(table), "best_ms": min(table.values()),
            "best_so_far_ms": curves}


def plot_quality(result: dict, path) -> None:
    """Best-so-far latency against measured trials, one line per seed, with the 3% band."""

    best = result["best_ms"]
    with saved_figure(path) as (figure, axis):
        for seed, curve in enumerate(result["best_so_far_ms"]):
            axis.step(range(1, len(curve) + 1), curve, where="post", label=f"seed {seed}")
        axis.axhspan(best, best * (1 + result["within"]), color="green", alpha=0.15,
                     label=f"within {100 * result['within']:.0f}% of the exhaustive best")
        axis.axvline(0.25 * result["space_size"], color="grey", linestyle="--", label="25% of the space")
        axis.set_xlabel(f"measured configs (space: {result['space_size']})")
        axis.set_ylabel("best latency so far (ms)")
        axis.set_title(f"TPE against exhaustive: median {result['median_trials']} trials", fontsize=10)
        finish(figure, [axis])


def format_quality(result: dict) -> str:
    return (f"{result['study']}: {result['space_size']} measured configs; TPE reached within "
            f"{100 * result['within']:.0f}% of the exhaustive best after {result['trials_per_seed']} trials "
            f"(seeds 0..{len(result['trials_per_seed']) - 1}); median {result['median_trials']} = "
            f"{100 * result['fraction_of_space']:.0f}% of the space")
