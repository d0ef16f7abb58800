"""``vk bench``: variants x prefix length x tree size x heads x page size, timed side by side.

Each point is built once (same seeded logical content for every variant, re-laid out per page
size), checked against the oracle, then timed with the harness timer; a failing or out-of-memory
variant becomes a row with its reason. Records are appended as they complete.

Every timed row carries ``power``: NVML's power draw, SM-busy and memory-controller utilisation
sampled over its timing (median and peak; harness.measure.power). With ``counters=True`` each ok
row also gets ``counters``: one profiled replay under ncu in a separate process
(harness.bench.counters_target, the same seed at the row's page size; harness.measure.counters).
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import sys
from dataclasses import asdict, dataclass

import torch
from tabulate import tabulate
from tqdm import tqdm

from verify_kernels import contract, make_problem, plan_once, reference_attention, variants, verify_attention
from verify_kernels.api import UnsupportedProblemError
from verify_kernels.arch import load_arch

from harness.bench import peers
from harness.measure import counters as ncu_counters
from harness.measure import records
from harness.measure import roofline
from harness.measure import timing
from harness.measure.power import PowerSampler
from harness.bench.cases import TOLERANCE


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
    # A ragged batch: one prefix length per request (then prefix_len is the longest, batch their count);
    # empty: ``batch`` requests of prefix_len each.
    prefix_lens: tuple = ()

    def lengths(self) -> list[int]:
        """The prefix length of every request of the point."""
        return list(self.prefix_lens) or [self.prefix_len] * self.batch


def page_size_for(variant: str, requested: int) -> int:
    """The requested page size, or the only one a variant runs (triton_ps1: 1). Peers take any."""
    if variant in peers.PEERS:
        return requested
    supported = variants.load_variant(variant).PAGE_SIZES
    return requested if requested in supported or len(supported) != 1 else supported[0]


def _applies(variant: str, config: dict) -> bool:
    """Whether a config override is meant for this variant (all its keys are the variant's tunables or
    optional keys)."""
    if variant in peers.PEERS:
        return False
    return set(config) <= variants.config_keys(variants.load_variant(variant))


def sweep_points(variants: list[str], prefix_lens: list[int], tree_sizes: list[int], heads: list[int],
                 page_sizes: list[int], batch: int = 1, dtype: str = "bfloat16",
                 configs: list[dict] | None = None, trees: list[str] = ("random",),
                 ragged: list[list[int]] = ()) -> list[BenchPoint]:
    """Every combination; each config override applies to the variants whose tunables it names.
    ``trees``: tree kinds (verify_kernels.trees.TREE_GENERATORS); "chain" is what causal-only peers run.
    ``ragged``: batches of different prefix lengths, each a point beside the ``prefix_lens`` ones."""
    points = []
    batches = [((length,) * batch, ()) for length in prefix_lens] + [(tuple(b), tuple(b)) for b in ragged]
    for tree, (lengths, ragged_lens), nodes, head_count, page_size, variant, config in itertools.product(
            trees, batches, tree_sizes, heads, page_sizes, variants, configs or [{}]):
        config = config if _applies(variant, config) else {}
        point = BenchPoint(variant, max(lengths), nodes, head_count, page_size_for(variant, page_size), len(lengths),
                           dtype, tree=tree, config=tuple(sorted(config.items())), prefix_lens=ragged_lens)
        if point not in points:
            points.append(point)
    return points


def recorded_points(records: list[dict]) -> set[BenchPoint]:
    """The points ``records`` already hold a row for (any status), for ``vk bench --resume``."""
    done = set()
    for record in records:
        if record.get("kind") != "bench":
            continue
        fields = {f.name: record[f.name] for f in dataclasses.fields(BenchPoint) if f.name in record}
        fields["config"] = tuple(sorted((record.get("config") or {}).items()))
        fields["prefix_lens"] = tuple(record.get("prefix_lens") or ())
        try:
            done.add(BenchPoint(**fields))
        except TypeError:  # a record from before a field existed: never matches a new point
            continue
    return done


def implementation_call(point: BenchPoint, problem, arch: str | None = None):
    """A no-argument callable returning the output, and the resolved config (a peer's: what its call
    says it ran, its ``config`` attribute, e.g. FlashInfer fa2's tiles). ``arch`` (a proxy run's): the
    keys the point's config does not set take that arch's defaults, not this GPU's."""
    if point.variant in peers.PEERS:
        call = peers.PEERS[point.variant](problem)
        return call, dict(getattr(call, "config", {}))
    config = dict(point.config) or None
    if arch:
        config = {**variants.defaults_for(variants.load_variant(point.variant), arch), **dict(point.config)}
    shape = contract.check_arguments(*problem.arguments(), **problem.kwargs())
    resolved = variants.resolve_config(point.variant, variants.load_variant(point.variant), config, shape)
    out = torch.empty(*problem.q.shape[:3], problem.v_dim, dtype=problem.q.dtype, device=problem.q.device)
    verify_attention(*problem.arguments(), **problem.kwargs(), variant=point.variant, config=config, out=out)

    def call():
        return verify_attention(*problem.arguments(), **problem.kwargs(), variant=point.variant, config=config,
                                out=out, validate=False)

    return call, resolved


