"""``vk tune``: one Optuna study per key (variant, GPU, L bucket, T, H, page size, dtype, and for a
ragged batch its prefix lengths).

- The sampler (TPE, seeded) proposes values per tunable; proposals the search space or the static
  model reject are pruned with their reason and never reach the GPU.
- A config already measured in the study is not measured again: the trial takes the earlier value
  (or is pruned, when the earlier measurement failed) and records ``duplicate_of``. The budget
  (``trials``) counts measured configs; pruned proposals and duplicates are free.
- Every measured trial runs in a worker process (harness/tune/worker.py, kept alive across trials
  by harness/tune/trial_process.py) that checks the config against the oracle before timing it; a wrong
  answer, an error, a crash or a hang past the timeout is a failed trial with its ``invalidity``,
  the worker is replaced and the study goes on.
- Storage is any Optuna URL; by default an SQLite file under results/tuned/. A killed run loses no
  completed trial: starting it again loads the study and continues.
- The variant's default config is trial 0 of every study (the speed-up's baseline); the winner of
  the neighbouring L bucket is enqueued next (warm start).
- Winners go to results/tuned/<gpu-sku>.yaml after each key, with their provenance.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import warnings
from dataclasses import asdict, dataclass
from pathlib import Path

from harness.measure.inputs import read_yaml_mapping
from harness.measure.paths import default_optuna_storage, results_dir
from harness.measure.environment import describe_environment, gpu_sku, source_hash
from harness.static.space import Candidate, VariantOnArch, kernel_source_hash, static_feasibility
from harness.static.space import candidates as search_candidates
from harness.measure.optuna_storage import open_storage, reap_interrupted, requeue, worker_identity
from harness.tune.trial_process import TrialProcess
from verify_kernels import variants
from verify_kernels.variants import VARIANTS
from verify_kernels.dispatch import SHIPPED_TUNED_DIR, log_distance, record_key

TUNED_DIR = results_dir() / "tuned"
DEFAULT_STORAGE = default_optuna_storage()


class TrialFailed(RuntimeError):
    """A measured config that faulted, hung, errored or gave a wrong answer."""


@dataclass(frozen=True)
class TuneKey:
    variant: str
    gpu: str
    l_bucket: int
    tree_nodes: int
    heads: int
    page_size: int
    dtype: str
    prefix_len: int  # the length actually measured for this bucket (a ragged batch's longest)
    # A ragged batch: one prefix length per request, the L bucket its longest's; empty: one request.
    prefix_lens: tuple[int, ...] = ()

    @property
    def batch(self) -> int:
        return len(self.prefix_lens) or 1

    @property
    def study_name(self) -> str:
        name = (f"{self.variant}|{self.gpu}|L{self.l_bucket}|T{self.tree_nodes}|H{self.heads}|"
                f"ps{self.page_size}|{self.dtype}")
        if not self.prefix_lens:
            return name
        # The batch's size and a digest of its lengths (the lengths themselves are in the record:
        # 64 of them would pass the storage's limit on a study's name).
        digest = hashlib.sha1(",".join(map(str, self.prefix_lens)).encode()).hexdigest()[:8]
        return f"{name}|B{self.batch}-{digest}"


def canonical(config: dict) -> str:
    return json.dumps(config, sort_keys=True)


def evaluate(key: TuneKey, config: dict, *, timeout_s: float, rep_ms: float, worker: TrialProcess,
             timing: str = "events", arch: str | None = None) -> dict:
    """Run one config in the worker process; crashes and timeouts become failed results. ``timing``:
    the bench's mode, "events" (eager calls, so a launch's host time shows once it exceeds the
    GPU's) or "graph" (CUDA-graph replay: the kernels alone). ``arch``: the arch tuned for, whose
    defaults the keys outside the space run at (a proxy tune's, not this GPU's)."""
    job = {"variant": key.variant, "config": config, "prefix_len": key.prefix_len, "tree_nodes": key.tree_nodes,
           "heads": key.heads, "page_size": key.page_size, "dtype": key.dtype, "rep_ms": rep_ms, "timing": timing,
           "prefix_lens": list(key.prefix_lens), "arch": arch}
    return worker.run(job, timeout_s)


def _same_config(study, config: dict, state, exclude: int | None = None):
    """The first trial in ``state`` with these params (other than trial ``exclude``), else None."""
    for trial in study.get_trials(deepcopy=False, states=(state,)):
        if trial.number != exclude and canonical(trial.params) == canonical(config):
            return trial
    return None


def make_objective(key: TuneKey, space: dict, feasible: dict[str, Candidate], rejected: dict[str, str], *,
                   timeout_s: float, rep_ms: float, worker: TrialProcess | None, timing: str = "events",
                   evaluator=None, arch: str | None = None):
    """The study's objective: a proposed config's median ms. ``evaluator`` (config -> result dict)
    replaces the measurement in ``worker``: ``vk tune --objective predicted`` passes the predictor.
    ``arch``: the arch tuned for (``evaluate``)."""
    import optuna

    names = list(space["tunables"])

    def objective(trial: "optuna.Trial") -> float:
        # First, so that a later run on this machine can tell this trial's process is gone and reap it
        # (a kill before this line leaves the trial to Optuna's heartbeat).
        trial.set_user_attr("worker", worker_identity())
        config = {name: trial.suggest_categorical(name, space["tunables"][name]) for name in names}
        text = canonical(config)
        if text not in feasible:
            trial.set_user_attr("invalidity", "constraints")
            trial.set_user_attr("reason", rejected.get(text, "not in the search space"))
            raise optuna.TrialPruned(rejected.get(text, "not in the search space"))
        running = _same_config(trial.study, config, optuna.trial.TrialState.RUNNING, exclude=trial.number)
        if running is not None:  # another worker is measuring it right now
            trial.set_user_attr("duplicate_of", running.number)
            raise optuna.TrialPruned(f"duplicate of running trial {running.number}")
        failed = _same_config(trial.study, config, optuna.trial.TrialState.FAIL)
        if failed is not None and "invalidity" in failed.user_attrs:  # measured and failed: not again
            trial.set_user_attr("duplicate_of", failed.number)
            raise optuna.TrialPruned(f"failed before as trial {failed.number}: {failed.user_attrs['invalidity']}")
        earlier = _same_config(trial.study, config, optuna.trial.TrialState.COMPLETE)
        if earlier is not None:
            trial.set_user_attr("duplicate_of", earlier.number)
            for name in ("median_ms", "iqr_ms"):
                if name in earlier.user_attrs:
                    trial.set_user_attr(name, earlier.user_attrs[name])
            return earlier.value
        try:
            result = (evaluator(config) if evaluator is not None
                      else evaluate(key, config, timeout_s=timeout_s, rep_ms=rep_ms, worker=worker, timing=timing,
                                    arch=arch))
        except KeyboardInterrupt:  # Ctrl-C: not a result; measured again by the next run, not counted
            trial.set_user_attr("interrupted", "KeyboardInterrupt")
            requeue(trial.study, config)
            raise
        for name, value in result.items():
            trial.set_user_attr(name, value)
        if result.get("status") != "ok":
            invalidity = {"wrong": "correctness", "error": "compile_or_launch"}.get(result["status"], result["status"])
            trial.set_user_attr("invalidity", invalidity)
            raise TrialFailed(f"{invalidity}: {result.get('reason', '')}")
        return float(result["median_ms"])

    return objective


def feasible_space(target: VariantOnArch, progress: bool, compile: bool = True):
    """(space, feasible {canonical: Candidate}, rejected {canonical: reason}).

    ``compile=False`` applies the constraints and kernel rules only (tests without a compiler).
    """
    space = target.tuned_space()
    candidates = static_feasibility(target, progress=progress) if compile else search_candidates(target)
    feasible = {canonical(c.config): c for c in candidates if c.feasible}
    rejected = {canonical(c.config): c.reason for c in candidates if not c.feasible}
    return space, feasible, rejected


def default_config_for(target: VariantOnArch) -> dict:
    """The arch's default config, cut to the space's tunables (the first trial of a study); an optional key
    (``OPTIONAL_CONFIG``) the defaults do not name at the value the kernel takes without it."""
    defaults = {**variants.optional(target.module, "OPTIONAL_CONFIG"), **target.defaults}
    return {name: defaults[name] for name in target.tuned_space()["tunables"]}


def tune_key(key: TuneKey, target: VariantOnArch, *, storage: str, trials: int | None, minutes: float | None, seed: int,
             warm_start: list[dict], timeout_s: float, rep_ms: float, progress: bool, compile: bool = True,
             feasible_override=None, exhaustive: bool = False, timing: str = "events", evaluator=None):
    """Run (or continue) the study of one key on ``target`` (the key's variant resolved for the arch whose
    static model and space apply: ``harness.static.space.resolve``); returns the study.
    ``evaluator``: see make_objective (no worker process is started then).

    ``exhaustive``: measure every feasible config once, in a study named "<key>|exhaustive" (the
    table the tuning-quality replay needs); ``trials`` is then the feasible count.
    """
    import optuna

    if target.name != key.variant:
        raise ValueError(f"tune_key: the key is {key.variant!r}'s, the target {target.name!r}")
    if feasible_override is not None:
        space, feasible, rejected = feasible_override
    else:
        space, feasible, rejected = feasible_space(target, progress, compile)
    if not feasible:
        raise ValueError(f"{key.variant} on {target.arch}: no statically feasible config in the search space")
    name = key.study_name + ("|exhaustive" if exhaustive else "")
    opened = open_storage(storage)
    study = open_study(name, opened, seed, target.source_hash, timing)
    reap_interrupted(study, opened)  # trials a killed run left RUNNING: failed, queued again, not counted
    study.set_user_attr("key", asdict(key))
    study.set_user_attr("arch", target.arch)
    study.set_user_attr("defaults", target.defaults)  # what a trial's untuned keys ran at (fit.study_points)
    if exhaustive:
        trials = len(feasible)
    # A budget that covers the whole feasible space measures the space, in a fixed order: a sampler
    # asked for the last few unmeasured configs of a small space proposes hundreds of duplicates.
    covers_space = trials is not None and trials >= len(feasible)
    if not study.trials or covers_space:
        queue = [default_config_for(target), *warm_start] if not exhaustive else []
        if covers_space:
            queue += [c.config for c in feasible.values()]
        done = {canonical(t.params) for t in study.trials if t.state.is_finished()}
        for config in queue:
            if canonical(config) in feasible and canonical(config) not in done:
                study.enqueue_trial(config, skip_if_exists=True)
    budget = None if trials is None else min(trials, len(feasible))
    stop = _StopAfterMeasured(budget, max_proposals=None if budget is None else PROPOSALS_PER_TRIAL * budget)
    if stop.reached(study):
        return study
    # Failed trials are recorded with their reason (invalidity, reason); Optuna's own log of them would
    # print a traceback per trial, and one for a Ctrl-C.
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    with (TrialProcess() if evaluator is None else contextlib.nullcontext()) as worker:
        objective = make_objective(key, space, feasible, rejected, timeout_s=timeout_s, rep_ms=rep_ms,
                                   worker=worker, timing=timing, evaluator=evaluator, arch=target.arch)
        study.optimize(objective, n_trials=None if budget is None else stop.max_proposals,
                       timeout=None if minutes is None else 60 * minutes, catch=(TrialFailed,), callbacks=[stop],
                       show_progress_bar=progress)
    return study


def open_study(name: str, storage, seed: int, kernel_hash: str, timing: str = "events"):
    """The study ``name``, resumed only if its trials measured this kernel source (``kernel_hash``)
    with this timing mode (the study's ``kernel_source_hash`` and ``timing`` attributes; a study
    from before them counts as "unrecorded", "events"). Any other study is archived whole as
    "<name>|kernel <its hash> <its timing>" and the key starts over, so a changed kernel is never
    ranked by its predecessor's timings, nor graph timings mixed with eager ones."""
    import optuna

    sampler = optuna.samplers.TPESampler(seed=seed)
    if name in optuna.get_all_study_names(storage):
        old = optuna.load_study(study_name=name, storage=storage, sampler=sampler)
        measured = (old.user_attrs.get("kernel_source_hash", "unrecorded"), old.user_attrs.get("timing", "events"))
        trials = len(old.trials)
        if trials and measured != (kernel_hash, timing):
            label = " ".join(measured)
            names, archive, copy = set(optuna.get_all_study_names(storage)), f"{name}|kernel {label}", 1
            while archive in names:  # an earlier archive of the same source is kept too
                copy += 1
                archive = f"{name}|kernel {label} ({copy})"
            optuna.copy_study(from_study_name=name, from_storage=storage, to_storage=storage, to_study_name=archive)
            optuna.delete_study(study_name=name, storage=storage)
            warnings.warn(f"study {name}: its {trials} trials measured kernel source {measured[0]} ({measured[1]} "
                          f"timing), this run {kernel_hash} ({timing}); archived as {archive!r}, tuning this key "
                          f"again",
                          stacklevel=2)
    study = optuna.create_study(study_name=name, storage=storage, direction="minimize", load_if_exists=True,
                                sampler=sampler)
    study.set_user_attr("kernel_source_hash", kernel_hash)
    study.set_user_attr("timing", timing)
    return study


