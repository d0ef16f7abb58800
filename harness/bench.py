"""``vk bench``: variants x prefix length x tree size x heads x page size, timed side by side.

Each point is built once (same seeded logical content for every variant, re-laid out per page
size), checked against the oracle, then timed with the harness timer; a failing or out-of-memory
variant becomes a row with its reason. Records are appended as they complete.
"""

from __future__ import annotations

import itertools
from dataclasses import asdict, dataclass

import torch
from tabulate import tabulate
from tqdm import tqdm

from verify_kernels import contract, make_problem, reference_attention, variants, verify_attention
from verify_kernels.api import UnsupportedProblemError

from . import records, roofline, timing
from .cases import TOLERANCE


@dataclass(frozen=True)
class BenchPoint:
    variant: str
    prefix_len: int
    tree_nodes: int
    heads: int
    page_size: int
    batch: int = 1
    dtype: str = "bfloat16"
    tree: str = "random"
    config: tuple = ()  # (key, value) overrides of the variant's defaults, hashable


def page_size_for(variant: str, requested: int) -> int:
    """triton_ps1 only runs page_size 1; every other variant runs the requested page size."""
    return 1 if variant == "triton_ps1" else requested


def sweep_points(variants: list[str], prefix_lens: list[int], tree_sizes: list[int], heads: list[int],
                 page_sizes: list[int], batch: int = 1, dtype: str = "bfloat16",
                 configs: list[dict] | None = None) -> list[BenchPoint]:
    """Every combination; ``configs`` (overrides) apply to every variant but triton_ps1."""
    points = []
    for length, nodes, head_count, page_size, variant, config in itertools.product(
            prefix_lens, tree_sizes, heads, page_sizes, variants, configs or [{}]):
        config = {} if variant == "triton_ps1" else config
        point = BenchPoint(variant, length, nodes, head_count, page_size_for(variant, page_size), batch, dtype,
                           config=tuple(sorted(config.items())))
        if point not in points:
            points.append(point)
    return points


def bench_point(point: BenchPoint, problem, ceilings, *, mode: str, rep_ms: float) -> dict:
    """Check one point against the oracle, time it, and return its record payload."""
    payload = {**asdict(point), "config": dict(point.config), "mode": mode, "status": "ok", "reason": ""}
    out = torch.empty(*problem.q.shape[:3], problem.v_dim, dtype=problem.q.dtype, device=problem.q.device)
    config = dict(point.config) or None
    try:
        shape = contract.check_arguments(*problem.arguments(), **problem.kwargs())
        payload["resolved_config"] = variants.resolve_config(point.variant, variants.load_variant(point.variant),
                                                             config, shape)
        verify_attention(*problem.arguments(), **problem.kwargs(), variant=point.variant, config=config, out=out)
        reference = reference_attention(*problem.arguments(), **problem.kwargs(), validate=False)
        rel_error = float((out.double() - reference.double()).norm() / reference.double().norm())
        del reference
        payload["rel_error"] = rel_error
        if not rel_error <= TOLERANCE[problem.q.dtype]:
            payload.update(status="wrong", reason=f"relative error {rel_error:.3g} vs the oracle")
            return payload

        def call():
            verify_attention(*problem.arguments(), **problem.kwargs(), variant=point.variant, config=config,
                             out=out, validate=False)

        result = timing.time_graph(call) if mode == "graph" else timing.time_events(call, rep_ms=rep_ms)
    except UnsupportedProblemError as error:
        payload.update(status="unsupported", reason=str(error))
        return payload
    except torch.cuda.OutOfMemoryError as error:
        torch.cuda.empty_cache()
        payload.update(status="oom", reason=str(error).splitlines()[0])
        return payload
    except Exception as error:
        payload.update(status="error", reason=f"{type(error).__name__}: {error}"[:500])
        return payload
    work = roofline.verify_work(problem.prefix_lens.tolist(), point.tree_nodes, point.heads)
    payload.update(median_ms=result.median_ms, iqr_ms=result.iqr_ms, samples_ms=result.samples_ms,
                   reps=result.reps, warmup_calls=result.warmup_calls, gpu_state_before=result.gpu_state_before,
                   gpu_state_after=result.gpu_state_after, state_flags=result.state_flags,
                   **roofline.metrics(work, result.median_ms, ceilings))
    return payload


def run_sweep(points: list[BenchPoint], *, out_path, mode: str = "events", rep_ms: float = 200.0,
              seed: int = 0, progress: bool = True) -> list[dict]:
    """Time every point; problems are shared by the points that differ only in variant/page size."""
    ceilings = roofline.load_ceilings()
    results = []
    problems = {}
    for point in tqdm(points, desc="vk bench", unit="point", disable=not progress):
        key = (point.prefix_len, point.tree_nodes, point.heads, point.batch, point.dtype, point.tree)
        if key not in problems:
            problems.clear()
            torch.cuda.empty_cache()
            problems[key] = {}
        by_page = problems[key]
        if point.page_size not in by_page:
            if by_page:
                by_page[point.page_size] = next(iter(by_page.values())).with_page_size(point.page_size)
            else:
                by_page[point.page_size] = make_problem(point.prefix_len, point.tree_nodes, point.heads,
                                                        page_size=point.page_size, batch=point.batch,
                                                        tree=point.tree, dtype=getattr(torch, point.dtype),
                                                        device="cuda", seed=seed)
        record = records.make_record("bench", bench_point(point, by_page[point.page_size], ceilings,
                                                          mode=mode, rep_ms=rep_ms))
        records.append_records(out_path, [record])
        results.append(record)
    return results


def format_table(results: list[dict]) -> str:
    rows = []
    for r in results:
        rows.append((r["variant"], _short_config(r.get("resolved_config") or {}), r["prefix_len"], r["tree_nodes"], r["heads"], r["page_size"],
                     f"{r['median_ms']:.4f}" if "median_ms" in r else r["status"],
                     f"{r['iqr_ms']:.4f}" if "iqr_ms" in r else "-",
                     f"{r['achieved_tbps']:.2f}" if r.get("achieved_tbps") else "-",
                     f"{r['achieved_tflops']:.1f}" if r.get("achieved_tflops") else "-",
                     f"{r['pct_roofline']:.1f}" if r.get("pct_roofline") else "-",
                     f"{r['rel_error']:.1e}" if "rel_error" in r else "-"))
    return tabulate(rows, headers=["variant", "config", "L", "T", "H", "page", "median_ms", "iqr_ms", "TB/s",
                                   "TFLOP/s", "% roofline", "rel_err"])


def _short_config(config: dict) -> str:
    short = {"BLOCK_M": "M", "BLOCK_N": "N", "num_warps": "w", "num_stages": "s", "kv_splits": "splits"}
    return " ".join(f"{short.get(k, k)}{v}" for k, v in config.items())
