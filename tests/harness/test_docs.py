"""The READMEs against the code (FlashMLA's tests/test_readme_example.py, in spirit): every ``vk``
command (code lines, and inline spans without placeholders) parses with the CLI's own parser, every
file path they cite, every section they link and every script they say to run exists, every README has
something of these to check, and the README's Python example runs on the CPU."""

import argparse
import re
import shlex
import subprocess
from pathlib import Path

import pytest

from harness.cli import build_parser

ROOT = Path(__file__).resolve().parents[2]
READMES = [ROOT / "README.md", ROOT / "results" / "README.md", ROOT / "experiments" / "README.md",
           *sorted((ROOT / "harness").rglob("README.md"))]
SUFFIXES = (".py", ".sh", ".md", ".jsonl", ".json", ".yaml", ".txt", ".png", ".cu", ".diff", ".db", ".toml")


def _commands(text: str) -> list[str]:
    """``vk ...`` lines of indented or fenced code (backslash continuations joined), and inline
    `` `vk ...` `` spans without placeholders (``<gpu>``, ``L``, ``...``), which name no real value."""
    joined = re.sub(r"\\\n\s*", " ", text)
    blocks = [line.strip() for line in joined.splitlines() if re.match(r"\s+vk \S", line) or line.startswith("vk ")]
    inline = [span for span in re.findall(r"`(vk [^`]+)`", text)
              if not re.search(r"<|\.\.\.|\s[A-Z]\b|\[|\|", span)]
    return blocks + inline


def _scripts(text: str) -> list[str]:
    """The scripts a README tells the reader to run: `` `bash scripts/x.sh ...` ``, `` `python3 scripts/x.py` ``."""
    return re.findall(r"(?:bash|python3?) ((?:scripts|harness)/[\w/.-]+\.(?:sh|py))", text)


@pytest.mark.parametrize("readme", READMES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_vk_line_parses(readme):
    commands = _commands(readme.read_text())
    parser = build_parser()
    subcommands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices
    for command in commands:
        words = shlex.split(command.split("  #")[0])[1:]
        if len(words) == 1:  # a subcommand named in prose (`vk report`): it must exist
            assert words[0] in subcommands, f"{readme.name}: `{command}` names no vk subcommand"
            continue
        try:
            parser.parse_args(words)
        except SystemExit as error:
            pytest.fail(f"{readme.name}: `{command}` does not parse (exit {error.code})")


@pytest.mark.parametrize("readme", READMES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_readme_has_commands_or_paths_to_check_and_its_scripts_exist(readme):
    """Each README is checked by this file for something: a command that parses or a path that exists."""
    text = readme.read_text()
    assert _commands(text) or _cited_paths(text), f"{readme.relative_to(ROOT)}: nothing the docs test can check"
    missing = [script for script in _scripts(text) if not (ROOT / script).is_file()]
    assert not missing, f"{readme.relative_to(ROOT)} tells the reader to run missing scripts: {missing}"


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


def _slug(heading: str) -> str:
    """GitHub's anchor for a markdown heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


@pytest.mark.parametrize("readme", READMES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_cited_section_exists(readme):
    """A link to a section (`[..](file.md#anchor)` or `(#anchor)`) names a heading the file has."""
    missing = []
    for target, anchor in re.findall(r"\]\(([^)#\s]*)#([^)\s]+)\)", readme.read_text()):
        path = (readme.parent / target) if target else readme
        headings = re.findall(r"^#+\s+(.*)$", path.read_text(), flags=re.M) if path.is_file() else []
        if anchor not in {_slug(h) for h in headings}:
            missing.append(f"{target}#{anchor}")
    assert not missing, f"{readme.relative_to(ROOT)} links sections that do not exist: {missing}"


def test_slugs_follow_github():
    assert _slug("Ragged batches: the planner (`notes/2026-12-04-scheduler.md`)") == \
        "ragged-batches-the-planner-notes2026-12-04-schedulermd"
    assert _slug("Predicted, not measured (sm_120)") == "predicted-not-measured-sm_120"


def test_readme_python_example_runs_on_the_cpu():
    (example,) = re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), flags=re.S)
    namespace = {}
    exec(compile(example, "README.md", "exec"), namespace)  # noqa: S102 (our own README)
    assert tuple(namespace["expected"].shape) == (2, 9, 2, 512)


def test_readme_is_short_and_its_test_command_is_the_ci_one():
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 130 and len((ROOT / "results" / "README.md").read_text().splitlines()) <= 150
    assert "python -m pytest -q" in readme and "python -m pytest -q" in (ROOT / ".ci" / "run").read_text()
