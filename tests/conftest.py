"""Shared test set-up: the Triton interpreter on CPU-only machines, the ``gpu`` marker, devices."""

import os

import pytest
import torch

HAS_CUDA = torch.cuda.is_available()
# Where the variant tests run: the GPU when there is one, else the CPU through the interpreter.
DEVICE = "cuda" if HAS_CUDA else "cpu"

if not HAS_CUDA:
    # Before any Triton kernel module is imported: kernels then run on the CPU through the
    # interpreter (variants import Triton lazily, so nothing has been decorated yet).
    os.environ.setdefault("TRITON_INTERPRET", "1")


def pytest_collection_modifyitems(config, items):
    skip_gpu = pytest.mark.skip(reason="needs a CUDA GPU; runs on the GPU host")
    for item in items:
        if "gpu" in item.keywords and not HAS_CUDA:
            item.add_marker(skip_gpu)


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
