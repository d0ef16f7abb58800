"""Where a kernel's register spills sit, from its SASS (cuobjdump): outside the main loop they cost a
few instructions per CTA (or per segment), inside it every tile. Not part of the static model's
feasibility (ptxas's spill bytes are); the tests check the defaults with it."""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from pathlib import Path

from verify_kernels.arch import load_arch
from verify_kernels.kernel_spec import CudaKernelSpec, TritonKernelSpec

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


def _sass_of(write_cubin) -> str:
    """cuobjdump -sass of the cubin ``write_cubin(path)`` writes."""
    tool = cuobjdump_path()
    if tool is None:
        raise RuntimeError("cuobjdump not found (PATH or Triton's wheel): needed to read the SASS")
    with tempfile.TemporaryDirectory() as tmp:
        cubin = Path(tmp) / "k.cubin"
        write_cubin(cubin)
        return subprocess.run([tool, "-sass", str(cubin)], capture_output=True, text=True, check=True).stdout


def sass(spec: CudaKernelSpec, arch: str) -> str:
    """cuobjdump -sass of ``spec`` compiled as a cubin for ``arch``."""

    def nvcc(cubin: Path) -> None:
        command = [nvcc_path(), "-cubin", f"-arch=sm_{load_arch(arch).compute}", "-std=c++17",
                   *(f"-D{k}={v}" for k, v in spec.macros.items()), str(spec.source), "-o", str(cubin)]
        compiled = subprocess.run(command, capture_output=True, text=True)
        if compiled.returncode:
            raise RuntimeError(f"nvcc failed for {arch}: {compiled.stderr.strip()[-800:]}")

    return _sass_of(nvcc)


def spills_in_main_loop(spec: CudaKernelSpec, arch: str) -> list[str]:
    """The spills (LDL/STL) of a CUDA ``spec`` inside its tile loops (``spills_in_tile_loops``). A spill
    outside them, a value kept across the loop and read once after, costs a few instructions per CTA;
    one inside costs every tile."""
    listing = sass(spec, arch)
    if not re.search(r"\bHMMA\b", listing):
        raise RuntimeError(f"{spec.name} for {arch}: no HMMA in its SASS (no main loop to look at)")
    return spills_in_tile_loops(listing)


def triton_sass(spec: TritonKernelSpec, arch: str) -> str:
    """cuobjdump -sass of a Triton or Gluon ``spec`` compiled for ``arch``."""
    from harness.static.triton_compile import compile_spec

    return _sass_of(lambda cubin: cubin.write_bytes(compile_spec(spec, arch).asm["cubin"]))


def spills_in_tile_loops(sass_text: str) -> list[str]:
    """The spills (LDL/STL) inside a kernel's tile loops: the innermost loops (a backward branch's range
    of addresses) that hold an mma (HMMA or HGMMA). For kernels with several loops (a warp-specialized
    kernel's partitions, a segment loop around a tile loop), where first-to-last mma would take in
    what runs once a segment."""
    instructions = []
    for line in sass_text.splitlines():
        found = re.match(r"\s*/\*([0-9a-f]{4,})\*/\s*(.*?)\s*;", line)
        if found:
            instructions.append((int(found.group(1), 16), found.group(2)))
    # Blocks placed after the body's last unconditional EXIT (a wait's retry, a slow path) jump back
    # into it: backward branches, but no loops.
    body_end = max((a for a, t in instructions if re.match(r"EXIT\b", t)),  # sm_120 listings annotate
                   default=max((a for a, _ in instructions), default=0))
    loops = []
    for address, text in instructions:
        branch = re.search(r"\bBRA\b.*?0x([0-9a-f]+)", text)
        if branch and int(branch.group(1), 16) <= address <= body_end:
            loops.append((int(branch.group(1), 16), address))

    def has_mma(low, high):
        return any(low <= a <= high and re.search(r"\bH(G)?MMA\b", t) for a, t in instructions)

    with_mma = [loop for loop in loops if has_mma(*loop)]
    innermost = [(low, high) for low, high in with_mma
                 if not any((low, high) != (a, b) and low <= a and b <= high for a, b in with_mma)]
    return [text for address, text in instructions
            if re.search(r"\b(LDL|STL)\b", text) and any(low <= address <= high for low, high in innermost)]


def wgmma_serialized(sass_text: str) -> bool:
    """Whether ptxas serialized the kernel's wgmma (its C7514 "Potential Performance Loss: wgmma.mma_async
    instructions are serialized"): it then waits after every HGMMA (a ``WARPGROUP.DEPBAR`` each), where a
    pipelined kernel waits once a group of them (gluon_wgmma_sym: 88 HGMMA, 6 waits; serialized, 88).
    ptxas does it, with no error, when it cannot prove that no other instruction reads a pending
    accumulator: e.g. a wait for all but the newest group that retires a wgmma issued in the loop's
    previous iteration (notes/2026-12-07-symmetric-warpgroups.md, "v5")."""
    hgmma = len(re.findall(r"\bHGMMA\.", sass_text))
    return hgmma > 0 and len(re.findall(r"\bWARPGROUP\.DEPBAR\b", sass_text)) >= hgmma
