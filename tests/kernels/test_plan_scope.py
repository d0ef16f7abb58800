"""One plan per decode step (verify_kernels/plan_scope.py, ``plan_once``): calls of a block with the same
lengths share a plan; a change of the lengths, another tensor, or a graph captured inside a block entered
outside it plan again, so no call ever reads a plan made for other lengths. Each result is checked against
the oracle at the lengths it ran with."""

import pytest
import torch

from verify_kernels import make_problem, plan_once, reference_attention, variants, verify_attention

from conftest import DEVICE, HAS_CUDA, capture_graph

VARIANT = "triton_splitkv" if not HAS_CUDA else "gluon_wgmma_ws"  # a planned variant the device runs
CONFIG = {"BLOCK_N": 16} if not HAS_CUDA else None


def _problem(lengths=(300, 17, 90), nodes=12, heads=2):
    problem = make_problem(list(lengths), nodes, heads, page_size=16 if not HAS_CUDA else 64, device=DEVICE, seed=5)
    q, kv, table, lens, mask = problem.arguments()
    kv.copy_(torch.where(kv.isnan(), torch.randn_like(kv), kv))  # new lengths move into unused slots
    return problem, (q, kv, table, lens, mask)


def _error(out, arguments, problem) -> float:
    expected = reference_attention(*arguments, **problem.kwargs())
    return float((out.double() - expected.double()).norm() / expected.double().norm())


def test_calls_of_a_block_with_the_same_lengths_share_one_plan(plan_launches):
    problem, arguments = _problem()
    q = arguments[0]
    other_q = torch.randn_like(q)
    with plan_once():
        first = verify_attention(*arguments, **problem.kwargs(), variant=VARIANT, config=CONFIG)
        second = verify_attention(other_q, *arguments[1:], **problem.kwargs(), variant=VARIANT, config=CONFIG)
    assert len(plan_launches) == 1
    assert _error(first, arguments, problem) < 1e-2
    assert _error(second, (other_q, *arguments[1:]), problem) < 1e-2
    verify_attention(*arguments, **problem.kwargs(), variant=VARIANT, config=CONFIG)
    assert len(plan_launches) == 2, "outside a block every call plans"


def test_new_lengths_or_another_tensor_plan_again(plan_launches):
    problem, arguments = _problem()
    q, kv, table, lens, mask = arguments
    capacity = table.shape[1] * kv.shape[1] - q.shape[1]
    with plan_once():
        verify_attention(*arguments, **problem.kwargs(), variant=VARIANT, config=CONFIG)
        lens.copy_(torch.tensor([capacity, 0, 5], dtype=torch.int32))  # in place: torch sees it
        out = verify_attention(*arguments, **problem.kwargs(), variant=VARIANT, config=CONFIG)
        assert len(plan_launches) == 2 and _error(out, arguments, problem) < 1e-2
        same_values = lens.clone()  # another tensor: its own plan, even with equal values
        verify_attention(q, kv, table, same_values, mask, **problem.kwargs(), variant=VARIANT, config=CONFIG)
        assert len(plan_launches) == 3


@pytest.mark.parametrize("variant", ["gluon_wgmma_ws", "cuda_ws", "cuda_qreg", "triton_splitkv"])
@pytest.mark.gpu
def test_graphs_with_a_block_replay_right_at_new_lengths(variant):
    """A block inside the capture: its calls share the plan the graph makes at each replay. A block entered
    before the capture (and used eagerly first): the graph makes its own plan, never the eager one."""
    problem, arguments = _problem((3000, 17, 900), 24, 4)
    module = variants.load_variant(variant)
    from verify_kernels.contract import check_arguments

    reason = module.unsupported_reason(check_arguments(*arguments, **problem.kwargs()))
    if reason:
        pytest.skip(reason)
    q, kv, table, lens, mask = arguments
    queries = [q, torch.randn_like(q), torch.randn_like(q)]
    outs = [torch.empty(*q.shape[:3], 512, dtype=q.dtype, device="cuda") for _ in queries]

    def layers():
        with plan_once():
            for query, out in zip(queries, outs):
                verify_attention(query, kv, table, lens, mask, **problem.kwargs(), variant=variant, out=out,
                                 validate=False)

    inside = capture_graph(layers)
    with plan_once():
        for query, out in zip(queries, outs):  # eager plans in the block the capture then runs in
            verify_attention(query, kv, table, lens, mask, **problem.kwargs(), variant=variant, out=out)
        outside = capture_graph(lambda: [verify_attention(query, kv, table, lens, mask, **problem.kwargs(),
                                                          variant=variant, out=out, validate=False)
                                         for query, out in zip(queries, outs)])
    capacity = table.shape[1] * kv.shape[1] - q.shape[1]
    for graph in (inside, outside):
        for new in ([capacity, 0, 5], [1, 2, 3], [100, capacity, capacity // 2]):
            lens.copy_(torch.tensor(new, dtype=torch.int32))
            for out in outs:
                out.fill_(float("nan"))
            graph.replay()
            for query, out in zip(queries, outs):
                assert _error(out, (query, kv, table, lens, mask), problem) < 1e-2, (variant, new)
