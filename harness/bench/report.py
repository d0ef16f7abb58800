"""``vk report``: bench records -> a markdown table with its conditions, and PNG plots.

Table: one row per shape (L, T, H), one column per implementation, each cell the median in ms
with the % of the roofline floor (or the reason there is no number). Plots: latency against
prefix length (log-log) and % of roofline against prefix length, one panel per (T, H).

Records with hardware counters (``vk bench --counters``) or NVML power samples add a second table,
one row per record: tensor-pipe %, DRAM % and GB/s, L2 hit rate, shared-memory pipe %, occupancy,
the top stalls, power and memory-controller utilisation; and a plot of tensor-pipe activity
against prefix length.
"""

from __future__ import annotations

import importlib.util
from collections import defaultdict
from pathlib import Path

from tabulate import tabulate

from harness.bench.peers_report import lengths_cell, peers_sections, shape_key
from harness.measure.records import read_records
from harness.measure.figures import finish, length_ticks, saved_figure


def load_bench_records(paths: list[Path]) -> list[dict]:
    records = []
    for path in paths:
        records += read_records(path, "bench", flag="inputs")
    return records


def _implementation(record: dict) -> str:
    config = record.get("config") or {}
    suffix = "" if not config else "[" + ",".join(f"{k}={v}" for k, v in sorted(config.items())) + "]"
    return record["variant"] + suffix


def _cell(record: dict) -> str:
    if record.get("status") != "ok":
        return record.get("status", "?")
    cell = f"{record['median_ms']:.3f}"
    if record.get("pct_roofline") is not None:
        cell += f" ({record['pct_roofline']:.1f}%)"
    return cell


def markdown_table(records: list[dict]) -> str:
    """Latest record per (shape, implementation); columns in first-seen order."""
    columns, cells = [], defaultdict(dict)
    for record in records:
        name = _implementation(record)
        if name not in columns:
            columns.append(name)
        cells[shape_key(record)][name] = record
    rows = []
    for (tree, length, nodes, heads, batch), by_name in sorted(cells.items()):
        floor = next((r.get("floor_ms") for r in by_name.values() if r.get("floor_ms")), None)
        rows.append([tree, lengths_cell(length), nodes, heads, batch, f"{floor:.4f}" if floor else "-"]
                    + [_cell(by_name[name]) if name in by_name else "" for name in columns])
    return tabulate(rows, headers=["tree", "L", "T", "H", "B", "floor ms"] + columns, tablefmt="github")



def conditions(records: list[dict]) -> str:
    env = records[-1]["environment"]
    modes = sorted({r.get("mode", "events") for r in records})
    hashes = sorted({r["environment"].get("source_hash") for r in records})
    return (f"GPU {env.get('gpu')} ({env.get('sm_count')} SMs), driver {env.get('driver')}, CUDA {env.get('cuda')}, "
            f"torch {env.get('torch')}, triton {env.get('triton')}; source hash {', '.join(hashes)}. "
            f"Timing: {', '.join(modes)} mode, L2 flushed before every call, warm-up and repetitions sized by "
            "time, median (IQR in the records); each output checked against the float64 oracle before timing. "
            "Cells: median ms (% of the roofline floor max(bytes / copy BW, FLOPs / bf16 matmul rate)).")


