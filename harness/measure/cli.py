"""``vk ceilings``, ``vk env``, ``vk index``, ``vk stalls``: this GPU's measured ceilings, the environment a
record carries, the index of record files, and where a kernel's warps wait (ncu's stall samples)."""

from __future__ import annotations

import json
from pathlib import Path

from harness.arguments import int_in, output_file
from harness.measure.paths import results_dir
from harness.measure.environment import describe_environment
from harness.measure.mma_ceiling import measure_mma_sync_tflops
from harness.measure.records import format_index, records_index
from harness.measure.roofline import load_ceilings, measure_ceilings, save_ceilings
from harness.measure.stalls import format_stalls



def cmd_ceilings(args) -> int:
    import torch

    cached = load_ceilings()
    if cached and not args.remeasure:
        print(json.dumps(cached.__dict__, indent=1))
        return 0
    if not torch.cuda.is_available():
        raise SystemExit("vk ceilings: needs a CUDA GPU (it measures this GPU's copy bandwidth and matmul rates); "
                         "torch sees none here")
    ceilings, procedure = measure_ceilings()
    try:
        mma_tflops, procedure["mma_sync"] = measure_mma_sync_tflops()
        ceilings = type(ceilings)(ceilings.gpu, ceilings.copy_tbps, ceilings.matmul_tflops, mma_tflops)
    except ImportError as error:
        procedure["mma_sync"] = f"not measured: {error}"
    path = save_ceilings(ceilings, procedure)
    print(json.dumps(ceilings.__dict__, indent=1))
    print(f"saved to {path}")
    return 0


def cmd_env(args) -> int:
    print(json.dumps(describe_environment(), indent=1))
    return 0


def cmd_index(args) -> int:
    root = args.root or results_dir()
    if not root.is_dir():
        raise SystemExit(f"vk index: --root: no such folder: {root}")
    text = format_index(records_index(root), root)
    out = args.out or root / "FILES.md"
    out.write_text(text)
    print(f"wrote {out} ({text.count(chr(10)) - 5} record files)")
    return 0


def cmd_stalls(args) -> int:
    for path in args.csv:
        if not path.is_file():
            raise SystemExit(f"vk stalls: {path}: " + ("a folder, expected ncu's CSV file" if path.is_dir()
                                                        else "no such file"))
        try:
            print(format_stalls(path, top=args.top))
        except ValueError as error:
            raise SystemExit(f"vk stalls: {error}") from None
    return 0


def add_commands(sub) -> None:
    """Register this package's subcommands on the ``vk`` parser."""
    ceilings = sub.add_parser("ceilings", help="measure (or show cached) copy bandwidth and matmul rate")
    ceilings.add_argument("--remeasure", action="store_true",
                          help="measure again even when this GPU's ceilings are cached")
    ceilings.set_defaults(func=cmd_ceilings)

    env = sub.add_parser("env", help="print the environment a record carries")
    env.set_defaults(func=cmd_env)

    index = sub.add_parser("index", help="the index of record files (results/FILES.md), generated from the records",
                           description="Write a markdown table of every JSONL record file under the results folder: "
                                       "records, kinds, commits, dates and the command that wrote them.")
    index.add_argument("--root", type=Path, help="results folder (default ./results or $VK_RESULTS_DIR)")
    index.add_argument("--out", type=output_file, help="markdown file (default ROOT/FILES.md)")
    index.set_defaults(func=cmd_index)

    stalls = sub.add_parser("stalls", help="where a kernel's warps wait, from ncu's per-instruction stall samples",
                            description="Read ncu's SASS source page as CSV (ncu -i REP --page source --csv "
                                        "--print-source sass, plain or .xz) and print the instructions with the "
                                        "most stall samples and the samples summed per mbarrier and kind of wait.")
    stalls.add_argument("csv", type=Path, nargs="+", help="CSV files (results/ncu/*.sass-*.csv.xz)")
    stalls.add_argument("--top", type=int_in(1), default=20, help="instructions listed by samples")
    stalls.set_defaults(func=cmd_stalls)
