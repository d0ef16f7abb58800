"""Arch specs as data: ``arch/<name>.yaml``, each value with its source. A user with another GPU
adds a file with every field of ``FIELDS`` and a ``sources`` entry for each."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import yaml

ARCH_DIR = Path(__file__).parent / "arch"
FIELDS = ("sms", "clock_ghz", "dram_tbps", "l2_mb", "smem_per_sm_kb", "smem_per_block_kb", "registers_per_sm",
          "max_threads_per_sm", "max_blocks_per_sm", "mma_sync_flop_per_clock_per_sm", "smem_bytes_per_clock_per_sm")


@dataclass(frozen=True)
class Arch:
    name: str
    gpu: str
    sms: int
    clock_ghz: float
    dram_tbps: float
    l2_mb: float
    smem_per_sm_kb: float
    smem_per_block_kb: float
    registers_per_sm: int
    max_threads_per_sm: int
    max_blocks_per_sm: int
    mma_sync_flop_per_clock_per_sm: float
    smem_bytes_per_clock_per_sm: float
    sources: dict


def available() -> list[str]:
    return sorted(path.stem for path in ARCH_DIR.glob("*.yaml"))


def parse_arch(data: dict, origin: str) -> Arch:
    """An Arch from a spec dict; ValueError naming the file and every missing or unsourced field."""
    missing = [name for name in ("name", "gpu", *FIELDS) if name not in data]
    unsourced = [name for name in FIELDS if name not in (data.get("sources") or {})]
    if missing or unsourced:
        raise ValueError(f"{origin}: missing fields {missing or 'none'}; fields without a source {unsourced or 'none'} "
                         f"(every arch file needs {list(FIELDS)} and a sources entry for each)")
    bad = [name for name in FIELDS if not isinstance(data[name], (int, float)) or data[name] <= 0]
    if bad:
        raise ValueError(f"{origin}: fields {bad} must be positive numbers, got {[data[n] for n in bad]}")
    return Arch(**{name: data[name] for name in ("name", "gpu", *FIELDS, "sources")})


def load_arch(name: str) -> Arch:
    path = ARCH_DIR / f"{name}.yaml"
    if not path.exists():
        raise ValueError(f"arch: no spec for {name!r} (expected {path}); known: {available()}")
    return parse_arch(yaml.safe_load(path.read_text()) or {}, str(path))
