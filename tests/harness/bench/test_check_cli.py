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
