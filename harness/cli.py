"""``vk``: the suite's command line (also ``python -m harness``).

    vk check     every variant against the oracle over the case matrix
    vk bench     time variants and peers side by side over a sweep; JSONL records + table
    vk report    bench records -> markdown table and PNG plots
    vk static    compile offline for sm_90/sm_120: registers, spills, shared memory, occupancy
    vk ceilings  measure and cache this GPU's copy bandwidth and bf16 matmul rate
    vk decode    the DDTree decode loop on an MLA model (Kimi-K2 shaped), per-phase step times
    vk decode-report  decode records -> markdown table and plots
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


BENCH_DEFAULTS = {"prefix": [4096, 32768, 131072], "tree": [16, 64], "heads": [8], "page_size": [64],
                  "batch": 1, "dtype": "bfloat16", "mode": "events", "rep_ms": 200.0, "repeat": 1}


def _bench_settings(args) -> dict:
    """Flags given on the command line, else the --sweep YAML's values, else BENCH_DEFAULTS."""
    import yaml

    sweep = {}
    if args.sweep:
        sweep = yaml.safe_load(Path(args.sweep).read_text()) or {}
        unknown = sorted(set(sweep) - set(BENCH_DEFAULTS) - {"variants", "peers", "configs"})
        if unknown:
            raise SystemExit(f"vk bench: {args.sweep}: unknown keys {unknown}; expected "
                             f"{sorted(set(BENCH_DEFAULTS) | {'variants', 'peers', 'configs'})}")
    settings = {}
    for key, default in {**BENCH_DEFAULTS, "variants": None, "peers": None, "configs": None}.items():
        given = getattr(args, "config" if key == "configs" else key)
        settings[key] = given if given is not None else sweep.get(key, default)
    return settings


def cmd_bench(args) -> int:
    import torch

    from .bench import format_table, run_sweep, sweep_points
    from .environment import gpu_sku
    from .peers import PEERS

    if not torch.cuda.is_available():
        raise SystemExit("vk bench: needs a CUDA GPU (timings on the CPU interpreter mean nothing)")
    from verify_kernels import VARIANTS

    settings = _bench_settings(args)
    names = list(settings["variants"] or VARIANTS) + list(PEERS if settings["peers"] is None else settings["peers"])
    unknown = sorted(set(names) - set(VARIANTS) - set(PEERS))
    if unknown:
        raise SystemExit(f"vk bench: unknown variants or peers {unknown}; variants {sorted(VARIANTS)}, "
                         f"peers {sorted(PEERS)}")
    points = sweep_points(names, settings["prefix"], settings["tree"], settings["heads"], settings["page_size"],
                          batch=settings["batch"], dtype=settings["dtype"], configs=settings["configs"])
    out = args.out or RESULTS / "bench" / f"{gpu_sku()}.jsonl"
    results = run_sweep(points, out_path=out, mode=settings["mode"], rep_ms=settings["rep_ms"],
                        repeats=settings["repeat"], progress=not args.no_progress)
    print(format_table(results))
    print(f"\nrecords appended to {out}")
    bad = [r for r in results if r["status"] in ("wrong", "error")]
    return 1 if bad else 0


def cmd_report(args) -> int:
    from .report import write_report

    out = args.out or RESULTS / "report" / args.inputs[0].stem
    markdown, images = write_report(args.inputs, out, args.title or f"Benchmarks: {args.inputs[0].stem}")
    print(markdown.read_text())
    print(f"wrote {markdown} and {', '.join(str(i) for i in images)}")
    return 0


def cmd_static(args) -> int:
    from .static_check import format_rows, static_rows

    from verify_kernels import VARIANTS

    names = [args.variant] if args.variant else [n for n in VARIANTS]
    if args.space:
        from .static_check import space_report

        print(space_report(names, args.arch, args.json))
        return 0
    rows = []
    for name in names:
        for arch in args.arch:
            rows += static_rows(name, arch, args.config)
    if args.json:
        print(json.dumps(rows, indent=1, default=str))
    else:
        print(format_rows(rows))
    return 0 if all(r["feasible"] for r in rows) else 1


def cmd_tune(args) -> int:
    from .tune_run import run_tune

    return run_tune(args, sys.argv[1:])


