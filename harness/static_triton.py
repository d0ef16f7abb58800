"""Compile a Triton kernel for an arch we may not have and read its resources from the compiler.

``triton.compile`` with a ``GPUTarget`` needs no GPU; registers and spills come from running ptxas
-v on the PTX Triton produced (Triton's own bundled ptxas), shared memory from Triton's metadata.
"""

from __future__ import annotations

import re
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from .static_model import ResourceUsage

ARCH_CAPABILITY = {"sm_90": 90, "sm_120": 120}


@dataclass(frozen=True)
class TritonKernelSpec:
    """One kernel launch to compile: the jit function, its argument types and launch options."""

    name: str
    kernel: object                      # a triton.JITFunction
    pointer_types: dict[str, str]       # argument -> "*bf16", "*i32", ...
    constexprs: dict[str, object]
    num_warps: int
    num_stages: int
    float_args: tuple[str, ...] = ("sm_scale",)
    # Representative run-time values of integer arguments. Triton's launcher specialises on them
    # (1 becomes a constant, a multiple of 16 gets tt.divisibility, as do 16-byte aligned
    # pointers), and that changes vector widths, pipelining and hence shared memory: compiling
    # without them under-counts what the run-time kernel asks for.
    int_values: dict[str, int] | None = None

    def signature(self) -> dict[str, str]:
        signature = {}
        for name in self.kernel.arg_names:
            if name in self.pointer_types:
                signature[name] = self.pointer_types[name]
            elif name in self.constexprs or (self.int_values or {}).get(name) == 1:
                signature[name] = "constexpr"
            elif name in self.float_args:
                signature[name] = "fp32"
            else:
                signature[name] = "i32"
        return signature

    def specialised_constexprs(self) -> dict[str, object]:
        ones = {name: 1 for name, value in (self.int_values or {}).items() if value == 1}
        return {**self.constexprs, **ones}

    def divisibility_attrs(self) -> dict[tuple[int], list]:
        """The tt.divisibility hints the launcher would give: aligned pointers, ints % 16 == 0."""
        divisible = set(self.pointer_types)
        divisible |= {name for name, value in (self.int_values or {}).items() if value % 16 == 0}
        return {(index,): [["tt.divisibility", 16]] for index, name in enumerate(self.kernel.arg_names)
                if name in divisible}


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
    }


def compile_resources(spec: TritonKernelSpec, arch: str) -> ResourceUsage:
    """Compile ``spec`` for ``arch`` offline and return its resource usage."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    if arch not in ARCH_CAPABILITY:
        raise ValueError(f"arch: expected one of {sorted(ARCH_CAPABILITY)}, got {arch!r}")
    if not isinstance(spec.kernel, triton.JITFunction):  # Gluon kernels are JITFunctions too
        raise RuntimeError("cannot compile kernels decorated under TRITON_INTERPRET=1; run without it")
    if getattr(spec.kernel, "is_gluon", lambda: False)():
        from triton.experimental.gluon._runtime import GluonASTSource as source_class
    else:
        source_class = ASTSource
    source = source_class(spec.kernel, spec.signature(), constexprs=spec.specialised_constexprs(),
                          attrs=spec.divisibility_attrs())
    compiled = triton.compile(source, target=GPUTarget("cuda", ARCH_CAPABILITY[arch], 32),
                              options={"num_warps": spec.num_warps, "num_stages": spec.num_stages})
    ptxas = _ptxas_report(compiled.asm["ptx"], ARCH_CAPABILITY[arch])
    return ResourceUsage(
        registers=ptxas["registers"],
        spill_store_bytes=ptxas["spill_store_bytes"],
        spill_load_bytes=ptxas["spill_load_bytes"],
        stack_bytes=ptxas["stack_bytes"],
        shared_bytes=int(compiled.metadata.shared) + ptxas["static_shared_bytes"],
        threads=spec.num_warps * 32,
    )
