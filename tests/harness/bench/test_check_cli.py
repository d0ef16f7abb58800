"""``vk --help`` needs torch only; ``vk check`` end to end."""

import os
import subprocess
import sys

from harness.measure import records

from conftest import DEVICE


def test_cli_help_needs_torch_only():
    completed = subprocess.run([sys.executable, "-c",
                                "import sys, harness.cli as c; sys.exit(c.main(['--help']))"],
                               capture_output=True, text=True)
    assert completed.returncode == 0 and "check" in completed.stdout
    imported = subprocess.run([sys.executable, "-c",
                               "import sys, verify_kernels, harness.cli; "
                               "print(sorted(m for m in ('triton', 'cupy', 'optuna') if m in sys.modules))"],
                              capture_output=True, text=True, check=True)
    assert imported.stdout.strip() == "[]"


def test_vk_check_cli(tmp_path):
    """On a CPU machine this runs the interpreter; on the GPU host the same cases on the GPU."""
    out = tmp_path / "check.jsonl"
    completed = subprocess.run([sys.executable, "-m", "harness", "check", "--device", DEVICE, "--quick",
                                "--variants", "triton_ps1", "--cases",
                                "prefix_0", "page_edge", "--no-progress", "--out", str(out)],
                               capture_output=True, text=True,
                               env={**os.environ, "TRITON_INTERPRET": "1" if DEVICE == "cpu" else "0"})
    assert completed.returncode == 0, completed.stdout + completed.stderr
    assert "2 passed, 0 failed" in completed.stdout
    assert [r["status"] for r in records.read_records(out)] == ["pass", "pass"]


def test_check_counters_profile_each_passed_case_apart(monkeypatch):
    """vk check --counters: a passed case gets the profile of its own replay (the case, variant, page
    size and config handed to a separate process); a failed or skipped case is not profiled."""
    import json

    from harness.bench import check
    from harness.bench.cases import Case, CaseResult

    cases = [Case("page_edge", (64,), 33, 2), Case("fp16", (54,), 33, 2, dtype="float16")]

    def run_case(name, case, *, device, page_size, config=None):
        status = "pass" if case.name == "page_edge" else "fail"
        return CaseResult(name, case.name, "", page_size, 0.0, 0.01, status, config=dict(config or {}))
    monkeypatch.setattr(check, "run_case", run_case)
    monkeypatch.setattr(check, "check_matrix", lambda name: [(64, {"BLOCK_N": 32})])
    seen = []

    def profile(argv):
        seen.append(json.loads(argv[3]))
        return {"status": "ok", "tensor_pipe_pct": 12.5}
    results = check.run_check(check.check_jobs(["triton_splitkv"], cases), device="cuda", progress=False,
                              counters=True, profile=profile)
    assert [r.counters for r in results] == [{"status": "ok", "tensor_pipe_pct": 12.5}, None]
    assert seen == [{"case": {"name": "page_edge", "prefix_lens": [64], "tree_nodes": 33, "heads": 2, "tree": "random",
                              "dtype": "bfloat16", "q_scale": 1.0, "seed": 0}, "variant": "triton_splitkv",
                     "page_size": 64, "config": {"BLOCK_N": 32}}]
    assert "tensor %" in check.format_table(results) and "12.5" in check.format_table(results)
    assert results[0].as_record()["counters"]["tensor_pipe_pct"] == 12.5


def test_check_counters_needs_a_gpu():
    completed = subprocess.run([sys.executable, "-m", "harness", "check", "--device", "cpu", "--counters",
                                "--quick", "--no-progress"], capture_output=True, text=True)
    assert completed.returncode == 2 and "--counters: needs a CUDA GPU" in completed.stderr
    assert "Traceback" not in completed.stderr


def test_check_keeps_each_record_and_resumes(monkeypatch, tmp_path, capsys):
    """A check cut short keeps the records of the cases it finished; --resume runs only the rest."""
    from harness import cli
    from harness.bench import check
    from harness.bench.cases import CaseResult

    ran = []

    def run_case(name, case, *, device, page_size, config=None):
        if len(ran) == 2 and not resumed:
            raise KeyboardInterrupt
        ran.append((case.name, page_size))
        return CaseResult(name, case.name, "", page_size, 1e-3, 0.01, "pass", config=dict(config or {}))
    monkeypatch.setattr(check, "run_case", run_case)
    monkeypatch.setattr(check, "check_matrix", lambda name: [(16, {}), (64, {"BLOCK_N": 32})])
    out = tmp_path / "check.jsonl"
    argv = ["check", "--device", "cpu", "--quick", "--variants", "triton_ps1", "--cases", "prefix_0", "page_edge",
            "--no-progress", "--out", str(out)]
    resumed = False
    assert cli.main(argv) == 130
    assert [(r["case"], r["page_size"]) for r in records.read_records(out)] == ran == [("prefix_0", 16),
                                                                                       ("page_edge", 16)]
    resumed, ran[:] = True, []
    assert cli.main([*argv, "--resume"]) == 0
    assert ran == [("prefix_0", 64), ("page_edge", 64)]
    assert "--resume: 2 cases already in" in capsys.readouterr().err
    assert len(records.read_records(out)) == 4