PROPOSALS_PER_TRIAL = 50  # bounds a run whose sampler keeps proposing infeasible or measured configs


def measured_trials(study) -> int:
    """Configs measured (or being measured) in the study: pruned proposals, duplicates and trials
    that an interruption cut short (failed with no ``invalidity``; queued again) are free."""
    import optuna

    TrialState = optuna.trial.TrialState
    return sum(1 for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.FAIL,
                                                                    TrialState.RUNNING))
               if "duplicate_of" not in t.user_attrs
               and (t.state != TrialState.FAIL or "invalidity" in t.user_attrs))


class _StopAfterMeasured:
    """Stops the study once it holds ``budget`` measured configs (with several workers on one
    storage, in-flight trials count, so together they stop there too), or after ``max_proposals``."""

    def __init__(self, budget: int | None, max_proposals: int | None):
        self.budget, self.max_proposals = budget, max_proposals

    def reached(self, study) -> bool:
        return self.budget is not None and (measured_trials(study) >= self.budget
                                            or len(study.trials) >= self.max_proposals)

    def __call__(self, study, trial) -> None:
        if self.reached(study):
            study.stop()


def winner_record(study, key: TuneKey) -> dict | None:
    import optuna

    complete = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
    if not complete:
        return None
    best = min(complete, key=lambda t: t.value)
    default = complete[0] if complete[0].number == 0 else None
    env = describe_environment()
    fields = asdict(key)
    if key.prefix_lens:  # a ragged batch's key: its lengths and size (dispatch matches batches by size)
        fields.update(prefix_lens=list(key.prefix_lens), batch=key.batch)
    else:
        del fields["prefix_lens"]
    record = {
        **fields, "config": dict(best.params), "median_ms": best.value,
        "iqr_ms": best.user_attrs.get("iqr_ms"), "trial": best.number,
        "default_median_ms": default.value if default else None,
        "speedup_over_default": (default.value / best.value) if default else None,
        "trials": len(study.trials),
        "measured": sum("duplicate_of" not in t.user_attrs and t.state == optuna.trial.TrialState.COMPLETE
                        for t in study.trials),
        "failed": sum(t.state == optuna.trial.TrialState.FAIL for t in study.trials),
        # the hash tune_key opened the study with: the kernel these trials measured
        "kernel_source_hash": study.user_attrs["kernel_source_hash"],
        "timing": study.user_attrs.get("timing", "events"),
        "source_hash": source_hash(), "torch": str(env["torch"]), "triton": env["triton"], "cupy": env["cupy"],
        "driver": env.get("driver"), "study": study.study_name,
    }
    return record


