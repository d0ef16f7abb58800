"""Argument types and helpers the subcommands share."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from harness.measure.paths import results_dir


def results_root() -> Path:
    """Where records go by default (``./results``, or ``$VK_RESULTS_DIR``)."""
    return results_dir()


def int_list(text: str) -> list[int]:
    try:
        return [int(x) for x in text.split(",") if x]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None


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
            raise SystemExit("vk: --device cuda requested but torch sees no CUDA device")
        return requested
    return "cuda" if torch.cuda.is_available() else "cpu"
