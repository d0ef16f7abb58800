"""Every GPU variant on small adversarial shapes against the oracle: a target for compute-sanitizer.

    compute-sanitizer --tool memcheck --kernel-name kns=verify python3 scripts/sanitize_variants.py [variant ...]
    compute-sanitizer --tool racecheck python3 scripts/sanitize_variants.py cuda_coalesced
    compute-sanitizer --tool synccheck python3 scripts/sanitize_variants.py
    compute-sanitizer --tool initcheck python3 scripts/sanitize_variants.py
    compute-sanitizer --tool racecheck python3 scripts/sanitize_variants.py cuda_ws --config '{"PRODUCER": 0}'

``--config`` (JSON) is applied to every shape under each shape's own overrides.

Shapes: a prefix of 0, page edges (prefix = page - 1, a tree ending on a page boundary), a ragged
batch, one split and many (a forced kv_splits), odd T and H. Exit 1 when any output is wrong.
"""

import argparse
import json
import sys

import torch

from verify_kernels import VARIANTS, make_problem, reference_attention, verify_attention
from verify_kernels.api import UnsupportedProblemError

# (prefix_lens, T, H, page_size, tree, config overrides); page_size 1 runs triton_ps1 only.
SHAPES = [
    ([0], 7, 2, 16, "random", {}),
    ([63], 16, 8, 64, "chain", {}),
    ([65], 33, 8, 64, "binary", {"kv_splits": 3}),
    ([300], 20, 3, 32, "star", {"kv_splits": 5}),
    ([130, 17, 0], 64, 2, 16, "random", {}),
    ([24], 40, 1, 64, "random", {"kv_splits": 1}),
]


def main(names: list[str], base_config: dict) -> int:
    failures = 0
    for name in names:
        for prefix_lens, nodes, heads, page_size, tree, config in SHAPES:
            page = 1 if name == "triton_ps1" else page_size
            problem = make_problem(prefix_lens, nodes, heads, page_size=page, tree=tree, seed=5)
            reference = reference_attention(*problem.arguments(), **problem.kwargs())
            gpu = problem.to("cuda")
            overrides = {} if name == "triton_ps1" else {**base_config, **config}
            try:
                out = verify_attention(*gpu.arguments(), **gpu.kwargs(), variant=name, config=overrides or None)
            except UnsupportedProblemError as error:
                print(f"{name} {gpu.shape_summary}: skipped ({str(error)[:100]})")
                continue
            torch.cuda.synchronize()
            error = float((out.cpu().double() - reference.double()).norm() / reference.double().norm())
            ok = error < 1e-2 and not torch.isnan(out).any()
            failures += not ok
            print(f"{name} {gpu.shape_summary} config={overrides}: rel_error={error:.2e} {'ok' if ok else 'FAIL'}")
    return 1 if failures else 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("variants", nargs="*", help="default: every registered variant")
    parser.add_argument("--config", type=json.loads, default={}, help="JSON config overrides for every shape")
    args = parser.parse_args()
    sys.exit(main(args.variants or list(VARIANTS), args.config))
