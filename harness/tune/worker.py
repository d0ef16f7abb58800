"""Tuning trials in their own process: check a config against the oracle, then time it.

    echo '{"variant": ..., "config": {...}, "prefix_len": ..., ...}' | python -m harness.tune.worker

Answers one job per input line with one JSON line, {"status": "ok"|"wrong"|"error", "median_ms",
"iqr_ms", "rel_error", "reason"}, until end of input, keeping the last problem and its oracle
output (harness/tune/trial_process.py drives it). A config that faults (illegal
address, launch failure) or hangs kills only this process; the tuner records it as a failed trial,
starts a fresh worker and goes on.

For tests on machines without a GPU, VK_TUNE_FAKE=1 replaces the measurement by a deterministic
cost of the config (VK_TUNE_FAKE_SLEEP seconds each), and VK_TUNE_FAULT='{"BLOCK_M": 16}' makes
any config containing those values abort the process, as a faulting kernel would
(VK_TUNE_HANG likewise makes it sleep, as a deadlocked kernel would).
"""

from __future__ import annotations

import json
import os
import sys
import time
import zlib

from harness.bench.sweep import BenchPoint, bench_point
from verify_kernels import make_problem, reference_attention


def fake_cost_ms(config: dict) -> float:
    """A deterministic, bumpy function of the config: stands in for a GPU timing in tests."""
    key = json.dumps(config, sort_keys=True).encode()
    return 1.0 + (zlib.crc32(key) % 1000) / 100.0


_problem_cache: dict = {}  # the last (shape -> (problem, oracle output)); a worker serves one key at a time


def _problem_and_reference(point, seed: int):
    import torch

    shape = (tuple(point.lengths()), point.tree_nodes, point.heads, point.page_size, point.dtype, seed)
    if shape not in _problem_cache:
        _problem_cache.clear()
        problem = make_problem(point.lengths(), point.tree_nodes, point.heads, page_size=point.page_size,
                               dtype=getattr(torch, point.dtype), device="cuda", seed=seed)
        _problem_cache[shape] = (problem, reference_attention(*problem.arguments(), **problem.kwargs()))
    return _problem_cache[shape]


def measure(job: dict) -> dict:
    """The bench's own point runner: oracle check first, then the harness timer."""

    lengths = tuple(job.get("prefix_lens") or ())  # a ragged batch; empty: one request of prefix_len
    point = BenchPoint(job["variant"], job["prefix_len"], job["tree_nodes"], job["heads"], job["page_size"],
                       batch=len(lengths) or 1, dtype=job["dtype"], config=tuple(sorted(job["config"].items())),
                       prefix_lens=lengths)
    problem, reference = _problem_and_reference(point, job.get("seed", 0))
    # The arch tuned for: the keys outside the space run at its defaults (a proxy tune's, not this GPU's).
    payload = bench_point(point, problem, reference, None, mode=job.get("timing", "events"),
                          rep_ms=job.get("rep_ms", 100.0), proxy_for=job.get("arch"))
    return {key: payload[key] for key in ("status", "reason", "median_ms", "iqr_ms", "rel_error", "reps")
            if key in payload}


def run_job(job: dict) -> dict:
    fault = os.environ.get("VK_TUNE_FAULT")
    if fault and all(job["config"].get(k) == v for k, v in json.loads(fault).items()):
        os.abort()  # what a kernel fault does to the process
    hang = os.environ.get("VK_TUNE_HANG")
    if hang and all(job["config"].get(k) == v for k, v in json.loads(hang).items()):
        time.sleep(3600)  # what a deadlocked kernel does
    if os.environ.get("VK_TUNE_FAKE"):
        time.sleep(float(os.environ.get("VK_TUNE_FAKE_SLEEP", "0")))
        cost = fake_cost_ms(job["config"])
        return {"status": "ok", "median_ms": cost, "iqr_ms": cost / 100, "rel_error": 0.0, "reps": 1}
    try:
        return measure(job)
    except Exception as error:  # problem set-up errors are results too, not crashes
        return {"status": "error", "reason": f"{type(error).__name__}: {str(error)[:400]}"}


def main() -> int:
    answers = sys.stdout
    sys.stdout = sys.stderr  # only answers go to stdout: the driver reads one JSON line per job
    for line in sys.stdin:
        if line.strip():
            result = run_job(json.loads(line))
            answers.write(json.dumps(result) + "\n")
            answers.flush()
            if result.get("status") == "error":
                return 0  # the driver starts a fresh worker: the CUDA context may be unusable
    return 0


if __name__ == "__main__":
    sys.exit(main())