def _number(value, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def counters_table(records: list[dict]) -> str | None:
    """One row per ok record that has counters or power; None when none has."""
    rows = []
    for r in records:
        found, power = r.get("counters"), r.get("power")
        if r.get("status") != "ok" or not (found or power):
            continue
        found = found or {}
        power = power if (power or {}).get("status") == "ok" else {}
        ok = found.get("status") == "ok"
        stalls = ", ".join(f"{reason} {cycles:.1f}" for reason, cycles in found.get("top_stalls", [])) if ok else \
            (found.get("reason", "-")[:60] if found else "-")
        rows.append([_implementation(r), lengths_cell(shape_key(r)[1]), r["tree_nodes"], r["heads"],
                     f"{r['median_ms']:.3f}",
                     _number(r.get("pct_roofline")),
                     *(_number(found.get(k)) if ok else "-" for k in
                       ("tensor_pipe_pct", "dram_pct", "dram_gbps", "l2_hit_pct", "smem_pipe_pct", "occupancy_pct")),
                     stalls, _number(power.get("power_w_median"), 0), _number(power.get("power_w_peak"), 0),
                     _number(power.get("mem_util_pct_median"), 0)])
    if not rows:
        return None
    return tabulate(rows, headers=["implementation", "L", "T", "H", "ms", "% floor", "tensor %", "DRAM %", "DRAM GB/s",
                                   "L2 hit %", "smem pipe %", "occupancy %", "top stalls (cycles per issue)",
                                   "W median", "W peak", "mem ctrl %"], tablefmt="github")


def unavailable_reasons(records: list[dict]) -> list[str]:
    seen, lines = set(), []
    for record in records:
        if record.get("status") != "ok":
            key = (_implementation(record), record.get("reason", "")[:200])
            if key not in seen:
                seen.add(key)
                lines.append(f"- `{key[0]}` ({record['status']}): {key[1]}")
    return lines


def _tensor_pct(record: dict) -> float | None:
    found = record.get("counters") or {}
    return found.get("tensor_pipe_pct") if found.get("status") == "ok" else None


def plot(records: list[dict], out_prefix: Path) -> list[Path]:
    """One PNG per metric (latency, % of the floor, tensor-pipe % when counted), a panel per (T, H),
    a line per implementation over L; the legend outside the panels (harness/measure/figures.py)."""

    panels = sorted({(r["tree_nodes"], r["heads"]) for r in records})
    written = []
    metrics = [("median_ms", "latency (ms)", True, "latency"),
               ("pct_roofline", "% of roofline floor", False, "roofline")]
    if any(_tensor_pct(r) is not None for r in records):
        metrics.append((_tensor_pct, "tensor pipe active (% of cycles, ncu)", False, "tensor"))
    for metric, label, log_y, kind in metrics:
        value = metric if callable(metric) else (lambda record, key=metric: record.get(key))
        path = out_prefix.with_name(f"{out_prefix.name}-{kind}.png")
        with saved_figure(path, columns=len(panels), size=(3.8 * len(panels), 3.8), dpi=110) as (figure, axes):
            axes = axes if isinstance(axes, tuple) else (axes,)
            for axis, (nodes, heads) in zip(axes, panels):
                series = defaultdict(list)
                for record in records:  # a ragged batch is a row of the table, not a point on an L axis
                    if (record["tree_nodes"], record["heads"]) == (nodes, heads) and value(record) is not None \
                            and not record.get("prefix_lens"):
                        series[_implementation(record)].append((record["prefix_len"], value(record)))
                for name, points in series.items():
                    points.sort()
                    axis.plot([p[0] for p in points], [p[1] for p in points], label=name)
                axis.set_xscale("log")
                if log_y:
                    axis.set_yscale("log")
                length_ticks(axis, [p[0] for points in series.values() for p in points])
                axis.set_title(f"T={nodes}, H={heads}")
                axis.set_xlabel("prefix length L")
                axis.set_ylabel(label)
                axis.grid(True, which="both", alpha=0.3)
            finish(figure, axes)
        written.append(path)
    return written


def write_report(paths: list[Path], out_prefix: Path, title: str, peers: bool = False) -> tuple[Path, list[Path]]:
    """Write <prefix>.md and the plots; return their paths. ``peers``: add the ahead-or-behind table
    and the portable race (harness.bench.peers_report)."""
    records = load_bench_records(paths)
    out_prefix.parent.mkdir(parents=True, exist_ok=True)
    # matplotlib is the `plot` extra: without it the table is written without the figures.
    images = plot(records, out_prefix) if importlib.util.find_spec("matplotlib") else []
    lines = [f"# {title}", "", conditions(records), "", markdown_table(records), ""]
    reasons = unavailable_reasons(records)
    if reasons:
        lines += ["Rows without a number:", "", *reasons, ""]
    counted = counters_table(records)
    if counted:
        lines += ["Hardware counters (one ncu-profiled replay per row, never the timed one; power and memory-"
                  "controller utilisation sampled by NVML over the row's timing):", "", counted, ""]
    if peers:
        lines += peers_sections(records)
    lines += [f"![{image.stem.rsplit('-', 1)[-1]}]({image.name})\n" for image in images]
    lines += ["Reproduce: " + "; ".join(sorted({f"`{r['command']}`" for r in records})), ""]
    markdown = out_prefix.with_suffix(".md")
    markdown.write_text("\n".join(lines))
    return markdown, images
