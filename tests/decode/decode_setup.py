"""What the decode tests share: the tiny float32 model on the CPU, a decode set-up over it, and
``vk decode`` run on it in a subprocess."""

import subprocess
import sys

import pytest
import torch

from harness.decode.run import build_model, build_setup, make_prompt


@pytest.fixture(scope="module")
def tiny_model():
    return build_model("tiny", seed=3, dtype=torch.float32, device="cpu")


def _setup(model, *, context, page_size, prompt_len=9, seed=3):
    prompt = make_prompt(model.config, None, prompt_len, seed)
    return build_setup(model, prompt, context=context, max_new=48, max_tree=40, page_size=page_size, seed=seed,
                       prefill_variant="reference")


def _vk_decode_tiny_cpu(out, *arguments: str, timeout: int = 300) -> subprocess.CompletedProcess:
    """``vk decode --preset tiny --device cpu ARGUMENTS --no-progress [--out OUT]`` in a subprocess."""
    command = [sys.executable, "-m", "harness", "decode", "--preset", "tiny", "--device", "cpu", *arguments,
               "--no-progress"] + (["--out", str(out)] if out is not None else [])
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout)
