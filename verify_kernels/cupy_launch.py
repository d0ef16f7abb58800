"""Run-time CUDA through CuPy for the CUDA variants: what a shape needs to run one (a CUDA device,
a supported page size, 576/512 head dims, CuPy), whether a config's shared memory fits the GPU,
NVRTC compiles of a kernel source with its macros, and CuPy's view of a torch stream. CuPy is
imported only when called.

CuPy caches NVRTC output on disk keyed by the code string, options and compiler version, so the
source's local headers (``#include "name"``, beside it) are inlined into that string: a header
change is a new key. The compiled functions are also kept in memory per (source, macros, dtype,
device).
"""

from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path


HEAD_DIM, V_DIM = 576, 512


def unsupported_cuda_reason(shape, page_sizes: tuple[int, ...]) -> str | None:
    """Why a CUDA variant cannot run ``shape`` (a ``ProblemShape``) for reasons all of them share."""
    if shape.device.type != "cuda":
        return f"needs a CUDA device, got {shape.device}"
    if shape.page_size not in page_sizes:
        return f"page_size must be one of {page_sizes}, got {shape.page_size}"
    if (shape.head_dim, shape.v_dim) != (HEAD_DIM, V_DIM):
        return f"compiled for Dqk={HEAD_DIM}, v_dim={V_DIM}; got Dqk={shape.head_dim}, v_dim={shape.v_dim}"
    try:
        import cupy  # noqa: F401
    except ImportError as error:
        return f"needs CuPy (pip install 'verify-kernels[cuda]'): {error}"
    return None


def check_config(problems: list[str], smem_bytes: int, shape) -> None:
    """Raise ValueError for a config's rule ``problems`` or shared memory beyond this GPU's per-block limit."""
    if problems:
        raise ValueError("config: " + "; ".join(problems))
    if shape.device.type == "cuda":
        import torch

        limit = torch.cuda.get_device_properties(shape.device).shared_memory_per_block_optin
        if smem_bytes > limit:
            raise ValueError(f"config: needs {smem_bytes} bytes of shared memory per block, this GPU allows {limit}")


def included_headers(source: Path) -> list[Path]:
    """The headers ``source`` includes with ``#include "name"`` (beside it): part of its kernel."""
    return [source.parent / name for name in re.findall(r'^#include "([^"]+)"', source.read_text(), re.M)]


def inlined_source(source: Path) -> str:
    """``source`` with each local ``#include "name"`` replaced by that header's text (one level)."""
    return re.sub(r'^#include "([^"]+)"$', lambda match: (source.parent / match.group(1)).read_text(),
                  source.read_text(), flags=re.M)


@lru_cache(maxsize=None)
def compiled_functions(source: Path, names: tuple[str, ...], macros: tuple, fp16: bool, device_index: int) -> tuple:
    """The kernels ``names`` of ``source`` compiled for this device with ``-D`` ``macros`` (pairs)."""
    import cupy

    options = ("-std=c++17", *(f"-D{k}={v}" for k, v in macros), f"-DUSE_FP16={int(fp16)}")
    with cupy.cuda.Device(device_index):
        module = cupy.RawModule(code=inlined_source(source), options=options)
        return tuple(module.get_function(name) for name in names)


@lru_cache(maxsize=64)
def external_stream(handle: int, device_index: int):
    """CuPy's view of a torch stream (cached: a wrapper per call costs microseconds)."""
    import cupy

    return cupy.cuda.ExternalStream(handle, device_index)
