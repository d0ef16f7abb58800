"""The READMEs against the code (FlashMLA's tests/test_readme_example.py, in spirit): every ``vk``
command line parses with the CLI's own parser, every file path they cite exists, and the README's
Python example runs on the CPU."""

import re
import shlex
import subprocess
from pathlib import Path

import pytest

from harness.cli import build_parser

ROOT = Path(__file__).resolve().parents[2]
READMES = [ROOT / "README.md", ROOT / "results" / "README.md", ROOT / "experiments" / "README.md",
           *sorted((ROOT / "harness").rglob("README.md")), ROOT / "scripts" / "archive" / "README.md"]
SUFFIXES = (".py", ".sh", ".md", ".jsonl", ".json", ".yaml", ".txt", ".png", ".cu", ".diff", ".db", ".toml")


def _commands(text: str) -> list[str]:
    """``vk ...`` lines of indented or fenced code, with backslash continuations joined."""
    joined = re.sub(r"\\\n\s*", " ", text)
    return [line.strip() for line in joined.splitlines() if re.match(r"\s+vk \S", line) or line.startswith("vk ")]


@pytest.mark.parametrize("readme", READMES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_vk_line_parses(readme):
    commands = _commands(readme.read_text())
    for command in commands:
        words = shlex.split(command.split("  #")[0])[1:]
        try:
            build_parser().parse_args(words)
        except SystemExit as error:
            pytest.fail(f"{readme.name}: `{command}` does not parse (exit {error.code})")


def _cited_paths(text: str) -> set[str]:
    paths = set()
    for token in re.findall(r"`([^`\s]+)`", text) + re.findall(r"\]\(([^)\s]+)\)", text):
        token = token.rstrip(".,:;")
        if any(mark in token for mark in "<>*{}$|") or token.startswith(("http", "-", "git")):
            continue
        if "/" in token and (token.endswith(SUFFIXES) or token.endswith("/")):
            paths.add(token)
    return paths


def _generated(path: Path) -> bool:
    """A file git ignores: written by a script (a patched experiment, say), so cited before it exists."""
    return subprocess.run(["git", "-C", str(ROOT), "check-ignore", "-q", str(path)]).returncode == 0


@pytest.mark.parametrize("readme", READMES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_cited_path_exists(readme):
    missing = [path for path in sorted(_cited_paths(readme.read_text()))
               if not ((ROOT / path).exists() or (readme.parent / path).exists() or _generated(readme.parent / path))]
    assert not missing, f"{readme.relative_to(ROOT)} cites missing files: {missing}"


def test_readme_python_example_runs_on_the_cpu():
    (example,) = re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), flags=re.S)
    namespace = {}
    exec(compile(example, "README.md", "exec"), namespace)  # noqa: S102 (our own README)
    assert tuple(namespace["expected"].shape) == (2, 9, 2, 512)


def test_readme_is_short_and_its_test_command_is_the_ci_one():
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 130 and len((ROOT / "results" / "README.md").read_text().splitlines()) <= 150
    assert "python -m pytest -q" in readme and "python -m pytest -q" in (ROOT / ".ci" / "run").read_text()
