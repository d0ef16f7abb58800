"""A plain (non-editable) install, used from another directory: the CLI runs and variant="auto"
finds the tuned table shipped in the package. CPU only; the repository's own dependencies
(torch, triton, ...) are reused, so nothing is downloaded."""

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
    venv, work = installed
    return subprocess.run([str(venv / "bin" / args[0]), *args[1:]], cwd=work, capture_output=True, text=True,
                          timeout=900)


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
    assert "triton_splitkv  sm_120           240          35" in static.stdout, static.stdout[-800:]
    tuned = _run(installed, "vk", "tuned")
    assert tuned.returncode == 0 and "# shipped:" in tuned.stdout and "site-packages" in tuned.stdout, tuned.stdout[:500]


def test_auto_finds_the_shipped_table(installed):
    code = ("from verify_kernels import dispatch; "
            "table = dispatch.load_tuned('nvidia-h200', str(dispatch.TUNED_DIR)); "
            "print(dispatch.TUNED_DIR); print(len(table))")
    done = _run(installed, "python", "-c", code)
    assert done.returncode == 0, done.stderr
    folder, count = done.stdout.split()
    assert "site-packages" in folder and int(count) > 0
