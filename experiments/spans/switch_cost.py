"""Is a CTA's switch between requests (the spans rule's segments) costly? gluon_wgmma_ws's kernels on a
ragged batch and on one request of the same total tiles, spans (waves 0) against units (waves 2); run
under ncu, which times each kernel alone (results/notes/2026-12-04-spans.md):

    ncu --kernel-name regex:"ws_verify|combine|plan" --metrics gpu__time_duration.sum --csv \
        python3 experiments/spans/switch_cost.py
"""

import torch

from verify_kernels import make_problem, verify_attention

CASES = [([65536] * 8, 16, 16), ([524400], 16, 16), ([185000, 4096, 32768, 131072], 64, 8), ([353000], 64, 8)]
for lengths, tree_nodes, heads in CASES:
    problem = make_problem(lengths, tree_nodes, heads, page_size=64, device="cuda", seed=1)
    for config in ({"waves": 0}, {"waves": 2}):
        print(lengths[:2], len(lengths), tree_nodes, heads, config, flush=True)
        verify_attention(*problem.arguments(), **problem.kwargs(), variant="gluon_wgmma_ws", config=config)
        torch.cuda.synchronize()
