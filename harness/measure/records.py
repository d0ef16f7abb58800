"""Versioned JSON Lines records: one line per measurement or check, appended as it completes.

Appending one line at a time means a killed run loses nothing already written.
"""

from __future__ import annotations

import datetime
import json
from pathlib import Path
from typing import Iterable

from harness.measure.environment import command_line, describe_environment

SCHEMA_VERSION = 1


RESERVED_KEYS = ("schema_version", "kind", "environment", "timestamp", "command")


def make_record(kind: str, payload: dict, command: str | None = None) -> dict:
    """A record: kind, payload fields, environment, timestamp and the reproducing command."""
    clashes = sorted(set(payload) & set(RESERVED_KEYS))
    if clashes:
        raise ValueError(f"payload: keys {clashes} are reserved for the record itself")
    return {
        "schema_version": SCHEMA_VERSION,
        "kind": kind,
        **payload,
        "environment": describe_environment(),
        "timestamp": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": command or command_line(),
    }


def append_records(path: str | Path, records: Iterable[dict]) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as handle:
        for record in records:
            handle.write(json.dumps(record, default=str) + "\n")
            handle.flush()


def read_records(path: str | Path) -> list[dict]:
    """All records of a file; a line of another schema version raises with its number."""
    records = []
    for number, line in enumerate(Path(path).read_text().splitlines(), 1):
        if not line.strip():
            continue
        record = json.loads(line)
        if record.get("schema_version") != SCHEMA_VERSION:
            raise ValueError(f"{path}:{number}: schema_version {record.get('schema_version')!r}, "
                             f"expected {SCHEMA_VERSION}")
        records.append(record)
    return records
