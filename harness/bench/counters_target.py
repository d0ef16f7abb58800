"""The profiled replay of one bench row or check case, run under ncu by ``vk bench --counters`` and
``vk check --counters`` (never the timed or checked run).

    python -m harness.bench.counters_target '{"variant": "cuda_ws", "prefix_len": 185000, ...}'
    python -m harness.bench.counters_target '{"case": {...}, "variant": ..., "page_size": ..., "config": ...}'

It rebuilds the problem from its seed (make_problem at the row's page size), calls the variant or
peer once to compile and warm up, then once more inside the NVTX range that ncu profiles
(harness.measure.counters.NVTX_RANGE). The argument is a BenchPoint as JSON plus "seed", or a
check Case with the variant, page size and config.
"""

from __future__ import annotations

import json
import sys

import torch

from verify_kernels import make_problem, verify_attention

from harness.bench.cases import DTYPES, Case
from harness.bench.sweep import BenchPoint, implementation_call
from harness.measure.counters import replay_profiled


def case_call(spec: dict):
    """The verify call of a check case (see ``harness.bench.cases.run_case``), as a no-argument callable."""
    case = Case(**{**spec["case"], "prefix_lens": tuple(spec["case"]["prefix_lens"])})
    problem = make_problem(list(case.prefix_lens), case.tree_nodes, case.heads, page_size=spec["page_size"],
                           tree=case.tree, dtype=DTYPES[case.dtype], device="cuda", seed=case.seed,
                           q_scale=case.q_scale)
    return lambda: verify_attention(*problem.arguments(), **problem.kwargs(), variant=spec["variant"],
                                    config=spec["config"] or None)


def main(argument: str) -> int:
    spec = json.loads(argument)
    if "case" in spec:
        call = case_call(spec)
    else:
        seed = spec.pop("seed")
        point = BenchPoint(**{**spec, "config": tuple(sorted(spec["config"].items())),
                              "prefix_lens": tuple(spec.get("prefix_lens") or ())})
        problem = make_problem(point.lengths(), point.tree_nodes, point.heads, page_size=point.page_size,
                               tree=point.tree, dtype=getattr(torch, point.dtype), device="cuda", seed=seed)
        call, _ = implementation_call(point, problem)
    replay_profiled(call)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
