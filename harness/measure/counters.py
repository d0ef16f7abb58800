"""Hardware counters of one profiled run under Nsight Compute: is a kernel waiting or working?

``profile(argv)`` runs ``argv`` (a Python target that launches the work inside the NVTX range
``vk_counters``) under ``ncu --clock-control none --csv --page raw``, so only the kernels in that
range are profiled, each with one replay pass per metric group. The timed run is never the
profiled one: the target is a separate process that rebuilds the same seeded problem.

Per kernel it reads the metrics in ``METRICS`` and ``STALL_METRICS``; ``summarize`` folds the
kernels of the range into one row: durations and DRAM bytes summed, percentages weighted by each
kernel's duration, the top stall reasons by the same weighting. When ncu is missing, not
permitted (ERR_NVGPUCTRPERM) or fails, the result is ``{"status": ..., "reason": ...}`` and the
caller's timing stands.
"""

from __future__ import annotations

import csv
import io
import os
import re
import shutil
import subprocess

NVTX_RANGE = "vk_counters"

# record field -> ncu metric (per kernel)
METRICS = {
    "duration_ns": "gpu__time_duration.sum",
    "tensor_pipe_pct": "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed",
    "dram_pct": "dram__throughput.avg.pct_of_peak_sustained_elapsed",
    "dram_bytes": "dram__bytes.sum",
    "l2_hit_pct": "lts__t_sector_hit_rate.pct",
    "smem_pipe_pct": "l1tex__data_pipe_lsu_wavefronts_mem_shared.avg.pct_of_peak_sustained_elapsed",
    "occupancy_pct": "sm__warps_active.avg.pct_of_peak_sustained_active",
}
STALL_REASONS = ("barrier", "branch_resolving", "dispatch_stall", "drain", "imc_miss", "lg_throttle",
                 "long_scoreboard", "math_pipe_throttle", "membar", "mio_throttle", "misc", "no_instruction",
                 "not_selected", "short_scoreboard", "sleeping", "tex_throttle", "wait")
# Cycles a warp spends stalled for a reason per instruction it issues (ncu's warp-state breakdown).
STALL_METRICS = {reason: f"smsp__average_warps_issue_stalled_{reason}_per_issue_active.ratio"
                 for reason in STALL_REASONS}
SUMMED = ("duration_ns", "dram_bytes")


def replay_profiled(call) -> None:
    """In a profiling target: run ``call`` once to warm up, then once inside the NVTX range that
    ``ncu_command`` profiles, each finished before the next step."""
    import torch

    call()
    torch.cuda.synchronize()
    torch.cuda.nvtx.range_push(NVTX_RANGE)
    call()
    torch.cuda.synchronize()
    torch.cuda.nvtx.range_pop()


def ncu_command(argv: list[str], metrics: list[str], ncu: str = "ncu", *, whole_graphs: bool = False) -> list[str]:
    """The ncu invocation: clocks left alone, only the NVTX range's kernels, raw CSV to stdout.
    ``whole_graphs``: a CUDA graph launched in the range is one profiled result (all its kernels
    together), not one per kernel node."""
    graphs = ["--graph-profiling", "graph"] if whole_graphs else []
    return [ncu, "--clock-control", "none", "--nvtx", "--nvtx-include", f"{NVTX_RANGE}/", *graphs, "--csv", "--page",
            "raw", "--metrics", ",".join(metrics), *argv]


def _number(text: str) -> float | None:
    text = text.strip().replace(",", "")
    try:
        return float(text)
    except ValueError:
        return None


def parse_csv(text: str) -> list[dict]:
    """ncu ``--csv --page raw`` output -> one dict per kernel: ``kernel`` (its name) and every
    metric column as a float (None where ncu printed n/a). ncu's own log lines (``==PROF==``) and
    the units row are skipped."""
    lines = [line for line in text.splitlines() if line.startswith('"')]
    if not lines:
        return []
    rows = list(csv.reader(io.StringIO("\n".join(lines))))
    header = rows[0]
    kernels = []
    for row in rows[1:]:
        if len(row) != len(header):
            continue
        entry = dict(zip(header, row))
        if not entry.get("ID", "").strip():  # the units row
            continue
        kernel = {"kernel": entry.get("Kernel Name", "")}
        for name, value in entry.items():
            if "__" in name:
                kernel[name] = _number(value)
        kernels.append(kernel)
    return kernels


