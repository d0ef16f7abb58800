"""Every registered variant against the oracle through the shared case runner.

CPU: the small case matrix under TRITON_INTERPRET=1. GPU (marker ``gpu``): the large matrix.
"""

import pytest
import torch

from conftest import capture_graph
from harness.bench.cases import Case, check_matrix, check_page_sizes, cpu_cases, gpu_cases, run_case
from verify_kernels import VARIANTS, variants

CPU_CASES = cpu_cases()
GPU_ONLY_CASES = [c for c in gpu_cases() if c not in CPU_CASES]


def _params(cases):
    """Every variant x (page size, config) x case; variants with no CPU path carry the gpu marker."""
    params = []
    for name in VARIANTS:
        marks = [] if variants.optional(variants.load_variant(name), "CPU_INTERPRETABLE") else [pytest.mark.gpu]
        for page, config in check_matrix(name):
            label = "-".join(f"{k}{v}" for k, v in config.items()) or "default"
            params += [pytest.param(name, case, page, config, id=f"{name}-{case.name}-ps{page}-{label}", marks=marks)
                       for case in cases]
    return params


def _assert_passes(result):
    assert result.status != "skip", result.reason
    assert result.passed, f"{result.variant} {result.case} ({result.shape}, page {result.page_size}): {result.reason}"


@pytest.mark.parametrize("variant, case, page_size, config", _params(CPU_CASES))
def test_variant_matches_oracle(variant, case, page_size, config):
    device = "cuda" if torch.cuda.is_available() else "cpu"
    _assert_passes(run_case(variant, case, device=device, page_size=page_size, config=config or None))


@pytest.mark.gpu
@pytest.mark.parametrize("variant, case, page_size, config", _params(GPU_ONLY_CASES))
def test_variant_matches_oracle_large(variant, case, page_size, config):
    _assert_passes(run_case(variant, case, device="cuda", page_size=page_size, config=config or None))


def test_runner_catches_a_wrong_answer(monkeypatch):
    """The runner can fail: a variant that writes a plausible but wrong answer is caught."""
    module = variants.load_variant("triton_ps1")
    real_run = module.run

    def off_by_a_bit(*args, out, **kwargs):
        real_run(*args, out=out, **kwargs)
        out.mul_(1.05)

    monkeypatch.setattr(module, "run", off_by_a_bit)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    result = run_case("triton_ps1", Case("wrong", (20,), 5, 1), device=device, page_size=1)
    assert result.status == "fail" and "relative error" in result.reason


def test_runner_catches_unwritten_output(monkeypatch):
    module = variants.load_variant("triton_ps1")
    monkeypatch.setattr(module, "run", lambda *args, out, **kwargs: out[:, 1:].zero_())
    device = "cuda" if torch.cuda.is_available() else "cpu"
    result = run_case("triton_ps1", Case("unwritten", (20,), 5, 1), device=device, page_size=1)
    assert result.status == "fail" and "NaN" in result.reason


@pytest.mark.gpu
def test_variants_are_deterministic_on_gpu():
    """A moving error is a race: two runs on the same inputs must agree bit for bit."""
    from verify_kernels import make_problem, verify_attention

    for name in VARIANTS:
        page = check_page_sizes(name)[-1]
        problem = make_problem([4097], 64, 8, page_size=page, device="cuda", seed=4)
        first = verify_attention(*problem.arguments(), **problem.kwargs(), variant=name)
        second = verify_attention(*problem.arguments(), **problem.kwargs(), variant=name)
        assert torch.equal(first, second), name


@pytest.mark.gpu
@pytest.mark.parametrize("variant", list(VARIANTS))
def test_cuda_graph_replay_with_new_inputs(variant):
    """Captured once, replayed on new q, KV content, prefix lengths and tree: still the oracle's answer."""
    from verify_kernels import make_problem, reference_attention, verify_attention

    page = check_page_sizes(variant)[-1]
    problems = [make_problem([3000, 700], 48, 8, page_size=page, device="cuda", seed=1),
                make_problem([2900, 1500], 48, 8, page_size=page, device="cuda", seed=2, tree="binary")]
    # Static buffers large enough for both problems; each replay copies one problem in.
    num_pages = max(p.kv_cache.shape[0] for p in problems)
    max_pages = max(p.block_table.shape[1] for p in problems)
    q = torch.empty_like(problems[0].q)
    kv_cache = torch.full((num_pages, page, 576), float("nan"), dtype=q.dtype, device="cuda")
    block_table = torch.zeros(2, max_pages, dtype=torch.int32, device="cuda")
    prefix_lens = problems[0].prefix_lens.clone()
    tree_mask = problems[0].tree_mask.clone()
    out = torch.full((*q.shape[:3], 512), float("nan"), dtype=q.dtype, device="cuda")

    def load(problem):
        kv_cache.fill_(float("nan"))
        kv_cache[: problem.kv_cache.shape[0]].copy_(problem.kv_cache)
        block_table.zero_()
        block_table[:, : problem.block_table.shape[1]].copy_(problem.block_table)
        for static, new in zip((q, prefix_lens, tree_mask), (problem.q, problem.prefix_lens, problem.tree_mask)):
            static.copy_(new)

    def call():
        verify_attention(q, kv_cache, block_table, prefix_lens, tree_mask, **problems[0].kwargs(),
                         variant=variant, out=out, validate=False)

    load(problems[0])
    graph = capture_graph(call)

    for problem in reversed(problems):
        load(problem)
        out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        reference = reference_attention(q, kv_cache, block_table, prefix_lens, tree_mask, **problem.kwargs())
        assert not torch.isnan(out).any(), variant
        error = float((out.double() - reference.double()).norm() / reference.double().norm())
        assert error < 1e-2, f"{variant} graph replay: relative error {error:.3g}"
