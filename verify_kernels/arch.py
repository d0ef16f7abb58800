"""The arch registry: one data file per GPU architecture (``arches/<name>.yaml``), each value with its
source, and one function from a device or a name to its record.

Everything that depends on an arch reads it here: dispatch (which table, which defaults), the variants
(what the ISA offers: ``features``), the static model (occupancy limits, shared memory, barriers), the
offline compilers (the target follows from ``capability``), the predictor (SM count, clock, DRAM,
mma.sync and shared-memory rates) and the CLIs (their ``--arch`` choices). Adding an arch is adding a
file; a variant without default configs for it uses those of the nearest known arch with the same
shared memory per block (``config_key``).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import torch

ARCH_DIR = Path(__file__).resolve().parent / "arches"
# What a kernel may need of the ISA, and the first capability that has it (PTX ISA): mma.sync, cp.async.bulk
# with mbarrier transaction counts, wgmma (sm_90a only: Blackwell dropped it). A record lists its own; the
# capabilities serve a device without a record.
# griddepcontrol: programmatic dependent launch (a kernel starts while the one before it ends)
FEATURES = {"mma_sync": (8, 0), "bulk_copy": (9, 0), "wgmma": (9, 0), "griddepcontrol": (9, 0)}
FIELDS = ("capability", "features", "sms", "clock_ghz", "dram_tbps", "l2_mb", "smem_per_sm_kb", "smem_per_block_kb",
          "smem_carveouts_kb", "registers_per_sm", "max_threads_per_sm", "max_blocks_per_sm", "barriers_per_sm",
          "mma_sync_flop_per_clock_per_sm", "smem_bytes_per_clock_per_sm")
NUMBERS = tuple(name for name in FIELDS if name not in ("capability", "features", "smem_carveouts_kb"))


@dataclass(frozen=True)
class Arch:
    name: str
    gpu: str
    capability: tuple[int, int]
    features: frozenset
    sms: int
    clock_ghz: float
    dram_tbps: float
    l2_mb: float
    smem_per_sm_kb: int
    smem_per_block_kb: int
    smem_carveouts_kb: tuple[int, ...]
    registers_per_sm: int
    max_threads_per_sm: int
    max_blocks_per_sm: int
    barriers_per_sm: int          # named barriers an SM holds (a block using 16 may cap its blocks per SM)
    mma_sync_flop_per_clock_per_sm: float
    smem_bytes_per_clock_per_sm: float
    sources: dict

    @property
    def max_warps_per_sm(self) -> int:
        return self.max_threads_per_sm // 32

    @property
    def smem_per_block_bytes(self) -> int:
        return self.smem_per_block_kb * 1024

    @property
    def compute(self) -> int:
        """The capability as one number (90, 120): Triton's GPUTarget and nvcc's ``sm_<n>``."""
        return self.capability[0] * 10 + self.capability[1]

    def has(self, feature: str) -> bool:
        if feature not in FEATURES:
            raise ValueError(f"feature: expected one of {sorted(FEATURES)}, got {feature!r}")
        return feature in self.features


@lru_cache(maxsize=None)
def _known_arches() -> tuple[str, ...]:
    return tuple(sorted((path.stem for path in ARCH_DIR.glob("*.yaml")), key=lambda name: load_arch(name).capability))


def known_arches() -> list[str]:
    """Every arch with a file, in capability order."""
    return list(_known_arches())


def parse_arch(data: dict, origin: str) -> Arch:
    """An Arch from a record's dict; ValueError naming the file and every missing, unsourced or bad field."""
    missing = [name for name in ("name", "gpu", *FIELDS) if name not in data]
    unsourced = [name for name in FIELDS if name not in (data.get("sources") or {})]
    if missing or unsourced:
        raise ValueError(f"{origin}: missing fields {missing or 'none'}; fields without a source {unsourced or 'none'} "
                         f"(every arch file needs {list(FIELDS)} and a sources entry for each)")
    bad = [name for name in NUMBERS if isinstance(data[name], bool) or not isinstance(data[name], (int, float))
           or data[name] <= 0]
    if bad:
        raise ValueError(f"{origin}: fields {bad} must be positive numbers, got {[data[n] for n in bad]}")
    unknown = sorted(set(data["features"]) - set(FEATURES))
    if unknown:
        raise ValueError(f"{origin}: unknown features {unknown}; expected a subset of {sorted(FEATURES)}")
    capability = tuple(data["capability"])
    if len(capability) != 2 or data["name"] != f"sm_{capability[0] * 10 + capability[1]}":
        raise ValueError(f"{origin}: name {data['name']!r} does not match capability {list(capability)}")
    values = {name: data[name] for name in ("name", "gpu", *FIELDS, "sources")}
    values.update(capability=capability, features=frozenset(data["features"]),
                  smem_carveouts_kb=tuple(data["smem_carveouts_kb"]))
    return Arch(**values)


@lru_cache(maxsize=None)
def load_arch(name: str) -> Arch:
    import yaml

    path = ARCH_DIR / f"{name}.yaml"
    if not path.exists():
        raise ValueError(f"arch: no record for {name!r} (expected {path}); known: "
                         f"{sorted((p.stem for p in ARCH_DIR.glob('*.yaml')), key=lambda n: int(n[3:]))}")
    return parse_arch(yaml.safe_load(path.read_text()) or {}, str(path))


def device_arch(device: torch.device) -> str | None:
    """'sm_<major><minor>' of a CUDA device (e.g. 'sm_120'), known to the registry or not; None off the GPU."""
    if device.type != "cuda" or not torch.cuda.is_available():
        return None
    major, minor = torch.cuda.get_device_capability(device)
    return f"sm_{major}{minor}"


def device_record(device: torch.device) -> Arch | None:
    """The registry's record of a CUDA device's arch; None off the GPU or for an arch without a file."""
    name = device_arch(device)
    return load_arch(name) if name in known_arches() else None


def config_key(arch: str | None, keys) -> str | None:
    """Which of a variant's per-arch default configs (``keys``, e.g. {"sm_90", "sm_120"}) an arch uses:
    its own; else that of the known arch with the same shared memory per block, nearest in capability;
    None off the GPU, for an arch without a file or without such a neighbour (the variant's
    ``DEFAULT_CONFIG`` then)."""
    keys = set(keys)
    if arch in keys:
        return arch
    if arch is None or arch not in known_arches():
        return None
    record = load_arch(arch)
    same_smem = [name for name in keys if name in known_arches()
                 and load_arch(name).smem_per_block_kb == record.smem_per_block_kb]
    return min(same_smem, key=lambda name: abs(load_arch(name).compute - record.compute), default=None)


def missing_feature(shape_or_device, feature: str, what: str) -> str | None:
    """Why a device cannot run something needing ``feature`` (None: it can, or it is not a CUDA device,
    which the caller's own check reports). ``what`` names the instruction for the message."""
    device = getattr(shape_or_device, "device", shape_or_device)
    name = device_arch(device)
    if name is None:
        return None
    if name in known_arches():
        if load_arch(name).has(feature):
            return None
        return f"needs {what}, which {name} ({load_arch(name).gpu}) does not have"
    capability = torch.cuda.get_device_capability(device)
    if capability < FEATURES[feature] or feature == "wgmma" and capability[0] != 9:
        return f"needs {what}, which {name} does not have"
    return None


def device_has(device: torch.device, feature: str) -> bool:
    """Whether a CUDA device has ``feature`` (False off CUDA)."""
    return torch.device(device).type == "cuda" and missing_feature(torch.device(device), feature, feature) is None