def smem_per_sm_bytes(arch: str) -> int:
    """The shared memory per SM of ``arch`` in bytes (the registry's), what a peer's launch must read to run
    that arch's config (scripts/gpu_peers_env.sh fa2_as_arch)."""
    return load_arch(arch).smem_per_sm_kb * 1024


def proxy_peer_problem(name: str, config: dict, arch: str) -> str | None:
    """Why a peer's row cannot stand as a proxy run for ``arch`` (None: it can). Our configs are constrained
    to the arch by ``--constrain-to``; a peer must say it ran the arch's config: the shared memory per SM its
    launch read (``smem_per_sm`` in its config) is the arch's."""
    wanted = smem_per_sm_bytes(arch)
    if config.get("smem_per_sm") == wanted and "tiles" not in config:
        return None
    ran = config or "a config it does not report"
    return (f"{name} as a proxy for {arch} must run that arch's config (its launch reading {wanted} bytes of shared "
            f"memory per SM, scripts/gpu_peers_env.sh fa2_as_arch); it ran {ran}")


def bench_point(point: BenchPoint, problem, reference, ceilings, *, mode: str, rep_ms: float,
                repeats: int = 1, proxy_for: str | None = None, plan: str = "call") -> dict:
    """Check one point against the oracle's output, time it ``repeats`` times, return its payload. With
    ``proxy_for``, a variant runs that arch's defaults under the point's config (``implementation_call``)
    and a peer only where it ran that arch's config (``proxy_peer_problem``). ``plan``: "call", every
    timed call plans; "once", the calls share a plan (``_time``)."""
    implementation = "peer" if point.variant in peers.PEERS else "variant"
    payload = {**asdict(point), "implementation": implementation, "config": dict(point.config), "mode": mode,
               "plan": plan, "status": "ok",
               "reason": ""}
    try:
        call, payload["resolved_config"] = implementation_call(point, problem, proxy_for)
        if implementation == "peer" and proxy_for and (why := proxy_peer_problem(point.variant,
                                                                                  payload["resolved_config"],
                                                                                  proxy_for)):
            raise peers.PeerUnavailable(why)
        output = call()
        if implementation == "peer" and not bool(torch.isfinite(output).all()):
            # A peer that reads the NaN in unused pool slots (or in the spare pages stale table
            # entries point at) is checked and timed on the same rows with those slots zeroed.
            problem = dataclasses.replace(problem, kv_cache=torch.nan_to_num(problem.kv_cache, nan=0.0))
            call, _ = implementation_call(point, problem, proxy_for)
            output = call()
            payload["unused_slots"] = ("zeroed: on the pool with NaN in unused slots its output was not finite "
                                       "(it reads slots past the sequence)")
        rel_error = float((output.double() - reference.double()).norm() / reference.double().norm())
        payload["rel_error"] = rel_error
        if not rel_error <= TOLERANCE[problem.q.dtype]:
            payload.update(status="wrong", reason=f"relative error {rel_error:.3g} vs the oracle")
            return payload
        del output
        with PowerSampler() as power:
            results = [_time(call, mode, rep_ms, payload, plan) for _ in range(repeats)]
        payload["power"] = power.summary()
    except peers.PeerUnavailable as error:
        payload.update(status="unavailable", reason=str(error))
        return payload
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
    result = results[0]
    work = roofline.verify_work(problem.prefix_lens.tolist(), point.tree_nodes, point.heads)
    payload.update(median_ms=result.median_ms, iqr_ms=result.iqr_ms, samples_ms=result.samples_ms,
                   reps=result.reps, warmup_calls=result.warmup_calls, gpu_state_before=result.gpu_state_before,
                   gpu_state_after=result.gpu_state_after, state_flags=result.state_flags,
                   **roofline.metrics(work, result.median_ms, ceilings))
    if repeats > 1:
        medians = [r.median_ms for r in results]
        payload.update(repeat_medians_ms=medians, repeat_iqrs_ms=[r.iqr_ms for r in results],
                       repeat_agrees=max(medians) - min(medians) <= max(r.iqr_ms for r in results))
    return payload


