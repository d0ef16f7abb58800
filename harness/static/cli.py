"""``vk static``: compile offline for an arch and report registers, spills, shared memory and occupancy."""

from __future__ import annotations

import json

from verify_kernels.arch import known_arches

from harness.arguments import json_dict
from harness.static.report import default_rows, format_rows, space_report
from verify_kernels import VARIANTS, variants


def cmd_static(args) -> int:
    if args.variant and args.variant not in VARIANTS:
        raise SystemExit(f"vk static: --variant: unknown {args.variant!r}; the variants are {list(VARIANTS)}")
    names = [args.variant] if args.variant else list(VARIANTS)
    for config in args.config or []:
        check_config_keys(names, args.arch, config)
    if args.space:
        if args.config:
            raise SystemExit("vk static: --config: not with --space (the space is the search space's configs)")

        print(space_report(names, args.arch, args.json))
        return 0
    rows = []
    for name in names:
        for arch in args.arch:
            rows += default_rows(name, arch, args.config)
    if args.json:
        print(json.dumps(rows, indent=1, default=str))
    else:
        print(format_rows(rows))
    return 0 if all(r["feasible"] for r in rows) else 1


def check_config_keys(names: list[str], archs: list[str], config: dict) -> None:
    """A --config key no variant named knows is refused, as the API refuses it."""

    known = set()
    for name in names:
        for arch in archs:
            known |= variants.config_keys(variants.load_variant(name), arch)
    unknown = sorted(set(config) - known)
    if unknown:
        raise SystemExit(f"vk static: --config: unknown keys {unknown} for {', '.join(names)}; expected "
                         f"{sorted(known)}")


def add_commands(sub) -> None:
    """Register this package's subcommands on the ``vk`` parser."""
    static = sub.add_parser("static", help="compile offline for an arch: registers, spills, smem, occupancy")
    static.add_argument("--variant", help="default: every variant with an offline compile path")
    static.add_argument("--arch", nargs="+", default=["sm_120"], choices=known_arches(),
                        help="target archs (verify_kernels/arches/)")
    static.add_argument("--config", type=json_dict, action="append",
                        help="configs to compile (default: the arch's default)")
    static.add_argument("--space", action="store_true", help="the whole search space (search_spaces/*.yaml)")
    static.add_argument("--json", action="store_true")
    static.set_defaults(func=cmd_static)
