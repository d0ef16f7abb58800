"""``vk static``: compile a variant's configs offline for an arch and report resources and occupancy."""

from __future__ import annotations

import json

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
    allow_spills = getattr(module, "ALLOW_SPILLS", False)
    rows = []
    for config in configs or [default_configs(variant, arch)]:
        config = {**default_configs(variant, arch), **config}
        row = {"variant": variant, "config": config}
        try:
            problems = getattr(module, "config_problems", lambda c: [])(config)
            if problems:
                raise ValueError("; ".join(problems))
            for name, usage in _resources(module, config, arch):
                rows.append({**row, "kernel": name, **report(usage, arch, allow_spills)})
        except Exception as error:  # a compile failure or a broken rule is a rejection with its reason
            rows.append({**row, "arch": arch, "feasible": False, "reason": f"compile: {str(error).splitlines()[0][:200]}"})
    return rows


def _resources(module, config: dict, arch: str):
    """(kernel name, ResourceUsage) pairs: nvcc for CUDA variants, triton.compile for Triton ones."""
    if hasattr(module, "static_resources"):
        return module.static_resources(config, arch)
    if hasattr(module, "kernel_specs"):
        return [(spec.name, compile_resources(spec, arch)) for spec in module.kernel_specs(config)]
    raise ValueError(f"variant {module.__name__} has no offline compile path")


def format_rows(rows: list[dict]) -> str:
    table = [(r["variant"], r["arch"], ",".join(f"{k}={v}" for k, v in r["config"].items()), r.get("registers", "-"),
              r.get("spill_store_bytes", "-"), f"{r['shared_bytes'] / 1024:.1f}" if "shared_bytes" in r else "-",
              r.get("blocks_per_sm", "-"), f"{r['occupancy']:.2f}" if "occupancy" in r else "-",
              r.get("limiter", "-"), "yes" if r["feasible"] else "NO", r["reason"]) for r in rows]
    return tabulate(table, headers=["variant", "arch", "config", "regs", "spill B", "smem KB", "blocks/SM",
                                    "occupancy", "limiter", "feasible", "reason"])


def space_report(names: list[str], arches: list[str], as_json: bool) -> str:
    """Every candidate of each variant's search space with its static figures or rejection."""
    from .search_space import SPACES_DIR, static_feasibility

    rows, summary = [], []
    for name in names:
        if not (SPACES_DIR / f"{name}.yaml").exists():
            continue
        for arch in arches:
            found = static_feasibility(name, arch, progress=not as_json)
            feasible = [c for c in found if c.feasible]
            summary.append((name, arch, len(found), len(feasible),
                            sum((c.static.get("spill_store_bytes") or 0) > 0 for c in feasible)))
            rows += [{"variant": name, "arch": arch, "config": c.config, "feasible": c.feasible, "reason": c.reason,
                      **c.static} for c in found]
    if as_json:
        return json.dumps(rows, indent=1, default=str)
    table = [(r["variant"], r["arch"], ",".join(f"{k}={v}" for k, v in r["config"].items()), r.get("registers", "-"),
              r.get("spill_store_bytes", "-"), f"{r['shared_bytes'] / 1024:.0f}" if r.get("shared_bytes") else "-",
              r.get("blocks_per_sm", "-"), "yes" if r["feasible"] else "NO", r["reason"][:70]) for r in rows]
    return (tabulate(table, headers=["variant", "arch", "config", "regs", "spill B", "smem KB", "blocks/SM",
                                     "feasible", "reason"]) + "\n\n" +
            tabulate(summary, headers=["variant", "arch", "candidates", "feasible", "feasible with spills"]))
