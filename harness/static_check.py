"""``vk static``: compile a variant's configs offline for an arch and report resources and occupancy."""

from __future__ import annotations

from tabulate import tabulate

from verify_kernels import variants

from .static_model import report
from .static_triton import compile_resources


def default_configs(variant: str, arch: str) -> dict:
    module = variants.load_variant(variant)
    per_arch = getattr(module, "DEFAULT_CONFIGS", None)
    return dict(per_arch[arch] if per_arch and arch in per_arch else module.DEFAULT_CONFIG)


def static_rows(variant: str, arch: str, configs: list[dict] | None = None) -> list[dict]:
    """One row per (config, kernel): resources from the compiler, occupancy, feasibility."""
    module = variants.load_variant(variant)
    if not hasattr(module, "kernel_specs"):
        raise ValueError(f"variant {variant!r} has no offline compile path (kernel_specs)")
    rows = []
    for config in configs or [default_configs(variant, arch)]:
        for spec in module.kernel_specs(config):
            row = {"variant": variant, "kernel": spec.name, "config": config}
            try:
                row.update(report(compile_resources(spec, arch), arch, getattr(module, "ALLOW_SPILLS", False)))
            except Exception as error:  # a compile failure is a rejection with its reason
                row.update(arch=arch, feasible=False, reason=f"compile: {str(error).splitlines()[0][:200]}")
            rows.append(row)
    return rows


def format_rows(rows: list[dict]) -> str:
    table = [(r["variant"], r["arch"], ",".join(f"{k}={v}" for k, v in r["config"].items()), r.get("registers", "-"),
              r.get("spill_store_bytes", "-"), f"{r['shared_bytes'] / 1024:.1f}" if "shared_bytes" in r else "-",
              r.get("blocks_per_sm", "-"), f"{r['occupancy']:.2f}" if "occupancy" in r else "-",
              r.get("limiter", "-"), "yes" if r["feasible"] else "NO", r["reason"]) for r in rows]
    return tabulate(table, headers=["variant", "arch", "config", "regs", "spill B", "smem KB", "blocks/SM",
                                    "occupancy", "limiter", "feasible", "reason"])
