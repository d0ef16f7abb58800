"""The kernel experiments (experiments/*/) are patches only: each applies to the source it was made
against, so their run scripts rebuild what the records in results/ timed.

A folder's ``BASE`` names the commit its patches were made at. A patch's ``---`` line names the
file it patches: a tracked source (read at BASE from git) or the output of another patch in the
same folder (its ``+++`` line), which is built first.
"""

import functools
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PATCHES = sorted((ROOT / "experiments").glob("*/*.diff"))


def _header(diff: Path, prefix: str) -> str:
    line = next(line for line in diff.read_text().splitlines() if line.startswith(prefix))
    return line.removeprefix(prefix).split("\t")[0].strip()


@functools.cache
def _at_commit(commit: str, path: str) -> str | None:
    shown = subprocess.run(["git", "-C", str(ROOT), "show", f"{commit}:{path}"], capture_output=True, text=True)
    return None if shown.returncode else shown.stdout


def _build(diff: Path, tmp_path: Path) -> Path:
    """The file ``diff`` produces, from its base at the folder's BASE commit (or from the patch that
    produces its base)."""
    target = _header(diff, "--- ")
    producers = {_header(other, "+++ "): other for other in diff.parent.glob("*.diff")}
    if target in producers:
        base = _build(producers[target], tmp_path)
    else:
        commit = (diff.parent / "BASE").read_text().strip()
        source = _at_commit(commit, target)
        if source is None:
            pytest.skip(f"{target} at commit {commit} is not in this checkout's history")
        base = tmp_path / f"base-{diff.stem}.py"
        base.write_text(source)
    patched = tmp_path / f"patched-{diff.stem}.py"
    result = subprocess.run(["patch", "-s", "-o", str(patched), str(base), str(diff)], capture_output=True, text=True)
    assert result.returncode == 0, f"{diff.name}: {result.stdout}{result.stderr}"
    return patched


def test_every_experiment_folder_names_its_base_and_holds_no_copy_of_a_kernel():
    for folder in {diff.parent for diff in PATCHES}:
        assert (folder / "BASE").is_file(), folder
    tracked = subprocess.run(["git", "-C", str(ROOT), "ls-files", "experiments"], capture_output=True, text=True,
                             check=True).stdout.split()
    assert not [path for path in tracked if path.endswith(".py")], tracked


@pytest.mark.skipif(shutil.which("patch") is None, reason="needs the patch tool")
@pytest.mark.parametrize("diff", PATCHES, ids=lambda p: p.name)
def test_experiment_patch_applies(diff, tmp_path):
    patched = _build(diff, tmp_path)
    compile(patched.read_text(), diff.name, "exec")
