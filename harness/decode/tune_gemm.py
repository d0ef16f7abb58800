"""Tune the split-K GEMM of the decode model (harness/decode/splitk_linear.py) per weight shape and row
block, beside cuBLAS, on the GPU at hand.

For each weight GEMM of the preset's layers (qkv_a, q_b, o_proj, gate_up, down: w [N, K]) and each
row count M in --rows (one per BLOCK_M: 16, 32, 64): every tile config of the grid below x every
split count that gives 0.5 to 8 CTAs per SM, each checked against float64 first (a config whose
error exceeds 4x cuBLAS's fails the run once its shape is done), then timed by CUDA-graph replay
(harness/measure/timing.py) with the weights cold: the graph cycles through copies of w that together
exceed 3x the L2, as the decode streams every layer's weights once. (An L2 flush by memset leaves the L2
full of dirty lines whose write-back competes with a bandwidth-bound kernel: it understated these GEMMs
by 20-30%.) cuBLAS (x @ w.T) is timed the same way in the same run.

Writes (appending each shape's record as it finishes, so a killed run keeps what it did):
- --out JSONL: one record per (shape, M): every trial, cuBLAS, the winner, GB/s and % of the
  measured copy bandwidth;
- --table JSON: the winners, which ``SplitKTable`` reads (with the kernel source hash, the
  environment and this command as provenance).

Usage (on the GPU): vk tune-gemm --preset k2-tp8 --rows 64,1,32 \
    --table results/tuned/splitk-linear-nvidia-h200.json --out results/bench/splitk-linear-nvidia-h200.jsonl
(``scripts/tune_splitk.py`` until 2026-12-04; its records name that command.)
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import torch
from tabulate import tabulate
from tqdm import tqdm

from harness.decode.model import PRESETS, weight_gemms
from harness.measure.records import append_records, make_record
from harness.measure.roofline import load_ceilings
from harness.static.space import source_digest
from harness.decode.splitk_linear import SplitKConfig, block_rows, splitk_matmul, split_plan
from harness.measure.timing import time_graph

TILES = [(64, 128, 4), (64, 256, 4), (128, 64, 4), (128, 128, 4), (128, 256, 4), (128, 128, 8), (256, 64, 8),
         (256, 128, 8)]  # (BLOCK_N, BLOCK_K, num_warps)
STAGES = [3, 4, 5]
SPLITS = [1, 2, 3, 4, 6, 8, 12, 16, 24, 32]


def source_hash() -> str:
    """The provenance hash of the kernel's module (search_space.source_digest, as for the variants)."""
    return source_digest([Path(__file__).resolve().parent / "splitk_linear.py"])


