"""Where a short tree's time goes: gluon_wgmma_ws (plan, kernel, combine) beside FlashMLA, kernel by kernel.

Issue 33's short trees (131072 / 16 / 8 at 59.9% of the floor on an H200, FlashMLA 66.7%): under ncu our main
kernel was faster than FlashMLA's and the plan and the combine were the difference, but ncu serializes kernels
and locks clocks. Here each call is timed the harness's way (graph replay, L2 flushed: ``time_graph``), then
the same graph is replayed under torch.profiler and every kernel's device time is averaged per call, with the
call's span (its first kernel's start to its last kernel's end) and the time no kernel of it ran.

Contenders, each a monkeypatch of the registered code for this process only (the combine contender is the
shared combine with its row cut into column blocks; it moves into split_combine if it wins):
- ``ours``: gluon_wgmma_ws as registered (plan, kernel, combine per call);
- ``plan_once``: the plan made once per prefix_lens outside the graph, as FlashMLA's harness call reuses its
  tile scheduler (``get_mla_metadata``, built on the first call): a decode step plans once for all layers;
- ``dv<N>[_t<S>][_w<W>]``: the combine over N column blocks of v_dim per row (N x the programs), S partial rows
  a load (16 unless named), W warps a program (1 unless named);
- ``flash_mla``: the peer.

Usage (GPU host, repository root):
    . scripts/gpu_env.sh; . scripts/gpu_peers_env.sh; python3 scripts/short_tree_timeline.py --out $OUT/timeline.json
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
import tempfile
from collections import defaultdict

import torch
import triton
import triton.language as tl
from tabulate import tabulate

from harness.bench.peers import PEERS
from harness.measure.timing import time_graph
from verify_kernels import planner, split_combine
from verify_kernels.api import verify_attention
from verify_kernels.problem import make_problem

SHAPES = ((131072, 16, 8), (32768, 16, 8), (4096, 64, 8), (185000, 64, 8))


@triton.jit
def _combine_dv_kernel(PartialOut, PartialLse, Plan, Out, stride_ob, stride_ot, stride_oh, T, H, max_units,
                       SPLITS_POW2: tl.constexpr, SPLIT_TILE: tl.constexpr, BLOCK_DV: tl.constexpr,
                       DV: tl.constexpr, PDL: tl.constexpr):
    """split_combine's merge with the row's v_dim cut into DV // BLOCK_DV programs (axis 2)."""
    row = tl.program_id(0)
    request = tl.program_id(1)
    column = tl.program_id(2) * BLOCK_DV
    if PDL:
        tl.extra.cuda.gdc_wait()
    first = tl.load(Plan + request)
    count = tl.minimum(tl.load(Plan + request + 1), max_units) - first
    if count > 1:
        num_rows = T * H
        splits = tl.arange(0, SPLITS_POW2)
        lse = tl.load(PartialLse + (first + splits) * num_rows + row, mask=splits < count, other=float("-inf"))
        m = tl.max(lse, 0)
        m = tl.where(m == float("-inf"), 0.0, m)
        total = tl.sum(tl.exp(lse - m), 0)
        offs_dv = column + tl.arange(0, BLOCK_DV)
        acc = tl.zeros([BLOCK_DV], dtype=tl.float32)
        for tile in range(0, count, SPLIT_TILE):
            unit = first + tile + tl.arange(0, SPLIT_TILE)
            live = tile + tl.arange(0, SPLIT_TILE) < count
            lse_tile = tl.load(PartialLse + unit * num_rows + row, mask=live, other=float("-inf"))
            partial_rows = (unit * num_rows + row).to(tl.int64)
            partial = tl.load(PartialOut + partial_rows[:, None] * DV + offs_dv[None, :],
                              mask=(live & (lse_tile > float("-inf")))[:, None], other=0.0)
            acc += tl.sum(tl.exp(lse_tile - m)[:, None] * partial, 0)
        acc = acc / tl.where(total > 0, total, 1.0)
        node = row // H
        head = row % H
        tl.store(Out + request * stride_ob + node * stride_ot + head * stride_oh + offs_dv,
                 acc.to(Out.dtype.element_ty))


