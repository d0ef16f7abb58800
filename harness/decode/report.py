"""``vk decode-report``: decode records (JSONL) -> a markdown table and two plots.

- <name>.md: per run the step time, its phases, attention's share, tokens/step, tokens/s, the step
  over its floor, the speed-up over triton_ps1 at the same context and budget, and the match with
  greedy decoding;
- <name>-steps.png: step time against context per variant, with the floor;
- <name>-budget.png: tokens/s and step time against the tree budget per context.
"""

from __future__ import annotations

import importlib.util
import statistics
from collections import defaultdict
from pathlib import Path

from harness.decode.run import PADDED_GREEDY, format_decode_table, timing_suffix
from harness.measure.figures import finish, length_ticks, saved_figure
from harness.measure.records import read_records

BASELINE = "triton_ps1"


def primary_runs(records: list[dict]) -> list[dict]:
    """Drop a synced or blocking run where the same context, variant and budget was also timed
    overlapped (``vk decode --phase-timing overlapped synced``): the overlapped one stands for the
    point. Records older than the option were synced and have no twin."""
    overlapped = {(r["context"], r["variant"], r["budget"]) for r in records if r.get("phase_timing") == "overlapped"}
    return [r for r in records if not (r.get("phase_timing") in ("synced", "overlapped-blocking")
                                       and (r["context"], r["variant"], r["budget"]) in overlapped)]


def speedups_over_baseline(records: list[dict]) -> dict[int, float]:
    """Record index -> its step-time speed-up over the baseline's run at the same context and budget."""
    baseline = {(r["context"], r["budget"]): r["median_step_ms"] for r in records
                if r.get("variant") == BASELINE and r.get("median_step_ms")}
    return {i: baseline[(r["context"], r["budget"])] / r["median_step_ms"] for i, r in enumerate(records)
            if r.get("median_step_ms") and r.get("variant") != BASELINE and (r["context"], r["budget"]) in baseline}


def repeated_steps(records: list[dict]) -> dict[tuple, list[float]]:
    """(context, budget, variant and timing) -> the median steps of its runs, where it ran more
    than once (``vk decode --repeats``)."""
    steps: dict[tuple, list[float]] = defaultdict(list)
    for r in records:
        if r.get("median_step_ms"):
            steps[(r["context"], r["budget"], r["variant"] + timing_suffix(r))].append(r["median_step_ms"])
    return {key: values for key, values in steps.items() if len(values) > 1}


def markdown(records: list[dict], title: str) -> str:
    ok = [r for r in records if r.get("status") != "error"]
    lines = [f"# {title}", "", "```", format_decode_table(records), "```", ""]
    speedups = speedups_over_baseline(ok)
    for index, speedup in speedups.items():
        r = ok[index]
        lines.append(f"- context {r['context']}, budget {r['budget']}: {r['variant']}{timing_suffix(r)} step "
                     f"{r['median_step_ms']:.1f} ms is {speedup:.1f}x faster than {BASELINE}'s")
    for r in ok:
        if "floor" in r:
            floor = r["floor"]
            lines.append(f"- context {r['context']}, budget {r['budget']}, {r['variant']}{timing_suffix(r)}: floor "
                         f"{floor['step_ms']:.2f} ms (weights {floor['weights_ms']:.2f} + attention "
                         f"{floor['attention_ms']:.2f}); step {r['median_step_ms']:.2f} ms = "
                         f"{r['step_over_floor']:.3f}x; "
                         f"attention {100 * r.get('attention_share', 0):.0f}% of the step")
    for key, steps in sorted(repeated_steps(ok).items()):
        context, budget, label = key
        lines.append(f"- context {context}, budget {budget}, {label}: {len(steps)} runs, step median of the runs "
                     f"{statistics.median(steps):.2f} ms, range {min(steps):.2f}-{max(steps):.2f} ms")
    best = _best_budget(primary_runs(ok))
    for context, r in sorted(best.items()):
        lines.append(f"- best budget at context {context}: {r['budget']} ({r['tokens_per_s']:.1f} tokens/s; "
                     "runs that parted from their drafter's greedy reference left out)")
    if ok:
        lines += ["", f"Command: `{ok[0].get('command', '')}`",
                  f"Environment: {ok[0].get('environment', {}).get('gpu', '')}"]
    return "\n".join(lines) + "\n"


def _off_reference(record: dict) -> bool:
    """Did the run part from the greedy run its oracle drafter followed (plain greedy, or greedy
    padded to the budget with --batch-invariant-greedy)? After that the drafter is out of step."""
    followed = (record.get("lossless_batch_invariant") if record.get("drafter_reference") == PADDED_GREEDY
                else record.get("lossless"))
    return bool(followed) and not followed["identical"]


