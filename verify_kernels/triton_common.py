"""What the Triton variants share: where they can run and how the 576 head splits."""

from __future__ import annotations

import os

from .contract import ProblemShape


def interpreting() -> bool:
    """True when Triton runs kernels on the CPU through its interpreter (TRITON_INTERPRET=1)."""
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def device_reason(shape: ProblemShape) -> str | None:
    """Why a Triton kernel cannot run on ``shape.device`` (None: it can)."""
    if shape.device.type == "cuda":
        return None
    if shape.device.type == "cpu" and interpreting():
        return None
    return f"needs a CUDA device (or TRITON_INTERPRET=1 for CPU tensors), got {shape.device}"


def is_power_of_two(value: int) -> bool:
    return value > 0 and value & (value - 1) == 0


def head_split_reason(shape: ProblemShape) -> str | None:
    """Triton tiles need power-of-two widths: Dqk must split as v_dim (latent) + rope, both 2^k >= 16."""
    rope_dim = shape.head_dim - shape.v_dim
    if not (is_power_of_two(shape.v_dim) and shape.v_dim >= 16):
        return f"v_dim must be a power of two >= 16, got {shape.v_dim}"
    if not (is_power_of_two(rope_dim) and rope_dim >= 16):
        return f"Dqk - v_dim (the rope part) must be a power of two >= 16, got {rope_dim}"
    return None


def upcast_dot(dtype) -> bool:
    """Whether kernels must upcast tl.dot operands: bf16 under the interpreter (see triton_dot.py)."""
    import torch

    return interpreting() and dtype == torch.bfloat16
