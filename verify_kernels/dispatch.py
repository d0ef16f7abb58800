"""Run-time dispatch for ``variant="auto"``: the tuned winner for this GPU and shape bucket.

Tuned records ship with the package in ``verify_kernels/tuned/<gpu-sku>.yaml`` (``VK_TUNED_DIR``
overrides the folder), one entry per key (variant, GPU, L bucket, T, H, page size, dtype). ``vk tune``
writes measured winners under ``results/tuned/``; ``vk tuned --publish`` copies them here. Where a
GPU has no measured table, its arch's tables are read, in this order of trust, each with a one-time
warning: ``proxy-<arch>.yaml`` (``vk tune --constrain-to <arch>`` on another GPU, published: configs
legal on the arch, timed elsewhere), then ``predicted-<arch>.yaml`` (``vk predict-fit --ship``: the
predictor's winners for the arch). In each table the fastest record at the key nearest the shape's (L
bucket, T, H, page size and batch size, by log ratio; dtype must match where the record names one)
decides, so every shape gets the table's best guess rather than the bare default order. A ragged
batch's record (``vk tune --ragged``) carries its batch size; every other record is one request. The
choice uses shapes only, so it is graph-safe: the L bucket comes from the block table's capacity
(max_pages x page_size), the largest power of two not above it, because prefix_lens lives on the device.
"""

from __future__ import annotations

import math
import os
import warnings
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import torch

from .arch import device_arch
from .contract import ProblemShape

SHIPPED_TUNED_DIR = Path(__file__).resolve().parent / "tuned"
TUNED_DIR = Path(os.environ.get("VK_TUNED_DIR") or SHIPPED_TUNED_DIR)
MIN_BUCKET = 1024
_warned: set = set()


def l_bucket(length: int) -> int:
    """The largest power of two <= length (at least MIN_BUCKET)."""
    return max(MIN_BUCKET, 1 << (max(int(length), 1).bit_length() - 1))


def device_sku(device: torch.device | None = None) -> str:
    """A file-name-safe GPU name, e.g. 'nvidia-h200'; 'cpu' without a GPU."""
    if device is not None and device.type != "cuda" or not torch.cuda.is_available():
        return "cpu"
    name = torch.cuda.get_device_properties(device or torch.cuda.current_device()).name
    return "-".join(name.lower().replace("_", " ").split())


@lru_cache(maxsize=None)
def load_tuned(sku: str, directory: str) -> dict:
    import yaml

    path = Path(directory) / f"{sku}.yaml"
    if not path.exists():
        return {}
    return yaml.safe_load(path.read_text()) or {}


def record_key(record: dict) -> tuple[int, int, int, int, int]:
    """A record's key: (L bucket, T, H, page size, batch size); the batch is a ragged batch's record's
    (``vk tune --ragged``), every other record is one request."""
    return record["l_bucket"], record["tree_nodes"], record["heads"], record["page_size"], record.get("batch", 1)


def log_distance(found: tuple, wanted: tuple) -> float:
    """How far a key is from the wanted one: the sum of |log2| ratios of its fields (0: the same key)."""
    return sum(abs(math.log2(a / b)) for a, b in zip(found, wanted))


TIMING_PREFERENCE = ("graph", "events")


def timing_mode(record: dict) -> str:
    """How a record was timed: its ``timing`` ("graph" or "events"; records before the field: events)."""
    return record.get("timing", "events")


