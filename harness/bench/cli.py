"""``vk check``, ``vk bench``, ``vk report``: the oracle check, the side-by-side timings and their tables."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from verify_kernels.arch import known_arches

from harness.arguments import (device_or_default, float_at_least, int_in, int_list_in, json_dict,
                               output_file, prefix_lengths)
from harness.measure.inputs import read_yaml_mapping
from harness.measure.paths import results_dir
from harness.bench.cases import cpu_cases, gpu_cases
from harness.bench.peers import PEERS
from harness.bench.report import write_report
from harness.bench.sweep import recorded_points
from harness.measure.environment import gpu_sku
from harness.measure.records import append_records, make_record, read_records
from verify_kernels import VARIANTS
from verify_kernels.trees import TREE_GENERATORS

BENCH_DEFAULTS = {"prefix": [4096, 32768, 131072], "tree": [16, 64], "heads": [8], "page_size": [64],
                  "batch": 1, "dtype": "bfloat16", "mode": "events", "plan": "call", "rep_ms": 200.0, "repeat": 1,
                  "tree_kind": ["random"], "ragged": []}


def cmd_check(args) -> int:
    device = device_or_default(args.device)
    if device == "cpu" and os.environ.get("TRITON_INTERPRET", "0") in ("", "0"):
        # Must be set before any Triton kernel module is imported (variants import lazily).
        os.environ["TRITON_INTERPRET"] = "1"
    from harness.bench.check import all_variants, check_jobs, format_table, job_key, recorded_jobs, run_check, summary

    names = args.variants or all_variants()
    unknown = sorted(set(names) - set(all_variants()))
    if unknown:
        raise SystemExit(f"vk check: --variants: unknown {unknown}; the variants are {all_variants()}")
    matrix = cpu_cases() if (device == "cpu" or args.quick) else gpu_cases()
    cases = [c for c in matrix if not args.cases or c.name in args.cases]
    if not cases:
        raise SystemExit(f"vk check: --cases: no case named {sorted(args.cases)}; the cases are "
                         f"{sorted(c.name for c in matrix)}")
    if device == "cpu":
        print("vk check: no CUDA device; running the Triton variants under TRITON_INTERPRET=1 "
              "on small shapes (the CPU case matrix).", file=sys.stderr)
    if args.counters and device != "cuda":
        raise SystemExit("vk check: --counters: needs a CUDA GPU (ncu profiles the kernels there)")
    out = args.out or results_dir() / "check" / f"{gpu_sku() if device == 'cuda' else 'cpu'}.jsonl"
    jobs = check_jobs(names, cases)
    if args.resume and Path(out).exists():
        done = recorded_jobs(read_records(out, "check", flag="--out"))
        left = [job for job in jobs if job_key(job[0], job[1].name, job[2], job[3]) not in done]
        print(f"vk check: --resume: {len(jobs) - len(left)} cases already in {out}, {len(left)} to run",
              file=sys.stderr)
        jobs = left
    results = run_check(jobs, device=device, progress=not args.no_progress, counters=args.counters,
                        on_result=lambda r: append_records(out, [make_record("check", r.as_record())]))
    if args.json:
        print(json.dumps([r.as_record() for r in results], indent=1))
    else:
        print(format_table(results))
        print("\n" + "\n".join(summary(results)))
    failed = [r for r in results if r.status == "fail"]
    passed = sum(r.passed for r in results)
    skipped = sum(r.status == "skip" for r in results)
    print(f"\n{passed} passed, {len(failed)} failed, {skipped} skipped ({device}); records appended to {out}")
    return 1 if failed or not passed else 0


def _bench_settings(args) -> dict:
    """Flags given on the command line, else the --sweep YAML's values, else BENCH_DEFAULTS."""
    sweep = {}
    if args.sweep:
        sweep = read_yaml_mapping(args.sweep, "--sweep")
        unknown = sorted(set(sweep) - set(BENCH_DEFAULTS) - {"variants", "peers", "configs", "proxy_for"})
        if unknown:
            raise SystemExit(f"vk bench: {args.sweep}: unknown keys {unknown}; expected "
                             f"{sorted(set(BENCH_DEFAULTS) | {'variants', 'peers', 'configs', 'proxy_for'})}")
        sweep = {key: _sweep_value(args.sweep, key, value) for key, value in sweep.items()}
    settings = {}
    for key, default in {**BENCH_DEFAULTS, "variants": None, "peers": None, "configs": None, "proxy_for": None}.items():
        given = getattr(args, "config" if key == "configs" else key)
        settings[key] = given if given is not None else sweep.get(key, default)
    if settings["ragged"] and args.prefix is None and "prefix" not in sweep:
        settings["prefix"] = []  # only the ragged batches were asked for
    return settings


