"""A proxy run (vk bench --proxy-for, vk tune --constrain-to) runs the proxied arch's defaults under the
point's config, not the card's: cuda_qreg's sm_90 default frees ring slots by mbarriers (EMPTY_BARS 1),
which an sm_120 config run on an H100 must not inherit. CPU: the launch is replaced by a recorder."""

import pytest

from harness.bench import sweep
from harness.tune import worker
from verify_kernels import make_problem


@pytest.mark.parametrize(("arch", "block_n", "empty_bars"), [("sm_120", 16, 0), ("sm_90", 32, 1)])
def test_a_proxy_point_takes_the_proxied_arch_defaults(monkeypatch, arch, block_n, empty_bars):
    launched = []
    monkeypatch.setattr(sweep, "verify_attention", lambda *a, config=None, **k: launched.append(config))
    problem = make_problem(100, 8, 8, device="cpu", seed=0)
    point = sweep.BenchPoint("cuda_qreg", 100, 8, 8, 64, config=(("STAGES", 2),))
    _, resolved = sweep.implementation_call(point, problem, arch)
    assert launched[0]["STAGES"] == 2 and launched[0]["BLOCK_N"] == block_n
    assert launched[0]["EMPTY_BARS"] == empty_bars and resolved["EMPTY_BARS"] == empty_bars


def test_without_a_proxy_arch_the_point_config_alone_is_sent(monkeypatch):
    launched = []
    monkeypatch.setattr(sweep, "verify_attention", lambda *a, config=None, **k: launched.append(config))
    problem = make_problem(100, 8, 8, device="cpu", seed=0)
    sweep.implementation_call(sweep.BenchPoint("cuda_qreg", 100, 8, 8, 64, config=(("STAGES", 2),)), problem)
    assert launched[0] == {"STAGES": 2}  # the card's defaults fill the rest (variants.resolve_config)


def test_a_tune_trial_runs_at_the_tuned_arch_defaults(monkeypatch):
    """vk tune's worker hands the job's arch (the study's target, --constrain-to's for a proxy tune) to the
    bench point, whose untuned keys then take that arch's defaults."""
    seen = {}
    monkeypatch.setattr(worker, "_problem_and_reference", lambda point, seed: (None, None))

    def fake_bench_point(point, problem, reference, ceilings, **kwargs):
        seen.update(kwargs)
        return {"status": "ok", "median_ms": 1.0}

    monkeypatch.setattr(worker, "bench_point", fake_bench_point)
    job = {"variant": "cuda_qreg", "config": {"STAGES": 2}, "prefix_len": 100, "tree_nodes": 8, "heads": 8,
           "page_size": 64, "dtype": "bfloat16", "prefix_lens": [], "arch": "sm_120"}
    assert worker.measure(job)["status"] == "ok"
    assert seen["proxy_for"] == "sm_120"


def test_the_study_objective_sends_the_target_arch():
    from harness.tune.study import TuneKey, evaluate

    class Recorder:
        def run(self, job, timeout_s):
            self.job = job
            return {"status": "ok", "median_ms": 1.0}

    recorder = Recorder()
    key = TuneKey("cuda_qreg", "gpu", 4096, 8, 8, 64, "bfloat16", 100)
    evaluate(key, {"STAGES": 2}, timeout_s=1, rep_ms=1, worker=recorder, arch="sm_120")
    assert recorder.job["arch"] == "sm_120" and recorder.job["config"] == {"STAGES": 2}
