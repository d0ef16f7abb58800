"""The decode model's split-K GEMM (harness/decode/splitk_linear.py) against float64, on NaN-padded views,
uneven splits and tails; its ticket counters and determinism; the config table; the model wiring."""

import json
import os
import subprocess
import sys

import pytest
import torch

from conftest import DEVICE, HAS_CUDA
from harness.decode.splitk_linear import (H100_SMEM_PER_BLOCK, MAX_ROWS, SplitKConfig, SplitKTable, block_rows,
                                   default_config, shared_bytes, split_plan, splitk_linear, splitk_matmul)

# the interpreter has no bfloat16 (numpy); fp16 exercises the same code
DTYPE = torch.bfloat16 if HAS_CUDA else torch.float16


def padded_operands(M, N, K, seed):
    """x [M, K] and w [N, K] as views into NaN-filled buffers (row stride K + 24, 8 NaN rows of w
    past N): a load outside the operands poisons the result."""
    generator = torch.Generator().manual_seed(seed)
    x_buffer = torch.full((M + 3, K + 24), float("nan"), dtype=DTYPE)
    w_buffer = torch.full((N + 8, K + 24), float("nan"), dtype=DTYPE)
    x_buffer[:M, :K] = torch.randn(M, K, generator=generator).to(DTYPE)
    w_buffer[:N, :K] = (torch.randn(N, K, generator=generator) / K ** 0.5).to(DTYPE)
    x_buffer, w_buffer = x_buffer.to(DEVICE), w_buffer.to(DEVICE)
    return x_buffer[:M, :K], w_buffer[:N, :K]


CASES = [  # M, N, K, config: tails in N and K, uneven splits, one split, M = 1 and M = 64
    (5, 200, 300, SplitKConfig(BLOCK_N=64, BLOCK_K=64, splits=3, num_stages=2)),
    (64, 128, 256, SplitKConfig(BLOCK_N=64, BLOCK_K=32, splits=4)),
    (1, 96, 100, SplitKConfig(BLOCK_N=32, BLOCK_K=32, splits=8)),
    (33, 64, 512, SplitKConfig(BLOCK_N=64, BLOCK_K=64, splits=1)),
    (17, 160, 416, SplitKConfig(BLOCK_N=32, BLOCK_K=64, splits=5)),
]


@pytest.mark.parametrize("M,N,K,config", CASES)
def test_splitk_matches_float64_and_is_deterministic(M, N, K, config):
    x, w = padded_operands(M, N, K, seed=M + N + K)
    first = splitk_matmul(x, w, config)
    second = splitk_matmul(x, w, config)  # the counters were reset by the first call's reducers
    reference = x.double() @ w.double().T
    assert first.shape == (M, N) and first.dtype == x.dtype
    assert torch.isfinite(first).all()
    error = (first.double() - reference).abs().max().item()
    assert error <= 4e-3 * reference.abs().max().item() + 1e-3, error
    assert torch.equal(first, second)  # fixed reduction order: bitwise the same every call


def test_out_argument_and_counters_left_at_zero():
    from harness.decode import splitk_linear as module

    x, w = padded_operands(7, 96, 192, seed=3)
    out = torch.full((7, 96), float("nan"), dtype=DTYPE, device=DEVICE)
    result = splitk_matmul(x, w, SplitKConfig(BLOCK_N=32, BLOCK_K=32, splits=6), out=out)
    assert result.data_ptr() == out.data_ptr() and torch.isfinite(out).all()
    assert int(module._COUNTERS[torch.device(DEVICE)].abs().sum()) == 0


@pytest.mark.parametrize("K,block_k,splits", [(300, 64, 3), (7168, 128, 12), (100, 32, 8), (64, 64, 4), (1024, 128, 1)])
def test_split_plan_covers_k_without_empty_splits(K, block_k, splits):
    per_split, launched = split_plan(K, SplitKConfig(BLOCK_K=block_k, splits=splits))
    assert per_split % block_k == 0 and 1 <= launched <= splits
    assert (launched - 1) * per_split < K <= launched * per_split


def test_bad_arguments_raise_with_the_argument_named():
    x, w = padded_operands(4, 32, 64, seed=1)
    with pytest.raises(ValueError, match="M <= 64"):
        splitk_matmul(torch.zeros(MAX_ROWS + 1, 64, dtype=DTYPE, device=DEVICE), w, SplitKConfig())
    with pytest.raises(ValueError, match=r"x \[M, K\] and w \[N, K\]"):
        splitk_matmul(x, w[:, :32], SplitKConfig())
    with pytest.raises(ValueError, match="both bfloat16 or both float16"):
        splitk_matmul(x, w.float(), SplitKConfig())
    with pytest.raises(ValueError, match="both bfloat16 or both float16"):
        splitk_matmul(x.float(), w.float(), SplitKConfig())


