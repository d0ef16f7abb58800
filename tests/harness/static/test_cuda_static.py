"""The CUDA variants without a GPU: nvcc compiles each one's source for sm_90 and sm_120 (both
variants), and cuda_coalesced's rules (cuda_ws's: test_cuda_ws_static.py)."""

import shutil

import pytest

from verify_kernels import cuda_coalesced, variants

CUDA_VARIANTS = ("cuda_coalesced", "cuda_ws", "cuda_qreg")

needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not on PATH (CI has it)")


@needs_nvcc
@pytest.mark.parametrize("variant", CUDA_VARIANTS)
@pytest.mark.parametrize("arch, smem_limit_kb", [("sm_90", 227), ("sm_120", 99)])
def test_default_config_compiles_within_the_arch_smem_without_spills_in_its_loop(variant, arch, smem_limit_kb):
    """Each arch's default compiles with nvcc and fits the arch's shared memory; it does not spill, or
    (where its search space allows spills on the arch) not inside its main loop."""
    from harness.static.sass import spills_in_main_loop
    from harness.static.report import default_rows as static_rows
    from harness.static.space import resolve

    (row,) = static_rows(variant, arch)
    assert row["registers"] > 0, row
    if row["spill_store_bytes"] or row["spill_load_bytes"]:
        target = resolve(variant, arch)
        assert target.spills_allowed, row
        (spec,) = target.module.kernel_specs(target.defaults)
        assert spills_in_main_loop(spec, arch) == [], row
    assert row["shared_bytes"] <= smem_limit_kb * 1024, f"{arch} default: {row['shared_bytes']} B"
    assert row["feasible"] and row["blocks_per_sm"] >= 1, row


@needs_nvcc
@pytest.mark.parametrize("variant", CUDA_VARIANTS)
def test_sm120_default_also_compiles_for_sm90(variant):
    """One source: the sm_120 default is a valid sm_90 config too."""
    from harness.static.report import default_rows as static_rows

    defaults = variants.load_variant(variant).DEFAULT_CONFIGS["sm_120"]
    (row,) = static_rows(variant, "sm_90", [defaults])
    assert row["feasible"] and row["spill_store_bytes"] == 0, row


@needs_nvcc
def test_fp16_and_wide_configs_compile():
    from dataclasses import replace

    from harness.static.nvcc_compile import compile_resources

    config = {**cuda_coalesced.DEFAULT_CONFIG, "WARPS_M": 4, "BLOCK_N": 32}
    (spec,) = cuda_coalesced.kernel_specs(config)
    usage = compile_resources(replace(spec, macros={**spec.macros, "USE_FP16": 1}), "sm_90")
    assert spec.threads == 256
    assert usage.spill_store_bytes == 0 and usage.registers <= 255


@needs_nvcc
def test_sm120_rejects_configs_over_99kb():
    from harness.static.report import default_rows as static_rows

    (row,) = static_rows("cuda_coalesced", "sm_120", [{"WARPS_M": 4, "BLOCK_N": 32}])
    assert not row["feasible"] and "99 KB" in row["reason"]


def test_smem_arithmetic():
    # Q 32 x 584 + 2 stages x 16 x 584 + P 32 x 24 halves, plus 2 x 2 x 32 floats.
    expected = 2 * (32 * 584 + 2 * 16 * 584 + 32 * 24) + 512
    assert cuda_coalesced.smem_bytes(cuda_coalesced.DEFAULT_CONFIGS["sm_120"]) == expected


@pytest.mark.parametrize("changes, message", [
    pytest.param({"BLOCK_N": 24}, "multiple of 16", id="block_n"),
    pytest.param({"WARPS_N": 4, "BLOCK_N": 16}, "multiple of 8", id="s_cols"),
    pytest.param({"WARPS_N": 3}, "WARPS_N", id="odd_warps_n"),
    pytest.param({"WARPS_M": 8, "WARPS_N": 8}, "threads per block", id="threads"),
])
def test_config_rules(changes, message):
    problems = cuda_coalesced.config_problems({**cuda_coalesced.DEFAULT_CONFIG, **changes})
    assert any(message in p for p in problems), problems
    assert cuda_coalesced.config_problems(dict(cuda_coalesced.DEFAULT_CONFIG)) == []


def test_cpu_tensors_are_a_clear_unsupported_reason():
    import torch

    from verify_kernels import UnsupportedProblemError, make_problem, verify_attention

    problem = make_problem([20], 4, 2, page_size=16)
    with pytest.raises(UnsupportedProblemError,
                       match="variant 'cuda_coalesced' does not support this problem: needs a CUDA device"):
        verify_attention(*problem.arguments(), **problem.kwargs(), variant="cuda_coalesced")
    assert torch.isnan(problem.kv_cache).any()
