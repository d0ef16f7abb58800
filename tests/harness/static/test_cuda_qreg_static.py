"""cuda_qreg without a GPU: its rules, shared-memory arithmetic and per-tile work, fp16 and both row
group counts through nvcc (its defaults compile in test_cuda_static.py)."""

import shutil

import pytest

from verify_kernels import cuda_qreg

needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not on PATH (CI has it)")


@needs_nvcc
@pytest.mark.parametrize("arch", ["sm_90", "sm_120"])
@pytest.mark.parametrize("warps_m, min_blocks", [(1, 2), (2, 1)])
def test_fp16_and_both_row_group_counts_compile_without_spills_in_the_loop(arch, warps_m, min_blocks):
    """No spill on sm_90; on sm_120 (two registers short) none inside the main loop."""
    from dataclasses import replace

    from harness.static.nvcc_compile import compile_resources
    from harness.static.sass import spills_in_main_loop

    config = {**cuda_qreg.DEFAULT_CONFIGS["sm_120"], "WARPS_M": warps_m, "MIN_BLOCKS": min_blocks}
    (spec,) = cuda_qreg.kernel_specs(config)
    spec = replace(spec, macros={**spec.macros, "USE_FP16": 1})
    usage = compile_resources(spec, arch)
    assert spec.threads == 128 * warps_m and usage.registers <= 255
    assert usage.spill_store_bytes == 0 if arch == "sm_90" else spills_in_main_loop(spec, arch) == []


@needs_nvcc
@pytest.mark.parametrize("fp16", [0, 1])
@pytest.mark.parametrize("arch", ["sm_90", "sm_120"])
def test_each_arch_default_compiles_without_spills_in_its_loop(arch, fp16):
    """The defaults sit at 254-255 registers (Q and O in registers) and keep 8 bytes in local memory
    outside the main loop (sm_90's walks the spans, sm_120's the units). A change that moves a spill into
    the loop shows here first."""
    from dataclasses import replace

    from harness.static.nvcc_compile import compile_resources
    from harness.static.sass import spills_in_main_loop

    (spec,) = cuda_qreg.kernel_specs(cuda_qreg.DEFAULT_CONFIGS[arch])
    spec = replace(spec, macros={**spec.macros, "USE_FP16": fp16})
    usage = compile_resources(spec, arch)
    assert usage.registers <= 255 and spills_in_main_loop(spec, arch) == []
    assert usage.spill_store_bytes == 8


@needs_nvcc
@pytest.mark.parametrize("arch", ["sm_90", "sm_120"])
@pytest.mark.parametrize("warps_m, min_blocks, block_n, stages", [(2, 1, None, None), (1, 2, 32, 2)])
def test_the_spans_walk_compiles_only_at_waves_0_without_spills_in_its_loop(arch, warps_m, min_blocks, block_n,
                                                                             stages):
    """waves 0 (the planner's spans rule) compiles the kernel with SPANS, its segment walk (with GAPS where the
    config names a segment_cost); any other plan compiles without the macros (units configs keep their code).
    At most 8 bytes in local memory, none inside the tile loop (the segment loop's registers had pushed the
    mask's row index there on sm_90)."""
    from harness.static.nvcc_compile import compile_resources
    from harness.static.sass import spills_in_main_loop

    config = {**cuda_qreg.DEFAULT_CONFIGS[arch], "WARPS_M": warps_m, "MIN_BLOCKS": min_blocks, "waves": 0}
    config.update({name: value for name, value in (("BLOCK_N", block_n), ("STAGES", stages)) if value})
    (spec,) = cuda_qreg.kernel_specs(config)
    assert spec.macros["SPANS"] == 1
    assert "SPANS" not in cuda_qreg.kernel_specs({**config, "waves": 2})[0].macros
    assert "SPANS" not in cuda_qreg.kernel_specs({**config, "kv_splits": 3})[0].macros  # fixed splits: no spans
    assert "GAPS" not in spec.macros
    (gaps,) = cuda_qreg.kernel_specs({**config, "segment_cost": 320})  # the walk steps over the plan's gaps
    assert gaps.macros["GAPS"] == 1 and "segment_cost" not in gaps.macros
    for compiled in (spec, gaps):
        usage = compile_resources(compiled, arch)
        assert usage.registers <= 255 and usage.spill_store_bytes <= 8 and spills_in_main_loop(compiled, arch) == []


@needs_nvcc
def test_the_loop_check_sees_a_spill_inside_the_loop():
    """A 64-token tile on sm_90 spills inside the main loop: spills_in_main_loop reports it."""
    from harness.static.sass import spills_in_main_loop

    (wide,) = cuda_qreg.kernel_specs({**cuda_qreg.DEFAULT_CONFIGS["sm_90"], "BLOCK_N": 64, "STAGES": 2})
    assert spills_in_main_loop(wide, "sm_90")


@needs_nvcc
def test_sm120_rejects_configs_over_99kb():
    from harness.static.report import default_rows as static_rows

    (row,) = static_rows("cuda_qreg", "sm_120", [{**cuda_qreg.DEFAULT_CONFIGS["sm_120"], "WARPS_M": 1, "STAGES": 6}])
    assert not row["feasible"] and "99 KB" in row["reason"]


def test_smem_arithmetic():
    # mbarriers and counters, 3 slots x 16 x 584 halves, 8 warps' 32 x 24 fp32 partial S, P 64 x 24
    # halves, 64 floats.
    config = cuda_qreg.DEFAULT_CONFIGS["sm_120"]
    assert (config["WARPS_M"], config["BLOCK_N"], config["STAGES"]) == (2, 16, 3)
    assert cuda_qreg.smem_bytes(config) == 128 + 2 * 3 * 16 * 584 + 4 * 8 * 32 * 24 + 2 * 64 * 24 + 4 * 64
    assert cuda_qreg.smem_bytes(config) <= 99 * 1024
    assert cuda_qreg.smem_bytes({**config, "STAGES": 4}) > 99 * 1024


def test_tile_work_has_no_q_bytes_and_clears_the_sm120_budget():
    """The design's prediction in the model's own terms: per KV tile, ~17 FLOP per shared-memory
    byte at 64 rows and 16-token tiles (cuda_ws's defaults: 8.8-10.3), above sm_120's ~8."""
    work = cuda_qreg.tile_work(cuda_qreg.DEFAULT_CONFIGS["sm_120"])
    flop_per_byte = work["mma"] * 4096 / work["smem_bytes"]
    assert 15 <= flop_per_byte <= 19, flop_per_byte
    assert work["rows"] == 64 and work["warps"] == 8 and work["barriers"] == 2


@pytest.mark.parametrize("changes, message", [
    pytest.param({"BLOCK_N": 24}, "16, 32 or 64", id="block_n"),
    pytest.param({"STAGES": 1}, "STAGES must be 2 .. 10", id="one_stage"),
    pytest.param({"STAGES": 11}, "STAGES must be 2 .. 10", id="eleven_stages"),
    pytest.param({"MIN_BLOCKS": 2}, "8 warps", id="registers"),
    pytest.param({"WARPS_M": 0}, "positive ints", id="zero_groups"),
    pytest.param({"WARPS_M": True}, "positive ints", id="bool"),
])
def test_config_rules(changes, message):
    problems = cuda_qreg.config_problems({**cuda_qreg.DEFAULT_CONFIG, **changes})
    assert any(message in p for p in problems), problems
    for config in cuda_qreg.DEFAULT_CONFIGS.values():
        assert cuda_qreg.config_problems(dict(config)) == []
