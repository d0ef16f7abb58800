"""The oracle against an independent implementation, and its invariances."""

import pytest
import torch

from verify_kernels import make_problem, reference_attention


def naive_attention(problem) -> torch.Tensor:
    """Independent of the oracle: walks ``parents`` (not the bitmask) node by node, head by head."""
    batch, nodes, heads, _ = problem.q.shape
    out = torch.zeros(batch, nodes, heads, problem.v_dim, dtype=torch.float64)
    for b in range(batch):
        rows = problem.logical_rows(b).double().cpu()
        prefix_len = int(problem.prefix_lens[b])
        parents = problem.parents[b].tolist()
        for node in range(nodes):
            visible, current = list(range(prefix_len)), node
            ancestors = []
            while current >= 0:
                ancestors.append(prefix_len + current)
                current = parents[current]
            keys = rows[visible + sorted(ancestors)]
            for head in range(heads):
                query = problem.q[b, node, head].double().cpu()
                weights = torch.softmax(keys @ query * problem.sm_scale, dim=0)
                out[b, node, head] = weights @ keys[:, :problem.v_dim]
    return out


@pytest.mark.parametrize("prefix_lens, nodes, heads, tree, page_size", [
    pytest.param([0], 6, 2, "random", 16, id="prefix_0"),
    pytest.param([37, 0, 64], 11, 3, "binary", 16, id="batch_mixed"),
    pytest.param([65], 33, 1, "star", 64, id="two_mask_words"),
    pytest.param([5], 1, 4, "chain", 1, id="single_node_ps1"),
])
def test_oracle_matches_naive_walk(prefix_lens, nodes, heads, tree, page_size):
    problem = make_problem(prefix_lens, nodes, heads, page_size=page_size, tree=tree, seed=11)
    reference = reference_attention(*problem.arguments(), **problem.kwargs()).double()
    torch.testing.assert_close(reference, naive_attention(problem), rtol=1e-6, atol=1e-6)


def test_oracle_is_layout_invariant_and_nan_free():
    problem = make_problem([100, 3], 17, 2, page_size=64, seed=5)
    assert torch.isnan(problem.kv_cache).any(), "unused slots must be NaN-poisoned"
    expected = reference_attention(*problem.arguments(), **problem.kwargs())
    for page_size in (1, 16, 32):
        relaid = problem.with_page_size(page_size, seed=page_size)
        got = reference_attention(*relaid.arguments(), **relaid.kwargs())
        assert not torch.isnan(got).any()
        torch.testing.assert_close(got, expected, rtol=0, atol=0)


def test_oracle_large_logits_stay_finite():
    problem = make_problem([50], 9, 2, page_size=16, q_scale=50.0, seed=2)
    out = reference_attention(*problem.arguments(), **problem.kwargs())
    assert torch.isfinite(out).all()


def test_problem_generator_layout():
    problem = make_problem([10, 130], 5, 1, page_size=16, seed=3)
    assert problem.block_table.dtype == torch.int32 and problem.prefix_lens.tolist() == [10, 130]
    used = problem.block_table[1, : (130 + 5 + 15) // 16]
    assert len(set(used.tolist())) == len(used), "a request's pages are distinct"
    assert used.tolist() != sorted(used.tolist()), "pages are shuffled"
    # Slots past the last position of a request's last page are NaN.
    last_page = problem.block_table[0, 0]
    assert torch.isnan(problem.kv_cache[last_page, 15]).all()
    assert not torch.isnan(problem.kv_cache[last_page, 14]).any()
    assert "B=2" in problem.shape_summary


@pytest.mark.gpu
def test_oracle_gpu_matches_cpu():
    problem = make_problem([300, 7], 40, 4, page_size=32, seed=9)
    cpu = reference_attention(*problem.arguments(), **problem.kwargs())
    gpu_problem = problem.to("cuda")
    gpu = reference_attention(*gpu_problem.arguments(), **gpu_problem.kwargs())
    torch.testing.assert_close(gpu.cpu(), cpu, rtol=1e-5, atol=1e-5)
