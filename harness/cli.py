"""``vk``: the suite's command line (also ``python -m harness``).

    vk check     every variant against the oracle over the case matrix
    vk bench     time variants and peers side by side over a sweep; JSONL records + table
    vk report    bench records -> markdown table and PNG plots
    vk static    compile offline for an arch of the registry: registers, spills, shared memory, occupancy
    vk ceilings  measure and cache this GPU's copy bandwidth and bf16 matmul rate
    vk decode    the DDTree decode loop on an MLA model (Kimi-K2 shaped), per-phase step times
    vk decode-report  decode records -> markdown table and plots
    vk env       the environment a record would carry
    vk stalls    where a kernel's warps wait, from ncu's per-instruction stall samples
    vk predict   predicted time of a config on an arch; vk predict-fit fits and validates the predictor
"""

from __future__ import annotations

import argparse
import sys

from harness.arguments import COMMON_HELP, OneLineParser
from harness.measure.inputs import InputError
from harness.bench import cli as bench_cli
from harness.decode import cli as decode_cli
from harness.measure import cli as measure_cli
from harness.predict import cli as predict_cli
from harness.static import cli as static_cli
from harness.tune import cli as tune_cli

# Each subpackage registers its own subcommands (flashinfer's benchmarks/routines style).
COMMAND_GROUPS = (bench_cli, static_cli, tune_cli, decode_cli, measure_cli, predict_cli)


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="vk", description="Tree-verify attention: check, benchmark, tune.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=OneLineParser)
    for group in COMMAND_GROUPS:
        group.add_commands(sub)
    for name, command in sub.choices.items():
        help_text = next(action.help for action in sub._choices_actions if action.dest == name)
        command.description = command.description or help_text[:1].upper() + help_text[1:] + "."
        command.formatter_class = argparse.ArgumentDefaultsHelpFormatter
        for action in command._actions:
            if action.option_strings and not action.help:
                action.help = COMMON_HELP.get(action.option_strings[0])
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run one subcommand. A subcommand refuses bad input with ``SystemExit("vk <command>: ...")`` or an
    ``InputError``: one line on stderr and exit status 2, as argparse's own errors are; Ctrl-C is one
    line and exit status 130."""
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except SystemExit as error:
        if isinstance(error.code, str):
            print(error.code, file=sys.stderr)
            return 2
        raise
    except InputError as error:  # a flag's value or a file it names, refused before the work
        print(f"vk {args.command}: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"vk {args.command}: interrupted (what was written stays; vk bench and vk check carry on with --resume, "
              "vk tune from its storage)", file=sys.stderr)
        return 130


def run() -> None:
    """Console-script entry point."""
    sys.exit(main())
