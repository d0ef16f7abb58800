"""The CUDA variants' run-time source without CuPy: local headers are inlined, so what NVRTC gets
(and CuPy keys its cache by) is the whole kernel; nvcc compiles the inlined text like the file."""

import shutil
import subprocess

import pytest

from verify_kernels import cuda_coalesced, cuda_qreg, cuda_ws
from verify_kernels.cupy_launch import included_headers, inlined_source

RING_AND_PLAN = ["mma_sync.cuh", "kv_ring.cuh", "plan_walk.cuh"]


@pytest.mark.parametrize("module, names", [(cuda_coalesced, ["mma_sync.cuh"]), (cuda_ws, RING_AND_PLAN),
                                           (cuda_qreg, RING_AND_PLAN)], ids=["cuda_coalesced", "cuda_ws", "cuda_qreg"])
def test_local_headers_are_inlined(module, names):
    headers = included_headers(module.SOURCE)
    assert [h.name for h in headers] == names
    text = inlined_source(module.SOURCE)
    assert '#include "' not in text
    assert all(header.read_text() in text for header in headers) and "mma_16816" in text


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not on PATH (CI has it)")
def test_inlined_source_compiles_alone(tmp_path):
    """The string handed to NVRTC compiles from a directory without the header."""
    code = tmp_path / "inlined.cu"
    code.write_text(inlined_source(cuda_ws.SOURCE))
    done = subprocess.run(["nvcc", "-ptx", "-arch=sm_120", "-std=c++17", str(code), "-o", str(tmp_path / "k.ptx")],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-800:]
    assert "mma.sync.aligned.m16n8k16" in (tmp_path / "k.ptx").read_text()
