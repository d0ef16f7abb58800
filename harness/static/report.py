"""``vk static``: the tables it prints, for a variant's defaults or for its whole search space."""

from __future__ import annotations

import json

from tabulate import tabulate

from harness.static.resources import static_rows
from harness.static.space import SPACES_DIR, resolve, static_feasibility


def default_rows(variant: str, arch: str, configs: list[dict] | None = None) -> list[dict]:
    """``static_rows`` under the variant's search-space rule for spills on ``arch``."""
    target = resolve(variant, arch)
    return static_rows(target, configs, allow_spills=target.spills_allowed)


def format_rows(rows: list[dict]) -> str:
    table = [(r["variant"], r["arch"], ",".join(f"{k}={v}" for k, v in r["config"].items()), r.get("registers", "-"),
              r.get("spill_store_bytes", "-"), f"{r['shared_bytes'] / 1024:.1f}" if "shared_bytes" in r else "-",
              r.get("blocks_per_sm", "-"), f"{r['occupancy']:.2f}" if "occupancy" in r else "-",
              r.get("limiter", "-"), "yes" if r["feasible"] else "NO", r["reason"]) for r in rows]
    return tabulate(table, headers=["variant", "arch", "config", "regs", "spill B", "smem KB", "blocks/SM",
                                    "occupancy", "limiter", "feasible", "reason"])


def space_report(names: list[str], arches: list[str], as_json: bool) -> str:
    """Every candidate of each variant's search space with its static figures or rejection."""
    rows, summary = [], []
    for name in names:
        if not (SPACES_DIR / f"{name}.yaml").exists():
            continue
        for arch in arches:
            found = static_feasibility(resolve(name, arch), progress=not as_json)
            feasible = [c for c in found if c.feasible]
            summary.append((name, arch, len(found), len(feasible),
                            sum((c.static.get("spill_store_bytes") or 0) > 0 for c in feasible)))
            # The candidate's verdict last: the compiled row's own "feasible" ignores the space's spill rule.
            rows += [{"variant": name, "arch": arch, "config": c.config, **c.static, "feasible": c.feasible,
                      "reason": c.reason} for c in found]
    if as_json:
        return json.dumps(rows, indent=1, default=str)
    table = [(r["variant"], r["arch"], ",".join(f"{k}={v}" for k, v in r["config"].items()), r.get("registers", "-"),
              r.get("spill_store_bytes", "-"), f"{r['shared_bytes'] / 1024:.0f}" if r.get("shared_bytes") else "-",
              r.get("blocks_per_sm", "-"), "yes" if r["feasible"] else "NO", r["reason"][:70]) for r in rows]
    return (tabulate(table, headers=["variant", "arch", "config", "regs", "spill B", "smem KB", "blocks/SM",
                                     "feasible", "reason"]) + "\n\n" +
            tabulate(summary, headers=["variant", "arch", "candidates", "feasible", "feasible with spills"]))
