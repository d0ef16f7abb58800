"""Run-time dispatch for ``variant="auto"``: the tuned winner for this GPU and shape bucket.

Tuned records ship with the package in ``verify_kernels/tuned/<gpu-sku>.yaml`` (``VK_TUNED_DIR``
overrides the folder), one entry per key (variant, GPU, L bucket, T, H, page size, dtype). ``vk tune``
writes measured winners under ``results/tuned/``; ``vk tuned --publish`` copies them here. Where a
GPU has no measured record for a key, ``predicted-<arch>.yaml`` (``vk predict-fit --ship``: the
predictor's winners for an arch, e.g. sm_120) is read instead, with a one-time warning that the
choice is predicted, not measured. The choice uses shapes only, so it is graph-safe: the L bucket comes from the block table's capacity (max_pages x page_size), the
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


def device_arch(device: torch.device) -> str | None:
    """'sm_<major><minor>' of a CUDA device (e.g. 'sm_120'); None off the GPU."""
    if device.type != "cuda" or not torch.cuda.is_available():
        return None
    major, minor = torch.cuda.get_device_capability(device)
    return f"sm_{major}{minor}"


def predicted_choice(shape: ProblemShape, bucket: int) -> tuple[str, dict] | None:
    """(variant, config) of the predictor's winner for this arch and key, warned once per key."""
    arch = device_arch(shape.device)
    if arch is None:
        return None
    best = None
    for record in load_tuned(f"predicted-{arch}", str(TUNED_DIR)).values():
        if (record["l_bucket"], record["tree_nodes"], record["heads"], record["page_size"]) != (
                bucket, shape.tree_nodes, shape.heads, shape.page_size):
            continue
        if best is None or record["predicted_ms"] < best["predicted_ms"]:
            best = record
    if best is None:
        return None
    key = ("predicted", arch, bucket, shape.tree_nodes, shape.heads, shape.page_size)
    if key not in _warned:
        _warned.add(key)
        warnings.warn(f"verify_attention(variant='auto'): no measured record for this GPU at L bucket {bucket}, "
                      f"T={shape.tree_nodes}, H={shape.heads}; using the PREDICTED winner for {arch} "
                      f"({best['variant']}, fitted on {best['fitted_on']}), not a measured one", stacklevel=3)
    return best["variant"], dict(best["config"])


def tuned_choice(shape: ProblemShape) -> tuple[str, dict] | None:
    """(variant, config) of the fastest measured record matching the shape's key, else the
    predicted winner for the GPU's arch, else None (each fallback warned once)."""
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
        predicted = predicted_choice(shape, bucket)
        if predicted is not None:
            return predicted
        key = (sku, bucket, shape.tree_nodes, shape.heads, shape.page_size, dtype)
        if key not in _warned:
            _warned.add(key)
            warnings.warn(f"verify_attention(variant='auto'): no tuned record for GPU {sku}, L bucket {bucket}, "
                          f"T={shape.tree_nodes}, H={shape.heads}, page_size={shape.page_size}, {dtype}; "
                          f"using the default variant order and configs", stacklevel=3)
        return None
    return best["variant"], dict(best["config"])
