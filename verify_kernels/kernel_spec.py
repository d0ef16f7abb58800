"""How a variant describes its kernels to an offline compiler, without compiling anything.

A variant's ``kernel_specs(config)`` returns these; the harness (``harness/static/``) compiles
them for an arch it may not have and reads registers, spills and shared memory. The library only
describes: it never imports the harness.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class TritonKernelSpec:
    """One Triton (or Gluon) kernel launch to compile: the jit function, its argument types and
    launch options."""

    name: str
    kernel: object                      # a triton.JITFunction (Gluon kernels are JITFunctions too)
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
    # Threads per block when the launch runs more warps than num_warps (warp-specialised
    # partitions add theirs); None: num_warps * 32.
    threads: int | None = None

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


@dataclass(frozen=True)
class CudaKernelSpec:
    """One CUDA C++ kernel to compile with nvcc: the source, the ``-D`` macros, the entry point,
    and what the launch adds (dynamic shared memory, threads per block)."""

    name: str
    source: Path
    macros: dict[str, object] = field(default_factory=dict)
    dynamic_smem: int = 0
    threads: int = 128
