"""Compile CUDA C++ offline with nvcc for an arch and read registers and spills from ptxas -v, and
where a kernel's spills sit (cuobjdump's SASS)."""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from pathlib import Path

from verify_kernels.kernel_spec import CudaKernelSpec

from verify_kernels.arch import load_arch

from harness.static.occupancy import ResourceUsage


def nvcc_path() -> str:
    path = shutil.which("nvcc")
    if path is None:
        raise RuntimeError("nvcc not found on PATH (needed for the offline CUDA compile)")
    return path


def _compile_cubin(source: Path, arch: str, macros: dict, cubin: Path) -> subprocess.CompletedProcess:
    target = f"sm_{load_arch(arch).compute}"  # ValueError for an arch without a record
    command = [nvcc_path(), "-cubin", f"-arch={target}", "-std=c++17", "-Xptxas", "-v",
               *(f"-D{k}={v}" for k, v in macros.items()), str(source), "-o", str(cubin)]
    completed = subprocess.run(command, capture_output=True, text=True)
    if completed.returncode:
        raise RuntimeError(f"nvcc failed for {arch}: {completed.stderr.strip()[-800:]}")
    return completed


def ptxas_report(source: Path, arch: str, macros: dict, kernel: str) -> str:
    """ptxas -v output for ``kernel`` compiled as a cubin for ``arch``."""
    with tempfile.TemporaryDirectory() as tmp:
        completed = _compile_cubin(source, arch, macros, Path(tmp) / "k.cubin")
    text = completed.stderr + completed.stdout
    marker = f"Compiling entry function '{kernel}'"
    if marker not in text:
        raise RuntimeError(f"ptxas reported no entry function {kernel!r}")
    section = text.split(marker, 1)[1].split("Compiling entry function", 1)[0]
    return section


def compile_resources(spec: CudaKernelSpec, arch: str) -> ResourceUsage:
    """Compile ``spec`` for ``arch`` with nvcc and return its resource usage (no GPU needed)."""
    section = ptxas_report(spec.source, arch, spec.macros, spec.name)

    def number(pattern: str) -> int:
        match = re.search(pattern, section)
        return int(match.group(1)) if match else 0

    return ResourceUsage(
        registers=number(r"Used (\d+) registers"),
        spill_store_bytes=number(r"(\d+) bytes spill stores"),
        spill_load_bytes=number(r"(\d+) bytes spill loads"),
        stack_bytes=number(r"(\d+) bytes stack frame"),
        shared_bytes=spec.dynamic_smem + number(r"(\d+) bytes smem"),
        threads=spec.threads,
        barriers=number(r"used (\d+) barriers"),
    )


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


def spills_in_main_loop(spec: CudaKernelSpec, arch: str) -> list[str]:
    """The local-memory loads and stores (LDL/STL: spills) ptxas placed between the kernel's first and
    last mma (HMMA) instruction, its main loop. A spill outside it, a value kept across the loop and read
    once after, costs a few instructions per CTA; one inside it costs every tile."""
    tool = cuobjdump_path()
    if tool is None:
        raise RuntimeError("cuobjdump not found (PATH or Triton's wheel): needed to read the SASS")
    with tempfile.TemporaryDirectory() as tmp:
        cubin = Path(tmp) / "k.cubin"
        _compile_cubin(spec.source, arch, spec.macros, cubin)
        sass = subprocess.run([tool, "-sass", str(cubin)], capture_output=True, text=True, check=True).stdout
    lines = [line.split(";")[0].strip() for line in sass.splitlines() if "*/" in line and ";" in line]
    mma = [i for i, line in enumerate(lines) if "HMMA" in line]
    if not mma:
        raise RuntimeError(f"{spec.name} for {arch}: no HMMA in its SASS (no main loop to look at)")
    return [line for line in lines[mma[0]:mma[-1]] if re.search(r"\b(LDL|STL)\b", line)]
