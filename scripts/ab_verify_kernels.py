"""Interleaved A/B timing of verify kernels whose power draw differs (the H200 holds its clocks down
under a power cap for minutes, so timing one contender after the other biases the second).

Each contender's output is first checked against the oracle (relative error, the bench's
tolerance); a wrong one is reported and not timed, unless ``--time-wrong`` (ablations: a kernel with a
part removed on purpose, to see what that part costs). Each round then times every contender once
(graph replay, L2 flushed, ``harness.measure.timing.time_graph``); the table gives each contender's median
over rounds and the SM clock NVML read after its rounds; ``--out`` appends one record per
contender (environment, command). A contender is ``variant[:config-json]``, or
``file=PATH:config-json`` for a variant module kept as a file (an earlier version of a kernel,
loaded as a sibling of verify_kernels' modules). ``--ragged L1,L2,...`` times a batch instead of one request.

  python scripts/ab_verify_kernels.py --prefix 185000 --tree 64 --rounds 8 \
      'gluon_wgmma_ws:{"BLOCK_N": 64, "kv_splits": 0}' 'file=old_ws.py:{"BLOCK_N": 64, "kv_splits": 16}'
"""

import argparse
import json
import shlex
import statistics
import sys
from pathlib import Path

import torch
from tabulate import tabulate

from harness.bench.cases import TOLERANCE
from harness.measure.records import append_records, make_record
from harness.measure.timing import gpu_state, time_graph
from verify_kernels import make_problem, reference_attention, variants
from verify_kernels.contract import check_arguments


def load_contender(spec: str):
    """(label, module, config) from 'variant:json' or 'file=PATH:json'."""
    name, _, config = spec.partition(":")
    config = json.loads(config) if config else {}
    if name.startswith("file="):
        path = Path(name.removeprefix("file="))
        return f"{path.stem} {config}", variants.load_variant_file(path), config
    return f"{name} {config}", variants.load_variant(name), config


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("contenders", nargs="+")
    parser.add_argument("--prefix", type=int, default=185000)
    parser.add_argument("--ragged", type=lambda text: [int(v) for v in text.split(",")],
                        help="a ragged batch instead of --prefix: one prefix length per request, comma-separated")
    parser.add_argument("--tree", type=int, default=64)
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--page-size", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--out", help="JSONL file the records are appended to")
    parser.add_argument("--time-wrong", action="store_true",
                        help="time contenders that fail the oracle check too (ablations); their rows say so")
    args = parser.parse_args()
    lengths = args.ragged or [args.prefix]
    problem = make_problem(lengths, args.tree, args.heads, page_size=args.page_size, device="cuda", seed=0)
    shape = check_arguments(*problem.arguments(), **problem.kwargs())
    reference = reference_attention(*problem.arguments(), **problem.kwargs()).double()
    out = torch.empty(*problem.q.shape[:3], problem.v_dim, dtype=problem.q.dtype, device="cuda")
    contenders, errors, passes = [], {}, {}
    for spec in args.contenders:
        label, module, config = load_contender(spec)
        config = variants.resolve_config(label, module, config, shape)

        def call(m=module, c=config):
            m.run(*problem.arguments(), **problem.kwargs(), out=out, config=c)

        out.fill_(float("nan"))
        call()
        errors[label] = float((out.double() - reference).norm() / reference.norm())
        passes[label] = errors[label] <= TOLERANCE[problem.q.dtype]
        if passes[label] or args.time_wrong:
            contenders.append((label, call))
        else:
            print(f"{label}: relative error {errors[label]:.3g} against the oracle; not timed")
    medians = {label: [] for label, _ in contenders}
    clocks = {label: [] for label, _ in contenders}
    for _ in range(args.rounds):
        for label, fn in contenders:
            medians[label].append(time_graph(fn, calls_per_graph=10, replays=10, read_state=False).median_ms)
            clocks[label].append((gpu_state() or {}).get("sm_clock_mhz"))
    rows = [{"contender": label, "prefix_len": max(lengths), "prefix_lens": lengths, "tree_nodes": args.tree,
             "heads": args.heads,
             "page_size": args.page_size,
             "rel_error": errors[label], "passes_oracle": passes[label],
             "median_ms": statistics.median(medians[label]), "min_ms": min(medians[label]),
             "round_medians_ms": medians[label],
             "sm_clock_mhz_after": clocks[label]} for label, _ in contenders]
    def clock_range(values: list) -> str:
        seen = [v for v in values if v]
        return f"{min(seen)}-{max(seen)}" if seen else "-"

    print(tabulate([(r["contender"], ",".join(map(str, lengths))[:24], r["tree_nodes"], f"{r['median_ms']:.4f}",
                     f"{r['min_ms']:.4f}",
                     f"{r['rel_error']:.1e}", clock_range(r["sm_clock_mhz_after"])) for r in rows],
                   headers=["contender", "L", "T", "median ms", "min ms", "rel err", "SM MHz after"]))
    if args.out:
        command = shlex.join(["python", *sys.argv])
        append_records(args.out, [make_record("ab_timing", row, command) for row in rows])


if __name__ == "__main__":
    main()
