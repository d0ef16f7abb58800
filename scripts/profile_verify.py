"""Where one verify forward of the decode loop spends its time, kernel by kernel.

For each context: the verify forward over a budget-sized bucket, timed as the decode loop runs it
(CUDA-graph replay, events), then the same forward eager under torch.profiler (the kernels a graph
replays are the ones the eager forward launches). Kernels are grouped into attention (the verify
kernel and its combine), GEMMs (cuBLAS, or the split-K kernel with --gemm splitk), fused elementwise
(Inductor's Triton kernels) and memory ops (index/copy/cat); the gap between the graph's time and the
kernels' sum is what launches and dependencies between kernels cost inside the graph. The weight floor
(weight bytes over the measured copy bandwidth) is printed beside the GEMM time.

Usage (repository root): python scripts/profile_verify.py --preset k2-tp8 --context 4096,185000 \
    --budget 64 --variant auto --compile-layers [--out profile.json]
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
from collections import defaultdict

import torch
from tabulate import tabulate

from harness.arguments import int_list
from harness.decode.run import build_model, build_setup, default_gemm_table, floor_ms, make_prompt
from harness.measure.records import make_record
from harness.decode.target_runner import TargetRunner

CATEGORIES = (  # first match wins
    ("attention", re.compile(r"verify|combine", re.I)),
    ("gemm", re.compile(r"gemm|gemv|nvjet|cutlass|xmma|sm90_|splitK", re.I)),
    ("fused elementwise", re.compile(r"^triton_", re.I)),
    ("memory ops", re.compile(r"index|scatter|gather|copy|cat|fill", re.I)),
)


def category(name: str) -> str:
    return next((label for label, pattern in CATEGORIES if pattern.search(name)), "other")


def replay_ms(runner: TargetRunner, bucket, replays: int = 20) -> float:
    samples = []
    for _ in range(replays):
        begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        begin.record()
        runner.run(bucket)
        end.record()
        end.synchronize()
        samples.append(begin.elapsed_time(end))
    return statistics.median(samples)


def kernel_times(runner: TargetRunner, bucket, forwards: int = 3) -> dict[str, tuple[float, float]]:
    """{kernel name: (ms per forward, launches per forward)} of the eager forward."""
    for _ in range(2):
        runner.run(bucket)
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as profiler:
        for _ in range(forwards):
            runner.run(bucket)
        torch.cuda.synchronize()
    totals: dict[str, list[float]] = defaultdict(lambda: [0.0, 0])
    for event in profiler.events():
        if event.device_type == torch.autograd.DeviceType.CUDA:
            totals[event.name][0] += event.device_time / 1e3
            totals[event.name][1] += 1
    return {name: (ms / forwards, count / forwards) for name, (ms, count) in totals.items()}


def profile_context(model, prompt, *, context: int, budget: int, variant: str, page_size: int) -> dict:
    setup = build_setup(model, prompt, context=context, max_new=0, max_tree=budget, page_size=page_size, seed=0,
                        prefill_variant=variant)
    setup.cache.reserve(setup.cache.prefix_len + budget)
    graphed = TargetRunner(model, setup.cache, attention=variant, use_graphs=True)
    graphed.warm(budget)
    bucket = graphed._bucket(budget)
    graph_ms = replay_ms(graphed, bucket)
    eager = TargetRunner(model, setup.cache, attention=variant, use_graphs=False)
    kernels = kernel_times(eager, bucket)
    by_category: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
    for name, (ms, count) in kernels.items():
        by_category[category(name)][0] += ms
        by_category[category(name)][1] += count
    kernel_ms = sum(ms for ms, _ in kernels.values())
    floor = floor_ms(model.config, prefix_len=setup.start_len, tree_nodes=budget, element_bytes=2)
    top = sorted(kernels.items(), key=lambda item: -item[1][0])[:15]
    return {"context": context, "budget": budget, "variant": variant, "graph_replay_ms": graph_ms,
            "kernel_sum_ms": kernel_ms, "kernels_per_forward": sum(c for _, c in kernels.values()),
            "categories": {label: {"ms": ms, "kernels": count} for label, (ms, count) in by_category.items()},
            "top_kernels": [{"name": name[:120], "ms": ms, "launches": count} for name, (ms, count) in top],
            "floor": floor}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="k2-tp8")
    parser.add_argument("--context", type=int_list, default=[4096], help="comma-separated context lengths")
    parser.add_argument("--budget", type=int, default=64)
    parser.add_argument("--variant", default="auto")
    parser.add_argument("--page-size", type=int, default=64)
    parser.add_argument("--compile-layers", action="store_true")
    parser.add_argument("--gemm", choices=["cublas", "splitk"], default="cublas")
    parser.add_argument("--pdl", action="store_true", help="programmatic dependent launches (see vk decode --pdl)")
    parser.add_argument("--out")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        parser.error("needs a CUDA GPU (it profiles the bf16 verify forward)")
    gemm_table = default_gemm_table("cuda") if args.gemm == "splitk" else None
    model = build_model(args.preset, seed=0, dtype=torch.bfloat16, device="cuda", compile_layers=args.compile_layers,
                        gemm=args.gemm, gemm_table=gemm_table, pdl=args.pdl)
    prompt = make_prompt(model.config, None, 16, 0)
    rows = [profile_context(model, prompt, context=c, budget=args.budget, variant=args.variant,
                            page_size=args.page_size) for c in args.context]
    if args.out:
        with open(args.out, "w") as handle:
            json.dump(make_record("verify_profile", {"preset": args.preset, "compile_layers": args.compile_layers,
                                                     "gemm": {"kind": args.gemm, "table": gemm_table},
                                                     "pdl": args.pdl, "rows": rows}), handle, indent=1, default=str)
    for row in rows:
        floor = row["floor"] or {}
        print(f"\ncontext {row['context']}, budget {row['budget']}, {row['variant']}: graph replay "
              f"{row['graph_replay_ms']:.2f} ms, kernels {row['kernel_sum_ms']:.2f} ms in "
              f"{row['kernels_per_forward']:.0f} launches; weight floor {floor.get('weights_ms', float('nan')):.2f} ms")
        print(tabulate(sorted(((label, f"{v['ms']:.3f}", f"{v['kernels']:.0f}")
                               for label, v in row["categories"].items()),
                              key=lambda r: -float(r[1])), headers=["category", "ms / forward", "kernels"]))
        print(tabulate([(k["name"][:70], f"{k['ms']:.3f}", f"{k['launches']:.0f}") for k in row["top_kernels"]],
                       headers=["kernel", "ms / forward", "launches"]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
