"""Tuning machinery on the CPU: fake costs stand in for GPU timings (VK_TUNE_FAKE=1)."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

optuna = pytest.importorskip("optuna")

from harness.tune import study as tune  # noqa: E402
from harness.tune import quality as tune_quality  # noqa: E402
from harness.tune.worker import fake_cost_ms  # noqa: E402

from harness.static.space import resolve  # noqa: E402

KEY = tune.TuneKey("triton_splitkv", "fake-cpu", 4096, 16, 8, 64, "bfloat16", 4096)
TARGET = resolve("triton_splitkv", "sm_120")


def _vk_tune(tmp_path, *extra, env=None):
    return [sys.executable, "-m", "harness", "tune", "--variants", "triton_splitkv", "--prefix", "4096", "--tree",
            "16", "--heads", "8", "--storage", f"sqlite:///{tmp_path / 'tune.db'}", "--winners",
            str(tmp_path / "winners.yaml"), "--no-compile", "--no-progress", "--arch", "sm_120", *extra]


@pytest.fixture
def fake_env(monkeypatch):
    monkeypatch.setenv("VK_TUNE_FAKE", "1")
    return {**os.environ, "VK_TUNE_FAKE": "1"}


def _trials(storage: str):
    return optuna.load_study(study_name=KEY.study_name, storage=tune.open_storage(storage)).trials


def _finished(storage: str) -> dict[int, float]:
    return {t.number: t.value for t in _trials(storage) if t.state.is_finished()}


def test_killed_run_resumes_without_losing_trials(tmp_path, fake_env):
    storage = f"sqlite:///{tmp_path / 'tune.db'}"
    env = {**fake_env, "VK_TUNE_FAKE_SLEEP": "0.4"}
    process = subprocess.Popen(_vk_tune(tmp_path, "--trials", "14"), env=env, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    deadline = time.time() + 120
    before = {}
    while time.time() < deadline:
        time.sleep(0.5)
        try:
            before = _finished(storage)
        except Exception:
            continue
        if len([v for v in before.values() if v is not None]) >= 2:
            break
    process.send_signal(signal.SIGKILL)
    process.wait()
    assert len(before) >= 2, "the first run finished no trial before the kill"
    completed = subprocess.run(_vk_tune(tmp_path, "--trials", "14"), env=env, capture_output=True, text=True)
    assert completed.returncode == 0, completed.stderr[-2000:]
    after = _finished(storage)
    for number, value in before.items():
        assert after[number] == value, f"trial {number} changed or vanished after the resume"
    # The trial in flight when the first run was killed was reaped by the resume (its process is gone),
    # failed as interrupted and measured again, so the budget is met. Only a trial the kill caught
    # between Optuna creating it and the objective's first line (no worker recorded yet) is left to
    # the heartbeat's grace period (test_tune_concurrency.py kills a trial that is being measured).
    trials = _trials(storage)
    running = [t for t in trials if t.state == optuna.trial.TrialState.RUNNING]
    assert len(trials) >= 14 and all("worker" not in t.user_attrs for t in running) and len(running) <= 1
    assert tune.measured_trials(optuna.load_study(study_name=KEY.study_name, storage=tune.open_storage(storage))) == 14
    winners = (tmp_path / "winners.yaml").read_text()
    assert KEY.study_name in winners and "speedup_over_default" in winners


@pytest.mark.parametrize("planted_fault, invalidity, reason, timeout_s", [
    ("VK_TUNE_FAULT", "runtime", "exited with code", 120),  # the worker aborts, as on an illegal address
    ("VK_TUNE_HANG", "timeout", "no answer within", 15),    # the worker sleeps, as a deadlocked kernel
])
def test_faulting_or_hanging_config_is_a_failed_trial_and_the_study_finishes(tmp_path, fake_env, monkeypatch,
                                                                             planted_fault, invalidity, reason,
                                                                             timeout_s):
    monkeypatch.setenv(planted_fault, json.dumps({"BLOCK_M": 16, "num_warps": 4}))
    storage = f"sqlite:///{tmp_path / 'fault.db'}"
    planted = {"BLOCK_M": 16, "BLOCK_N": 32, "num_warps": 4, "num_stages": 1, "kv_splits": 0}
    study = tune.tune_key(KEY, TARGET, storage=storage, trials=8, minutes=None, seed=1, warm_start=[planted],
                          timeout_s=timeout_s, rep_ms=10, progress=False, compile=False)
    failed = [t for t in study.trials if t.state == optuna.trial.TrialState.FAIL]
    assert failed and failed[0].params == planted
    assert failed[0].user_attrs["invalidity"] == invalidity and reason in failed[0].user_attrs["reason"]
    assert tune.measured_trials(study) == 8  # the next trials ran in a fresh worker
    record = tune.winner_record(study, KEY)
    assert record["config"] != planted and record["failed"] >= 1


def test_no_config_is_measured_twice(tmp_path, fake_env):
    space, feasible, rejected = tune.feasible_space(TARGET, progress=False, compile=False)
    small = dict(list(feasible.items())[:3])
    study = tune.tune_key(KEY, TARGET, storage=f"sqlite:///{tmp_path / 'dup.db'}", trials=25, minutes=None,
                          seed=0, warm_start=[], timeout_s=60, rep_ms=10, progress=False, compile=False,
                          feasible_override=(space, small, rejected))
    complete = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
    measured = [t for t in complete if "duplicate_of" not in t.user_attrs]
    assert len({json.dumps(t.params, sort_keys=True) for t in measured}) == len(measured) <= 3
    for trial in complete:
        assert trial.value == pytest.approx(fake_cost_ms(trial.params))


def test_infeasible_proposals_never_reach_the_worker(tmp_path, fake_env, monkeypatch):
    calls = []
    monkeypatch.setattr(tune, "evaluate", lambda key, config, **kw: calls.append(config) or
                        {"status": "ok", "median_ms": fake_cost_ms(config), "iqr_ms": 0.0})
    space, feasible, rejected = tune.feasible_space(TARGET, progress=False, compile=False)
    study = tune.tune_key(KEY, TARGET, storage=f"sqlite:///{tmp_path / 'inf.db'}", trials=30, minutes=None,
                          seed=3, warm_start=[], timeout_s=60, rep_ms=10, progress=False, compile=False)
    assert all(json.dumps(c, sort_keys=True) in feasible for c in calls)
    pruned = [t for t in study.trials if t.state == optuna.trial.TrialState.PRUNED]
    assert all(t.user_attrs.get("invalidity") == "constraints" or "duplicate_of" in t.user_attrs for t in pruned)


def test_study_of_another_kernel_source_is_archived_not_resumed(tmp_path, fake_env):
    storage = f"sqlite:///{tmp_path / 'src.db'}"
    space, feasible, rejected = tune.feasible_space(TARGET, progress=False, compile=False)

    def run(trials):
        return tune.tune_key(KEY, TARGET, storage=storage, trials=trials, minutes=None, seed=0, warm_start=[],
                             timeout_s=60, rep_ms=10, progress=False, compile=False,
                             feasible_override=(space, feasible, rejected))

    first = run(3)
    current = tune.kernel_source_hash(KEY.variant)
    assert first.user_attrs["kernel_source_hash"] == current and tune.measured_trials(first) == 3
    assert len(run(3).trials) == len(first.trials)  # same source: resumed, nothing measured again
    first.set_user_attr("kernel_source_hash", "0" * 16)  # as if the kernel changed since
    with pytest.warns(UserWarning, match="archived"):
        fresh = run(2)
    assert tune.measured_trials(fresh) == 2 and fresh.user_attrs["kernel_source_hash"] == current
    archived = optuna.load_study(study_name=f"{KEY.study_name}|kernel {'0' * 16} events",
                                 storage=tune.open_storage(storage))
    assert tune.measured_trials(archived) == 3
    fresh.set_user_attr("kernel_source_hash", "0" * 16)  # the same old source again: a second archive
    with pytest.warns(UserWarning, match=r"\(2\)"):
        run(1)
    assert f"{KEY.study_name}|kernel {'0' * 16} events" in optuna.get_all_study_names(tune.open_storage(storage))
    with pytest.warns(UserWarning, match="archived"):  # graph timings never join a study of eager ones
        graph = tune.tune_key(KEY, TARGET, storage=storage, trials=1, minutes=None, seed=0, warm_start=[],
                              timeout_s=60, rep_ms=10, progress=False, compile=False, timing="graph",
                              feasible_override=(space, feasible, rejected))
    assert graph.user_attrs["timing"] == "graph" and tune.winner_record(graph, KEY)["timing"] == "graph"


def test_winners_check_flags_stale_source(tmp_path):
    path = tmp_path / "w.yaml"
    record = {"study": "s", "kernel_source_hash": "0" * 16, "variant": "triton_splitkv"}
    tune.save_winner(record, path)
    current = tune.kernel_source_hash("triton_splitkv")
    assert tune.check_winners(path) == [f"s: kernel source hash {'0' * 16} != current {current}"]
    tune.save_winner({**record, "kernel_source_hash": current}, path)
    assert tune.check_winners(path) == []


def test_tuned_cli_check_exit_code(tmp_path):
    path = tmp_path / "w.yaml"
    tune.save_winner({"study": "s", "kernel_source_hash": "stale", "variant": "triton_ps1"}, path)
    completed = subprocess.run([sys.executable, "-m", "harness", "tuned", "--check", "--file", str(path)],
                               capture_output=True, text=True)
    assert completed.returncode == 1 and "stale" in completed.stdout


def test_neighbour_winner_is_the_warm_start(tmp_path):
    path = tmp_path / "w.yaml"
    base = {"variant": "triton_splitkv", "tree_nodes": 16, "heads": 8, "page_size": 64, "dtype": "bfloat16",
            "source_hash": "h"}
    tune.save_winner({**base, "study": "a", "l_bucket": 32768, "config": {"BLOCK_M": 32}}, path)
    tune.save_winner({**base, "study": "b", "l_bucket": 131072, "config": {"BLOCK_M": 64}}, path)
    assert tune.neighbour_winners(path, KEY) == [{"BLOCK_M": 32}]
    # A ragged batch starts from the one-request winner of its longest length's bucket.
    tune.save_winner({**base, "study": "c", "l_bucket": 4096, "config": {"BLOCK_M": 16}}, path)
    ragged = tune.TuneKey("triton_splitkv", "fake-cpu", 4096, 16, 8, 64, "bfloat16", 4000, (100, 4000))
    assert tune.neighbour_winners(path, ragged) == [{"BLOCK_M": 16}]


def test_tuning_quality_replay_on_a_known_table(tmp_path):
    storage = f"sqlite:///{tmp_path / 'q.db'}"
    study = optuna.create_study(study_name="exhaustive", storage=storage)
    for a in range(10):
        for b in range(12):
            study.enqueue_trial({"a": a, "b": b})
    study.optimize(lambda t: 1.0 + abs(t.suggest_int("a", 0, 9) - 7) + abs(t.suggest_int("b", 0, 11) - 3) / 3,
                   n_trials=120)
    result = tune_quality.trials_to_reach(storage, "exhaustive", seeds=5, within=0.03)
    assert result["space_size"] == 120 and len(result["trials_per_seed"]) == 5
    assert 1 <= result["median_trials"] <= 120
    assert "median" in tune_quality.format_quality(result)
    for curve in result["best_so_far_ms"]:  # non-increasing, and it stops once within 3% of the best (1.0)
        assert all(b <= a for a, b in zip(curve, curve[1:])) and curve[-1] <= 1.03
        assert all(value > 1.03 for value in curve[:-1])
    tune_quality.plot_quality(result, tmp_path / "quality.png")
    assert (tmp_path / "quality.png").stat().st_size > 1000


def test_exhaustive_study_measures_every_feasible_config_once(tmp_path, fake_env):
    space, feasible, rejected = tune.feasible_space(TARGET, progress=False, compile=False)
    subset = dict(list(feasible.items())[:7])
    study = tune.tune_key(KEY, TARGET, storage=f"sqlite:///{tmp_path / 'ex.db'}", trials=None, minutes=None,
                          seed=0, warm_start=[], timeout_s=60, rep_ms=10, progress=False, compile=False,
                          feasible_override=(space, subset, rejected), exhaustive=True)
    assert study.study_name.endswith("|exhaustive")
    measured = {json.dumps(t.params, sort_keys=True) for t in study.trials
                if t.state == optuna.trial.TrialState.COMPLETE}
    assert measured == set(subset)


def test_a_budget_covering_the_space_measures_it_without_sampler_churn(tmp_path, fake_env):
    """--trials >= the feasible count (sm_120's small spaces): every feasible config once, in as many
    trials, instead of hundreds of duplicate proposals near the end."""
    space, feasible, rejected = tune.feasible_space(TARGET, progress=False, compile=False)
    subset = dict(list(feasible.items())[3:9])
    study = tune.tune_key(KEY, TARGET, storage=f"sqlite:///{tmp_path / 'small.db'}", trials=len(subset) + 3,
                          minutes=None, seed=0, warm_start=[], timeout_s=60, rep_ms=10, progress=False,
                          compile=False, feasible_override=(space, subset, rejected))
    measured = [json.dumps(t.params, sort_keys=True) for t in study.trials
                if t.state == optuna.trial.TrialState.COMPLETE]
    assert sorted(measured) == sorted(subset)
    assert len(study.trials) <= len(subset) + 1  # the default config is outside the subset: pruned once


def test_workers_share_one_storage_and_stop_at_the_trial_budget(tmp_path, fake_env):
    """--workers 2 on one machine (the multi-GPU path with every worker on this CPU): one study,
    the budget respected, the winners written once at the end."""
    completed = subprocess.run(_vk_tune(tmp_path, "--trials", "10", "--workers", "2"), env=fake_env,
                               capture_output=True, text=True, timeout=300)
    assert completed.returncode == 0, completed.stderr[-2000:]
    study = optuna.load_study(study_name=KEY.study_name, storage=tune.open_storage(f"sqlite:///{tmp_path / 'tune.db'}"))
    assert 10 <= tune.measured_trials(study) <= 12  # two workers may each start one as the budget is reached
    trials = study.trials
    measured = [t for t in trials if t.state == optuna.trial.TrialState.COMPLETE and "duplicate_of" not in t.user_attrs]
    assert len({json.dumps(t.params, sort_keys=True) for t in measured}) == len(measured)
    assert KEY.study_name in (tmp_path / "winners.yaml").read_text()


def test_workers_on_journal_storage(tmp_path, fake_env):
    """The same worker run on Optuna's JournalStorage (a file many processes append to)."""
    journal = f"journal://{tmp_path / 'journal.log'}"
    argv = [a if not a.startswith("sqlite:///") else journal
            for a in _vk_tune(tmp_path, "--trials", "8", "--workers", "2")]
    completed = subprocess.run(argv, env=fake_env, capture_output=True, text=True, timeout=300)
    assert completed.returncode == 0, completed.stderr[-2000:]
    study = optuna.load_study(study_name=KEY.study_name, storage=tune.open_storage(journal))
    assert 8 <= tune.measured_trials(study) <= 10
    assert KEY.study_name in (tmp_path / "winners.yaml").read_text()


def test_one_worker_process_serves_many_trials(fake_env, monkeypatch):
    from harness.tune.trial_process import TrialProcess

    job = {"variant": "triton_splitkv", "prefix_len": 4096, "tree_nodes": 16, "heads": 8, "page_size": 64,
           "dtype": "bfloat16", "rep_ms": 1}
    with TrialProcess() as worker:
        answers = [worker.run({**job, "config": {"BLOCK_M": m}}, timeout_s=60) for m in (16, 32, 64)]
        pid = worker._process.pid
        assert worker.run({**job, "config": {"BLOCK_M": 128}}, timeout_s=60)["status"] == "ok"
        assert worker._process.pid == pid
    assert [a["median_ms"] for a in answers] == [fake_cost_ms({"BLOCK_M": m}) for m in (16, 32, 64)]


def test_constrain_to_tunes_the_target_space_apart_and_marks_its_records(tmp_path, fake_env):
    """vk tune --constrain-to sm_120: the sm_120 space, its own studies and table, records with proxy_for."""
    import yaml

    command = [a for a in _vk_tune(tmp_path, "--trials", "3") if a not in ("--arch", "sm_120")]
    command = [*command, "--constrain-to", "sm_120"]
    done = subprocess.run(command, env=fake_env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    winners = yaml.safe_load((tmp_path / "winners.yaml").read_text())
    (name, record), = winners.items()
    assert "-proxy-sm_120|" in name and record["proxy_for"] == "sm_120" and record["arch"] == "sm_120"
    assert record["measured_on"] == record["gpu"].removesuffix("-proxy-sm_120")
    assert record["gpu"].endswith("-proxy-sm_120")
    space, feasible, _ = tune.feasible_space(TARGET, progress=False, compile=False)
    assert json.dumps(record["config"], sort_keys=True) in feasible
    clash = subprocess.run([*command, "--arch", "sm_90"], env=fake_env, capture_output=True, text=True)
    assert clash.returncode == 2 and "give one arch" in clash.stderr


def test_predicted_objective_tunes_without_a_gpu_and_writes_a_predicted_table(tmp_path):
    """vk tune --arch sm_120 --objective predicted: Optuna over the sm_120 space with the predictor's time
    as the objective; its winner is the best predicted config it saw, marked predicted in the table."""
    import yaml

    from harness.predict.objective import predicted_evaluator

    table = tmp_path / "predicted.yaml"
    command = [sys.executable, "-m", "harness", "tune", "--objective", "predicted", "--arch", "sm_120",
               "--variants", "cuda_coalesced", "--prefix", "131072,185000", "--tree", "64", "--heads", "8",
               "--trials", "4", "--storage", f"sqlite:///{tmp_path / 'p.db'}", "--winners", str(table),
               "--no-compile", "--no-progress"]
    environment = {k: v for k, v in os.environ.items() if k != "VK_TUNE_FAKE"}
    done = subprocess.run(command, env=environment, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "PREDICTED for sm_120" in done.stdout
    (name, record), = yaml.safe_load(table.read_text()).items()  # 185000 shares the 128k bucket: one key
    assert name == "cuda_coalesced|sm_120|predicted|L131072|T64|H8|ps64" and record["predicted"] is True
    assert record["search"].startswith("optuna TPE, study cuda_coalesced|predicted-sm_120|L131072")
    study = optuna.load_study(study_name="cuda_coalesced|predicted-sm_120|L131072|T64|H8|ps64|bfloat16",
                              storage=f"sqlite:///{tmp_path / 'p.db'}")
    assert study.user_attrs["timing"] == "predicted"
    evaluate = predicted_evaluator(resolve("cuda_coalesced", "sm_120"), prefix_len=131072, tree_nodes=64, heads=8)
    seen = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
    assert len({json.dumps(t.params, sort_keys=True) for t in seen}) >= 4
    best = min(seen, key=lambda t: t.value)
    assert record["predicted_ms"] == pytest.approx(evaluate(best.params)["median_ms"])
    assert record["predicted_ms"] == pytest.approx(min(evaluate(t.params)["median_ms"] for t in seen))


def test_predicted_objective_needs_an_arch(tmp_path):
    done = subprocess.run([sys.executable, "-m", "harness", "tune", "--objective", "predicted", "--variants",
                           "cuda_ws", "--storage", f"sqlite:///{tmp_path / 'p.db'}", "--no-progress"],
                          capture_output=True, text=True)
    assert done.returncode != 0 and "give --arch" in done.stderr


def test_a_key_reads_its_variant_only_through_the_resolved_target(tmp_path, monkeypatch):
    """vk tune resolves a variant once per arch (module, space, kernel source hash, defaults) and passes
    the object down: a key's feasibility, study and winner read none of them again."""
    from harness.static import space as space_module
    from verify_kernels import variants

    target = resolve("triton_splitkv", "sm_120")

    def again(*args, **kwargs):
        raise AssertionError("read again instead of taken from the target")
    for module, name in ((space_module, "kernel_source_hash"), (tune, "kernel_source_hash"),
                         (space_module, "_read_space"), (variants, "load_variant"), (variants, "defaults_for")):
        monkeypatch.setattr(module, name, again)
    study = tune.tune_key(KEY, target, storage=f"sqlite:///{tmp_path / 'once.db'}", trials=3, minutes=None, seed=0,
                          warm_start=[], timeout_s=60, rep_ms=10, progress=False, compile=False,
                          evaluator=lambda config: {"status": "ok", "median_ms": 1.0 + len(str(config)) / 1e3})
    record = tune.winner_record(study, KEY)
    assert record["kernel_source_hash"] == target.source_hash and tune.measured_trials(study) == 3
    with pytest.raises(ValueError, match="the target 'cuda_ws'"):
        tune.tune_key(KEY, tune.VariantOnArch("cuda_ws", "sm_120", None, None, "", {}), storage="sqlite://",
                      trials=1, minutes=None, seed=0, warm_start=[], timeout_s=60, rep_ms=10, progress=False)


def test_ragged_batches_are_keys_of_their_own(tmp_path, fake_env):
    """issue 33: vk tune --ragged tunes a batch of different prefix lengths as one key (alone, or
    beside --prefix keys); its record carries the lengths and the batch's size, which auto reads."""
    import yaml

    command = [a for a in _vk_tune(tmp_path, "--trials", "3") if a not in ("--prefix", "4096")]
    done = subprocess.run([*command, "--ragged", "100,5000,0"], env=fake_env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    (name, record), = yaml.safe_load((tmp_path / "winners.yaml").read_text()).items()
    assert "|L4096|" in name and "|B3-" in name and record["study"] == name  # the longest length's bucket
    assert (record["prefix_lens"], record["batch"], record["prefix_len"]) == ([100, 5000, 0], 3, 5000)
    assert "100,5000,0" in done.stdout
    both = subprocess.run([*command, "--prefix", "4096", "--ragged", "100,5000,0"], env=fake_env,
                          capture_output=True, text=True)
    assert both.returncode == 0, both.stderr[-2000:]
    assert len(yaml.safe_load((tmp_path / "winners.yaml").read_text())) == 2
    one = subprocess.run([*command, "--ragged", "4096"], env=fake_env, capture_output=True, text=True)
    assert one.returncode != 0 and "at least two prefix lengths" in one.stderr


def test_a_ragged_key_measures_its_batch(monkeypatch):
    """The worker builds the key's batch, not one request of its longest length."""
    from harness.tune import worker

    points = []

    def problem_and_reference(point, seed):
        points.append(point)
        return None, None

    monkeypatch.setattr(worker, "_problem_and_reference", problem_and_reference)
    monkeypatch.setattr(worker, "bench_point", lambda point, *a, **k: {"status": "ok", "median_ms": 1.0})
    job = {"variant": "triton_splitkv", "config": {}, "prefix_len": 5000, "tree_nodes": 16, "heads": 8,
           "page_size": 64, "dtype": "bfloat16"}
    worker.measure({**job, "prefix_lens": [100, 5000, 0]})
    worker.measure(job)
    assert [point.lengths() for point in points] == [[100, 5000, 0], [5000]]


def test_prefix_lengths_of_one_bucket_make_one_key(capsys):
    """131072 and 185000 share an L bucket: one study, measured and recorded at the first length
    (before, the second run of the same study overwrote the key with a length it never measured)."""
    import argparse

    from harness.tune.run import tune_keys

    args = argparse.Namespace(variants=["cuda_ws"], prefix=[131072, 185000, 4096], tree=[64], heads=[8],
                              page_size=64, dtype="bfloat16")
    keys = list(tune_keys(args, "gpu"))
    assert [(k.prefix_len, k.l_bucket) for k in keys] == [(131072, 131072), (4096, 4096)]
    assert "--prefix 185000 shares L bucket 131072 with 131072" in capsys.readouterr().err


def test_a_studys_first_trial_names_an_optional_tunable_at_its_absent_value():
    """gluon_wgmma_ws tunes segment_cost, which its defaults do not name: the first trial (the arch's default)
    takes the value the kernel has without it, not a KeyError."""
    first = tune.default_config_for(resolve("gluon_wgmma_ws", "sm_90"))
    assert first["segment_cost"] == 0 and first["waves"] == 0
