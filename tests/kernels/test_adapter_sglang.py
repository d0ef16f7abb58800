"""The SGLang adapter: SGLang's extend-attention verify arguments -> the contract's, checked
against the oracle and, where sglang is installed (CI: ``pip install --no-deps sglang``), against
SGLang's own Triton extend kernel on the same inputs (the interpreter on the CPU). Only that one
kernel file of SGLang is loaded, with stand-ins for the two modules it imports."""

import importlib.util
import sys
import types
from pathlib import Path

import pytest
import torch

from conftest import DEVICE
from verify_kernels import make_problem, reference_attention, trees, verify_attention
from verify_kernels.adapters.sglang import from_extend_attention


def _sglang_arguments(problem):
    """The page_size=1 ``problem`` as SGLang's extend call sees it (prefix slots, tree slots, a flat
    T x (prefix + T) bool mask per request)."""
    batch, nodes, heads, dim = problem.q.shape
    lens = problem.prefix_lens.tolist()
    table = problem.block_table.to(torch.int64)
    bits = trees.unpack_bits(problem.tree_mask, nodes)
    masks = [torch.cat([torch.ones(nodes, p, dtype=torch.bool, device=bits.device), bits[b]], 1).flatten()
             for b, p in enumerate(lens)]
    zero = torch.zeros(1, dtype=torch.int64, device=table.device)
    return dict(
        q_extend=problem.q.reshape(batch * nodes, heads, dim),
        k_buffer=problem.kv_cache.view(-1, 1, dim),
        qo_indptr=torch.arange(batch + 1, device=table.device) * nodes,
        kv_indptr=torch.cat([zero, torch.tensor(lens, device=table.device).cumsum(0)]),
        kv_indices=torch.cat([table[b, :p] for b, p in enumerate(lens)]),
        out_cache_loc=torch.cat([table[b, p:p + nodes] for b, p in enumerate(lens)]),
        custom_mask=torch.cat(masks),
        mask_indptr=torch.cat([zero, torch.tensor([m.numel() for m in masks], device=table.device).cumsum(0)]),
    )


def _problem(seed=0, dtype=torch.bfloat16):
    return make_problem([21, 0, 40], 6, 2, page_size=1, device=DEVICE, seed=seed, dtype=dtype)


def test_round_trip_gives_the_same_problem():
    problem = _problem()
    converted = from_extend_attention(**_sglang_arguments(problem), sm_scale=problem.sm_scale)
    assert torch.equal(converted.tree_mask, problem.tree_mask)
    assert torch.equal(converted.prefix_lens, problem.prefix_lens)
    expected = reference_attention(*problem.arguments(), **problem.kwargs())
    got = reference_attention(*converted.arguments(), **converted.kwargs())
    assert torch.equal(got, expected)


def test_paged_route_runs_a_paged_variant():
    problem = _problem(1)
    paged = from_extend_attention(**_sglang_arguments(problem), sm_scale=problem.sm_scale).with_page_size(16)
    out = verify_attention(*paged.arguments(), **paged.kwargs(), variant="triton_splitkv")
    expected = reference_attention(*problem.arguments(), **problem.kwargs())
    assert float((out.double().cpu() - expected.double().cpu()).norm() / expected.double().cpu().norm()) < 1e-2


@pytest.mark.parametrize("breakage, message", [
    ("not_ancestors", "not an ancestor set"),
    ("hidden_prefix", "does not see its whole prefix"),
    ("ragged", "same number of tree tokens"),
    ("short_mask", "custom_mask: request 2 needs entries"),
])
def test_malformed_calls_fail_clearly(breakage, message):
    problem = _problem(2)
    arguments = _sglang_arguments(problem)
    width = 21 + 6  # request 0: prefix 21, 6 tree tokens
    if breakage == "not_ancestors":  # token 3 of request 0 also sees token 4 (a later node)
        arguments["custom_mask"][3 * width + 21 + 4] = True
    elif breakage == "hidden_prefix":
        arguments["custom_mask"][2 * width + 5] = False
    elif breakage == "ragged":
        arguments["qo_indptr"] = torch.tensor([0, 5, 12, 18], device=arguments["qo_indptr"].device)
    else:
        arguments["custom_mask"] = arguments["custom_mask"][:-1]
    with pytest.raises(ValueError, match=message):
        from_extend_attention(**arguments)


@pytest.fixture
def sglang_extend_attention(monkeypatch):
    """SGLang's extend_attention_fwd, from its file alone (skip where sglang is not installed)."""
    spec = importlib.util.find_spec("sglang")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("sglang is not installed (pip install --no-deps sglang==0.5.10.post1)")
    path = Path(spec.submodule_search_locations[0]) / "srt/layers/attention/triton_ops/extend_attention.py"
    utils = types.ModuleType("sglang.srt.utils")
    utils.is_cuda = torch.cuda.is_available
    utils.is_hip = lambda: False
    prefill = types.ModuleType("sglang.srt.layers.attention.triton_ops.prefill_attention")
    prefill.context_attention_fwd = None  # imported by the file, not used by extend_attention_fwd
    for name, module in {"sglang.srt.utils": utils, prefill.__name__: prefill}.items():
        monkeypatch.setitem(sys.modules, name, module)
    for parent in ("sglang", "sglang.srt", "sglang.srt.layers", "sglang.srt.layers.attention",
                   "sglang.srt.layers.attention.triton_ops"):
        monkeypatch.setitem(sys.modules, parent, sys.modules.get(parent) or types.ModuleType(parent))
    loader = importlib.util.spec_from_file_location("sglang_extend_attention", path)
    module = importlib.util.module_from_spec(loader)
    loader.loader.exec_module(module)
    return module.extend_attention_fwd


# bf16 through SGLang's kernel is off by ~1e9 under Triton 3.6's interpreter (fp16 and fp32 are
# right there), so the CPU compares in fp16; a GPU runs both.
DTYPES = [torch.float16] if DEVICE == "cpu" else [torch.float16, torch.bfloat16]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_agrees_with_sglangs_extend_kernel(sglang_extend_attention, dtype):
    problem = _problem(3, dtype)
    arguments = _sglang_arguments(problem)
    k_buffer = arguments["k_buffer"]
    v_buffer = k_buffer[..., :512]
    slots = arguments["out_cache_loc"]
    o_extend = torch.empty(*arguments["q_extend"].shape[:2], 512, dtype=problem.q.dtype, device=DEVICE)
    sglang_extend_attention(arguments["q_extend"], k_buffer[slots].contiguous(), v_buffer[slots].contiguous(),
                            o_extend, k_buffer, v_buffer, arguments["qo_indptr"], arguments["kv_indptr"],
                            arguments["kv_indices"], arguments["custom_mask"], False, arguments["mask_indptr"],
                            problem.q.shape[1], 1.0, 1.0, sm_scale=problem.sm_scale)
    theirs = o_extend.view(problem.q.shape[0], problem.q.shape[1], problem.q.shape[2], 512)
    converted = from_extend_attention(**arguments, sm_scale=problem.sm_scale)
    ours = verify_attention(*converted.arguments(), **converted.kwargs(), variant="triton_ps1")
    expected = reference_attention(*problem.arguments(), **problem.kwargs()).double().cpu()

    def error(out):
        return float((out.double().cpu() - expected).norm() / expected.norm())

    tolerance = 2e-3 if dtype == torch.float16 else 1e-2
    assert error(theirs) < tolerance and error(ours) < tolerance
    assert float((theirs.double() - ours.double()).abs().max()) < 10 * tolerance
