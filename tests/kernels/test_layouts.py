"""Argument layouts (Hypothesis): every tensor argument handed as a view — permuted storage order,
every other element, a storage offset that may leave 16-byte alignment, a slice of a larger buffer
whose other elements are poison — through every variant this machine runs, the torch ops and the
SGLang adapter. The contract (``contract.kernel_layouts``) accepts q, block_table, prefix_lens,
tree_mask and out in any layout and refuses a kv_cache that is not a contiguous, aligned pool; so a
call either matches the oracle or, exactly when the pool is such a view, raises naming kv_cache.

On the CPU the Triton interpreter runs triton_splitkv and triton_ps1; on the GPU host every variant.
"""

import pytest
import torch

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from verify_kernels import make_problem, reference_attention, variants, verify_attention  # noqa: E402
from verify_kernels.contract import ALIGN_BYTES, check_arguments  # noqa: E402

from conftest import DEVICE, HAS_CUDA  # noqa: E402

TOLERANCE = {torch.bfloat16: 1e-2, torch.float16: 2e-3}
LAYOUTS = settings(max_examples=10 if not HAS_CUDA else 12, deadline=None, derandomize=True,
                   suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
ARGUMENTS = ("q", "kv_cache", "block_table", "prefix_lens", "tree_mask", "out")


def _runs_here(name: str) -> bool:
    module = variants.load_variant(name) if name in variants.VARIANTS else None
    return HAS_CUDA or bool(module and variants.optional(module, "CPU_INTERPRETABLE"))


# (variant, page size): every variant at its first check page size; those this machine cannot run
# are skipped with the reason.
VARIANT_PAGES = [pytest.param(name, variants.load_variant(name).CHECK_PAGE_SIZES[0], id=name,
                              marks=() if _runs_here(name) else pytest.mark.skip(reason="needs a CUDA GPU"))
                 for name in variants.VARIANTS]


@st.composite
def layouts(draw, dims: int):
    """A storage layout for a tensor of ``dims`` dimensions: (storage order, step per dim, offset)."""
    order = draw(st.permutations(range(dims)))
    steps = draw(st.lists(st.sampled_from([1, 1, 2, 3]), min_size=dims, max_size=dims))
    offset = draw(st.sampled_from([0, 0, 1, 3, 8, 40]))
    return tuple(order), tuple(steps), offset


def relayout(tensor: torch.Tensor, layout, poison) -> torch.Tensor:
    """``tensor``'s values in a view with ``layout``: storage in ``order`` (innermost last), every
    ``step``-th element along each dim, ``offset`` elements in; every element the view skips holds
    ``poison``, so a kernel that reads the view as contiguous reads poison."""
    order, steps, offset = layout
    strides, extent = [0] * tensor.dim(), 1
    for dim in reversed(order):
        strides[dim] = extent * steps[dim]
        extent *= max(1, tensor.shape[dim]) * steps[dim]
    buffer = torch.full((offset + extent,), poison, dtype=tensor.dtype, device=tensor.device)
    view = buffer.as_strided(tensor.shape, strides, offset)
    view.copy_(tensor)
    return view


def is_plain(layout) -> bool:
    order, steps, offset = layout
    return order == tuple(sorted(order)) and set(steps) <= {1}


def _poison(tensor):
    return float("nan") if tensor.is_floating_point() else 0x3FFFFFF


def _pool_is_honoured(kv_cache: torch.Tensor) -> bool:
    return kv_cache.is_contiguous() and kv_cache.data_ptr() % ALIGN_BYTES == 0


def _relative_error(out, expected):
    return float((out.double().cpu() - expected.double().cpu()).norm() / expected.double().cpu().norm())


POOL_OFFSETS = st.sampled_from([0, 8, 40, 64 * 576])  # elements: all 16-byte aligned (a slice of a larger pool)


def _draw_arguments(data, problem, out):
    """The problem's arguments (and out), each in a drawn layout. The pool is one the contract honours
    (contiguous, aligned, maybe a slice of a larger pool) four times in five: a pool in any other
    layout is refused before anything runs, which would leave the other arguments untested."""
    tensors = dict(zip(ARGUMENTS, (*problem.arguments(), out)))
    drawn = {}
    for name, tensor in tensors.items():
        if name == "kv_cache" and data.draw(st.integers(0, 4), label="pool honoured") > 0:
            layout = (tuple(range(3)), (1, 1, 1), data.draw(POOL_OFFSETS, label="pool offset"))
        else:
            layout = data.draw(layouts(tensor.dim()), label=f"{name} layout")
        drawn[name] = relayout(tensor, layout, _poison(tensor))
    return drawn


@pytest.mark.parametrize("variant, page_size", VARIANT_PAGES)
@LAYOUTS
@given(data=st.data(), prefixes=st.lists(st.integers(0, 70), min_size=1, max_size=3),
       tree_nodes=st.integers(1, 33), heads=st.integers(1, 3), dtype=st.sampled_from([torch.bfloat16, torch.float16]),
       seed=st.integers(0, 2**16))
def test_any_layout_matches_the_oracle_or_names_kv_cache(variant, page_size, data, prefixes, tree_nodes, heads,
                                                          dtype, seed):
    problem = make_problem(prefixes, tree_nodes, heads, page_size=page_size, dtype=dtype, seed=seed, device=DEVICE)
    poisoned_out = torch.full((len(prefixes), tree_nodes, heads, 512), float("nan"), dtype=dtype, device=DEVICE)
    drawn = _draw_arguments(data, problem, poisoned_out)
    out = drawn.pop("out")
    if not _pool_is_honoured(drawn["kv_cache"]):
        with pytest.raises(ValueError, match="^kv_cache: expected a contiguous pool"):
            verify_attention(**drawn, **problem.kwargs(), variant=variant, out=out)
        return
    returned = verify_attention(**drawn, **problem.kwargs(), variant=variant, out=out)
    assert returned is out, "verify_attention must return the out it was given"
    expected = reference_attention(*problem.arguments(), **problem.kwargs())
    assert torch.isfinite(out).all(), (variant, problem.shape_summary)
    assert _relative_error(out, expected) < TOLERANCE[dtype], (variant, problem.shape_summary,
                                                               {k: v.stride() for k, v in drawn.items()})
    # The views were read, never written: the inputs still hold their values.
    for name, original in zip(ARGUMENTS, problem.arguments()):
        assert torch.equal(drawn[name].nan_to_num(), original.nan_to_num()), name


@LAYOUTS
@given(data=st.data(), prefixes=st.lists(st.integers(0, 50), min_size=1, max_size=3), tree_nodes=st.integers(1, 20))
def test_the_oracle_reads_any_layout_it_accepts(data, prefixes, tree_nodes):
    problem = make_problem(prefixes, tree_nodes, 2, page_size=16, seed=len(prefixes), device="cpu")
    drawn = _draw_arguments(data, problem, torch.empty(len(prefixes), tree_nodes, 2, 512, dtype=torch.bfloat16))
    drawn.pop("out")
    if not _pool_is_honoured(drawn["kv_cache"]):
        with pytest.raises(ValueError, match="^kv_cache:"):
            reference_attention(**drawn, **problem.kwargs())
        return
    assert torch.equal(reference_attention(**drawn, **problem.kwargs()),
                       reference_attention(*problem.arguments(), **problem.kwargs()))


def test_the_reported_case_a_strided_prefix_lens():
    """The defect this file exists for: ``lens[::2]`` was read as if contiguous (relative error ~3)."""
    variant = "triton_splitkv"
    problem = make_problem([100, 7, 50], 9, 2, page_size=16, seed=0, device=DEVICE)
    q, kv, table, lens, mask = problem.arguments()
    interleaved = torch.full((2 * lens.numel(),), 12345, dtype=torch.int32, device=lens.device)
    interleaved[::2] = lens
    out = verify_attention(q, kv, table, interleaved[::2], mask, **problem.kwargs(), variant=variant)
    expected = reference_attention(*problem.arguments(), **problem.kwargs())
    assert _relative_error(out, expected) < TOLERANCE[torch.bfloat16]


@pytest.mark.parametrize("layout, honoured", [
    pytest.param(((0, 1, 2), (1, 1, 1), 0), True, id="contiguous"),
    pytest.param(((0, 1, 2), (1, 1, 1), 8), True, id="offset-16-bytes"),
    pytest.param(((0, 1, 2), (1, 1, 1), 3), False, id="offset-6-bytes"),
    pytest.param(((0, 1, 2), (1, 1, 2), 0), False, id="every-other-column"),
    pytest.param(((1, 0, 2), (1, 1, 1), 0), False, id="rows-before-pages"),
])
def test_the_pool_is_refused_unless_contiguous_and_aligned(layout, honoured):
    problem = make_problem([30], 4, 2, page_size=16, seed=3, device="cpu")
    q, kv, table, lens, mask = problem.arguments()
    pool = relayout(kv, layout, float("nan"))
    if honoured:
        check_arguments(q, pool, table, lens, mask, **problem.kwargs())
    else:
        with pytest.raises(ValueError, match="^kv_cache: expected a contiguous pool starting on a 16-byte boundary"):
            check_arguments(q, pool, table, lens, mask, **problem.kwargs())


def test_an_overlapping_out_is_refused():
    problem = make_problem([30], 4, 2, page_size=16, seed=3, device="cpu")
    out = torch.empty(1, 4, 1, 512, dtype=torch.bfloat16).expand(1, 4, 2, 512)
    with pytest.raises(ValueError, match="^out: expected a writable buffer whose elements do not overlap"):
        verify_attention(*problem.arguments(), **problem.kwargs(), variant="auto", out=out)


@pytest.mark.skipif(not _runs_here("triton_splitkv"), reason="needs Triton's interpreter or a GPU")
@LAYOUTS
@given(data=st.data(), prefixes=st.lists(st.integers(0, 40), min_size=1, max_size=2), tree_nodes=st.integers(1, 12))
def test_the_torch_ops_take_any_layout(data, prefixes, tree_nodes):
    import verify_kernels.ops  # noqa: F401  (registers the ops)

    problem = make_problem(prefixes, tree_nodes, 2, page_size=16, seed=tree_nodes, device=DEVICE)
    poisoned = torch.full((len(prefixes), tree_nodes, 2, 512), float("nan"), dtype=torch.bfloat16, device=DEVICE)
    drawn = _draw_arguments(data, problem, poisoned)
    out = drawn.pop("out")
    args = [drawn[name] for name in ARGUMENTS[:5]]
    expected = reference_attention(*problem.arguments(), **problem.kwargs())
    if not _pool_is_honoured(drawn["kv_cache"]):
        with pytest.raises(ValueError, match="kv_cache: expected a contiguous pool"):
            torch.ops.verify_kernels.verify_attention(*args, problem.sm_scale, 512, "triton_splitkv")
        return
    got = torch.ops.verify_kernels.verify_attention(*args, problem.sm_scale, 512, "triton_splitkv")
    assert _relative_error(got, expected) < TOLERANCE[torch.bfloat16]
    torch.ops.verify_kernels.verify_attention_out(*args, out, problem.sm_scale, 512, "triton_splitkv")
    assert _relative_error(out, expected) < TOLERANCE[torch.bfloat16]


@LAYOUTS
@given(data=st.data(), seed=st.integers(0, 2**10))
def test_the_sglang_adapter_takes_any_layout(data, seed):
    """SGLang's extend arguments as views (strided index tensors, a q_extend slice, a flat mask that
    is every other element of a larger one): the converted problem equals the one from contiguous
    arguments; a pool that is not contiguous is refused naming k_buffer."""
    from verify_kernels.adapters.sglang import from_extend_attention

    from test_adapter_sglang import _sglang_arguments

    problem = make_problem([21, 0, 40], 6, 2, page_size=1, device="cpu", seed=seed)
    arguments = _sglang_arguments(problem)
    def poison(tensor):
        return float("nan") if tensor.is_floating_point() else (True if tensor.dtype == torch.bool else -7)

    drawn = {name: relayout(tensor, data.draw(layouts(tensor.dim()), label=name), poison(tensor))
             for name, tensor in arguments.items()}
    if not _pool_is_honoured(drawn["k_buffer"]):
        with pytest.raises(ValueError, match="^k_buffer: expected a contiguous pool"):
            from_extend_attention(**drawn, sm_scale=problem.sm_scale)
        return
    converted = from_extend_attention(**drawn, sm_scale=problem.sm_scale)
    expected = reference_attention(*problem.arguments(), **problem.kwargs())
    assert torch.equal(reference_attention(*converted.arguments(), **converted.kwargs()), expected)