def winners_path(sku: str | None = None) -> Path:
    return TUNED_DIR / f"{sku or gpu_sku()}.yaml"


def save_winner(record: dict, path: Path) -> None:
    """Add (or replace) one study's winner in the table at ``path``. Many processes may write one
    table together: a lock file beside it serialises the read-modify-write, and the table is
    replaced atomically, so no writer loses another's row and a killed writer leaves the old table."""
    import yaml
    from filelock import FileLock

    path.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(path) + ".lock"):
        winners = read_yaml_mapping(path, "--winners", allow_empty=True) if path.exists() else {}
        winners[record["study"]] = record
        temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        temporary.write_text(yaml.safe_dump(winners, sort_keys=True))
        os.replace(temporary, path)


def neighbour_winners(path: Path, key: TuneKey) -> list[dict]:
    """The winner of the same variant, T, H, page size and dtype at the nearest other key: another L
    bucket, or (for a ragged batch) one request of its longest length or another batch."""
    if not path.exists():
        return []
    wanted = (key.variant, key.tree_nodes, key.heads, key.page_size, key.dtype)
    fields = ("variant", "tree_nodes", "heads", "page_size", "dtype")

    same = [w for w in read_yaml_mapping(path, "--winners", allow_empty=True).values()
            if isinstance(w, dict) and tuple(w.get(f) for f in fields) == wanted and "config" in w
            and w.get("l_bucket")
            and (w["l_bucket"], list(w.get("prefix_lens") or ())) != (key.l_bucket, list(key.prefix_lens))]
    wanted = (key.l_bucket, key.tree_nodes, key.heads, key.page_size, key.batch)
    same.sort(key=lambda w: log_distance(record_key(w), wanted))
    return [w["config"] for w in same[:1]]


