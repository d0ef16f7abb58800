"""``vk tune``, ``vk tuned``, ``vk tune-quality``: Optuna studies, their winners, and TPE's quality."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from harness.arguments import int_list


def cmd_tune(args) -> int:
    from harness.tune.run import run_tune

    return run_tune(args, sys.argv[1:])


def cmd_tuned(args) -> int:
    import yaml

    from harness.tune.study import check_winners, winners_path

    from harness.tune.study import TUNED_DIR

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
    from harness.tune.quality import format_quality, plot_quality, trials_to_reach

    result = trials_to_reach(args.storage, args.study, seeds=args.seeds, within=args.within)
    print(format_quality(result))
    if args.plot:
        plot_quality(result, args.plot)
        print(f"figure: {args.plot}")
    return 0


def add_commands(sub) -> None:
    """Register this package's subcommands on the ``vk`` parser."""
    tune = sub.add_parser("tune", help="Optuna over the statically feasible space, one study per key")
    tune.add_argument("--variants", nargs="+", default=["triton_splitkv", "cuda_coalesced"])
    tune.add_argument("--prefix", type=int_list, default=[4096, 32768, 131072])
    tune.add_argument("--tree", type=int_list, default=[16, 64, 256])
    tune.add_argument("--heads", type=int_list, default=[8])
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

    quality = sub.add_parser("tune-quality", help="trials TPE needs to reach the exhaustive best (replayed)")
    quality.add_argument("--storage", required=True)
    quality.add_argument("--study", required=True, help="a study holding an exhaustive measurement of one key")
    quality.add_argument("--seeds", type=int, default=5)
    quality.add_argument("--within", type=float, default=0.03)
    quality.add_argument("--plot", help="write the best-so-far figure (PNG) here")
    quality.set_defaults(func=cmd_tune_quality)