def test_table_picks_by_row_block_and_falls_back_to_defaults(tmp_path):
    path = tmp_path / "table.json"
    tuned = SplitKConfig(BLOCK_N=64, BLOCK_K=256, splits=6, num_warps=4, num_stages=5)
    path.write_text(json.dumps({"configs": [{"block_m": 64, "n": 4608, "k": 7168, "config": tuned.as_dict()}]}))
    table = SplitKTable(path)
    assert table.config(64, 4608, 7168, 132) == tuned
    assert table.config(40, 4608, 7168, 132) == tuned  # 40 rows run in the 64-row block
    assert block_rows(1) == 16 and block_rows(17) == 32
    assert table.config(16, 4608, 7168, 132) == default_config(4608, 7168, 132, 16)
    default = default_config(4608, 7168, 132)
    assert -(-4608 // default.BLOCK_N) * default.splits >= 132


SM120_SMEM_PER_BLOCK = 99 * 1024


@pytest.mark.parametrize("smem", [H100_SMEM_PER_BLOCK, SM120_SMEM_PER_BLOCK])
@pytest.mark.parametrize("block_m", [16, 32, 64])
def test_default_config_fits_the_blocks_shared_memory(smem, block_m):
    config = default_config(4608, 7168, 188, block_m, smem)
    assert shared_bytes(config, block_m) + 1024 <= smem
    assert config.num_stages >= 3  # a real copy pipeline, also in 99 KB
    if smem == H100_SMEM_PER_BLOCK:
        assert (config.BLOCK_K, config.num_stages) == (128, 4)
    with pytest.raises(ValueError, match="no tile fits"):
        default_config(4608, 7168, 132, block_m, 16 * 1024)


def test_default_configs_compile_offline_for_sm90_and_sm120():
    """The default configs, compiled without a GPU (Triton's compiler and ptxas, the launcher's
    specialisation), fit each arch's shared memory per block without spills, and the estimate
    ``default_config`` uses is what Triton allocates; on sm_90 also with PDL (griddepcontrol and the
    bulk L2 prefetch)."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    code = """
import json
from harness.decode.splitk_linear import default_config, kernel_spec, shared_bytes
from harness.static.occupancy import infeasibility
from harness.static.triton_compile import compile_resources
rows = []
for arch, smem, pdl in (("sm_90", 227 * 1024, True), ("sm_120", 99 * 1024, False)):
    for block_m in (16, 64):
        for n, k in ((4608, 7168), (1536, 1536)):
            config = default_config(n, k, 132, block_m, smem)
            usage = compile_resources(kernel_spec(config, block_m, n, k, pdl=pdl), arch)
            rows.append({"arch": arch, "block_m": block_m, "shared": usage.shared_bytes,
                         "estimate": shared_bytes(config, block_m), "spills": usage.spill_store_bytes,
                         "reason": infeasibility(usage, arch)})
print(json.dumps(rows))
"""
    completed = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert completed.returncode == 0, completed.stderr[-2000:]
    rows = json.loads(completed.stdout.strip().splitlines()[-1])
    assert len(rows) == 8
    for row in rows:
        assert row["reason"] is None and row["spills"] == 0, row
        assert row["shared"] <= row["estimate"] + 1024, row


def test_op_falls_back_to_torch_off_the_gpu_path():
    x = torch.randn(70, 48, dtype=torch.float32)
    w = torch.randn(24, 48, dtype=torch.float32)
    assert torch.equal(splitk_linear(x, w, ""), x @ w.T)  # float32 and 70 rows: torch


def test_model_with_splitk_gemms_matches_cublas_on_cpu():
    """The wiring: on the CPU the op falls back to x @ w.T, so the forwards are identical."""
    from harness.decode.model import PRESETS, MLAModel, random_weights

    config = PRESETS["tiny"]
    outputs = []
    for gemm in ("cublas", "splitk"):
        model = MLAModel(config, random_weights(config, seed=0, dtype=torch.float32, device="cpu"), gemm=gemm)
        tokens, positions = torch.tensor([1, 2, 3]), torch.tensor([0, 1, 2])
        outputs.append(model.forward(tokens, positions, write_rows=lambda layer, rows: None,
                                     attention=lambda q, layer: q[..., :config.kv_lora]))
    assert torch.equal(outputs[0], outputs[1])
    with pytest.raises(ValueError, match="gemm: expected one of"):
        MLAModel(config, random_weights(config, seed=0, dtype=torch.float32, device="cpu"), gemm="cutlass")


@pytest.mark.gpu
def test_pdl_refuses_rows_the_bulk_prefetch_cannot_take():
    if torch.cuda.get_device_capability()[0] < 9:
        pytest.skip("programmatic dependent launch needs compute capability 9.0+")
    x, w = padded_operands(4, 64, 100, seed=2)  # K = 100: a row's length is not a multiple of 16 bytes
    with pytest.raises(ValueError, match="pdl=True needs w 16-byte aligned"):
        splitk_matmul(x, w, SplitKConfig(BLOCK_N=64, BLOCK_K=64, splits=2), pdl=True)


@pytest.mark.gpu
@pytest.mark.parametrize("pdl", [False, True])
@pytest.mark.parametrize("M", [1, 16, 64])
def test_k2_shapes_match_cublas_in_graph_replay(M, pdl):
    """The k2-tp8 weight GEMMs in bf16, replayed from a CUDA graph twice, against cuBLAS (with
    programmatic dependent launch too, where the GPU has it)."""
    if pdl and torch.cuda.get_device_capability()[0] < 9:
        pytest.skip("programmatic dependent launch needs compute capability 9.0+")
    from harness.decode.model import PRESETS, weight_gemms

    for name, (N, K) in weight_gemms(PRESETS["k2-tp8"]).items():
        x, w = padded_operands(M, N, K, seed=N + M)
        splitk_linear(x, w, "", pdl)  # eager first: the counters exist before capture
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            y = splitk_linear(x, w, "", pdl)
        outputs = []
        for _ in range(2):
            graph.replay()
            outputs.append(y.clone())
        reference = x.double() @ w.double().T
        cublas_error = ((x @ w.T).double() - reference).abs().max().item()
        error = (outputs[0].double() - reference).abs().max().item()
        assert error <= 2 * cublas_error + 1e-3, (name, error, cublas_error)
        assert torch.equal(outputs[0], outputs[1]), name
