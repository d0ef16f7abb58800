"""The kernel experiments kept as patches (experiments/) still apply to the source they were made
against, so their run scripts rebuild what the records in results/ timed."""

import functools
import shutil
import subprocess
from pathlib import Path

import pytest

from harness.static.space import kernel_source_hash

ROOT = Path(__file__).resolve().parents[1]
WS_PATCHED_AT = "189877040873e776"  # gluon_wgmma_ws's source hash when experiments/ws/*.diff were made
WS_BASE_COMMIT = "1c8feeb"  # the last commit with that source (the TMA loader came after)


@functools.cache
def _ws_base_source() -> str | None:
    """gluon_wgmma_ws at WS_BASE_COMMIT (read from git once), or None without that history."""
    shown = subprocess.run(["git", "-C", str(ROOT), "show", f"{WS_BASE_COMMIT}:verify_kernels/gluon_wgmma_ws.py"],
                           capture_output=True, text=True)
    return None if shown.returncode else shown.stdout


def _patch_base(target: Path, tmp_path: Path) -> Path:
    """The source a patch was made against: the file itself, or gluon_wgmma_ws at WS_BASE_COMMIT."""
    if target.name != "gluon_wgmma_ws.py" or kernel_source_hash("gluon_wgmma_ws") == WS_PATCHED_AT:
        return target
    source = _ws_base_source()
    if source is None:
        pytest.skip(f"gluon_wgmma_ws changed since its experiments were made; their base is commit "
                    f"{WS_BASE_COMMIT}, not in this checkout's history")
    base = tmp_path / "base.py"
    base.write_text(source)
    return base


@pytest.mark.skipif(shutil.which("patch") is None, reason="needs the patch tool")
@pytest.mark.parametrize("diff", sorted((ROOT / "experiments").glob("*/*.diff")), ids=lambda p: p.name)
def test_experiment_patch_applies(diff, tmp_path):
    first = diff.read_text().splitlines()[0]
    target = ROOT / first.removeprefix("--- ").strip()
    result = subprocess.run(["patch", "-s", "-o", str(tmp_path / "patched.py"), str(_patch_base(target, tmp_path)),
                             str(diff)],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    compile((tmp_path / "patched.py").read_text(), diff.name, "exec")