def _time(call, mode: str, rep_ms: float, payload: dict, plan: str = "call") -> timing.Timing:
    """Graph replay when asked and the call can be captured, else CUDA events; the payload's
    ``timing_mode`` says which, and ``graph_error`` why a peer's capture failed. ``plan`` "once": the
    planned variants' calls share one plan (``verify_kernels.plan_once``): one a captured graph of calls,
    or one for all the timed calls with events, as FlashMLA's call reuses the metadata of its first."""
    if plan == "once" and mode != "graph":
        with plan_once():
            return _time(call, mode, rep_ms, payload)
    scope = plan_once if plan == "once" else None
    if mode == "graph" and getattr(call, "graph_safe", True):
        try:
            result = timing.time_graph(call, budget_ms=rep_ms, capture_scope=scope)
            payload["timing_mode"] = "graph"
            return result
        except Exception as error:  # a peer that cannot be captured is timed with events instead
            if payload.get("implementation") != "peer":
                raise
            torch.cuda.synchronize()
            payload["graph_error"] = f"{type(error).__name__}: {(str(error).splitlines() or [''])[0][:300]}"
    payload["timing_mode"] = "events"
    return timing.time_events(call, rep_ms=rep_ms)


def _lengths_label(point: BenchPoint) -> str:
    return ",".join(map(str, point.prefix_lens)) if point.prefix_lens else str(point.prefix_len)


def counters_argv(point: BenchPoint, seed: int) -> list[str]:
    """The command that replays ``point`` once for ncu (harness.bench.counters_target)."""
    spec = {**asdict(point), "config": dict(point.config), "seed": seed}
    return [sys.executable, "-m", "harness.bench.counters_target", json.dumps(spec)]


