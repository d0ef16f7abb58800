"""A plain (non-editable) install, used from another directory: the CLI runs and variant="auto"
finds the tuned table shipped in the package. CPU only; the repository's own dependencies
(torch, triton, ...) are reused, so nothing is downloaded."""

import hashlib
import os
import shutil
import site
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """A fresh venv holding a wheel-built copy of the package; its other needs come from this
    environment's site-packages through a .pth line (which does not run this environment's own
    .pth files, so the editable install of the checkout is not seen)."""
    base = tmp_path_factory.mktemp("install")
    venv = base / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    purelib = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                  capture_output=True, text=True, check=True).stdout.strip())
    parents = {sysconfig.get_paths()["purelib"], *site.getsitepackages()}
    (purelib / "dependencies.pth").write_text("\n".join(sorted(parents)) + "\n")
    build = base / "src"
    shutil.copytree(ROOT, build, ignore=shutil.ignore_patterns(".git", ".venv", "results", "*.egg-info", "build",
                                                              "__pycache__", ".whl"))
    # The venv's own interpreter runs pip (so ``vk`` gets its shebang); --ignore-installed, or pip would
    # uninstall this environment's editable install, which it sees through the .pth line.
    subprocess.run([str(python), "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
                    "--ignore-installed", "--no-warn-script-location", str(build)], check=True)
    work = base / "elsewhere"
    shutil.copytree(ROOT / "results" / "static", work / "results" / "static")  # the static model's compile cache
    return venv, work


def _run(installed, *args):
    """A command of the installed copy, in a folder outside the checkout, writing under its ./results."""
    venv, work = installed
    env = {k: v for k, v in os.environ.items() if k != "VK_RESULTS_DIR"}
    return subprocess.run([str(venv / "bin" / args[0]), *args[1:]], cwd=work, capture_output=True, text=True,
                          timeout=900, env=env)


def _package_files(installed) -> dict[str, str]:
    """Every file of the installed package, by path, with its content hash."""
    venv, _ = installed
    done = subprocess.run([str(venv / "bin" / "python"), "-c", "import harness, verify_kernels; "
                           "print(harness.__path__[0]); print(verify_kernels.__path__[0])"],
                          capture_output=True, text=True, check=True)
    files = {}
    for folder in done.stdout.split():
        for path in sorted(Path(folder).rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts:
                files[str(path)] = hashlib.sha256(path.read_bytes()).hexdigest()
    return files


def test_the_installed_copy_is_the_one_imported(installed):
    done = _run(installed, "python", "-c", "import verify_kernels, harness, search_spaces; "
                "print(verify_kernels.__file__); print(harness.__file__); print(search_spaces.SPACES_DIR)")
    assert done.returncode == 0, done.stderr
    assert all("site-packages" in line and str(ROOT) not in line for line in done.stdout.splitlines()), done.stdout


def test_vk_check_static_and_tuned_run_from_another_directory(installed):
    check = _run(installed, "vk", "check", "--device", "cpu", "--variants", "triton_splitkv", "--no-progress",
                 "--cases", "odd_lengths")
    assert check.returncode == 0 and "passed, 0 failed" in check.stdout, check.stdout[-1500:] + check.stderr[-1500:]
    static = _run(installed, "vk", "static", "--space", "--arch", "sm_120")
    assert static.returncode == 0, static.stderr[-1500:]
    # The checkout's own count under this environment's Triton (which allocates registers its own way,
    # so the feasible count depends on its version): the installed copy must agree with it.
    here = subprocess.run([sys.executable, "-m", "harness", "static", "--space", "--arch", "sm_120"], cwd=ROOT,
                          capture_output=True, text=True, timeout=900)
    def summary(stdout: str) -> list[list[str]]:  # the closing table: variant, arch, candidates, feasible, spills
        return [f for f in (line.split() for line in stdout.splitlines()) if len(f) == 5 and f[2].isdigit()]

    (expected,) = [row for row in summary(here.stdout) if row[0] == "triton_splitkv"]
    assert expected[1] == "sm_120" and int(expected[3]) > 0, here.stdout[-800:]
    assert expected in summary(static.stdout), static.stdout[-800:]
    tuned = _run(installed, "vk", "tuned")
    assert tuned.returncode == 0 and "# shipped" in tuned.stdout and "site-packages" in tuned.stdout, tuned.stdout[:500]


def test_auto_finds_the_shipped_table(installed):
    code = ("from verify_kernels import dispatch; "
            "table = dispatch.load_tuned('predicted-sm_120', str(dispatch.TUNED_DIR)); "
            "print(dispatch.TUNED_DIR); print(len(table))")
    done = _run(installed, "python", "-c", code)
    assert done.returncode == 0, done.stderr
    folder, count = done.stdout.split()
    assert "site-packages" in folder and int(count) > 0


def test_commands_never_write_into_the_installed_package(installed):
    """vk predict-fit writes its fit under ./results/predict (not site-packages); --ship and
    vk tuned --publish, which write into the package, refuse an installed copy."""
    _, work = installed
    before = _package_files(installed)
    records = str(ROOT / "results" / "bench" / "cuda_ws-side-by-side-nvidia-h200.jsonl")
    fit = _run(installed, "vk", "predict-fit", "--records", records, "--trials", "3", "--predict-for")
    assert fit.returncode == 0, fit.stderr[-1500:]
    assert (work / "results" / "predict" / "params" / "cuda_ws-sm_90.yaml").is_file()
    ship = _run(installed, "vk", "predict-fit", "--records", records, "--trials", "3", "--ship")
    assert ship.returncode == 2 and "not a source checkout" in ship.stderr, ship.stderr[-800:]
    table = str(ROOT / "results" / "tuned" / "archive" / "2026-12-04-nvidia-h200-before-planner.yaml")
    publish = _run(installed, "vk", "tuned", "--publish", "--file", table)
    assert publish.returncode == 2 and "not a source checkout" in publish.stderr, publish.stderr[-800:]
    assert _package_files(installed) == before
