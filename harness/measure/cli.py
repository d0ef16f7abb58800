"""``vk ceilings``, ``vk env``: this GPU's measured ceilings and the environment a record carries."""

from __future__ import annotations

import json



def cmd_ceilings(args) -> int:
    from harness.measure.roofline import load_ceilings, measure_ceilings, save_ceilings

    cached = load_ceilings()
    if cached and not args.remeasure:
        print(json.dumps(cached.__dict__, indent=1))
        return 0
    ceilings, procedure = measure_ceilings()
    try:
        from harness.measure.mma_ceiling import measure_mma_sync_tflops

        mma_tflops, procedure["mma_sync"] = measure_mma_sync_tflops()
        ceilings = type(ceilings)(ceilings.gpu, ceilings.copy_tbps, ceilings.matmul_tflops, mma_tflops)
    except ImportError as error:
        procedure["mma_sync"] = f"not measured: {error}"
    path = save_ceilings(ceilings, procedure)
    print(json.dumps(ceilings.__dict__, indent=1))
    print(f"saved to {path}")
    return 0


def cmd_env(args) -> int:
    from harness.measure.environment import describe_environment

    print(json.dumps(describe_environment(), indent=1))
    return 0


def add_commands(sub) -> None:
    """Register this package's subcommands on the ``vk`` parser."""
    ceilings = sub.add_parser("ceilings", help="measure (or show cached) copy bandwidth and matmul rate")
    ceilings.add_argument("--remeasure", action="store_true")
    ceilings.set_defaults(func=cmd_ceilings)

    env = sub.add_parser("env", help="print the environment a record carries")
    env.set_defaults(func=cmd_env)