def cmd_tuned(args) -> int:
    import yaml

    from .tune import check_winners, winners_path

    from .tune import TUNED_DIR

    paths = [args.file] if args.file else sorted(TUNED_DIR.glob("*.yaml")) or [winners_path()]
    if args.check:
        stale = [line for path in paths for line in check_winners(path)]
        for line in stale:
            print(line)
        names = ", ".join(str(p) for p in paths)
        print(f"ok: every tuned record in {names} matches the current source" if not stale else
              f"{len(stale)} stale records")
        return 1 if stale else 0
    for path in paths:
        print(f"# {path}")
        print(yaml.safe_dump(yaml.safe_load(path.read_text()) if path.exists() else {}, sort_keys=True))
    return 0


def cmd_tune_quality(args) -> int:
    from .tune_quality import format_quality, plot_quality, trials_to_reach

    result = trials_to_reach(args.storage, args.study, seeds=args.seeds, within=args.within)
    print(format_quality(result))
    if args.plot:
        plot_quality(result, args.plot)
        print(f"figure: {args.plot}")
    return 0


def cmd_decode(args) -> int:
    from .decode_run import format_decode_table, run_matrix
    from .environment import command_line

    records = run_matrix(args, command_line())
    if args.json:
        for record in records:
            print(json.dumps({k: v for k, v in record.items() if k != "steps_detail"}))
    else:
        print(format_decode_table(records))
        if args.out:
            print(f"\nrecords appended to {args.out}")
    failed = [r for r in records if r.get("status") == "error"]
    must_match = [r for r in records if r.get("device") == "cpu" and r.get("dtype") == "float32"]
    if args.check_lossless and any(r.get("lossless") and not r["lossless"]["identical"] for r in must_match):
        return 1  # in float32 on the CPU the tokens must be identical
    return 1 if failed else 0


def cmd_decode_report(args) -> int:
    from .decode_report import write_decode_report

    missing = [str(path) for path in args.records if not Path(path).is_file()]
    if missing:
        raise SystemExit(f"vk decode-report: records: no such file: {', '.join(missing)}")
    for path in write_decode_report(args.records, args.out_dir, args.name):
        print(path)
    return 0