# A sweep file's values go through the flags' own parsers (ranges and choices included).
SWEEP_PARSERS = {"prefix": prefix_lengths, "tree": int_list_in(1, 1024), "heads": int_list_in(1, 128),
                 "page_size": int_list_in(1), "batch": int_in(1), "rep_ms": float_at_least(0, strict=True),
                 "repeat": int_in(1)}
SWEEP_CHOICES = {"dtype": ("bfloat16", "float16"), "mode": ("events", "graph"), "plan": ("call", "once"),
                 "proxy_for": (*known_arches(), None)}


def _sweep_value(path, key: str, value):
    import argparse

    def refuse(expected: str):
        raise SystemExit(f"vk bench: --sweep: {path}: {key}: expected {expected}, got {value!r}")

    if key in SWEEP_PARSERS:
        text = ",".join(str(v) for v in value) if isinstance(value, list) else str(value)
        if isinstance(value, (dict, bool)) or (isinstance(value, list) and any(isinstance(v, (list, dict, bool))
                                                                              for v in value)):
            refuse("numbers")
        try:
            return SWEEP_PARSERS[key](text)
        except argparse.ArgumentTypeError as error:
            refuse(str(error).removeprefix("expected ").split(", got")[0])
    if key in SWEEP_CHOICES and value not in SWEEP_CHOICES[key]:
        refuse(f"one of {list(SWEEP_CHOICES[key])}")
    if key in ("variants", "peers", "tree_kind") and not (
            isinstance(value, str) or (isinstance(value, list) and all(isinstance(v, str) for v in value))):
        refuse("a name or a list of names")
    if key == "configs" and not (isinstance(value, list) and all(isinstance(v, dict) for v in value)):
        refuse("a list of config mappings")
    if key == "ragged":
        if not (isinstance(value, list) and all(isinstance(b, list) and b for b in value)):
            refuse("a list of batches, each a list of prefix lengths")
        return [_sweep_value(path, "prefix", batch) for batch in value]
    return value


def cmd_bench(args) -> int:
    import torch

    from harness.bench.sweep import format_table, run_sweep, sweep_points

    settings = _bench_settings(args)
    kinds = [settings["tree_kind"]] if isinstance(settings["tree_kind"], str) else list(settings["tree_kind"])
    if not kinds or set(kinds) - set(TREE_GENERATORS):
        raise SystemExit(f"vk bench: tree_kind: expected some of {sorted(TREE_GENERATORS)}, got {kinds}")
    settings["tree_kind"] = kinds
    names = list(settings["variants"] or VARIANTS) + list(PEERS if settings["peers"] is None else settings["peers"])
    unknown = sorted(set(names) - set(VARIANTS) - set(PEERS))
    if unknown:
        raise SystemExit(f"vk bench: unknown variants or peers {unknown}; variants {sorted(VARIANTS)}, "
                         f"peers {sorted(PEERS)}")
    points = sweep_points(names, settings["prefix"], settings["tree"], settings["heads"], settings["page_size"],
                          batch=settings["batch"], dtype=settings["dtype"], configs=settings["configs"],
                          trees=settings["tree_kind"], ragged=settings["ragged"])
    if not torch.cuda.is_available():  # after the inputs: a bad sweep is named on any machine
        raise SystemExit("vk bench: needs a CUDA GPU (timings on the CPU interpreter mean nothing)")
    out = args.out or results_dir() / "bench" / f"{gpu_sku()}.jsonl"
    if args.resume and Path(out).exists():
        done = recorded_points(read_records(out))
        skipped = sum(point in done for point in points)
        points = [point for point in points if point not in done]
        print(f"vk bench: --resume: {skipped} points already in {out}, {len(points)} to run", file=sys.stderr)
    results = run_sweep(points, out_path=out, mode=settings["mode"], rep_ms=settings["rep_ms"],
                        repeats=settings["repeat"], progress=not args.no_progress, proxy_for=settings["proxy_for"],
                        counters=args.counters, plan=settings["plan"])
    print(format_table(results))
    print(f"\nrecords appended to {out}")
    bad = [r for r in results if r["status"] in ("wrong", "error")]
    return 1 if bad else 0


def cmd_report(args) -> int:
    out = args.out or results_dir() / "report" / args.inputs[0].stem
    markdown, images = write_report(args.inputs, out, args.title or f"Benchmarks: {args.inputs[0].stem}",
                                    peers=args.peers)
    print(markdown.read_text())
    print(f"wrote {markdown}" + (f" and {', '.join(str(i) for i in images)}" if images else ""))
    if not images:  # write_report leaves the figures out without matplotlib
        print("vk report: no plots: they need matplotlib (pip install 'verify-kernels[plot]')", file=sys.stderr)
    return 0