def summarize(kernels: list[dict], *, top_stalls: int = 3) -> dict:
    """One row from the kernels of a range (see the module docstring)."""
    durations = [k.get(METRICS["duration_ns"]) or 0.0 for k in kernels]
    total = sum(durations)
    row: dict = {"status": "ok", "kernels": len(kernels)}
    for field, metric in METRICS.items():
        values = [(k.get(metric), d) for k, d in zip(kernels, durations) if k.get(metric) is not None]
        if not values:
            row[field] = None
        elif field in SUMMED:
            row[field] = sum(v for v, _ in values)
        else:
            weight = sum(d for _, d in values)
            row[field] = (sum(v * d for v, d in values) / weight) if weight else values[0][0]
    row["duration_us"] = total / 1e3 if total else None
    row.pop("duration_ns")
    row["dram_gbps"] = (row["dram_bytes"] / total) if total and row["dram_bytes"] is not None else None  # B/ns
    stalls = {}
    for reason, metric in STALL_METRICS.items():
        values = [(k.get(metric), d) for k, d in zip(kernels, durations) if k.get(metric) is not None]
        weight = sum(d for _, d in values)
        if values and weight:
            stalls[reason] = sum(v * d for v, d in values) / weight
    row["top_stalls"] = [[reason, round(cycles, 3)] for reason, cycles in
                         sorted(stalls.items(), key=lambda item: -item[1])[:top_stalls]]
    row["per_kernel"] = [{"kernel": k["kernel"][:80], "duration_us": (d / 1e3) if d else None,
                          "tensor_pipe_pct": k.get(METRICS["tensor_pipe_pct"])} for k, d in zip(kernels, durations)]
    return row


_MISSING_METRIC = re.compile(r"Failed to find metric (?:regex )?\"?([A-Za-z0-9_.]+)")


def profile(argv: list[str], *, metrics: list[str] | None = None, timeout_s: float = 300.0,
            env: dict | None = None, ncu: str | None = None, keep_kernels: bool = False, whole_graphs: bool = False,
            run=subprocess.run) -> dict:
    """Profile ``argv`` (see the module docstring); the summary row, ``ncu_command`` included.

    ``metrics`` default to all of ``METRICS`` and ``STALL_METRICS``. A metric this ncu or GPU does
    not have is dropped and the run repeated once; the row lists it under ``metrics_missing``.
    ``keep_kernels`` adds the parsed per-kernel rows as ``kernels_raw``; ``whole_graphs`` see
    ``ncu_command``. ``run`` is
    ``subprocess.run`` (replaceable in tests).
    """
    ncu = ncu or shutil.which("ncu")
    if not ncu:
        return {"status": "unavailable", "reason": "ncu not found on PATH (Nsight Compute)"}
    metrics = list(metrics or [*METRICS.values(), *STALL_METRICS.values()])
    missing: list[str] = []
    for _ in range(2):
        command = ncu_command(argv, metrics, ncu, whole_graphs=whole_graphs)
        try:
            done = run(command, capture_output=True, text=True, timeout=timeout_s, env={**os.environ, **(env or {})})
        except subprocess.TimeoutExpired:
            return {"status": "error", "reason": f"ncu ran past {timeout_s:.0f} s", "ncu_command": command}
        output = done.stdout + done.stderr
        unknown = sorted(set(_MISSING_METRIC.findall(output)) & set(metrics))
        if unknown and not missing:
            missing = unknown
            metrics = [m for m in metrics if m not in unknown]
            continue
        break
    base = {"ncu_command": command, "metrics_missing": missing}
    if "ERR_NVGPUCTRPERM" in output:
        return {**base, "status": "unavailable",
                "reason": "ncu not permitted to read GPU counters here (ERR_NVGPUCTRPERM)"}
    kernels = parse_csv(done.stdout)
    if done.returncode != 0 or not kernels:
        tail = " | ".join(line for line in output.splitlines()[-6:] if line.strip())
        return {**base, "status": "error",
                "reason": f"ncu exit {done.returncode}, {len(kernels)} kernels profiled: {tail}"[:500]}
    return {**summarize(kernels), **base, **({"kernels_raw": kernels} if keep_kernels else {})}
