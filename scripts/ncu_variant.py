"""One verify_attention call of a variant at one shape, for ncu (the call before it warms up).

    ncu --clock-control none --kernel-name regex:verify --launch-skip 1 --launch-count 1 \
        python3 scripts/ncu_variant.py cuda_ws 185000 64 8 '{"PRODUCER": 0}'
"""

import json
import sys

import torch

from verify_kernels import make_problem, verify_attention

variant, length, nodes, heads = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
config = json.loads(sys.argv[5]) if len(sys.argv) > 5 else None
problem = make_problem([length], nodes, heads, page_size=64, device="cuda", seed=0)
for _ in range(2):
    verify_attention(*problem.arguments(), **problem.kwargs(), variant=variant, config=config)
torch.cuda.synchronize()