def run_sweep(points: list[BenchPoint], *, out_path, mode: str = "events", rep_ms: float = 200.0,
              repeats: int = 1, seed: int = 0, progress: bool = True, proxy_for: str | None = None,
              counters: bool = False, profile=ncu_counters.profile, plan: str = "call") -> list[dict]:
    """Time every point. Points that share a shape share one seeded problem (re-laid out per page
    size) and one oracle output. ``proxy_for`` (an arch such as "sm_120") marks every record as a
    proxy run for that arch on this GPU: our variants' configs are that arch's defaults under the points'
    overrides, their timings this GPU's.
    ``counters``: each ok row gets ``profile(counters_argv(point, seed))`` as ``counters``."""
    ceilings = roofline.load_ceilings()
    results = []
    shape_key, by_page, reference = None, {}, None
    bar = tqdm(points, desc="vk bench", unit="point", disable=not progress)
    for point in bar:
        bar.set_postfix_str(f"{point.variant} L={_lengths_label(point)} T={point.tree_nodes} H={point.heads}")
        key = (tuple(point.lengths()), point.tree_nodes, point.heads, point.dtype, point.tree)
        if key != shape_key:
            shape_key, by_page, reference = key, {}, None
            torch.cuda.empty_cache()
        if point.page_size not in by_page:
            if by_page:
                by_page[point.page_size] = next(iter(by_page.values())).with_page_size(point.page_size)
            else:
                by_page[point.page_size] = make_problem(point.lengths(), point.tree_nodes, point.heads,
                                                        page_size=point.page_size, tree=point.tree,
                                                        dtype=getattr(torch, point.dtype), device="cuda", seed=seed)
        problem = by_page[point.page_size]
        if reference is None:
            reference = reference_attention(*problem.arguments(), **problem.kwargs())
        payload = bench_point(point, problem, reference, ceilings, mode=mode, rep_ms=rep_ms, repeats=repeats,
                              proxy_for=proxy_for, plan=plan)
        if proxy_for:
            payload["proxy_for"] = proxy_for
        if counters and payload["status"] == "ok":
            bar.set_postfix_str(f"{point.variant} L={_lengths_label(point)} T={point.tree_nodes} H={point.heads}: ncu")
            payload["counters"] = profile(counters_argv(point, seed))
        record = records.make_record("bench", payload)
        records.append_records(out_path, [record])
        results.append(record)
    return results


def format_table(results: list[dict]) -> str:
    rows = []
    for r in results:
        lengths = ",".join(map(str, r["prefix_lens"])) if r.get("prefix_lens") else r["prefix_len"]
        config = _short_config(r.get("resolved_config") or {}) + (" plan-once" if r.get("plan") == "once" else "")
        rows.append((r["variant"], config, lengths, r["tree_nodes"], r["heads"],
                     r["page_size"],
                     f"{r['median_ms']:.4f}" if "median_ms" in r else r["status"],
                     f"{r['iqr_ms']:.4f}" if "iqr_ms" in r else "-",
                     f"{r['achieved_tbps']:.2f}" if r.get("achieved_tbps") else "-",
                     f"{r['achieved_tflops']:.1f}" if r.get("achieved_tflops") else "-",
                     f"{r['pct_roofline']:.1f}" if r.get("pct_roofline") else "-",
                     f"{r['rel_error']:.1e}" if "rel_error" in r else "-",
                     _repeat_column(r)))
    headers = ["variant", "config", "L", "T", "H", "page", "median_ms", "iqr_ms", "TB/s", "TFLOP/s", "% roofline",
               "rel_err", "repeat"]
    if any("counters" in r for r in results):
        rows = [(*row, *counter_cells(r)) for row, r in zip(rows, results)]
        headers += ["tensor %", "DRAM %", "W"]
    return tabulate(rows, headers=headers)


def counter_cells(record: dict) -> tuple[str, str, str]:
    """Tensor-pipe %, DRAM % (ncu) and median power (NVML) of a record, or why not."""
    found = record.get("counters") or {}
    power = record.get("power") or {}
    if found.get("status") == "ok":
        tensor = f"{found['tensor_pipe_pct']:.1f}" if found.get("tensor_pipe_pct") is not None else "n/a"
        dram = f"{found['dram_pct']:.1f}" if found.get("dram_pct") is not None else "n/a"
    else:
        tensor = dram = found.get("status", "-")
    watts = f"{power['power_w_median']:.0f}" if power.get("status") == "ok" else "-"
    return tensor, dram, watts


def _short_config(config: dict) -> str:
    short = {"BLOCK_M": "M", "BLOCK_N": "N", "num_warps": "w", "num_stages": "s", "kv_splits": "splits"}
    return " ".join(f"{short.get(k, k)}{v}" for k, v in config.items())


def _repeat_column(record: dict) -> str:
    medians = record.get("repeat_medians_ms")
    if not medians:
        return ""
    verdict = "agree" if record.get("repeat_agrees") else "DIFFER"
    return f"{'/'.join(f'{m:.4f}' for m in medians)} {verdict}"
