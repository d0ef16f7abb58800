"""One problem, a few calls of one variant: the target of `ncu` in scripts/gpu_final.sh."""

import argparse

import torch

from harness.bench.sweep import page_size_for
from verify_kernels import make_problem, verify_attention

parser = argparse.ArgumentParser()
parser.add_argument("--variant", required=True)
parser.add_argument("--prefix", type=int, default=131072)
parser.add_argument("--tree", type=int, default=64)
parser.add_argument("--heads", type=int, default=8)
args = parser.parse_args()
problem = make_problem(args.prefix, args.tree, args.heads, page_size=page_size_for(args.variant, 64),
                       device="cuda", seed=0)
out = torch.empty(*problem.q.shape[:3], 512, dtype=problem.q.dtype, device="cuda")
for _ in range(4):
    verify_attention(*problem.arguments(), **problem.kwargs(), variant=args.variant, out=out, validate=False)
torch.cuda.synchronize()
