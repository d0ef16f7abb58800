"""Every contract error: the argument is named, with what was expected and what was given."""

import dataclasses

import pytest
import torch

from verify_kernels import UnsupportedProblemError, make_problem, reference_attention, verify_attention
from verify_kernels import contract

from conftest import DEVICE


@pytest.fixture(scope="module")
def problem():
    return make_problem([5, 70], 9, 2, page_size=16, seed=1, device=DEVICE)


def _call(problem, **changes):
    args = dict(zip(("q", "kv_cache", "block_table", "prefix_lens", "tree_mask"), problem.arguments()))
    kwargs = {**problem.kwargs(), "variant": "triton_ps1"}
    for key, value in changes.items():
        (args if key in args else kwargs)[key] = value
    q, kv, table, lens, mask = (args[k] for k in ("q", "kv_cache", "block_table", "prefix_lens", "tree_mask"))
    return verify_attention(q, kv, table, lens, mask, **kwargs)


SHAPE_AND_TYPE_ERRORS = [
    pytest.param(dict(q="not a tensor"), TypeError, r"q: expected a torch.Tensor, got str", id="q_type"),
    pytest.param(dict(q=lambda p: p.q.float()), TypeError,
                 r"q: expected dtype torch.bfloat16 or torch.float16, got torch.float32", id="q_dtype"),
    pytest.param(dict(q=lambda p: p.q[0]), ValueError, r"q: expected 4 dimensions .* got shape \(9, 2, 576\)",
                 id="q_dims"),
    pytest.param(dict(q=lambda p: p.q[:0]), ValueError, r"q: expected at least one request", id="q_empty_batch"),
    pytest.param(dict(q=lambda p: p.q.half()), TypeError,
                 r"kv_cache: expected dtype torch.float16, got torch.bfloat16", id="kv_dtype_mismatch"),
    pytest.param(dict(kv_cache=lambda p: p.kv_cache[..., :512].contiguous()), ValueError,
                 r"kv_cache: expected last dimension Dqk = 576 \(as q\), got 512", id="kv_dim"),
    pytest.param(dict(kv_cache=lambda p: p.kv_cache.to("meta")), ValueError,
                 r"kv_cache: expected device \S+ \(the device of q\), got meta", id="kv_device"),
    pytest.param(dict(kv_cache=lambda p: p.kv_cache[0]), ValueError, r"kv_cache: expected 3 dimensions", id="kv_dims"),
    pytest.param(dict(block_table=lambda p: p.block_table.long()), TypeError,
                 r"block_table: expected dtype torch.int32, got torch.int64", id="table_dtype"),
    pytest.param(dict(block_table=lambda p: p.block_table[:1]), ValueError, r"block_table: expected 2 rows",
                 id="table_rows"),
    pytest.param(dict(prefix_lens=lambda p: p.prefix_lens[:1]), ValueError,
                 r"prefix_lens: expected shape \(2,\) \[B\], got \(1,\)", id="lens_shape"),
    pytest.param(dict(prefix_lens=lambda p: p.prefix_lens.long()), TypeError,
                 r"prefix_lens: expected dtype torch.int32", id="lens_dtype"),
    pytest.param(dict(tree_mask=lambda p: p.tree_mask[:, :8]), ValueError, r"tree_mask: expected shape \(2, 9, 1\)",
                 id="mask_shape"),
    pytest.param(dict(tree_mask=lambda p: p.tree_mask.to("meta")), ValueError,
                 r"tree_mask: expected device \S+ \(the device of q\), got meta", id="mask_device"),
    pytest.param(dict(sm_scale=-1.0), ValueError, r"sm_scale: expected a positive finite float, got -1.0",
                 id="scale_negative"),
    pytest.param(dict(sm_scale=float("nan")), ValueError, r"sm_scale: expected a positive finite float",
                 id="scale_nan"),
    pytest.param(dict(sm_scale="0.1"), TypeError, r"sm_scale: expected a float, got str", id="scale_type"),
    pytest.param(dict(v_dim=600), ValueError, r"v_dim: expected 1 <= v_dim <= Dqk = 576, got 600", id="v_dim_range"),
    pytest.param(dict(v_dim=512.0), TypeError, r"v_dim: expected an int, got float", id="v_dim_type"),
    pytest.param(dict(out=lambda p: torch.empty(2, 9, 2, 576, dtype=torch.bfloat16, device=DEVICE)), ValueError,
                 r"out: expected shape \(2, 9, 2, 512\)", id="out_shape"),
    pytest.param(dict(out=lambda p: torch.empty(2, 9, 2, 512, dtype=torch.float32, device=DEVICE)), TypeError,
                 r"out: expected dtype torch.bfloat16, got torch.float32", id="out_dtype"),
]


