"""``vk decode --counters``: the verify forward of one decode step under ncu, split by kernel class.

The profiled step is never a timed one: ``step_argv`` starts ``python -m
harness.decode.counters_target`` with the decode point's settings; that process builds the same model
and cache (same seeds), captures the verify graph of the budget's bucket, replays it once to warm up,
then once inside the NVTX range ncu profiles.

By default the graph is one profiled result (``ncu --graph-profiling graph``): tensor-pipe %,
DRAM % and bytes over the whole verify forward, in a few replays of the step. ``by_kernel=True``
profiles each kernel node instead and ``by_class`` folds them into attention (the verify kernels
and their split-KV combine), GEMMs and the rest, each with its share of the step's kernel time;
that takes a replay pass per kernel, and a k2-tp8 step is about a thousand kernels.
"""

from __future__ import annotations

import json
import re
import sys

from harness.measure import counters

KERNEL_CLASSES = (("attention", re.compile(r"verify|combine|attention|attn|flash|mla", re.I)),
                  ("gemm", re.compile(r"gemm|matmul|cutlass|xmma|nvjet|splitk|cublas|mm_", re.I)))
STEP_METRICS = [counters.METRICS[k] for k in ("duration_ns", "tensor_pipe_pct", "dram_pct", "dram_bytes")]


def kernel_class(name: str) -> str:
    for label, pattern in KERNEL_CLASSES:
        if pattern.search(name):
            return label
    return "other"


def by_class(kernels: list[dict]) -> dict:
    """{"all": summary, "attention": ..., "gemm": ..., "other": ...}: each a summarize() row without
    the per-kernel list, plus ``time_share`` of the step's summed kernel time."""
    groups: dict[str, list[dict]] = {}
    for kernel in kernels:
        groups.setdefault(kernel_class(kernel["kernel"]), []).append(kernel)
    total = sum(k.get(counters.METRICS["duration_ns"]) or 0.0 for k in kernels)
    out = {}
    for label, members in [("all", kernels), *sorted(groups.items())]:
        row = counters.summarize(members, top_stalls=0)
        row.pop("per_kernel")
        row.pop("top_stalls")
        row["time_share"] = (row["duration_us"] * 1e3 / total) if total and row["duration_us"] else None
        out[label] = row
    return out


def step_argv(settings: dict) -> list[str]:
    return [sys.executable, "-m", "harness.decode.counters_target", json.dumps(settings)]


def profile_step(settings: dict, *, by_kernel: bool = False, timeout_s: float = 900.0,
                 profile=counters.profile) -> dict:
    """ncu over one verify step of ``settings`` (harness.decode.counters_target): {"status": "ok",
    "scope", "step": the whole step's row} or, ``by_kernel``, {"status": "ok", "scope",
    "by_class": {...}}; else the profile's failure row."""
    result = profile(step_argv(settings), metrics=STEP_METRICS, timeout_s=timeout_s, keep_kernels=True,
                     whole_graphs=not by_kernel)
    if result.get("status") != "ok":
        return result
    kernels = result.pop("kernels_raw")
    base = {"status": "ok", "ncu_command": result["ncu_command"], "metrics_missing": result["metrics_missing"]}
    if not by_kernel:
        step = counters.summarize(kernels, top_stalls=0)
        for key in ("per_kernel", "top_stalls"):
            step.pop(key)
        return {**base, "scope": "the verify graph of one step as one result (ncu --graph-profiling graph)",
                "step": step}
    return {**base, "scope": "each kernel node of one step's verify graph", "kernels": len(kernels),
            "by_class": by_class(kernels)}
