"""cuda_ws without a GPU: its rules, both hand-offs and fp16 through nvcc (its defaults compile in
test_cuda_static.py, with cuda_coalesced's)."""

import shutil

import pytest

from verify_kernels import cuda_ws

needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not on PATH (CI has it)")


@needs_nvcc
@pytest.mark.parametrize("producer", [0, 1])
def test_fp16_and_both_hand_offs_compile(producer):
    from dataclasses import replace

    from harness.static.nvcc_compile import compile_resources

    config = {**cuda_ws.DEFAULT_CONFIGS["sm_120"], "PRODUCER": producer, "SPLIT_K": producer}
    (spec,) = cuda_ws.kernel_specs(config)
    usage = compile_resources(replace(spec, macros={**spec.macros, "USE_FP16": 1}), "sm_120")
    assert spec.threads == 32 * (6 + producer)
    assert usage.spill_store_bytes == 0 and usage.registers <= 255


@needs_nvcc
def test_sm120_rejects_configs_over_99kb():
    from harness.static.report import default_rows as static_rows

    (row,) = static_rows("cuda_ws", "sm_120", [cuda_ws.DEFAULT_CONFIGS["sm_90"]])
    assert not row["feasible"] and "99 KB" in row["reason"]


def test_smem_arithmetic():
    # mbarriers, Q 48 x 584 + 2 stages x 16 x 584 halves, 6 warps' 16 x 16 fp32 partial S (SPLIT_K)
    # or P 48 x 24 halves, plus 2 x 2 x 48 floats.
    config = cuda_ws.DEFAULT_CONFIGS["sm_120"]
    assert (config["WARPS_M"], config["BLOCK_N"], config["STAGES"], config["SPLIT_K"]) == (3, 16, 2, 1)
    assert cuda_ws.smem_bytes(config) == 128 + 2 * (48 * 584 + 2 * 16 * 584) + 6 * 16 * 16 * 4 + 768
    assert cuda_ws.smem_bytes({**config, "SPLIT_K": 0}) == 128 + 2 * (48 * 584 + 2 * 16 * 584 + 48 * 24) + 768
    assert cuda_ws.smem_bytes(config) <= 99 * 1024


@pytest.mark.parametrize("changes, message", [
    pytest.param({"BLOCK_N": 24}, "multiple of 16", id="block_n"),
    pytest.param({"WARPS_N": 4, "BLOCK_N": 16}, "multiple of 8", id="s_cols"),
    pytest.param({"ROW_TILES": 2}, "registers per thread", id="output_tile"),
    pytest.param({"PRODUCER": 0, "STAGES": 1}, "PRODUCER=0 needs", id="no_producer_one_stage"),
    pytest.param({"PRODUCER": 0}, "SPLIT_K=0", id="no_producer_split_k"),
    pytest.param({"PRODUCER": 2}, "PRODUCER must be 0 or 1", id="producer_value"),
    pytest.param({"WARPS_M": 0}, "positive ints", id="zero_warps"),
    pytest.param({"WARPS_M": 16, "WARPS_N": 4}, "threads per block", id="threads"),
])
def test_config_rules(changes, message):
    problems = cuda_ws.config_problems({**cuda_ws.DEFAULT_CONFIG, **changes})
    assert any(message in p for p in problems), problems
    for config in cuda_ws.DEFAULT_CONFIGS.values():
        assert cuda_ws.config_problems(dict(config)) == []


def test_offline_arches():
    assert cuda_ws.offline_arch_problem("sm_90") is None and cuda_ws.offline_arch_problem("sm_120") is None
    assert "cp.async.bulk" in cuda_ws.offline_arch_problem("sm_89")


def test_cpu_tensors_are_a_clear_unsupported_reason():
    from verify_kernels import UnsupportedProblemError, make_problem, verify_attention

    problem = make_problem([20], 4, 2, page_size=16)
    with pytest.raises(UnsupportedProblemError,
                       match="variant 'cuda_ws' does not support this problem: needs a CUDA device"):
        verify_attention(*problem.arguments(), **problem.kwargs(), variant="cuda_ws")


@needs_nvcc
@pytest.mark.parametrize("arch", ["sm_90", "sm_120"])
@pytest.mark.parametrize("producer", [0, 1])
def test_the_spans_walk_compiles_only_at_waves_0_and_without_spills(arch, producer):
    """waves 0 (the planner's spans rule) compiles the kernel with SPANS, its segment walk, and with GAPS
    where the config names a segment_cost; any other plan compiles without the macros, so units configs
    keep their code. No spill on either arch."""
    from harness.static.nvcc_compile import compile_resources

    config = {**cuda_ws.DEFAULT_CONFIGS[arch], "PRODUCER": producer, "SPLIT_K": producer, "waves": 0}
    if not producer:
        config["STAGES"] = 3
    (spec,) = cuda_ws.kernel_specs(config)
    assert spec.macros["SPANS"] == 1
    assert "SPANS" not in cuda_ws.kernel_specs({**config, "waves": 2})[0].macros
    assert "SPANS" not in cuda_ws.kernel_specs({**config, "kv_splits": 3})[0].macros  # fixed splits: no spans
    assert "GAPS" not in spec.macros
    (gaps,) = cuda_ws.kernel_specs({**config, "segment_cost": 320})  # the walk steps over the plan's gaps
    assert gaps.macros["GAPS"] == 1 and gaps.macros["SPANS"] == 1
    for usage in (compile_resources(spec, arch), compile_resources(gaps, arch)):
        assert usage.spill_store_bytes == 0 and usage.spill_load_bytes == 0
