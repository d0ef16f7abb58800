"""What a record must say about where it was measured: GPU, driver, versions, source hash."""

from __future__ import annotations

import hashlib
import os
import importlib.metadata
import platform
import shlex
import subprocess
import sys
import warnings
from functools import lru_cache
from pathlib import Path

import torch

import verify_kernels
from verify_kernels.dispatch import device_sku

LIBRARY_DIR = Path(verify_kernels.__file__).resolve().parent
SOURCE_SUFFIXES = (".py", ".cu", ".cuh")


@lru_cache(maxsize=None)
def source_hash() -> str:
    """sha256 (first 16 hex) over the library's sources: a record is stale when this changes."""
    digest = hashlib.sha256()
    for path in sorted(LIBRARY_DIR.rglob("*")):
        if path.suffix in SOURCE_SUFFIXES and "__pycache__" not in path.parts:
            digest.update(path.relative_to(LIBRARY_DIR.parent).as_posix().encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


@lru_cache(maxsize=None)
def git_commit() -> dict:
    """The checkout's commit and whether its tracked files differ from it (None outside a git
    checkout, e.g. an installed wheel): with ``command``, what reproduces a record. ``VK_GIT_COMMIT``
    overrides it where the checkout's .git is not the tree's (a copy sent to a GPU host with a
    stale .git reports that one's HEAD). Where that .git holds the named commit, the tree is compared
    with it, so naming the stale HEAD by mistake gives ``dirty`` True (and a warning), not a clean label;
    where it does not, ``dirty`` is None (unknown)."""
    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(["git", "-C", str(LIBRARY_DIR.parent), *args], capture_output=True, text=True,
                                  timeout=10)
        except (OSError, subprocess.SubprocessError):
            return None
        return done.stdout.strip() if done.returncode == 0 else None

    in_checkout = git("rev-parse", "--show-toplevel") == str(LIBRARY_DIR.parent)
    named = os.environ.get("VK_GIT_COMMIT")
    if named:
        known = in_checkout and git("cat-file", "-e", f"{named}^{{commit}}") is not None
        differs = git("diff", "--name-only", named, "--") if known else None
        dirty = bool(differs) if differs is not None else None
        if dirty:
            warnings.warn(f"VK_GIT_COMMIT={named[:12]}: the tree differs from that commit in "
                          f"{len(differs.splitlines())} tracked files (a stale .git's HEAD?); records say dirty")
        return {"commit": named, "dirty": dirty}
    if not in_checkout:
        return {"commit": None, "dirty": None}
    status = git("status", "--porcelain", "--untracked-files=no")
    return {"commit": git("rev-parse", "HEAD"), "dirty": bool(status) if status is not None else None}


def _version(package: str) -> str | None:
    for name in (package, f"{package}-cuda13x", f"{package}-cuda12x"):
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def _driver_version() -> str | None:
    try:
        completed = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                   capture_output=True, text=True, timeout=10, check=True)
        return completed.stdout.strip().splitlines()[0]
    except (OSError, subprocess.SubprocessError, IndexError):
        return None


@lru_cache(maxsize=None)
def describe_environment() -> dict:
    """Machine, GPU and library versions for every record."""
    info = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "triton": _version("triton"),
        "cupy": _version("cupy"),
        "optuna": _version("optuna"),
        "source_hash": source_hash(),
        "git_commit": git_commit()["commit"],
        "git_dirty": git_commit()["dirty"],
        "host": platform.node(),
    }
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        info.update({
            "gpu": props.name,
            "sm_count": props.multi_processor_count,
            "compute_capability": f"{props.major}.{props.minor}",
            "gpu_memory_gb": round(props.total_memory / 1e9, 1),
            "l2_bytes": getattr(props, "L2_cache_size", None),
            "cuda": torch.version.cuda,
            "driver": _driver_version(),
        })
    else:
        info.update({"gpu": None, "sm_count": None, "cuda": torch.version.cuda, "driver": None})
    return info


def gpu_sku() -> str:
    """A file-name-safe GPU name, e.g. 'nvidia-h200'; 'cpu' without a GPU."""

    return device_sku()


def command_line() -> str:
    """The command that reproduces this run, as typed."""
    argv = list(sys.argv)
    if argv and argv[0].endswith(("__main__.py", "/vk", "vk")):
        argv[0] = "vk"
    return shlex.join(argv)
