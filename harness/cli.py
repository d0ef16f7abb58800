"""``vk``: the suite's command line (also ``python -m harness``).

    vk check     every variant against the oracle over the case matrix
    vk bench     time variants side by side over a sweep; JSONL records + table
    vk ceilings  measure and cache this GPU's copy bandwidth and bf16 matmul rate
    vk env       the environment a record would carry
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

RESULTS = Path(__file__).resolve().parent.parent / "results"


def _int_list(text: str) -> list[int]:
    try:
        return [int(x) for x in text.split(",") if x]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None


def _json_dict(text: str) -> dict:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as error:
        raise argparse.ArgumentTypeError(f"expected a JSON object, got {text!r} ({error})") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"expected a JSON object, got {text!r}")
    return value


def _device_or_default(requested: str | None) -> str:
    import torch

    if requested:
        if requested == "cuda" and not torch.cuda.is_available():
            raise SystemExit("vk: --device cuda requested but torch sees no CUDA device")
        return requested
    return "cuda" if torch.cuda.is_available() else "cpu"


def cmd_check(args) -> int:
    device = _device_or_default(args.device)
    if device == "cpu" and os.environ.get("TRITON_INTERPRET", "0") in ("", "0"):
        # Must be set before any Triton kernel module is imported (variants import lazily).
        os.environ["TRITON_INTERPRET"] = "1"
    from .cases import cpu_cases, gpu_cases
    from .check import all_variants, format_table, run_check
    from .records import append_records, make_record

    if device == "cpu":
        print("vk check: no CUDA device; running the Triton variants under TRITON_INTERPRET=1 "
              "on small shapes (the CPU case matrix).", file=sys.stderr)
    names = args.variants or all_variants()
    cases = cpu_cases() if (device == "cpu" or args.quick) else gpu_cases()
    if args.cases:
        wanted = set(args.cases)
        cases = [c for c in cases if c.name in wanted]
        if not cases:
            raise SystemExit(f"vk check: no case named {sorted(wanted)}")
    results = run_check(names, cases, device=device, progress=not args.no_progress)
    if args.out:
        append_records(args.out, [make_record("check", r.as_record()) for r in results])
    if args.json:
        print(json.dumps([r.as_record() for r in results], indent=1))
    else:
        print(format_table(results))
    failed = [r for r in results if r.status == "fail"]
    passed = sum(r.passed for r in results)
    skipped = sum(r.status == "skip" for r in results)
    print(f"\n{passed} passed, {len(failed)} failed, {skipped} skipped ({device})")
    return 1 if failed or not passed else 0


def cmd_bench(args) -> int:
    from .bench import format_table, run_sweep, sweep_points
    from .environment import gpu_sku

    import torch

    if not torch.cuda.is_available():
        raise SystemExit("vk bench: needs a CUDA GPU (timings on the CPU interpreter mean nothing)")
    from verify_kernels import VARIANTS

    names = args.variants or list(VARIANTS)
    points = sweep_points(names, args.prefix, args.tree, args.heads, args.page_size, batch=args.batch,
                          dtype=args.dtype, configs=args.config)
    out = args.out or RESULTS / "bench" / f"{gpu_sku()}.jsonl"
    results = run_sweep(points, out_path=out, mode=args.mode, rep_ms=args.rep_ms,
                        progress=not args.no_progress)
    print(format_table(results))
    print(f"\nrecords appended to {out}")
    return 0 if all(r["status"] in ("ok", "unsupported") for r in results) else 1


def cmd_ceilings(args) -> int:
    from .roofline import load_ceilings, measure_ceilings, save_ceilings

    cached = load_ceilings()
    if cached and not args.remeasure:
        print(json.dumps(cached.__dict__, indent=1))
        return 0
    ceilings, procedure = measure_ceilings()
    if cached and cached.mma_sync_tflops:
        ceilings = type(ceilings)(ceilings.gpu, ceilings.copy_tbps, ceilings.matmul_tflops, cached.mma_sync_tflops)
    path = save_ceilings(ceilings, procedure)
    print(json.dumps(ceilings.__dict__, indent=1))
    print(f"saved to {path}")
    return 0


def cmd_env(args) -> int:
    from .environment import describe_environment

    print(json.dumps(describe_environment(), indent=1))
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="vk", description="Tree-verify attention: check, benchmark, tune.")
    sub = parser.add_subparsers(dest="command", required=True)

    check = sub.add_parser("check", help="every variant against the oracle over the case matrix")
    check.add_argument("--variants", nargs="+", help="variants to check (default: all registered)")
    check.add_argument("--device", choices=["cpu", "cuda"], help="default: cuda if available")
    check.add_argument("--quick", action="store_true", help="the small CPU case matrix even on a GPU")
    check.add_argument("--cases", nargs="+", help="only these case names")
    check.add_argument("--out", type=Path, help="append JSONL records here")
    check.add_argument("--json", action="store_true", help="print records as JSON instead of a table")
    check.add_argument("--no-progress", action="store_true")
    check.set_defaults(func=cmd_check)

    bench = sub.add_parser("bench", help="time variants side by side over a sweep")
    bench.add_argument("--variants", nargs="+", help="default: all registered")
    bench.add_argument("--prefix", type=_int_list, default=[4096, 32768, 131072], help="prefix lengths L")
    bench.add_argument("--tree", type=_int_list, default=[16, 64], help="tree sizes T")
    bench.add_argument("--heads", type=_int_list, default=[8], help="heads H")
    bench.add_argument("--page-size", type=_int_list, default=[64], help="page sizes (triton_ps1 always 1)")
    bench.add_argument("--batch", type=int, default=1)
    bench.add_argument("--dtype", choices=["bfloat16", "float16"], default="bfloat16")
    bench.add_argument("--config", type=_json_dict, action="append",
                       help='config overrides as JSON, e.g. \'{"BLOCK_M": 64}\'; repeat to sweep configs')
    bench.add_argument("--mode", choices=["events", "graph"], default="events")
    bench.add_argument("--rep-ms", type=float, default=200.0, help="time budget of timed calls per point")
    bench.add_argument("--out", type=Path, help="JSONL file (default results/bench/<gpu>.jsonl)")
    bench.add_argument("--no-progress", action="store_true")
    bench.set_defaults(func=cmd_bench)

    ceilings = sub.add_parser("ceilings", help="measure (or show cached) copy bandwidth and matmul rate")
    ceilings.add_argument("--remeasure", action="store_true")
    ceilings.set_defaults(func=cmd_ceilings)

    env = sub.add_parser("env", help="print the environment a record carries")
    env.set_defaults(func=cmd_env)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.func(args)


def run() -> None:
    """Console-script entry point."""
    sys.exit(main())
