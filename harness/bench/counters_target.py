"""The profiled replay of one bench row, run under ncu by ``vk bench --counters`` (never the timed run).

    python -m harness.bench.counters_target '{"variant": "cuda_ws", "prefix_len": 185000, ...}'

It rebuilds the row's problem from its seed (make_problem at the row's page size), calls the
variant or peer once to compile and warm up, then once more inside the NVTX range that ncu
profiles (harness.measure.counters.NVTX_RANGE). The argument is a BenchPoint as JSON plus "seed".
"""

from __future__ import annotations

import json
import sys

import torch

from verify_kernels import make_problem

from harness.bench.sweep import BenchPoint, implementation_call
from harness.measure.counters import NVTX_RANGE


def main(argument: str) -> int:
    spec = json.loads(argument)
    seed = spec.pop("seed")
    point = BenchPoint(**{**spec, "config": tuple(sorted(spec["config"].items()))})
    problem = make_problem(point.prefix_len, point.tree_nodes, point.heads, page_size=point.page_size,
                           batch=point.batch, tree=point.tree, dtype=getattr(torch, point.dtype), device="cuda",
                           seed=seed)
    call, _ = implementation_call(point, problem)
    call()
    torch.cuda.synchronize()
    torch.cuda.nvtx.range_push(NVTX_RANGE)
    call()
    torch.cuda.synchronize()
    torch.cuda.nvtx.range_pop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
