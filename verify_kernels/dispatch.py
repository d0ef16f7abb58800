"""Run-time dispatch for ``variant="auto"``: the tuned winner for this GPU and shape bucket.

Tuned records ship with the package in ``verify_kernels/tuned/<gpu-sku>.yaml`` (``VK_TUNED_DIR``
overrides the folder), one entry per key (variant, GPU, L bucket, T, H, page size, dtype). ``vk tune``
writes measured winners under ``results/tuned/``; ``vk tuned --publish`` copies them here. The choice uses shapes only, so it is
graph-safe: the L bucket comes from the block table's capacity (max_pages x page_size), the
largest power of two not above it, because prefix_lens lives on the device.
"""

from __future__ import annotations

import os
import warnings
from functools import lru_cache
from pathlib import Path

import torch

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


def tuned_choice(shape: ProblemShape) -> tuple[str, dict] | None:
    """(variant, config) of the fastest tuned record matching the shape's key, else None (warned once)."""
    sku = device_sku(shape.device)
    bucket = l_bucket(shape.max_pages * shape.page_size)
    dtype = str(shape.dtype).removeprefix("torch.")
    best = None
    for record in load_tuned(sku, str(TUNED_DIR)).values():
        if (record["l_bucket"], record["tree_nodes"], record["heads"], record["page_size"], record["dtype"]) != (
                bucket, shape.tree_nodes, shape.heads, shape.page_size, dtype):
            continue
        if best is None or record["median_ms"] < best["median_ms"]:
            best = record
    if best is None:
        key = (sku, bucket, shape.tree_nodes, shape.heads, shape.page_size, dtype)
        if key not in _warned:
            _warned.add(key)
            warnings.warn(f"verify_attention(variant='auto'): no tuned record for GPU {sku}, L bucket {bucket}, "
                          f"T={shape.tree_nodes}, H={shape.heads}, page_size={shape.page_size}, {dtype}; "
                          f"using the default variant order and configs", stacklevel=3)
        return None
    return best["variant"], dict(best["config"])
