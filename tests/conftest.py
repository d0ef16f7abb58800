"""Shared test set-up: the Triton interpreter on CPU-only machines, the ``gpu`` marker, devices."""

import os
import shutil
import tempfile
from pathlib import Path

import pytest
import torch

HAS_CUDA = torch.cuda.is_available()
# Where the variant tests run: the GPU when there is one, else the CPU through the interpreter.
DEVICE = "cuda" if HAS_CUDA else "cpu"

# The tests never write into the checkout's results/ (the static model's compile cache under another
# Triton, tuned tables, records): they read and write a session copy of it, before any harness module
# (whose paths come from VK_RESULTS_DIR) is imported. Subprocesses inherit it.
if "VK_RESULTS_DIR" not in os.environ:
    _COPY = Path(tempfile.mkdtemp(prefix="vk-tests-")) / "results"
    shutil.copytree(Path(__file__).resolve().parents[1] / "results", _COPY)
    os.environ["VK_RESULTS_DIR"] = str(_COPY)

if not HAS_CUDA:
    # Before any Triton kernel module is imported: kernels then run on the CPU through the
    # interpreter (variants import Triton lazily, so nothing has been decorated yet).
    os.environ.setdefault("TRITON_INTERPRET", "1")


def pytest_collection_modifyitems(config, items):
    skip_gpu = pytest.mark.skip(reason="needs a CUDA GPU; runs on the GPU host")
    for item in items:
        if "gpu" in item.keywords and not HAS_CUDA:
            item.add_marker(skip_gpu)


@pytest.fixture
def plan_launches(monkeypatch):
    """Every plan tensor the planner launched its kernel for (a plan shared by ``plan_once`` launches none)."""
    from verify_kernels import planner

    made = []
    launch = planner._plan_kernel

    class Counting:
        def __getitem__(self, grid):
            def run(*args, **kwargs):
                made.append(args[1])
                return launch[grid](*args, **kwargs)
            return run

    monkeypatch.setattr(planner, "_plan_kernel", Counting())
    return made


def capture_graph(call) -> "torch.cuda.CUDAGraph":
    """``call`` run once on a side stream (warm-up: compiles, allocates), then captured in a graph."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        call()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        call()
    return graph
