"""Bad input on the command line ends in one line on stderr that names the flag, exit status 2,
and no traceback (the table of hostile inputs is tests/harness/test_hostile_inputs.py; here the
cases that need a subprocess: a missing optional dependency); bad values through the API raise
naming the argument; numbers of other types (NumPy scalars) are accepted where a Python number is."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

from verify_kernels import make_problem, reference_attention, verify_attention

from conftest import DEVICE

HIDE = ("import importlib.util as u, sys; real = u.find_spec; "
        "u.find_spec = lambda name, *a: None if name in {hidden!r} else real(name, *a); "
        "from harness.cli import main; sys.exit(main({argv!r}))")


def _vk(*argv, hide=(), cwd=None, env=None):
    code = HIDE.format(hidden=set(hide), argv=list(argv))
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=cwd, timeout=300,
                          env={**os.environ, **(env or {})})


@pytest.mark.parametrize("command", ["tune", "tune-quality"])
def test_a_missing_optional_dependency_names_the_extra(command, tmp_path):
    argv = [command] + (["--storage", "sqlite:///x.db", "--study", "s"] if command == "tune-quality" else [])
    done = _vk(*argv, hide=("optuna",), cwd=tmp_path)
    assert done.returncode == 2 and "verify-kernels[tune]" in done.stderr and "Traceback" not in done.stderr


def test_report_writes_its_markdown_without_matplotlib(tmp_path):
    from harness.measure import records

    path = tmp_path / "bench.jsonl"
    records.append_records(path, [records.make_record("bench", {
        "variant": "triton_splitkv", "prefix_len": 4096, "tree_nodes": 64, "heads": 8, "batch": 1, "page_size": 64,
        "config": {}, "status": "ok", "reason": "", "mode": "graph", "median_ms": 0.05, "iqr_ms": 0.001,
        "pct_roofline": 12.0, "floor_ms": 0.006}, command="vk bench")])
    done = _vk("report", str(path), "--out", str(tmp_path / "report" / "r"), hide=("matplotlib",), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "report" / "r.md").exists() and "verify-kernels[plot]" in done.stderr


def test_static_gives_the_whole_compile_reason(tmp_path):
    done = _vk("static", "--variant", "triton_splitkv", "--arch", "sm_90", "--config", json.dumps({"BLOCK_N": 7}),
               env={"TRITON_INTERPRET": "0"})  # an offline compile, not the interpreter
    assert done.returncode == 1 and "static_assert(BLOCK_N % 16 == 0)" in done.stdout, done.stdout[-600:]


def test_api_names_a_config_value_of_the_wrong_type_and_takes_numpy_scalars():
    problem = make_problem([40], 5, 2, page_size=16, seed=2, device=DEVICE)
    with pytest.raises(TypeError, match="config: BLOCK_N must be an int"):
        verify_attention(*problem.arguments(), **problem.kwargs(), variant="triton_splitkv", config={"BLOCK_N": "32"})
    kwargs = problem.kwargs()
    kwargs["sm_scale"], kwargs["v_dim"] = np.float32(kwargs["sm_scale"]), np.int64(512)
    out = verify_attention(*problem.arguments(), **kwargs, variant="triton_splitkv", config={"BLOCK_N": np.int64(16)})
    expected = reference_attention(*problem.arguments(), **problem.kwargs())
    assert float((out.double() - expected.double()).norm() / expected.double().norm()) < 2e-2
    with pytest.raises(TypeError, match="sm_scale"):
        verify_attention(*problem.arguments(), sm_scale="0.1", v_dim=512, variant="triton_splitkv")
    assert torch.isfinite(out).all()


def test_every_subcommand_has_a_description_and_every_flag_help():
    from harness.cli import build_parser

    parser = build_parser()
    (sub,) = [action for action in parser._actions if isinstance(action, type(parser._subparsers._group_actions[0]))]
    missing = {name: [a.option_strings[0] for a in command._actions
                      if a.option_strings and a.dest != "help" and not (a.help or "").strip()
                      and a.help != "==SUPPRESS=="]
               for name, command in sub.choices.items()}
    assert not {name: flags for name, flags in missing.items() if flags}
    assert all(command.description for command in sub.choices.values())
