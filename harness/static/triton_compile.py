"""Compile a Triton kernel for an arch we may not have and read its resources from the compiler.

``triton.compile`` with a ``GPUTarget`` needs no GPU; registers and spills come from running ptxas
-v on the PTX Triton produced (Triton's own bundled ptxas), shared memory from Triton's metadata.
"""

from __future__ import annotations

import re
import subprocess
import tempfile
from pathlib import Path

from verify_kernels.kernel_spec import TritonKernelSpec

from verify_kernels.arch import load_arch

from harness.static.occupancy import ResourceUsage


def _ptxas(capability: int) -> str:
    """The ptxas Triton itself uses for this capability (a separate Blackwell build for sm_100+)."""
    from triton.backends.nvidia.compiler import get_ptxas

    return get_ptxas(capability).path


def _ptxas_report(ptx: str, capability: int) -> dict[str, int]:
    target = re.search(r"^\.target\s+(\S+)", ptx, re.MULTILINE).group(1).rstrip(",")
    with tempfile.TemporaryDirectory() as tmp:
        source = Path(tmp) / "kernel.ptx"
        source.write_text(ptx)
        completed = subprocess.run([_ptxas(capability), f"-arch={target}", "-v", str(source), "-o",
                                    str(Path(tmp) / "k.cubin")], capture_output=True, text=True)
    if completed.returncode:
        raise RuntimeError(f"ptxas failed for {target}: {completed.stderr.strip()[:500]}")
    text = completed.stderr + completed.stdout

    def number(pattern: str) -> int:
        match = re.search(pattern, text)
        return int(match.group(1)) if match else 0

    return {
        "registers": number(r"Used (\d+) registers"),
        "stack_bytes": number(r"(\d+) bytes stack frame"),
        "spill_store_bytes": number(r"(\d+) bytes spill stores"),
        "spill_load_bytes": number(r"(\d+) bytes spill loads"),
        "static_shared_bytes": number(r"(\d+) bytes smem"),
        "barriers": number(r"used (\d+) barriers"),
    }


def compile_spec(spec: TritonKernelSpec, arch: str):
    """Compile ``spec`` for ``arch`` offline: Triton's compiled kernel (its ``asm`` holds PTX and cubin)."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    capability = load_arch(arch).compute  # ValueError for an arch without a record
    if not isinstance(spec.kernel, triton.JITFunction):  # Gluon kernels are JITFunctions too
        raise RuntimeError("cannot compile kernels decorated under TRITON_INTERPRET=1; run without it")
    if getattr(spec.kernel, "is_gluon", lambda: False)():
        from triton.experimental.gluon._runtime import GluonASTSource as source_class
    else:
        source_class = ASTSource
    source = source_class(spec.kernel, spec.signature(), constexprs=spec.specialised_constexprs(),
                          attrs=spec.divisibility_attrs())
    return triton.compile(source, target=GPUTarget("cuda", capability, 32),
                          options={"num_warps": spec.num_warps, "num_stages": spec.num_stages})


def compile_resources(spec: TritonKernelSpec, arch: str) -> ResourceUsage:
    """Compile ``spec`` for ``arch`` offline and return its resource usage."""
    capability = load_arch(arch).compute
    compiled = compile_spec(spec, arch)
    ptxas = _ptxas_report(compiled.asm["ptx"], capability)
    return ResourceUsage(
        registers=ptxas["registers"],
        spill_store_bytes=ptxas["spill_store_bytes"],
        spill_load_bytes=ptxas["spill_load_bytes"],
        stack_bytes=ptxas["stack_bytes"],
        shared_bytes=int(compiled.metadata.shared) + ptxas["static_shared_bytes"],
        threads=spec.threads or spec.num_warps * 32,
        barriers=ptxas["barriers"],
    )
