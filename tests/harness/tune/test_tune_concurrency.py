"""Tuning loses nothing under concurrency and interruption (CPU: VK_TUNE_FAKE costs stand in for
GPU timings):

- several ``vk tune`` processes started together on a fresh SQLite file all finish (the schema is
  created once, under a lock);
- eight processes tuning eight keys into one winners table keep all eight winners;
- Ctrl-C re-queues the trial in flight and it does not count against ``--trials``; after SIGKILL the
  trial left RUNNING is reaped by the next run and measured again;
- many worker processes of two hosts' studies on one PostgreSQL server (``VK_TEST_POSTGRES_URL``,
  which ``.ci/run`` starts): every study's budget reached, every winner written, no config measured
  twice.
"""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

optuna = pytest.importorskip("optuna")

from harness.static.space import load_space  # noqa: E402
from harness.tune import study as tune  # noqa: E402

TrialState = optuna.trial.TrialState


def _vk_tune(storage: str, winners, *extra) -> list[str]:
    return [sys.executable, "-m", "harness", "tune", "--variants", "triton_splitkv", "--prefix", "4096", "--heads",
            "8", "--storage", storage, "--winners", str(winners), "--no-compile", "--no-progress", "--arch", "sm_120",
            *extra]


def _env(sleep_s: float = 0.0) -> dict:
    return {**os.environ, "VK_TUNE_FAKE": "1", "VK_TUNE_FAKE_SLEEP": str(sleep_s)}


def _study(storage: str, tree_nodes: int = 16, gpu: str = "fake-cpu"):
    name = f"triton_splitkv|{gpu}|L4096|T{tree_nodes}|H8|ps64|bfloat16"
    return optuna.load_study(study_name=name, storage=tune.open_storage(storage))


def _measured_params(study) -> list[str]:
    return [json.dumps(t.params, sort_keys=True) for t in study.get_trials(states=(TrialState.COMPLETE,))
            if "duplicate_of" not in t.user_attrs]


def _wait_for_a_measuring_trial(storage: str, process, timeout_s: float = 120):
    """The first trial a worker is measuring: RUNNING with its worker recorded, every tunable sampled
    and still RUNNING a moment later (a fake measurement sleeps; a trial caught while it samples, or
    while it is pruned as infeasible or a duplicate, is not yet or never measured)."""
    tunables = set(load_space("triton_splitkv", "sm_120")["tunables"])
    deadline = time.time() + timeout_s
    while time.time() < deadline and process.poll() is None:
        try:
            running = [t for t in _study(storage).get_trials(states=(TrialState.RUNNING,))
                       if "worker" in t.user_attrs and set(t.params) == tunables]
        except Exception:  # the study does not exist yet
            running = []
        if running:
            time.sleep(0.3)
            if _study(storage).trials[running[0].number].state == TrialState.RUNNING:
                return running[0]
        time.sleep(0.2)
    raise AssertionError(f"no trial was being measured within {timeout_s} s (exit {process.poll()})")