def _best_budget(records: list[dict]) -> dict[int, dict]:
    """Per context, the budget with the most tokens/s among runs still on the path of the greedy
    run their oracle drafter followed (after parting from it, the acceptance is meaningless)."""
    by_context: dict[int, list[dict]] = defaultdict(list)
    for r in records:
        on_path = not _off_reference(r)
        if r.get("variant") != BASELINE and r.get("tokens_per_s") and on_path:
            by_context[r["context"]].append(r)
    return {c: max(rs, key=lambda r: r["tokens_per_s"]) for c, rs in by_context.items()
            if len({r["budget"] for r in rs}) > 1}


def plot_steps(records: list[dict], path: Path) -> None:
    """Step time against context at the budget run at the most contexts (one point per context)."""
    timed = [r for r in primary_runs(records) if r.get("median_step_ms")]
    contexts_per_budget = defaultdict(set)
    for r in timed:
        contexts_per_budget[r["budget"]].add(r["context"])
    budget = max(contexts_per_budget, key=lambda b: len(contexts_per_budget[b]))
    by_variant: dict[str, dict[int, dict]] = defaultdict(dict)
    for r in timed:
        if r["budget"] == budget:
            by_variant[r["variant"] + timing_suffix(r)][r["context"]] = r  # a repeated point: the last run
    floors = sorted({(r["context"], r["floor"]["step_ms"]) for rs in by_variant.values() for r in rs.values()
                     if "floor" in r})
    with saved_figure(path) as (figure, axis):
        for variant, points in sorted(by_variant.items()):
            rs = sorted(points.values(), key=lambda r: r["context"])
            axis.plot([r["context"] for r in rs], [r["median_step_ms"] for r in rs], marker="o", label=variant)
        if floors:
            axis.plot(*zip(*floors), linestyle="--", color="grey", label="floor (weights + attention roofline)")
        axis.set_xscale("log", base=2)
        axis.set_yscale("log")
        length_ticks(axis, [r["context"] for rs in by_variant.values() for r in rs.values()])
        axis.set_xlabel("context (tokens)")
        axis.set_ylabel("decode step (ms)")
        axis.set_title(f"tree budget {budget}", fontsize=10)
        finish(figure, [axis])


def plot_budget(records: list[dict], path: Path) -> None:
    """Tokens/s (left) and step time (right) against the tree budget, one line per context."""
    by_context: dict[int, list[dict]] = defaultdict(list)
    for r in primary_runs(records):
        if r.get("tokens_per_s") and r.get("variant") != BASELINE:
            by_context[r["context"]].append(r)
    with saved_figure(path, columns=2, size=(9.6, 4)) as (figure, (left, right)):
        for context, rs in sorted(by_context.items()):
            rs = sorted(rs, key=lambda r: r["budget"])
            budgets = [r["budget"] for r in rs]
            line, = left.plot(budgets, [r["tokens_per_s"] for r in rs], marker="o", label=f"context {context}")
            right.plot(budgets, [r["median_step_ms"] for r in rs], marker="o", label=f"context {context}")
            # A run that left greedy's path early leaves the oracle drafter's reference: its acceptance
            # (tokens/s) is not the drafter's calibrated one. Marked with a cross.
            off_path = [r for r in rs if _off_reference(r)]
            left.scatter([r["budget"] for r in off_path], [r["tokens_per_s"] for r in off_path], marker="x", s=80,
                         color=line.get_color(), zorder=3)
        left.set_title("x: diverged from the drafter's greedy reference (oracle out of step)", fontsize=9)
        for axis, label in ((left, "tokens/s"), (right, "decode step (ms)")):
            axis.set_xscale("log", base=2)
            length_ticks(axis, [r["budget"] for rs in by_context.values() for r in rs])
            axis.set_xlabel("tree budget (nodes)")
            axis.set_ylabel(label)
        finish(figure, [left, right])


def write_decode_report(inputs: list[Path], out_dir: Path, name: str) -> list[Path]:
    records = [r for path in inputs for r in read_records(path, "decode")]
    out_dir.mkdir(parents=True, exist_ok=True)
    written = [out_dir / f"{name}.md"]
    written[0].write_text(markdown(records, f"DDTree decode: {name}"))
    # matplotlib is the `plot` extra: without it the table is written without the figures.
    if importlib.util.find_spec("matplotlib") is not None:
        written += [out_dir / f"{name}-steps.png", out_dir / f"{name}-budget.png"]
        plot_steps(records, written[1])
        plot_budget(records, written[2])
    return written
