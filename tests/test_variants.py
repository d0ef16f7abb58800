"""Every registered variant against the oracle through the shared case runner.

CPU: the small case matrix under TRITON_INTERPRET=1. GPU (marker ``gpu``): the large matrix.
"""

import pytest
import torch

from harness.cases import Case, check_page_sizes, cpu_cases, gpu_cases, run_case
from verify_kernels import VARIANTS, variants

CPU_CASES = cpu_cases()
GPU_ONLY_CASES = [c for c in gpu_cases() if c not in CPU_CASES]


def _params(cases):
    return [pytest.param(name, case, page, id=f"{name}-{case.name}-ps{page}")
            for name in VARIANTS for page in check_page_sizes(name) for case in cases]


def _assert_passes(result):
    assert result.status != "skip", result.reason
    assert result.passed, f"{result.variant} {result.case} ({result.shape}, page {result.page_size}): {result.reason}"


@pytest.mark.parametrize("variant, case, page_size", _params(CPU_CASES))
def test_variant_matches_oracle(variant, case, page_size):
    device = "cuda" if torch.cuda.is_available() else "cpu"
    _assert_passes(run_case(variant, case, device=device, page_size=page_size))


@pytest.mark.gpu
@pytest.mark.parametrize("variant, case, page_size", _params(GPU_ONLY_CASES))
def test_variant_matches_oracle_large(variant, case, page_size):
    _assert_passes(run_case(variant, case, device="cuda", page_size=page_size))


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
