"""Where a CUDA kernel's register spills sit, from its SASS (cuobjdump): outside the main loop they
cost a few instructions per CTA, inside it every tile. Not part of the static model's feasibility
(ptxas's spill bytes are); the tests check the defaults with it."""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from pathlib import Path

from verify_kernels.arch import load_arch
from verify_kernels.kernel_spec import CudaKernelSpec

from harness.static.nvcc_compile import nvcc_path


def cuobjdump_path() -> str | None:
    """cuobjdump from PATH, else the one Triton's wheel carries; None without either."""
    path = shutil.which("cuobjdump")
    if path:
        return path
    try:
        import triton
    except ImportError:
        return None
    bundled = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
    return str(bundled) if bundled.exists() else None


def sass(spec: CudaKernelSpec, arch: str) -> str:
    """cuobjdump -sass of ``spec`` compiled as a cubin for ``arch``."""
    tool = cuobjdump_path()
    if tool is None:
        raise RuntimeError("cuobjdump not found (PATH or Triton's wheel): needed to read the SASS")
    with tempfile.TemporaryDirectory() as tmp:
        cubin = Path(tmp) / "k.cubin"
        command = [nvcc_path(), "-cubin", f"-arch=sm_{load_arch(arch).compute}", "-std=c++17",
                   *(f"-D{k}={v}" for k, v in spec.macros.items()), str(spec.source), "-o", str(cubin)]
        compiled = subprocess.run(command, capture_output=True, text=True)
        if compiled.returncode:
            raise RuntimeError(f"nvcc failed for {arch}: {compiled.stderr.strip()[-800:]}")
        return subprocess.run([tool, "-sass", str(cubin)], capture_output=True, text=True, check=True).stdout


def spills_in_main_loop(spec: CudaKernelSpec, arch: str) -> list[str]:
    """The local-memory loads and stores (LDL/STL: spills) ptxas placed between the kernel's first and
    last mma (HMMA) instruction, its main loop. A spill outside it, a value kept across the loop and read
    once after, costs a few instructions per CTA; one inside it costs every tile."""
    lines = [line.split(";")[0].strip() for line in sass(spec, arch).splitlines() if "*/" in line and ";" in line]
    mma = [i for i, line in enumerate(lines) if "HMMA" in line]
    if not mma:
        raise RuntimeError(f"{spec.name} for {arch}: no HMMA in its SASS (no main loop to look at)")
    return [line for line in lines[mma[0]:mma[-1]] if re.search(r"\b(LDL|STL)\b", line)]
