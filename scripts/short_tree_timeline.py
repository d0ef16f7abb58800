"""Where a short tree's time goes: gluon_wgmma_ws (plan, kernel, combine) beside FlashMLA, kernel by kernel.

Issue 33's short trees (131072 / 16 / 8 at 59.9% of the floor on an H200, FlashMLA 66.7%): under ncu our main
kernel was faster than FlashMLA's and the plan and the combine were the difference, but ncu serializes kernels
and locks clocks. Here each call is timed the harness's way (graph replay, L2 flushed: ``time_graph``), then
the same graph is replayed under torch.profiler and every kernel's device time is averaged per call, with the
call's span (its first kernel's start to its last kernel's end) and the time no kernel of it ran.

Contenders, each a monkeypatch of the registered code for this process only:
- ``one-row combine``: the shared combine launched one program per row, as before its column blocks;
- ``ours``: gluon_wgmma_ws as registered (plan, kernel, combine per call);
- ``ours, plan once``: the calls of a captured graph sharing one plan (``verify_kernels.plan_once``), as a decode
  step's layers do and as FlashMLA's harness call reuses its first call's tile scheduler (``get_mla_metadata``);
- ``ours, plan once, bf16 partials``: the same, the partial rows stored in bf16 (half the bytes the attention kernel
  writes and the combine reads; the LSEs stay fp32). An experiment: the library keeps fp32, as the peers do, and
  the diff column says what bf16 costs in accuracy;
- ``flash_mla``: the peer.

Usage (GPU host, repository root):
    . scripts/gpu_env.sh; . scripts/gpu_peers_env.sh
    python3 scripts/short_tree_timeline.py --out results/bench/short-tree-timeline-<gpu>.jsonl
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import statistics
import tempfile
from collections import defaultdict

import torch
from tabulate import tabulate

from harness.bench.peers import PEERS
from harness.measure.records import append_records, make_record
from harness.measure.timing import time_graph
from verify_kernels import plan_once, split_combine, variants
from verify_kernels.api import verify_attention
from verify_kernels.problem import make_problem

SHAPES = ((131072, 16, 8), (32768, 16, 8), (4096, 64, 8), (185000, 64, 8))


class Patched:
    """For one contender: the combine launched one program per row (``one_row``: the launch before column
    blocks), and/or the calls sharing one plan (``plan_once``: one plan a captured graph)."""

    def __init__(self, one_row: bool = False, plan_once: bool = False, bf16_partials: bool = False,
                 variant_module=None):
        self.one_row, self.plan_once, self.bf16_partials = one_row, plan_once, bf16_partials
        # the names are patched where the variant looks them up: split_combine, and the variant's module where it
        # imported them itself
        self.modules = [m for m in (split_combine, variant_module) if m is not None]

    def __enter__(self):
        self.saved = [(m, m.__dict__.get("launch_combine"), m.__dict__.get("partial_buffers")) for m in self.modules]
        for module, launch, buffers in self.saved:
            if self.one_row and launch is not None:
                module.launch_combine = functools.partial(LAUNCH_COMBINE, grid=ONE_ROW)
            if self.bf16_partials and buffers is not None:
                module.partial_buffers = bf16_partial_buffers
        return self

    def __exit__(self, *exc):
        for module, launch, buffers in self.saved:
            for name, value in (("launch_combine", launch), ("partial_buffers", buffers)):
                if value is not None:
                    setattr(module, name, value)

    def scope(self):
        return plan_once() if self.plan_once else contextlib.nullcontext()


def bf16_partial_buffers(out: torch.Tensor, max_units: int) -> tuple[torch.Tensor, torch.Tensor]:
    """split_combine.partial_buffers with the partial rows in bf16 (a store into them rounds; the LSEs stay fp32)."""
    _, tree_nodes, heads, v_dim = out.shape
    rows = max_units * tree_nodes * heads
    return (torch.empty(rows, v_dim, dtype=torch.bfloat16, device=out.device),
            torch.empty(rows, dtype=torch.float32, device=out.device))


ONE_ROW = split_combine.CombineGrid(1, 4, 8)
LAUNCH_COMBINE = split_combine.launch_combine
# bf16 partial rows only where the attention kernel's store converts to the buffer's type (Triton, Gluon); a CUDA
# kernel writes float whatever the buffer holds
BF16_PARTIAL_VARIANTS = ("gluon_wgmma_ws", "triton_splitkv")
CONTENDERS = {"one-row combine": {"one_row": True}, "ours": {}, "ours, plan once": {"plan_once": True},
              "ours, plan once, bf16 partials": {"plan_once": True, "bf16_partials": True}}


def kernel_profile(call, scope, calls: int = 10) -> dict:
    """Per call: each kernel's mean device time (us; a programmatic launch's counts from its early start), the
    span of the call's kernels, and its tail: from the end of the attention kernel (the longest kernel not
    named combine) to the end of the call's last kernel."""
    flush = torch.empty(2 * torch.cuda.get_device_properties(0).L2_cache_size, dtype=torch.uint8, device="cuda")
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph), scope():
        for _ in range(calls):
            flush.zero_()
            call()
    graph.replay()
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as profiler:
        for _ in range(3):
            graph.replay()
        torch.cuda.synchronize()
    with tempfile.NamedTemporaryFile(suffix=".json") as trace:
        profiler.export_chrome_trace(trace.name)
        events = [e for e in json.load(open(trace.name))["traceEvents"]
                  if e.get("cat") == "kernel" and e.get("ph") == "X"]
    events.sort(key=lambda e: e["ts"])
    per_kernel, spans, tails = defaultdict(list), [], []
    group: list = []

    def close(group):
        if not group:
            return
        begin = group[0]["ts"]
        end = max(e["ts"] + e["dur"] for e in group)
        spans.append(end - begin)
        main = max((e for e in group if "combine" not in e["name"]), key=lambda e: e["dur"])
        tails.append(end - main["ts"] - main["dur"])

    for event in events:  # a flush (a fill kernel) opens each call's group
        name = event["name"]
        if "fill" in name.lower() or "memset" in name.lower():
            close(group)
            group = []
            continue
        group.append(event)
        per_kernel[name[:60]].append(event["dur"])
    close(group)
    return {"kernels_us": {name: statistics.mean(durs) for name, durs in per_kernel.items()},
            "launches_per_call": {name: len(durs) / max(1, len(spans)) for name, durs in per_kernel.items()},
            "span_us": statistics.median(spans) if spans else None,
            "tail_us": statistics.median(tails) if tails else None}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True, help="JSONL records (appended)")
    parser.add_argument("--shapes", default=";".join(",".join(map(str, s)) for s in SHAPES))
    parser.add_argument("--variant", default="gluon_wgmma_ws", help="the planned variant timed")
    parser.add_argument("--proxy-for", help="run the variant with this arch's defaults (sm_120: the proxy); the peer "
                                            "is left out")
    args = parser.parse_args()
    config = (variants.defaults_for(variants.load_variant(args.variant), args.proxy_for) if args.proxy_for
              else None)
    shapes = [tuple(int(x) for x in s.split(",")) for s in args.shapes.split(";")]
    variant_module = variants.load_variant(args.variant)
    rows = []
    for prefix, nodes, heads in shapes:
        problem = make_problem(prefix, nodes, heads, page_size=64, tree="chain", device="cuda", seed=1)
        out = torch.empty(1, nodes, heads, 512, dtype=problem.q.dtype, device="cuda")
        reference = None
        contenders = [name for name in CONTENDERS
                      if args.variant in BF16_PARTIAL_VARIANTS or not CONTENDERS[name].get("bf16_partials")]
        for name in (*contenders, *(() if args.proxy_for else ("flash_mla",))):
            if name == "flash_mla":
                try:
                    peer = PEERS["flash_mla"](problem)
                except Exception as error:  # noqa: BLE001 (a peer that cannot run is reported, not fatal)
                    print(f"flash_mla: {error}")
                    continue
                call, context = peer, Patched()
            else:
                context = Patched(**CONTENDERS[name], variant_module=variant_module)

                def call():
                    verify_attention(problem.q, problem.kv_cache, problem.block_table, problem.prefix_lens,
                                     problem.tree_mask, sm_scale=problem.sm_scale, variant=args.variant,
                                     config=config, out=out, validate=False)
            with context:
                try:
                    result = call()
                except Exception as error:  # noqa: BLE001 (an experiment that cannot run is reported, not fatal)
                    print(f"{name}: {type(error).__name__}: {str(error)[:300]}")
                    continue
                result = out if result is None else result
                torch.cuda.synchronize()
                if reference is None:
                    reference = result.float().clone()
                error = (result.float() - reference).abs().max().item()
                timing = time_graph(call, read_state=False, capture_scope=context.scope)
                profile = kernel_profile(call, context.scope)
            record = {"shape": [prefix, nodes, heads], "variant": args.variant if name in CONTENDERS else name,
                      "proxy_for": args.proxy_for, "config": config, "contender": name,
                      "median_us": timing.median_ms * 1e3,
                      "iqr_us": timing.iqr_ms * 1e3, "max_abs_diff_vs_first": error, **profile}
            append_records(args.out, [make_record("timeline", record)])
            kernels = ", ".join(f"{k.split('_kernel')[0][-28:]} {v:.1f}" for k, v in profile["kernels_us"].items())
            rows.append([f"{prefix}/{nodes}/{heads}", name, f"{record['median_us']:.1f}", f"{record['iqr_us']:.1f}",
                         f"{profile['span_us'] or 0:.1f}", f"{profile['tail_us'] or 0:.1f}", kernels,
                         f"{error:.1e}"])
            print(tabulate(rows[-1:], tablefmt="plain"), flush=True)
    print(tabulate(rows, headers=["shape", "contender", "us", "iqr", "span us", "tail us", "kernels (us)",
                                  "diff"]))


if __name__ == "__main__":
    main()
