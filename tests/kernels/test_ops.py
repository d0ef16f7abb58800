"""verify_attention as torch custom ops: schema and fake implementations (torch.library.opcheck),
torch.compile(fullgraph=True) without a graph break, the out= variant, and answers that match the
oracle. On the CPU the kernel is triton_splitkv under the Triton interpreter at small shapes."""

import pytest
import torch

import verify_kernels.ops  # noqa: F401  (registers torch.ops.verify_kernels.*)
from conftest import DEVICE, capture_graph
from verify_kernels import make_problem, reference_attention

VARIANT = "auto" if DEVICE == "cuda" else "triton_splitkv"


def _problem(seed=0):
    return make_problem([37, 0], 5, 2, page_size=16, device=DEVICE, seed=seed)


def _relative_error(out, reference):
    return float((out.double().cpu() - reference.double().cpu()).norm() / reference.double().cpu().norm())


def test_op_matches_the_oracle():
    problem = _problem()
    out = torch.ops.verify_kernels.verify_attention(*problem.arguments(), problem.sm_scale, 512, VARIANT)
    assert _relative_error(out, reference_attention(*problem.arguments(), **problem.kwargs())) < 1e-2


def test_opcheck_schema_and_fake():
    problem = _problem(1)
    args = (*problem.arguments(), problem.sm_scale, 512, VARIANT)
    torch.library.opcheck(torch.ops.verify_kernels.verify_attention.default, args,
                          test_utils=("test_schema", "test_faketensor"))
    out = torch.full((*problem.q.shape[:3], 512), float("nan"), dtype=problem.q.dtype, device=DEVICE)
    torch.library.opcheck(torch.ops.verify_kernels.verify_attention_out.default,
                          (*problem.arguments(), out, problem.sm_scale, 512, VARIANT),
                          test_utils=("test_schema", "test_faketensor"))


class _Layer(torch.nn.Module):
    """A projection into the op and one out of it: what a decode layer looks like around attention."""

    def __init__(self, dtype):
        super().__init__()
        self.down = torch.nn.Linear(512, 64, dtype=dtype, device=DEVICE)

    def forward(self, q, kv_cache, block_table, prefix_lens, tree_mask, sm_scale: float):
        attended = torch.ops.verify_kernels.verify_attention(q * 1.0, kv_cache, block_table, prefix_lens, tree_mask,
                                                             sm_scale, 512, VARIANT)
        return self.down(attended)


def test_compiles_with_fullgraph_and_matches_eager():
    problem = _problem(2)
    layer = _Layer(problem.q.dtype)
    eager = layer(*problem.arguments(), problem.sm_scale)
    torch._dynamo.reset()
    compiled = torch.compile(layer, fullgraph=True, backend="aot_eager")
    got = compiled(*problem.arguments(), problem.sm_scale)
    assert got.shape == eager.shape
    assert torch.equal(got, eager)


def test_out_variant_writes_in_place_under_compile():
    problem = _problem(3)
    out = torch.full((*problem.q.shape[:3], 512), float("nan"), dtype=problem.q.dtype, device=DEVICE)

    def step(q, kv_cache, block_table, prefix_lens, tree_mask, out):
        torch.ops.verify_kernels.verify_attention_out(q, kv_cache, block_table, prefix_lens, tree_mask, out,
                                                     problem.sm_scale, 512, VARIANT)
        return out.float().sum()

    torch._dynamo.reset()
    total = torch.compile(step, fullgraph=True, backend="aot_eager")(*problem.arguments(), out)
    assert not torch.isnan(out).any() and torch.isfinite(total)
    assert _relative_error(out, reference_attention(*problem.arguments(), **problem.kwargs())) < 1e-2


def test_fake_output_shape_without_running_a_kernel():
    from torch._subclasses.fake_tensor import FakeTensorMode

    problem = _problem(4)
    with FakeTensorMode(allow_non_fake_inputs=True) as mode:
        fake = [mode.from_tensor(t) for t in problem.arguments()]
        out = torch.ops.verify_kernels.verify_attention(*fake, problem.sm_scale, 512, "no_such_variant_runs")
    assert tuple(out.shape) == (2, 5, 2, 512) and out.dtype == problem.q.dtype


def test_bad_arguments_still_raise_through_the_op():
    problem = _problem(5)
    q, *rest = problem.arguments()
    with pytest.raises(ValueError, match="q"):
        torch.ops.verify_kernels.verify_attention(q[..., :500], *rest, problem.sm_scale, 512, VARIANT)


@pytest.mark.gpu
def test_out_variant_in_a_captured_cuda_graph():
    """Captured once through the op, replayed on new inputs: the oracle's answer."""
    problems = [make_problem([3000, 700], 48, 8, page_size=64, device="cuda", seed=s) for s in (6, 7)]
    q, kv_cache, block_table, prefix_lens, tree_mask = (t.clone() for t in problems[0].arguments())
    out = torch.empty(*q.shape[:3], 512, dtype=q.dtype, device="cuda")

    def call():
        torch.ops.verify_kernels.verify_attention_out(q, kv_cache, block_table, prefix_lens, tree_mask, out,
                                                     problems[0].sm_scale, 512, "auto")

    graph = capture_graph(call)
    for problem in problems[::-1]:
        for static, new in zip((q, kv_cache, block_table, prefix_lens, tree_mask), problem.arguments()):
            static.copy_(new)
        out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        assert _relative_error(out, reference_attention(*problem.arguments(), **problem.kwargs())) < 1e-2
