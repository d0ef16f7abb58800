"""What a user hands the harness, checked before any work: files to read (JSON Lines records, YAML
tables) and paths to write. Every refusal is an ``InputError`` whose message is one line naming the
flag or file (and line), what was expected and what was given; ``vk`` prints it and exits 2.
"""

from __future__ import annotations

import json
import os
from pathlib import Path


class InputError(ValueError):
    """Bad input from the command line or a file it names: one line, printed by ``vk`` (exit 2)."""


def _nearest_existing(path: Path) -> Path:
    for parent in (path, *path.parents):
        if parent.exists():
            return parent
    return Path(".")


def check_output_file(path: str | Path, flag: str) -> Path:
    """``path`` can be created or appended to: not a folder, and its nearest existing parent is a
    writable folder. Nothing is created."""
    path = Path(path)
    if path.is_dir():
        raise InputError(f"{flag}: expected a file path, got the folder {path}")
    if path.exists() and not os.access(path, os.W_OK):
        raise InputError(f"{flag}: cannot write {path} (no permission)")
    existing = _nearest_existing(path.parent)
    if not existing.is_dir():
        raise InputError(f"{flag}: cannot write {path}: {existing} is a file, not a folder")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise InputError(f"{flag}: cannot write {path}: the folder {existing} is not writable")
    return path


def check_output_dir(path: str | Path, flag: str) -> Path:
    """``path`` is, or can be created as, a writable folder. Nothing is created."""
    path = Path(path)
    existing = _nearest_existing(path)
    if existing == path and not path.is_dir():
        raise InputError(f"{flag}: expected a folder, got the file {path}")
    if not existing.is_dir():
        raise InputError(f"{flag}: cannot create {path}: {existing} is a file, not a folder")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise InputError(f"{flag}: cannot write into {path}: {existing} is not writable")
    return path


def check_input_file(path: str | Path, flag: str) -> Path:
    path = Path(path)
    if path.is_dir():
        raise InputError(f"{flag}: expected a file, got the folder {path}")
    if not path.is_file():
        raise InputError(f"{flag}: no such file: {path}")
    return path


def read_jsonl(path: str | Path, flag: str) -> list[tuple[int, dict]]:
    """(line number, object) per non-blank line; a line that is not one JSON object (a truncated last
    line, a YAML file, text) is refused with the file and the line."""
    path = check_input_file(path, flag)
    rows = []
    try:
        text = path.read_text()
    except UnicodeDecodeError:
        raise InputError(f"{flag}: {path}: expected JSON Lines (text), got binary data") from None
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except json.JSONDecodeError as error:
            raise InputError(f"{flag}: {path}:{number}: expected one JSON object per line, got {line[:40]!r} "
                             f"({error.msg})") from None
        if not isinstance(value, dict):
            raise InputError(f"{flag}: {path}:{number}: expected a JSON object, got {type(value).__name__}")
        rows.append((number, value))
    if not rows:
        raise InputError(f"{flag}: {path}: expected JSON Lines records, got an empty file")
    return rows


def read_yaml_mapping(path: str | Path, flag: str, *, allow_empty: bool = False) -> dict:
    """A YAML file holding one mapping; a parse error names the line, another type or an empty file
    is refused (``allow_empty``: an empty file is an empty mapping)."""
    import yaml

    path = check_input_file(path, flag)
    try:
        value = yaml.safe_load(path.read_text())
    except UnicodeDecodeError:
        raise InputError(f"{flag}: {path}: expected YAML (text), got binary data") from None
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f":{mark.line + 1}" if mark is not None else ""
        problem = getattr(error, "problem", None) or str(error).splitlines()[0]
        raise InputError(f"{flag}: {path}{where}: not valid YAML ({problem})") from None
    if value is None:
        if allow_empty:
            return {}
        raise InputError(f"{flag}: {path}: expected a YAML mapping, got an empty file")
    if not isinstance(value, dict):
        raise InputError(f"{flag}: {path}: expected a YAML mapping, got a {type(value).__name__}")
    return value


def check_source_checkout(flag: str) -> Path:
    """Publishing into the package is a deliberate step of a source checkout (then committed), never
    of an installed copy: refuse when the package does not live in a git work tree."""
    import verify_kernels

    package = Path(verify_kernels.__file__).resolve().parent
    for parent in package.parents:
        if (parent / ".git").exists():
            return parent
    raise InputError(f"{flag}: the package is installed at {package}, not a source checkout; publish from a "
                     f"checkout of the repository (and commit the table there)")
