"""One tuning trial in its own process: check a config against the oracle, then time it.

    echo '{"variant": ..., "config": {...}, "prefix_len": ..., ...}' | python -m harness.tune_worker

Prints one JSON line: {"status": "ok"|"wrong"|"error", "median_ms", "iqr_ms", "rel_error", "reason"}.
A config that faults (illegal address, launch failure) or hangs kills only this process; the
tuner records it as a failed trial and goes on.

For tests on machines without a GPU, VK_TUNE_FAKE=1 replaces the measurement by a deterministic
cost of the config (VK_TUNE_FAKE_SLEEP seconds each), and VK_TUNE_FAULT='{"BLOCK_M": 16}' makes
any config containing those values abort the process, as a faulting kernel would.
"""

from __future__ import annotations

import json
import os
import sys
import time
import zlib


def fake_cost_ms(config: dict) -> float:
    """A deterministic, bumpy function of the config: stands in for a GPU timing in tests."""
    key = json.dumps(config, sort_keys=True).encode()
    return 1.0 + (zlib.crc32(key) % 1000) / 100.0


def measure(job: dict) -> dict:
    """The bench's own point runner: oracle check first, then the harness timer."""
    import torch

    from verify_kernels import make_problem, reference_attention

    from .bench import BenchPoint, bench_point

    point = BenchPoint(job["variant"], job["prefix_len"], job["tree_nodes"], job["heads"], job["page_size"],
                       dtype=job["dtype"], config=tuple(sorted(job["config"].items())))
    problem = make_problem(point.prefix_len, point.tree_nodes, point.heads, page_size=point.page_size,
                           dtype=getattr(torch, point.dtype), device="cuda", seed=job.get("seed", 0))
    reference = reference_attention(*problem.arguments(), **problem.kwargs())
    payload = bench_point(point, problem, reference, None, mode="events", rep_ms=job.get("rep_ms", 100.0))
    return {key: payload[key] for key in ("status", "reason", "median_ms", "iqr_ms", "rel_error", "reps")
            if key in payload}


def run_job(job: dict) -> dict:
    fault = os.environ.get("VK_TUNE_FAULT")
    if fault and all(job["config"].get(k) == v for k, v in json.loads(fault).items()):
        os.abort()  # what a kernel fault does to the process
    if os.environ.get("VK_TUNE_FAKE"):
        time.sleep(float(os.environ.get("VK_TUNE_FAKE_SLEEP", "0")))
        cost = fake_cost_ms(job["config"])
        return {"status": "ok", "median_ms": cost, "iqr_ms": cost / 100, "rel_error": 0.0, "reps": 1}
    try:
        return measure(job)
    except Exception as error:  # problem set-up errors are results too, not crashes
        return {"status": "error", "reason": f"{type(error).__name__}: {str(error)[:400]}"}


def main() -> int:
    job = json.loads(sys.stdin.read())
    print(json.dumps(run_job(job)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
