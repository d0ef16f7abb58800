"""Compile a variant's configs offline for an arch: resources, occupancy and feasibility per kernel."""

from __future__ import annotations

from verify_kernels import variants

from verify_kernels.kernel_spec import CudaKernelSpec

from harness.static import nvcc_compile, triton_compile
from harness.static.occupancy import report


def default_configs(variant: str, arch: str) -> dict:
    """The variant's default config on ``arch`` (``variants.defaults_for``)."""
    return variants.defaults_for(variants.load_variant(variant), arch)


def static_rows(target, configs: list[dict] | None = None, *, allow_spills: bool = True) -> list[dict]:
    """One row per (config, kernel) of ``target``, a variant resolved for an arch (``space.VariantOnArch``,
    not imported: space imports this module; its module and defaults are read once): resources from the
    compiler, occupancy, feasibility. Whether spills disqualify is the search space's rule for the arch
    (``target.spills_allowed``)."""
    module, arch = target.module, target.arch
    rows = []
    for config in configs or [target.defaults]:
        config = {**target.defaults, **config}
        row = {"variant": target.name, "config": config}
        try:
            problems = variants.optional(module, "config_problems")(config)
            if problems:
                raise ValueError("; ".join(problems))
            for name, usage in _resources(module, config, arch):
                rows.append({**row, "kernel": name, **report(usage, arch, allow_spills)})
        except Exception as error:  # a compile failure or a broken rule is a rejection with its reason
            rows.append({**row, "arch": arch, "feasible": False, "reason": f"compile: {one_line(error)}"})
    return rows


def _resources(module, config: dict, arch: str):
    """(kernel name, ResourceUsage) pairs: nvcc for CUDA kernels, triton.compile for Triton ones."""
    problem = variants.optional(module, "offline_arch_problem")(arch)
    if problem:
        raise ValueError(problem)
    return [(spec.name, compile_spec(spec, arch)) for spec in module.kernel_specs(config)]


def compile_spec(spec, arch: str):
    """Resources of one kernel spec compiled offline for ``arch``."""
    if isinstance(spec, CudaKernelSpec):
        return nvcc_compile.compile_resources(spec, arch)
    return triton_compile.compile_resources(spec, arch)


def one_line(error: Exception, limit: int = 300) -> str:
    """A compile error on one line. Triton's put the kernel source between where (the first line)
    and what: a message last, or a caret under the failing line (a static_assert, say)."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()] or [""]
    detail = getattr(error, "error_message", None)
    if not detail and len(lines) > 1:
        detail = lines[-2] if set(lines[-1]) == {"^"} else lines[-1]
    text = " ".join(part for part in (type(error).__name__ + ":", lines[0], detail) if part)
    return text if len(text) <= limit else text[:limit - 3] + "..."
