"""The kernel experiments kept as patches (experiments/) still apply to the source they were made
against, so their run scripts rebuild what the records in results/ timed."""

import shutil
import subprocess
from pathlib import Path

import pytest

from harness.search_space import kernel_source_hash

ROOT = Path(__file__).resolve().parents[1]
WS_PATCHED_AT = "189877040873e776"  # gluon_wgmma_ws's source hash when experiments/ws/*.diff were made


@pytest.mark.skipif(shutil.which("patch") is None, reason="needs the patch tool")
@pytest.mark.parametrize("diff", sorted((ROOT / "experiments").glob("*/*.diff")), ids=lambda p: p.name)
def test_experiment_patch_applies(diff, tmp_path):
    first = diff.read_text().splitlines()[0]
    target = ROOT / first.removeprefix("--- ").strip()
    if target.name == "gluon_wgmma_ws.py" and kernel_source_hash("gluon_wgmma_ws") != WS_PATCHED_AT:
        pytest.skip("gluon_wgmma_ws changed since its experiments were made; they apply to its earlier source")
    result = subprocess.run(["patch", "-s", "-o", str(tmp_path / "patched.py"), str(target), str(diff)],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    compile((tmp_path / "patched.py").read_text(), diff.name, "exec")
