"""Every GPU variant on small adversarial shapes against the oracle: a target for compute-sanitizer.

    compute-sanitizer --tool memcheck --kernel-name kns=verify python3 scripts/sanitize_variants.py [variant ...]
    compute-sanitizer --tool racecheck python3 scripts/sanitize_variants.py cuda_coalesced
    compute-sanitizer --tool synccheck python3 scripts/sanitize_variants.py
    compute-sanitizer --tool initcheck python3 scripts/sanitize_variants.py
    compute-sanitizer --tool racecheck python3 scripts/sanitize_variants.py cuda_ws --config '{"PRODUCER": 0}'
    compute-sanitizer --tool racecheck python3 scripts/sanitize_variants.py \
        file=experiments/sanitizer/ws_cta_handoff.py@gluon_wgmma_ws

A name ``file=PATH@VARIANT`` runs a variant module kept as a file (an experiment's patched kernel,
loaded as a sibling of verify_kernels' modules) on the shapes of the registered ``VARIANT``.

``--config`` (JSON) is applied to every shape under each shape's own overrides; where the variant refuses the
two together (a spans-only key beside a shape's fixed ``kv_splits``), the shape runs at ``--config`` alone and
the log says so.

Shapes: a prefix of 0, page edges (prefix = page - 1, a tree ending on a page boundary), ragged
batches (one whose CTAs cross requests), one split and many (a forced kv_splits), odd T and H.
Exit 1 when any output is wrong.
"""

import argparse
import json
import sys

import torch

from verify_kernels import VARIANTS, make_problem, reference_attention, verify_attention, variants
from verify_kernels import contract
from verify_kernels.api import UnsupportedProblemError

# (prefix_lens, T, H, page_size, tree, config overrides); page_size 1 runs triton_ps1 only.
SHAPES = [
    ([0], 7, 2, 16, "random", {}),
    ([63], 16, 8, 64, "chain", {}),
    ([65], 33, 8, 64, "binary", {"kv_splits": 3}),
    ([300], 20, 3, 32, "star", {"kv_splits": 5}),
    ([130, 17, 0], 64, 2, 16, "random", {}),
    ([24], 40, 1, 64, "random", {"kv_splits": 1}),
    # The planner's spans rule on 132 SMs: spans of 4 tiles, one CTA walks 2 requests, one 3.
    ([9000, 130, 4100, 1, 20000], 16, 8, 64, "random", {}),
]


def file_runner(spec: str):
    """(registered variant, run(problem, config)) for 'file=PATH@VARIANT': PATH's ``run`` with the
    registered variant's config rules applied to PATH's defaults."""
    path, _, registered = spec.removeprefix("file=").partition("@")
    if registered not in VARIANTS:
        raise SystemExit(f"{spec}: expected file=PATH@VARIANT with a registered VARIANT, got {registered!r}")
    module = variants.load_variant_file(path)

    def run(gpu, config):
        shape = contract.check_arguments(*gpu.arguments(), **gpu.kwargs())
        resolved = variants.resolve_config(registered, module, config or None, shape)
        out = torch.empty(shape.batch, shape.tree_nodes, shape.heads, shape.v_dim, dtype=gpu.q.dtype,
                          device=gpu.q.device)
        module.run(*gpu.arguments(), sm_scale=gpu.sm_scale, v_dim=shape.v_dim, out=out, config=resolved)
        return out
    return registered, run


def config_clash(variant: str, base_config: dict, overrides: dict, gpu) -> str | None:
    """Why the variant refuses ``--config`` under a shape's own overrides (e.g. a spans-only key beside the
    shape's fixed ``kv_splits``), where it takes ``--config`` alone; None where both are fine."""
    shape = contract.check_arguments(*gpu.arguments(), **gpu.kwargs())
    module = variants.load_variant(variant)
    try:
        variants.resolve_config(variant, module, overrides, shape)
    except ValueError as error:
        try:
            variants.resolve_config(variant, module, base_config or None, shape)
        except ValueError:
            return None  # --config itself is refused: the run below says so
        return str(error)
    return None


def main(names: list[str], base_config: dict) -> int:
    failures = 0
    for name in names:
        registered, file_run = file_runner(name) if name.startswith("file=") else (name, None)
        for prefix_lens, nodes, heads, page_size, tree, config in SHAPES:
            page = 1 if registered == "triton_ps1" else page_size
            problem = make_problem(prefix_lens, nodes, heads, page_size=page, tree=tree, seed=5)
            reference = reference_attention(*problem.arguments(), **problem.kwargs())
            gpu = problem.to("cuda")
            overrides = {} if registered == "triton_ps1" else {**base_config, **config}
            if overrides != base_config and (clash := config_clash(registered, base_config, overrides, gpu)):
                print(f"{name} {gpu.shape_summary}: the shape's {config} dropped ({clash[:120]})")
                overrides = base_config
            try:
                if file_run:
                    out = file_run(gpu, overrides)
                else:
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
    parser.add_argument("variants", nargs="*", help="registered variants or file=PATH@VARIANT; default: every "
                        "registered variant")
    parser.add_argument("--config", type=json.loads, default={}, help="JSON config overrides for every shape")
    args = parser.parse_args()
    sys.exit(main(args.variants or list(VARIANTS), args.config))