def publish_winners(path: Path, proxy_for: str | None = None) -> Path:
    """Copy a measured winners table into the package (verify_kernels/tuned/), where
    ``variant="auto"`` reads it: as ``<gpu>.yaml``, or for a proxy tune's table (``proxy_for``, every
    record's) as ``proxy-<arch>.yaml``, which GPUs of that arch without a measured table read; returns
    where it went."""
    import shutil

    SHIPPED_TUNED_DIR.mkdir(parents=True, exist_ok=True)
    target = SHIPPED_TUNED_DIR / (f"proxy-{proxy_for}.yaml" if proxy_for else path.name)
    shutil.copyfile(path, target)
    return target


def check_winners(path: Path) -> list[str]:
    """Stale records: those whose variant's kernel sources changed since they were measured."""
    if not path.exists():
        return [f"{path}: no tuned records"]
    stale = []
    for name, record in read_yaml_mapping(path, "table", allow_empty=True).items():
        if not isinstance(record, dict) or record.get("variant") not in VARIANTS:
            stale.append(f"{name}: not a winner record of a known variant")
            continue
        current = kernel_source_hash(record["variant"])
        if record.get("kernel_source_hash") != current:
            stale.append(f"{name}: kernel source hash {record.get('kernel_source_hash')} != current {current}")
    return stale