def candidates(N: int, K: int, sms: int):
    for (block_n, block_k, warps), stages in itertools.product(TILES, STAGES):
        tiles = -(-N // block_n)
        seen = set()
        for splits in SPLITS:
            _, launched = split_plan(K, SplitKConfig(block_n, block_k, splits, warps, stages))
            ctas = tiles * launched
            if launched in seen or not (sms // 2 <= ctas <= 8 * sms or launched == 1):
                continue
            seen.add(launched)
            yield SplitKConfig(block_n, block_k, launched, warps, stages)


def time_cold(gemm, weights: list[torch.Tensor]):
    """Per-call time of ``gemm(w)`` over the weight copies in turn (each once per pass, two passes
    per graph), no flush: every call reads its weights from HBM."""
    turn = itertools.cycle(weights)
    return time_graph(lambda: gemm(next(turn)), calls_per_graph=2 * len(weights), replays=5, flush=False,
                      read_state=False)


def tune_shape(name: str, N: int, K: int, M: int, sms: int, progress, pdl: bool) -> dict:
    generator = torch.Generator(device="cuda").manual_seed(N * 7 + K + M)
    x = torch.randn(M, K, generator=generator, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(N, K, generator=generator, device="cuda", dtype=torch.bfloat16).mul_(K ** -0.5)
    expected = x @ w.T
    reference = (x.double() @ w.double().T)
    tolerance = 4 * (expected.double() - reference).abs().max().item() + 1e-2
    out = torch.empty_like(expected)
    l2_bytes = torch.cuda.get_device_properties(0).L2_cache_size
    weights = [w] + [w.clone() for _ in range(-(-3 * l2_bytes // (N * K * 2)))]
    cublas = time_cold(lambda weight: torch.matmul(x, weight.T, out=out), weights)
    trials, wrong, failed = [], 0, 0
    for config in candidates(N, K, sms):
        progress.set_postfix_str(f"{name} M={M} {config.BLOCK_N}x{config.BLOCK_K} s{config.splits}")
        try:
            got = splitk_matmul(x, w, config, pdl=pdl)
            torch.cuda.synchronize()
        except Exception as error:  # e.g. shared memory over the limit: not a candidate
            failed += 1
            progress.update()
            if "OutOfResources" not in type(error).__name__ and "out of resource" not in str(error).lower():
                raise
            continue
        error = (got.double() - reference).abs().max().item()
        if not error <= tolerance:
            wrong += 1
            progress.update()
            continue
        timing = time_cold(lambda weight: splitk_matmul(x, weight, config, out=out, pdl=pdl), weights)
        trials.append({"config": config.as_dict(), "median_ms": timing.median_ms, "iqr_ms": timing.iqr_ms,
                       "max_abs_error": error})
        progress.update()
    if wrong:
        raise RuntimeError(f"{name} M={M}: {wrong} configs gave wrong results (tolerance {tolerance:.3g})")
    best = min(trials, key=lambda t: t["median_ms"])
    weight_bytes = N * K * 2
    ceilings = load_ceilings()
    row = {"name": name, "n": N, "k": K, "m": M, "block_m": block_rows(M), "pdl": pdl, "weight_bytes": weight_bytes,
           "timing": f"CUDA-graph replay over {len(weights)} weight copies, no flush (weights cold)",
           "cublas_ms": cublas.median_ms, "best": best, "trials": trials, "failed_to_compile": failed,
           "tolerance": tolerance, "best_tbps": weight_bytes / (best["median_ms"] * 1e-3) / 1e12,
           "cublas_tbps": weight_bytes / (cublas.median_ms * 1e-3) / 1e12}
    if ceilings is not None:
        row["copy_tbps"] = ceilings.copy_tbps
        row["best_pct_of_copy"] = 100 * row["best_tbps"] / ceilings.copy_tbps
        row["cublas_pct_of_copy"] = 100 * row["cublas_tbps"] / ceilings.copy_tbps
    return row


def run(args) -> int:
    """``vk tune-gemm``: every weight GEMM of the preset at every row count, records and table as they finish."""
    if not torch.cuda.is_available():
        raise SystemExit("vk tune-gemm: needs a CUDA GPU")
    shapes = weight_gemms(PRESETS[args.preset])
    chosen = args.shapes or list(shapes)
    unknown = sorted(set(chosen) - set(shapes))
    if unknown:
        raise SystemExit(f"vk tune-gemm: --shapes: unknown {unknown}; expected some of {list(shapes)}")
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    jobs = [(name, M) for M in args.rows for name in chosen]  # the first row count for every shape first
    total = sum(len(list(candidates(*shapes[name], sms))) for name, _ in jobs)
    progress = tqdm(total=total, desc="splitk", unit="config", disable=args.no_progress)
    rows, winners = [], []
    for name, M in jobs:
        N, K = shapes[name]
        row = tune_shape(name, N, K, M, sms, progress, args.pdl)
        append_records(args.out,
                       [make_record("splitk_tune", {"preset": args.preset, "kernel_source_hash": source_hash(),
                                                              **row})])
        rows.append(row)
        winners.append({"name": name, "block_m": row["block_m"], "n": N, "k": K, "config": row["best"]["config"],
                        "median_ms": row["best"]["median_ms"], "cublas_ms": row["cublas_ms"], "m": M})
        table = make_record("splitk_table",
                            {"preset": args.preset, "kernel_source_hash": source_hash(), "pdl": args.pdl,
                                             "configs": winners})
        args.table.parent.mkdir(parents=True, exist_ok=True)
        args.table.write_text(json.dumps(table, indent=1, default=str) + "\n")
    progress.close()
    print(tabulate([(r["name"], r["m"], f"{r['n']}x{r['k']}", f"{r['cublas_ms'] * 1e3:.1f}",
                     f"{r['best']['median_ms'] * 1e3:.1f}", f"{r['cublas_ms'] / r['best']['median_ms']:.2f}x",
                     f"{r.get('best_pct_of_copy', float('nan')):.0f}%",
                     f"{r.get('cublas_pct_of_copy', float('nan')):.0f}%",
                     "{BLOCK_N}x{BLOCK_K} s{splits} w{num_warps} st{num_stages}".format(**r["best"]["config"]))
                    for r in rows],
                   headers=["gemm", "M", "N x K", "cuBLAS us", "split-K us", "speed-up", "split-K % copy BW",
                            "cuBLAS % copy BW", "config"]))
    return 0