def cmd_ceilings(args) -> int:
    from .roofline import load_ceilings, measure_ceilings, save_ceilings

    cached = load_ceilings()
    if cached and not args.remeasure:
        print(json.dumps(cached.__dict__, indent=1))
        return 0
    ceilings, procedure = measure_ceilings()
    try:
        from .mma_ceiling import measure_mma_sync_tflops

        mma_tflops, procedure["mma_sync"] = measure_mma_sync_tflops()
        ceilings = type(ceilings)(ceilings.gpu, ceilings.copy_tbps, ceilings.matmul_tflops, mma_tflops)
    except ImportError as error:
        procedure["mma_sync"] = f"not measured: {error}"
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

    bench = sub.add_parser("bench", help="time variants and peers side by side over a sweep")
    bench.add_argument("--sweep", type=Path, help="YAML file with any of the flags below (flags win)")
    bench.add_argument("--variants", nargs="+", help="default: all registered")
    bench.add_argument("--peers", nargs="*", help="peers to time beside them (default: all; none: --peers)")
    bench.add_argument("--prefix", type=_int_list, help="prefix lengths L (default 4096,32768,131072)")
    bench.add_argument("--tree", type=_int_list, help="tree sizes T (default 16,64)")
    bench.add_argument("--heads", type=_int_list, help="heads H (default 8)")
    bench.add_argument("--page-size", type=_int_list, help="page sizes (default 64; triton_ps1 always 1)")
    bench.add_argument("--batch", type=int, help="requests per call (default 1)")
    bench.add_argument("--dtype", choices=["bfloat16", "float16"])
    bench.add_argument("--config", type=_json_dict, action="append",
                       help='config overrides as JSON, e.g. \'{"BLOCK_M": 64}\'; repeat to sweep configs')
    bench.add_argument("--mode", choices=["events", "graph"], help="events (default) or CUDA-graph replay")
    bench.add_argument("--rep-ms", type=float, help="time budget of timed calls per point (default 200)")
    bench.add_argument("--repeat", type=int, help="time each point this many times (agreement check)")
    bench.add_argument("--out", type=Path, help="JSONL file (default results/bench/<gpu>.jsonl)")
    bench.add_argument("--no-progress", action="store_true")
    bench.set_defaults(func=cmd_bench)

    report = sub.add_parser("report", help="bench records -> markdown table and PNG plots")
    report.add_argument("inputs", nargs="+", type=Path, help="bench JSONL files")
    report.add_argument("--out", type=Path, help="output prefix (default results/report/<first input stem>)")
    report.add_argument("--title")
    report.set_defaults(func=cmd_report)

    static = sub.add_parser("static", help="compile offline for an arch: registers, spills, smem, occupancy")
    static.add_argument("--variant", help="default: every variant with an offline compile path")
    static.add_argument("--arch", nargs="+", default=["sm_120"], choices=["sm_90", "sm_120"])
    static.add_argument("--config", type=_json_dict, action="append", help="configs to compile (default: the arch's default)")
    static.add_argument("--space", action="store_true", help="the whole search space (search_spaces/*.yaml)")
    static.add_argument("--json", action="store_true")
    static.set_defaults(func=cmd_static)

    tune = sub.add_parser("tune", help="Optuna over the statically feasible space, one study per key")
    tune.add_argument("--variants", nargs="+", default=["triton_splitkv", "cuda_coalesced"])
    tune.add_argument("--prefix", type=_int_list, default=[4096, 32768, 131072])
    tune.add_argument("--tree", type=_int_list, default=[16, 64, 256])
    tune.add_argument("--heads", type=_int_list, default=[8])
    tune.add_argument("--page-size", type=int, default=64)
    tune.add_argument("--dtype", choices=["bfloat16", "float16"], default="bfloat16")
    tune.add_argument("--trials", type=int, default=30, help="configs measured per study, counting earlier runs (pruned proposals and duplicates are free)")
    tune.add_argument("--minutes", type=float, help="wall-clock budget per study")
    tune.add_argument("--storage", help=f"any Optuna storage URL (default {'sqlite:///results/tuned/optuna.db'})")
    tune.add_argument("--workers", type=int, default=1, help="worker processes, one per local GPU, shared storage")
    tune.add_argument("--arch", choices=["sm_90", "sm_120"], help="static model's arch (default: this GPU's)")
    tune.add_argument("--gpu", help="GPU SKU for the keys (default: this GPU's)")
    tune.add_argument("--seed", type=int, default=0)
    tune.add_argument("--trial-timeout", type=float, default=180.0, help="seconds before a trial counts as hung")
    tune.add_argument("--rep-ms", type=float, default=100.0)
    tune.add_argument("--timing", choices=["events", "graph"], default="events",
                      help="events: eager calls between CUDA events (a launch's host time shows once it exceeds "
                           "the kernel's); graph: CUDA-graph replay, the kernels alone (how the decode runs them)")
    tune.add_argument("--exhaustive", action="store_true",
                      help="measure every feasible config once (study '<key>|exhaustive'), for vk tune-quality")
    tune.add_argument("--winners", type=Path, help="winners YAML (default results/tuned/<gpu-sku>.yaml)")
    tune.add_argument("--no-compile", action="store_true",
                      help="static model without the compiler: constraints and kernel rules only")
    tune.add_argument("--worker-only", action="store_true", help=argparse.SUPPRESS)
    tune.add_argument("--no-progress", action="store_true")
    tune.set_defaults(func=cmd_tune)

    tuned = sub.add_parser("tuned", help="show tuned winners (every results/tuned/*.yaml); --check fails on stale "
                                         "source hashes")
    tuned.add_argument("--check", action="store_true")
    tuned.add_argument("--file", type=Path)
    tuned.set_defaults(func=cmd_tuned)

    decode = sub.add_parser("decode", help="DDTree decode loop on an MLA model: step phases, tokens/s, lossless check")
    decode.add_argument("--preset", default="tiny", help="tiny (CPU tests) or k2-tp8 (one GPU's slice of Kimi K2 at TP8)")
    decode.add_argument("--context", type=_int_list, default=[0], help="random latent rows before the prompt (list)")
    decode.add_argument("--budget", type=_int_list, default=[64], help="tree nodes per step, root included (list)")
    decode.add_argument("--new-tokens", type=int, default=64)
    decode.add_argument("--variants", "--variant", nargs="+",
                        help="attention variants (auto, triton_ps1, ...; reference = the float64 oracle, the CPU "
                             "default); triton_ps1 runs on a page_size=1 pool")
    decode.add_argument("--drafter", choices=["oracle", "ngram"], default="oracle")
    decode.add_argument("--block-size", type=int, default=16, help="drafted positions per step")
    decode.add_argument("--temperature", type=float, default=0.0, help="> 0 samples the target at each node")
    decode.add_argument("--check-lossless", action="store_true",
                        help="compare with plain greedy decoding (CPU float32: must be identical)")
    decode.add_argument("--batch-invariant-greedy", action="store_true",
                        help="also compare with greedy decoding whose forwards are padded to the budget (the verify's "
                             "GEMM shapes): separates bf16 shape noise from the tree's own effect")
    decode.add_argument("--greedy-variant", help="variant of the greedy reference run (default: the last of --variants)")
    decode.add_argument("--prompt", type=_int_list, help="prompt token ids (default: --prompt-len random ids)")
    decode.add_argument("--prompt-len", type=int, default=16)
    decode.add_argument("--page-size", type=int, default=64)
    decode.add_argument("--device", choices=["cpu", "cuda"])
    decode.add_argument("--dtype", choices=["bfloat16", "float16", "float32"],
                        help="default: bfloat16 on the GPU, float32 on the CPU")
    decode.add_argument("--weights", help="a safetensors file in DeepSeek-V3 tensor names (default: random, --seed)")
    decode.add_argument("--seed", type=int, default=0)
    decode.add_argument("--no-graphs", action="store_true", help="eager verify forward instead of CUDA graphs")
    decode.add_argument("--compile-layers", action="store_true",
                        help="torch.compile each layer's two halves around attention (fuses norms, RoPE, SwiGLU)")
    decode.add_argument("--gemm", choices=["cublas", "splitk"], default="cublas",
                        help="the layers' weight GEMMs: cuBLAS, or the split-K Triton kernel (harness/splitk_linear.py)")
    decode.add_argument("--gemm-table", help="split-K configs (JSON from scripts/tune_splitk.py; default: "
                        "results/tuned/splitk-linear-SKU.json for this GPU if present, else built-in defaults)")
    decode.add_argument("--pdl", action="store_true",
                        help="programmatic dependent launches between the compiled layers' kernels and the split-K "
                        "GEMMs (Hopper+; with --compile-layers --gemm splitk)")
    decode.add_argument("--phase-timing", nargs="+", choices=["overlapped", "overlapped-blocking", "synced"],
                        default=["overlapped"],
                        help="overlapped (default): one wait for the GPU per step, the walk's, polled, so the commit "
                             "overlaps the next draft; overlapped-blocking: the same, waiting in cudaEventSynchronize; "
                             "synced: a device sync after every phase, so phases add up to the step. Several: each "
                             "run once per choice (harness/decode_loop.py)")
    decode.add_argument("--draft-on", nargs="+", choices=["host", "device"], default=["host"],
                        help="host (default): the host drafts, builds the tree and its mask between steps; device: "
                             "all three run on the device in CUDA graphs and the host stays one step behind (greedy, "
                             "oracle drafter; phase timing overlapped only). Both: each run once per choice "
                             "(harness/device_decode.py)")
    decode.add_argument("--repeats", type=int, default=1,
                        help="runs of each (context, variant, budget, timing), back to back in one process, for the "
                             "run-to-run spread of the step (records carry ``repeat``)")
    decode.add_argument("--out", type=Path, help="append JSONL records here")
    decode.add_argument("--json", action="store_true")
    decode.add_argument("--no-progress", action="store_true")
    decode.set_defaults(func=cmd_decode)

    decode_report = sub.add_parser("decode-report", help="decode records -> markdown table and plots")
    decode_report.add_argument("records", type=Path, nargs="+", help="JSONL files written by vk decode --out")
    decode_report.add_argument("--out-dir", type=Path, default=RESULTS / "decode")
    decode_report.add_argument("--name", default="decode")
    decode_report.set_defaults(func=cmd_decode_report)

    quality = sub.add_parser("tune-quality", help="trials TPE needs to reach the exhaustive best (replayed)")
    quality.add_argument("--storage", required=True)
    quality.add_argument("--study", required=True, help="a study holding an exhaustive measurement of one key")
    quality.add_argument("--seeds", type=int, default=5)
    quality.add_argument("--within", type=float, default=0.03)
    quality.add_argument("--plot", help="write the best-so-far figure (PNG) here")
    quality.set_defaults(func=cmd_tune_quality)

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
