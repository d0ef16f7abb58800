"""Argument types and helpers the subcommands share."""

from __future__ import annotations

import argparse
import json

from harness.measure.inputs import InputError, check_output_dir, check_output_file


def int_list(text: str) -> list[int]:
    try:
        values = [int(x) for x in text.split(",") if x]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None
    if not values:
        raise argparse.ArgumentTypeError(f"expected at least one integer, got {text!r}")
    return values


def int_list_in(low: int, high: int | None = None):
    """``int_list`` whose every value lies in [low, high]: range-checked when the flag is parsed."""
    def parse(text: str) -> list[int]:
        values = int_list(text)
        bad = [v for v in values if v < low or (high is not None and v > high)]
        if bad:
            raise argparse.ArgumentTypeError(f"expected integers {_range(low, high)}, got {text!r}")
        return values
    return parse


def int_in(low: int, high: int | None = None):
    """An int in [low, high]."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if value < low or (high is not None and value > high):
            raise argparse.ArgumentTypeError(f"expected an integer {_range(low, high)}, got {value}" if high is not None
                                             else f"expected at least {low}, got {value}")
        return value
    return parse


def float_at_least(low: float, *, strict: bool = False):
    """A finite float >= low (> low when ``strict``)."""
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
        if not (value > low if strict else value >= low) or value != value or value == float("inf"):
            raise argparse.ArgumentTypeError(f"expected a finite number {'>' if strict else '>='} {low:g}, got "
                                             f"{text!r}")
        return value
    return parse


def _argument_type(check, name: str):
    """An argparse type from an ``inputs`` check: refused at parse time, before any work."""
    def parse(text: str):
        try:
            return check(text, "")
        except InputError as error:
            raise argparse.ArgumentTypeError(str(error).removeprefix(": ")) from None
    parse.__name__ = name
    return parse


# Output paths checked when the flag is parsed: a file that can be written (not a folder, its folder
# writable or creatable), a folder that can be. Input files are checked where they are read
# (harness/measure/inputs.py), so a command line that names a file an earlier command writes parses.
output_file = _argument_type(check_output_file, "output file")
output_dir = _argument_type(check_output_dir, "output folder")

# Prefix lengths a flag takes: 4M tokens is a 4.8 GB bf16 pool of 576-wide rows, past every MLA model's
# context; a larger number is a typo, refused before a pool is allocated.
PREFIX_MAX = 2**22
SEED_MAX = 2**32 - 1  # NumPy's and torch's generators take seeds in [0, 2**32)


def prefix_lengths(text: str) -> list[int]:
    return int_list_in(0, PREFIX_MAX)(text)


def seed(text: str) -> int:
    return int_in(0, SEED_MAX)(text)


def _range(low: int, high: int | None) -> str:
    return f"in {low}..{high}" if high is not None else f">= {low}"


# Help for flags many subcommands share, filled in where a subcommand gives none.
COMMON_HELP = {
    "--no-progress": "no progress bar",
    "--json": "print JSON instead of a table",
    "--seed": "random seed",
    "--dtype": "data type of q and the KV cache",
    "--device": "cpu or cuda (default: cuda when torch sees a GPU)",
}


class OneLineParser(argparse.ArgumentParser):
    """argparse whose errors are one line on stderr (``vk decode: argument --budget: ...``), exit 2."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: {message}\n")


def json_dict(text: str) -> dict:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as error:
        raise argparse.ArgumentTypeError(f"expected a JSON object, got {text!r} ({error})") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"expected a JSON object, got {text!r}")
    return value


def device_or_default(requested: str | None) -> str:
    import torch

    if requested:
        if requested == "cuda" and not torch.cuda.is_available():
            raise SystemExit("vk: --device: cuda requested, but torch sees no CUDA device on this machine")
        return requested
    return "cuda" if torch.cuda.is_available() else "cpu"