def add_commands(sub) -> None:
    """Register this package's subcommands on the ``vk`` parser."""
    check = sub.add_parser("check", help="every variant against the oracle over the case matrix")
    check.add_argument("--variants", nargs="+", help="variants to check (default: all registered)")
    check.add_argument("--device", choices=["cpu", "cuda"], help="default: cuda if available")
    check.add_argument("--quick", action="store_true", help="the small CPU case matrix even on a GPU")
    check.add_argument("--cases", nargs="+", help="only these case names")
    check.add_argument("--out", type=output_file,
                       help="append JSONL records here (default: results/check/<gpu or cpu>.jsonl "
                                                "in the current directory, or under $VK_RESULTS_DIR)")
    check.add_argument("--json", action="store_true", help="print records as JSON instead of a table")
    check.add_argument("--counters", action="store_true",
                       help="also profile each passed case once under ncu (a separate process): the record gets "
                            "tensor-pipe %%, DRAM %%, L2 hit rate, shared-memory pipe %%, occupancy, top stalls")
    check.add_argument("--resume", action="store_true",
                       help="skip the cases --out already holds a record of (each record is written as its case ends)")
    check.add_argument("--no-progress", action="store_true")
    check.set_defaults(func=cmd_check)

    bench = sub.add_parser("bench", help="time variants and peers side by side over a sweep")
    bench.add_argument("--sweep", type=Path, help="YAML file with any of the flags below (flags win)")
    bench.add_argument("--variants", nargs="+", help="default: all registered")
    bench.add_argument("--peers", nargs="*", help="peers to time beside them (default: all; none: --peers)")
    bench.add_argument("--prefix", type=prefix_lengths, help="prefix lengths L (default 4096,32768,131072)")
    bench.add_argument("--tree", type=int_list_in(1, 1024), help="tree sizes T (default 16,64)")
    bench.add_argument("--heads", type=int_list_in(1, 128), help="heads H (default 8)")
    bench.add_argument("--tree-kind", nargs="+",
                       help="tree shapes (default random; chain is what causal-only peers such as FlashMLA run)")
    bench.add_argument("--page-size", type=int_list_in(1), help="page sizes (default 64; triton_ps1 always 1)")
    bench.add_argument("--batch", type=int_in(1), help="requests per call (default 1)")
    bench.add_argument("--ragged", type=prefix_lengths, action="append",
                       help="a ragged batch: one prefix length per request, comma-separated (e.g. 185000,4096,32768); "
                            "repeat for more batches; each a point beside the --prefix ones, its floor summed over "
                            "the requests")
    bench.add_argument("--dtype", choices=["bfloat16", "float16"])
    bench.add_argument("--config", type=json_dict, action="append",
                       help='config overrides as JSON, e.g. \'{"BLOCK_M": 64}\'; repeat to sweep configs')
    bench.add_argument("--mode", choices=["events", "graph"], help="events (default) or CUDA-graph replay")
    bench.add_argument("--plan", choices=["call", "once"],
                       help="call (default): every timed call of a planned variant makes its plan; once: the calls "
                            "share one (verify_kernels.plan_once; one a captured graph), as a decode step plans once "
                            "for its layers and FlashMLA's call reuses its first call's metadata")
    bench.add_argument("--rep-ms", type=float_at_least(0, strict=True),
                       help="time budget of timed calls per point (default 200)")
    bench.add_argument("--repeat", type=int_in(1), help="time each point this many times (agreement check)")
    bench.add_argument("--proxy-for", choices=known_arches(),
                       help="a proxy run for this arch, timed on this GPU: our variants run its defaults (under any "
                            "--config), and the records say so")
    bench.add_argument("--counters", action="store_true",
                       help="also profile each ok row once under ncu (a separate replay, never the timed one): "
                            "tensor-pipe %%, DRAM %% and GB/s, L2 hit rate, shared-memory pipe %%, occupancy, "
                            "top stalls")
    bench.add_argument("--out", type=output_file, help="JSONL file (default results/bench/<gpu>.jsonl)")
    bench.add_argument("--resume", action="store_true",
                       help="skip the points --out already holds a row for (a sweep cut short goes on where it "
                            "stopped)")
    bench.add_argument("--no-progress", action="store_true")
    bench.set_defaults(func=cmd_bench)

    report = sub.add_parser("report", help="bench records -> markdown table and PNG plots")
    report.add_argument("inputs", nargs="+", type=Path, help="bench JSONL files")
    report.add_argument("--out", type=output_file, help="output prefix (default results/report/<first input stem>)")
    report.add_argument("--title", help="the report's heading (default: Benchmarks: <first input>)")
    report.add_argument("--peers", action="store_true",
                        help="add, per shape, the best of ours against the best peer (ratio, ahead or behind) and "
                             "the portable race (FlashInfer fa2 beside our portable kernels)")
    report.set_defaults(func=cmd_report)