def nearest_winner(table: dict, bucket: int, tree_nodes: int, heads: int, page_size: int, dtype: str,
                   time_key: str, batch: int = 1) -> tuple[dict, float] | None:
    """The fastest record (by ``time_key``) at the table's nearest key to the wanted one, of this dtype
    (records without one, the predicted, match any) and of one timing mode (graph replay where the key
    has both), and its distance; None for an empty table."""
    records = [r for r in table.values() if r.get("dtype", dtype) == dtype]
    if not records:
        return None

    wanted = (bucket, tree_nodes, heads, page_size, batch)
    # The nearest key; between equally near ones the larger (times of different keys never compete).
    nearest = min({record_key(r) for r in records}, key=lambda k: (log_distance(k, wanted), tuple(-v for v in k)))
    at_key = [r for r in records if record_key(r) == nearest]
    # Nor do times of different timing modes (events include launch gaps that graph replay hides): where
    # a key has both, its graph-replay records.
    modes = {timing_mode(r) for r in at_key}
    if len(modes) > 1:
        mode = next(m for m in TIMING_PREFERENCE if m in modes)
        at_key = [r for r in at_key if timing_mode(r) == mode]
    best = min(at_key, key=lambda r: r[time_key])
    return best, log_distance(record_key(best), wanted)


@dataclass(frozen=True)
class Choice:
    """What ``variant="auto"`` runs for a key and why: the record that decided it (None: no table)."""

    variant: str | None
    config: dict | None
    source: str             # "measured", "proxy", "predicted" or "default order"
    table: str | None       # the table's file
    record: dict | None
    distance: float         # 0: the record's key is the wanted one; > 0: the nearest the table has


def choose(sku: str, arch: str | None, bucket: int, tree_nodes: int, heads: int, page_size: int,
           dtype: str, batch: int = 1) -> Choice:
    """The measured table of this GPU (``sku``), else the proxy table of its arch, else its predicted
    table; in each the fastest record at the nearest key (``batch``: the batch's size, which ragged
    batches' records are matched by). Shapes only: graph-safe."""
    for source, name, time_key in (("measured", sku, "median_ms"), ("proxy", f"proxy-{arch}", "median_ms"),
                                   ("predicted", f"predicted-{arch}", "predicted_ms")):
        if source != "measured" and arch is None:
            continue
        found = nearest_winner(load_tuned(name, str(TUNED_DIR)), bucket, tree_nodes, heads, page_size, dtype,
                               time_key, batch)
        if found is not None:
            record, distance = found
            return Choice(record["variant"], dict(record["config"]), source, str(TUNED_DIR / f"{name}.yaml"),
                          record, distance)
    return Choice(None, None, "default order", None, None, 0.0)


def tuned_choice(shape: ProblemShape) -> tuple[str, dict] | None:
    """(variant, config) of ``choose`` for this device and shape, else None; a predicted choice, or one
    from another key than the shape's, is warned once per key."""
    sku, arch = device_sku(shape.device), device_arch(shape.device)
    bucket = l_bucket(shape.max_pages * shape.page_size)
    dtype = str(shape.dtype).removeprefix("torch.")
    choice = choose(sku, arch, bucket, shape.tree_nodes, shape.heads, shape.page_size, dtype, shape.batch)
    key = (choice.source, sku, bucket, shape.tree_nodes, shape.heads, shape.page_size, dtype, shape.batch)
    if key not in _warned and (choice.source != "measured" or choice.distance > 0):
        _warned.add(key)
        if choice.variant is None:
            message = "using the default variant order and configs"
        else:
            record = choice.record
            nearest = (f" at the nearest key (L bucket {record['l_bucket']}, T={record['tree_nodes']}, "
                       f"H={record['heads']}, page_size={record['page_size']}, batch {record.get('batch', 1)})"
                       if choice.distance else "")
            message = {
                "predicted": f"using the PREDICTED winner for {arch} ({choice.variant}, fitted on "
                             f"{record.get('fitted_on')}){nearest}, not a measured one",
                "proxy": f"using the PROXY winner for {arch} ({choice.variant}, timed on {record.get('measured_on')} "
                         f"with {arch}'s limits){nearest}, not one measured on this GPU",
            }.get(choice.source, f"using the measured winner {choice.variant}{nearest}")
        warnings.warn(f"verify_attention(variant='auto'): no tuned record for GPU {sku}, L bucket {bucket}, "
                      f"T={shape.tree_nodes}, H={shape.heads}, page_size={shape.page_size}, {dtype}, "
                      f"batch {shape.batch}; {message}",
                      stacklevel=3)
    return None if choice.variant is None else (choice.variant, choice.config)
