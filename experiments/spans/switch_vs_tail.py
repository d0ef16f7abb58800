"""Which costs a spans CTA time, a switch between requests or a request's partial last tile?
gluon_wgmma_ws (spans, waves 0) at T 16, H 16 on batches of the same 8217 tiles (33 spans of 249 on an
H200): A three requests whose boundaries are span boundaries and whose last tiles are whole; B the
boundaries inside spans (two CTAs switch), tiles whole; E boundaries on spans, each last tile partial;
C one request. Run under ncu as switch_cost.py says."""

import torch

from verify_kernels import make_problem, verify_attention

CASES = {"A": [175280] * 3, "B": [181680, 175280, 168880], "E": [175248] * 3, "C": [525872]}
for name, lengths in CASES.items():
    problem = make_problem(lengths, 16, 16, page_size=64, device="cuda", seed=1)
    print(name, lengths, flush=True)
    verify_attention(*problem.arguments(), **problem.kwargs(), variant="gluon_wgmma_ws", config={"waves": 0})
    torch.cuda.synchronize()