def combine_dv(blocks: int, split_tile: int = 16, warps: int = 2):
    def launch(partial_out, partial_lse, plan, out, max_units, max_splits):
        batch, tree_nodes, heads, v_dim = out.shape
        _combine_dv_kernel[(tree_nodes * heads, batch, blocks)](
            partial_out, partial_lse, plan, out, out.stride(0), out.stride(1), out.stride(2), tree_nodes, heads,
            max_units, SPLITS_POW2=triton.next_power_of_2(max(2, max_splits)), SPLIT_TILE=split_tile,
            BLOCK_DV=v_dim // blocks, DV=v_dim, PDL=True, num_warps=warps, launch_pdl=True)
    return launch


class Patched:
    """Swap the planner's make_plan (cached per prefix_lens tensor) and/or the combine for one contender."""

    def __init__(self, plan_once: bool = False, combine=None):
        self.plan_once, self.combine = plan_once, combine

    def __enter__(self):
        self.saved = planner.make_plan, split_combine.launch_combine
        if self.plan_once:
            made = self.saved[0]

            @functools.lru_cache(maxsize=None)
            def cached(key, tree_nodes, bounds):
                return made(key[1], tree_nodes, bounds)

            planner.make_plan = lambda prefix_lens, tree_nodes, bounds, launch_dependents=False: cached(
                (prefix_lens.data_ptr(), prefix_lens), tree_nodes, bounds)
        if self.combine is not None:
            split_combine.launch_combine = self.combine
        return self

    def __exit__(self, *exc):
        planner.make_plan, split_combine.launch_combine = self.saved


CONTENDERS = {
    "ours": {},
    "plan_once": {"plan_once": True},
    "dv8": {"combine": combine_dv(8, warps=1)},
    "dv16": {"combine": combine_dv(16, warps=1)},
    "dv16_t32": {"combine": combine_dv(16, split_tile=32, warps=1)},
    "dv8_t32_w2": {"combine": combine_dv(8, split_tile=32, warps=2)},
    "dv4_t32_w4": {"combine": combine_dv(4, split_tile=32, warps=4)},
    "plan_once+dv16": {"plan_once": True, "combine": combine_dv(16, warps=1)},
    "plan_once+dv8": {"plan_once": True, "combine": combine_dv(8, warps=1)},
}


def kernel_profile(call, calls: int = 10) -> dict:
    """Per call: each kernel's mean device time (us), the span of the call's kernels and their idle time."""
    flush = torch.empty(2 * torch.cuda.get_device_properties(0).L2_cache_size, dtype=torch.uint8, device="cuda")
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
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
    per_kernel, spans, idle = defaultdict(list), [], []
    group: list = []

    def close(group):
        if not group:
            return
        begin = group[0]["ts"]
        end = max(e["ts"] + e["dur"] for e in group)
        spans.append(end - begin)
        busy, cursor = 0.0, begin
        for e in group:
            start, stop = max(e["ts"], cursor), e["ts"] + e["dur"]
            if stop > start:
                busy += stop - start
                cursor = stop
        idle.append(end - begin - busy)

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
            "idle_us": statistics.median(idle) if idle else None}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--shapes", default=";".join(",".join(map(str, s)) for s in SHAPES))
    args = parser.parse_args()
    shapes = [tuple(int(x) for x in s.split(",")) for s in args.shapes.split(";")]
    records, rows = [], []
    for prefix, nodes, heads in shapes:
        problem = make_problem(prefix, nodes, heads, page_size=64, tree="chain", device="cuda", seed=1)
        out = torch.empty(1, nodes, heads, 512, dtype=problem.q.dtype, device="cuda")
        reference = None
        for name in (*CONTENDERS, "flash_mla"):
            if name == "flash_mla":
                try:
                    peer = PEERS["flash_mla"](problem)
                except Exception as error:  # noqa: BLE001 (a peer that cannot run is reported, not fatal)
                    print(f"flash_mla: {error}")
                    continue
                call, context = peer, Patched()
            else:
                context = Patched(**CONTENDERS[name])

                def call():
                    verify_attention(problem.q, problem.kv_cache, problem.block_table, problem.prefix_lens,
                                     problem.tree_mask, sm_scale=problem.sm_scale, variant="gluon_wgmma_ws",
                                     out=out, validate=False)
            with context:
                result = call()
                result = out if result is None else result
                torch.cuda.synchronize()
                if reference is None:
                    reference = result.float().clone()
                error = (result.float() - reference).abs().max().item()
                timing = time_graph(call, read_state=False)
                profile = kernel_profile(call)
            record = {"shape": [prefix, nodes, heads], "contender": name, "median_us": timing.median_ms * 1e3,
                      "iqr_us": timing.iqr_ms * 1e3, "max_abs_diff_vs_ours": error, **profile}
            records.append(record)
            with open(args.out, "w") as handle:
                json.dump(records, handle, indent=1)
            kernels = ", ".join(f"{k.split('_kernel')[0][-28:]} {v:.1f}" for k, v in profile["kernels_us"].items())
            rows.append([f"{prefix}/{nodes}/{heads}", name, f"{record['median_us']:.1f}", f"{record['iqr_us']:.1f}",
                         f"{profile['span_us'] or 0:.1f}", f"{profile['idle_us'] or 0:.1f}", kernels,
                         f"{error:.1e}"])
            print(tabulate(rows[-1:], tablefmt="plain"), flush=True)
    print(tabulate(rows, headers=["shape", "contender", "us", "iqr", "span us", "idle us", "kernels (us)",
                                  "diff"]))


if __name__ == "__main__":
    main()