@pytest.mark.parametrize("attempt", range(2))
def test_processes_started_together_on_a_fresh_sqlite_file_all_finish(tmp_path, attempt):
    storage = f"sqlite:///{tmp_path / 'fresh.db'}"
    processes = [subprocess.Popen(_vk_tune(storage, tmp_path / "w.yaml", "--tree", "16", "--trials", "3"),
                                  env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
                 for _ in range(4)]
    errors = [p.communicate(timeout=300)[1] for p in processes]
    assert [p.returncode for p in processes] == [0] * 4, [e[-600:] for e in errors]
    assert tune.measured_trials(_study(storage)) >= 3


def test_eight_writers_of_one_winners_table_lose_no_winner(tmp_path):
    storage = f"sqlite:///{tmp_path / 'eight.db'}"
    winners = tmp_path / "winners.yaml"
    trees = [8, 12, 16, 24, 32, 48, 64, 96]
    processes = [subprocess.Popen(_vk_tune(storage, winners, "--tree", str(t), "--trials", "2"), env=_env(),
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True) for t in trees]
    errors = [p.communicate(timeout=600)[1] for p in processes]
    assert [p.returncode for p in processes] == [0] * len(trees), [e[-600:] for e in errors]
    import yaml

    table = yaml.safe_load(winners.read_text())
    assert sorted(record["tree_nodes"] for record in table.values()) == trees


def test_ctrl_c_requeues_the_trial_in_flight_and_it_costs_no_budget(tmp_path):
    storage = f"sqlite:///{tmp_path / 'int.db'}"
    command = _vk_tune(storage, tmp_path / "w.yaml", "--tree", "16", "--trials", "4")
    process = subprocess.Popen(command, env=_env(sleep_s=1.5), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True)
    in_flight = _wait_for_a_measuring_trial(storage, process)
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 130, stderr[-800:]
    assert stderr.strip().splitlines() == [stderr.strip().splitlines()[-1]] and "interrupted" in stderr, stderr
    study = _study(storage)
    interrupted = study.trials[in_flight.number]
    assert interrupted.state == TrialState.FAIL and "interrupted" in interrupted.user_attrs
    queued = [t.system_attrs.get("fixed_params") for t in study.get_trials(states=(TrialState.WAITING,))]
    assert in_flight.params in queued
    done = subprocess.run(command, env=_env(), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-800:]
    study = _study(storage)
    assert tune.measured_trials(study) == 4
    assert json.dumps(in_flight.params, sort_keys=True) in _measured_params(study)


def test_sigkill_leaves_a_running_trial_that_the_next_run_reaps_and_measures(tmp_path):
    storage = f"sqlite:///{tmp_path / 'kill.db'}"
    command = _vk_tune(storage, tmp_path / "w.yaml", "--tree", "16", "--trials", "4")
    process = subprocess.Popen(command, env=_env(sleep_s=1.5), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    in_flight = _wait_for_a_measuring_trial(storage, process)
    process.send_signal(signal.SIGKILL)
    process.wait()
    assert _study(storage).trials[in_flight.number].state == TrialState.RUNNING
    done = subprocess.run(command, env=_env(), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-800:]
    study = _study(storage)
    reaped = study.trials[in_flight.number]
    assert reaped.state == TrialState.FAIL and "interrupted" in reaped.user_attrs
    assert not study.get_trials(states=(TrialState.RUNNING,))
    assert tune.measured_trials(study) == 4
    assert json.dumps(in_flight.params, sort_keys=True) in _measured_params(study)


def test_a_bad_storage_url_fails_at_once_in_one_line(tmp_path):
    started = time.time()
    done = subprocess.run(_vk_tune("postgresql://nobody@127.0.0.1:1/none", tmp_path / "w.yaml", "--tree", "16"),
                          env=_env(), capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr[-800:]
    assert "storage" in done.stderr and time.time() - started < 60


@pytest.mark.skipif(not os.environ.get("VK_TEST_POSTGRES_URL"),
                    reason="set VK_TEST_POSTGRES_URL to a PostgreSQL database (.ci/run starts one) to run")
def test_eight_workers_of_two_hosts_on_postgresql(tmp_path):
    """Two hosts' worth of studies (GPU SKUs host-a and host-b, two keys each), each host four worker
    processes (``--workers 4``), all started together on one fresh PostgreSQL database."""
    url = os.environ["VK_TEST_POSTGRES_URL"]
    storage = optuna.storages.RDBStorage(url)
    for summary in optuna.get_all_study_summaries(storage):
        optuna.delete_study(study_name=summary.study_name, storage=storage)
    trials, trees, hosts = 6, (16, 64), ("host-a", "host-b")
    processes = {host: subprocess.Popen(_vk_tune(url, tmp_path / f"{host}.yaml", "--tree", ",".join(map(str, trees)),
                                                 "--trials", str(trials), "--workers", "4", "--gpu", host),
                                        env=_env(sleep_s=0.3), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                        text=True)
                 for host in hosts}
    errors = {host: p.communicate(timeout=900)[1] for host, p in processes.items()}
    assert {host: p.returncode for host, p in processes.items()} == dict.fromkeys(hosts, 0), errors
    import yaml

    for host in hosts:
        winners = yaml.safe_load((tmp_path / f"{host}.yaml").read_text())
        assert sorted(r["tree_nodes"] for r in winners.values()) == list(trees), host
        for nodes in trees:
            study = _study(url, nodes, host)
            measured = _measured_params(study)
            assert len(measured) == len(set(measured)), f"{host} T{nodes}: a config was measured twice"
            assert trials <= tune.measured_trials(study) <= trials + 4
            assert not study.get_trials(states=(TrialState.RUNNING,))
            record = winners[study.study_name]
            best = min(study.get_trials(states=(TrialState.COMPLETE,)), key=lambda t: t.value)
            assert record["median_ms"] == best.value
