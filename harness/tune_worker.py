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
    import torch

    from verify_kernels import make_problem, reference_attention, verify_attention

    from .cases import TOLERANCE
    from .timing import time_events

    problem = make_problem(job["prefix_len"], job["tree_nodes"], job["heads"], page_size=job["page_size"],
                           dtype=getattr(torch, job["dtype"]), device="cuda", seed=job.get("seed", 0))
    out = torch.full((*problem.q.shape[:3], problem.v_dim), float("nan"), dtype=problem.q.dtype, device="cuda")
    verify_attention(*problem.arguments(), **problem.kwargs(), variant=job["variant"], config=job["config"], out=out)
    torch.cuda.synchronize()
    reference = reference_attention(*problem.arguments(), **problem.kwargs())
    rel_error = float((out.double() - reference.double()).norm() / reference.double().norm())
    if not rel_error <= TOLERANCE[problem.q.dtype]:
        return {"status": "wrong", "rel_error": rel_error, "reason": f"relative error {rel_error:.3g} vs the oracle"}
    del reference

    def call():
        verify_attention(*problem.arguments(), **problem.kwargs(), variant=job["variant"], config=job["config"],
                         out=out, validate=False)

    timing = time_events(call, rep_ms=job.get("rep_ms", 100.0), read_state=False)
    return {"status": "ok", "median_ms": timing.median_ms, "iqr_ms": timing.iqr_ms, "rel_error": rel_error,
            "reps": timing.reps}


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
    except Exception as error:  # compile and launch errors are results, not crashes
        return {"status": "error", "reason": f"{type(error).__name__}: {str(error)[:400]}"}


def main() -> int:
    job = json.loads(sys.stdin.read())
    print(json.dumps(run_job(job)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
