"""Run cuda_coalesced on four small shapes against the oracle; meant to run under compute-sanitizer.

    compute-sanitizer --tool memcheck --kernel-name regex:verify python3 scripts/sanitize_cuda.py
    compute-sanitizer --tool racecheck --kernel-name regex:verify python3 scripts/sanitize_cuda.py
"""

import sys

import torch

from verify_kernels import make_problem, reference_attention, verify_attention

SHAPES = [  # (prefix_lens, T, H, page_size, tree, config)
    ([0], 7, 2, 16, "random", {}),
    ([65], 33, 8, 64, "binary", {"BLOCK_N": 32, "kv_splits": 3}),
    ([300], 20, 3, 32, "star", {"WARPS_M": 1, "WARPS_N": 4, "BLOCK_N": 32, "STAGES": 3, "kv_splits": 5}),
    ([130, 17], 64, 2, 16, "chain", {"WARPS_M": 4, "BLOCK_N": 32}),
]

failures = 0
for prefix_lens, nodes, heads, page_size, tree, config in SHAPES:
    problem = make_problem(prefix_lens, nodes, heads, page_size=page_size, tree=tree, seed=5)
    reference = reference_attention(*problem.arguments(), **problem.kwargs())
    gpu = problem.to("cuda")
    out = verify_attention(*gpu.arguments(), **gpu.kwargs(), variant="cuda_coalesced", config=config or None)
    torch.cuda.synchronize()
    error = float((out.cpu().double() - reference.double()).norm() / reference.double().norm())
    ok = error < 1e-2 and not torch.isnan(out).any()
    failures += not ok
    print(f"{gpu.shape_summary} config={config}: rel_error={error:.2e} {'ok' if ok else 'FAIL'}")
sys.exit(1 if failures else 0)
