"""Property-based fuzzing of the contract (Hypothesis), bounded to keep CI short.

- Random batches, tree sizes, heads, page sizes, prefixes and tree shapes through the Triton
  variants (the interpreter on the CPU, the GPU on the GPU host) agree with the float64 oracle
  within the dtype's tolerance.
- Random malformed calls raise ValueError or TypeError whose message starts with the argument's
  name: never another exception, never a result.
"""

import pytest
import torch

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from verify_kernels import make_problem, reference_attention, verify_attention  # noqa: E402

from conftest import DEVICE  # noqa: E402

TOLERANCE = {torch.bfloat16: 1e-2, torch.float16: 2e-3}
FUZZ = settings(max_examples=12, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


def _relative_error(out, expected):
    return float((out.double() - expected.double()).norm() / expected.double().norm().clamp_min(1e-30))


@FUZZ
@given(variant_page=st.sampled_from([("triton_splitkv", 16), ("triton_splitkv", 32), ("triton_splitkv", 64),
                                     ("triton_ps1", 1)]),
       prefixes=st.lists(st.integers(0, 150), min_size=1, max_size=3),
       tree_nodes=st.integers(1, 40), heads=st.integers(1, 4),
       tree=st.sampled_from(["random", "chain", "star", "binary"]),
       dtype=st.sampled_from([torch.bfloat16, torch.float16]), seed=st.integers(0, 2**16))
def test_random_problems_agree_with_the_oracle(variant_page, prefixes, tree_nodes, heads, tree, dtype, seed):
    variant, page_size = variant_page
    problem = make_problem(prefixes, tree_nodes, heads, page_size=page_size, tree=tree, dtype=dtype, seed=seed,
                           device=DEVICE)
    out = verify_attention(*problem.arguments(), **problem.kwargs(), variant=variant)
    expected = reference_attention(*problem.arguments(), **problem.kwargs())
    assert not torch.isnan(out).any()
    assert _relative_error(out, expected) < TOLERANCE[dtype], (variant, problem.shape_summary)


def _break(problem, how: str, rng: int):
    """The problem's arguments with one of them made wrong; returns (args, kwargs, the argument's name)."""
    q, kv, table, lens, mask = problem.arguments()
    kwargs = problem.kwargs()
    if how == "q_dtype":
        q = q.float()
    elif how == "q_dims":
        q = q[0]
    elif how == "q_head_dim":
        q = q[..., : 575 - rng % 64]
    elif how == "kv_dtype":
        kv = kv.to(torch.float16 if kv.dtype == torch.bfloat16 else torch.bfloat16)
    elif how == "kv_head_dim":
        kv = kv[..., :-1 - rng % 8]
    elif how == "table_dtype":
        table = table.long()
    elif how == "table_batch":
        table = table[:0] if table.shape[0] > 1 else torch.cat([table, table])
    elif how == "lens_dtype":
        lens = lens.float()
    elif how == "lens_shape":
        lens = torch.cat([lens, lens])
    elif how == "mask_words":
        mask = torch.cat([mask, mask], dim=-1)
    elif how == "mask_dtype":
        mask = mask.long()
    elif how == "sm_scale_value":
        kwargs["sm_scale"] = -abs(kwargs["sm_scale"]) * (1 + rng % 3)
    elif how == "sm_scale_type":
        kwargs["sm_scale"] = str(kwargs["sm_scale"])
    elif how == "v_dim":
        kwargs["v_dim"] = 577 + rng % 10
    names = {"q": ("q",), "kv": ("kv_cache",), "table": ("block_table",), "lens": ("prefix_lens",),
             "mask": ("tree_mask",), "sm": ("sm_scale",), "v": ("v_dim",)}[how.split("_")[0]]
    if how in ("q_head_dim", "q_dtype", "kv_dtype"):  # kv_cache must match q: either may be named
        names = ("q", "kv_cache")
    return (q, kv, table, lens, mask), kwargs, names


BREAKS = ["q_dtype", "q_dims", "q_head_dim", "kv_dtype", "kv_head_dim", "table_dtype", "table_batch", "lens_dtype",
          "lens_shape", "mask_words", "mask_dtype", "sm_scale_value", "sm_scale_type", "v_dim"]


@settings(max_examples=60, deadline=None, derandomize=True)
@given(how=st.sampled_from(BREAKS), prefixes=st.lists(st.integers(0, 90), min_size=1, max_size=3),
       tree_nodes=st.integers(1, 40), heads=st.integers(1, 3), rng=st.integers(0, 1000),
       variant=st.sampled_from(["auto", "triton_splitkv", "reference"]))
def test_malformed_calls_raise_naming_the_argument(how, prefixes, tree_nodes, heads, rng, variant):
    problem = make_problem(prefixes, tree_nodes, heads, page_size=16, seed=rng)
    args, kwargs, names = _break(problem, how, rng)
    call = reference_attention if variant == "reference" else (
        lambda *a, **k: verify_attention(*a, **k, variant=variant))
    with pytest.raises((ValueError, TypeError)) as raised:
        call(*args, **kwargs)
    assert str(raised.value).startswith(tuple(f"{name}:" for name in names)), (how, str(raised.value))
