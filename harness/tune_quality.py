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


def measured_table(storage: str, study_name: str) -> tuple[dict[str, float], dict[str, list]]:
    import optuna

    study = optuna.load_study(study_name=study_name, storage=storage)
    table, values = {}, {}
    for trial in study.get_trials(states=(optuna.trial.TrialState.COMPLETE,)):
        table[json.dumps(trial.params, sort_keys=True)] = trial.value
        for name, value in trial.params.items():
            values.setdefault(name, [])
            if value not in values[name]:
                values[name].append(value)
    if not table:
        raise ValueError(f"study {study_name!r} has no completed trials")
    return table, values


def replay(table: dict[str, float], values: dict[str, list], *, seed: int, within: float, max_trials: int) -> int:
    """Measured trials until TPE (seeded) proposes a config within ``within`` of the table's best."""
    import optuna

    target = min(table.values()) * (1 + within)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(sampler=optuna.samplers.TPESampler(seed=seed))
    measured = 0
    seen: dict[str, float] = {}
    for _ in range(50 * max_trials):  # proposals, pruned ones included: bounded
        if measured >= max_trials:
            break
        trial = study.ask()
        config = {name: trial.suggest_categorical(name, options) for name, options in values.items()}
        key = json.dumps(config, sort_keys=True)
        if key not in table:
            study.tell(trial, state=optuna.trial.TrialState.PRUNED)
            continue
        if key not in seen:
            measured += 1
            seen[key] = table[key]
        study.tell(trial, table[key])
        if table[key] <= target:
            return measured
    return measured


def trials_to_reach(storage: str, study_name: str, *, seeds: int = 5, within: float = 0.03) -> dict:
    table, values = measured_table(storage, study_name)
    counts = [replay(table, values, seed=seed, within=within, max_trials=len(table)) for seed in range(seeds)]
    median = statistics.median(counts)
    return {"study": study_name, "space_size": len(table), "within": within, "trials_per_seed": counts,
            "median_trials": median, "fraction_of_space": median / len(table)}


def format_quality(result: dict) -> str:
    return (f"{result['study']}: {result['space_size']} measured configs; TPE reached within "
            f"{100 * result['within']:.0f}% of the exhaustive best after {result['trials_per_seed']} trials "
            f"(seeds 0..{len(result['trials_per_seed']) - 1}); median {result['median_trials']} = "
            f"{100 * result['fraction_of_space']:.0f}% of the space")
