"""Compile CUDA C++ offline with nvcc for an arch and read registers and spills from ptxas -v."""

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


def ptxas_report(source: Path, arch: str, macros: dict, kernel: str) -> str:
    """ptxas -v output for ``kernel`` compiled as a cubin for ``arch``."""
    target = f"sm_{load_arch(arch).compute}"  # ValueError for an arch without a record
    with tempfile.TemporaryDirectory() as tmp:
        command = [nvcc_path(), "-cubin", f"-arch={target}", "-std=c++17", "-Xptxas", "-v",
                   *(f"-D{k}={v}" for k, v in macros.items()), str(source), "-o", str(Path(tmp) / "k.cubin")]
        completed = subprocess.run(command, capture_output=True, text=True)
    if completed.returncode:
        raise RuntimeError(f"nvcc failed for {arch}: {completed.stderr.strip()[-800:]}")
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