@pytest.mark.parametrize("changes, error, message", SHAPE_AND_TYPE_ERRORS)
def test_shape_dtype_device_errors_name_the_argument(problem, changes, error, message):
    changes = {k: (v(problem) if callable(v) else v) for k, v in changes.items()}
    with pytest.raises(error, match=message):
        _call(problem, **changes)
    # The same metadata checks run with validate=False (they need no sync).
    with pytest.raises(error, match=message):
        _call(problem, validate=False, **changes)


def _tiny_call(tree_nodes, heads):
    q = torch.zeros(1, tree_nodes, heads, 576, dtype=torch.bfloat16)
    words = (tree_nodes + 31) // 32
    return verify_attention(q, torch.zeros(1, 1, 576, dtype=torch.bfloat16), torch.zeros(1, 1, dtype=torch.int32),
                            torch.zeros(1, dtype=torch.int32), torch.zeros(1, tree_nodes, words, dtype=torch.int32),
                            sm_scale=0.1)


def test_tree_and_head_limits():
    with pytest.raises(ValueError, match=r"q: expected 1 <= T <= 1024 tree nodes, got T = 1025"):
        _tiny_call(1025, 1)
    with pytest.raises(ValueError, match=r"q: expected 1 <= H <= 128 heads, got H = 129"):
        _tiny_call(1, 129)


def _with_value(tensor, index, value):
    tensor = tensor.clone()
    tensor[index] = value
    return tensor


VALUE_ERRORS = [
    pytest.param(lambda p: dict(block_table=_with_value(p.block_table, (1, 2), p.kv_cache.shape[0])),
                 r"block_table: request 1 logical page 2 maps to page \d+, outside the pool", id="page_past_pool"),
    pytest.param(lambda p: dict(block_table=_with_value(p.block_table, (0, 0), -3)),
                 r"block_table: request 0 logical page 0 maps to page -3", id="negative_page"),
    pytest.param(lambda p: dict(prefix_lens=_with_value(p.prefix_lens, 1, -1)),
                 r"prefix_lens: expected non-negative lengths, got -1 for request 1", id="negative_prefix"),
    pytest.param(lambda p: dict(prefix_lens=_with_value(p.prefix_lens, 0, 1000)),
                 r"block_table: request 0 needs prefix_len \+ T = 1009 positions, but its \d+ pages x page_size 16 "
                 r"hold \d+",
                 id="capacity"),
    pytest.param(lambda p: dict(tree_mask=_with_value(p.tree_mask, (1, 4, 0), 0)),
                 r"tree_mask: malformed ancestor bitmask: tree 1 row 4: its own bit 4 is not set", id="mask_own_bit"),
    pytest.param(lambda p: dict(tree_mask=_with_value(p.tree_mask, (0, 0, 0), 3)),
                 r"tree_mask: malformed .*root's row", id="mask_root"),
]


@pytest.mark.parametrize("changes, message", VALUE_ERRORS)
def test_value_errors_with_validate(problem, changes, message):
    args = dict(zip(("q", "kv_cache", "block_table", "prefix_lens", "tree_mask"), problem.arguments()))
    args.update(changes(problem))
    with pytest.raises(ValueError, match=message):
        verify_attention(**args, **problem.kwargs(), variant="triton_ps1")
    with pytest.raises(ValueError, match=message):
        reference_attention(**args, **problem.kwargs())


def test_validate_false_skips_value_checks(problem):
    """With validate=False a malformed mask is the caller's business: no host-sync check runs."""
    ps1 = problem.with_page_size(1)
    mask = _with_value(ps1.tree_mask, (0, 3, 0), ps1.tree_mask[0, 3, 0] | (1 << 8))
    with pytest.raises(ValueError, match="tree_mask: malformed"):
        _call(ps1, tree_mask=mask)
    out = _call(ps1, tree_mask=mask, validate=False)
    assert out.shape == (2, 9, 2, 512)


def test_unknown_variant_lists_the_registered_ones(problem):
    with pytest.raises(ValueError,
                       match=r"variant: unknown variant 'flash'; expected one of \[.*'triton_ps1'.*\] or 'auto'"):
        _call(problem, variant="flash")


def test_explicit_variant_never_falls_back(problem):
    """triton_ps1 runs page_size 1 only: asked for a paged pool it raises, naming the reason."""
    with pytest.raises(UnsupportedProblemError,
                       match=r"variant 'triton_ps1' does not support this problem: page_size must be 1"):
        _call(problem, variant="triton_ps1")


def test_unknown_config_key(problem):
    ps1 = problem.with_page_size(1)
    with pytest.raises(ValueError, match=r"config: unknown keys \['BLOCK_K'\] for variant 'triton_ps1'; expected keys"):
        _call(ps1, config={"BLOCK_K": 32})


def test_problem_shape_rows():
    shape = contract.ProblemShape(1, 64, 8, 576, 512, 64, 10, 3, torch.bfloat16, torch.device("cpu"))
    assert shape.rows == 512
    assert dataclasses.is_dataclass(shape)
