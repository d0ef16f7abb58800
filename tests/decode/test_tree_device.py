"""The device tree builder (harness/decode/tree_device.py) against the host heap builder, and the oracle
drafter's device draft: same trees without ties, the same scores with them, the contract's mask."""

import math

import pytest
import torch

from harness.decode.tree import build_tree
from harness.decode.tree_device import ancestor_mask, build_tree_tensors
from harness.decode.tree_kernel import TreeKernel
from harness.decode.drafters import OracleDrafter
from verify_kernels import trees

from conftest import DEVICE, HAS_CUDA


def _draft(depth, ranks, seed, *, ties=False, cut=False):
    """[D, K] tokens (distinct per row) and sorted log-probabilities; ``ties``: rounded to halves;
    ``cut``: one row's tail at -inf, as the n-gram drafter pads."""
    generator = torch.Generator().manual_seed(seed)
    logprobs = torch.log(torch.rand(depth, ranks, generator=generator, dtype=torch.float64) * 0.98 + 0.01)
    logprobs = logprobs.sort(dim=1, descending=True).values
    if ties:
        logprobs = (logprobs * 2).round() / 2
    if cut and depth:
        row = int(torch.randint(depth, (1,), generator=generator))
        logprobs[row, int(torch.randint(1, ranks + 1, (1,), generator=generator)) - 1:] = -math.inf
    tokens = torch.stack([torch.randperm(100, generator=generator)[:ranks] for _ in range(depth)]) if depth else \
        torch.empty(0, ranks, dtype=torch.int64)
    return tokens, logprobs


def _split(ids, budget):
    count = int(ids[3 * budget])
    return ids[:budget], ids[budget:2 * budget], ids[2 * budget:3 * budget], count


def _path_scores(tokens, parents, depths, count, top_tokens, top_logprobs):
    scores = [0.0]
    for node in range(1, count):
        row = top_tokens[depths[node] - 1].tolist()
        scores.append(scores[parents[node]] + float(top_logprobs[depths[node] - 1, row.index(int(tokens[node]))]))
    return sorted(scores, reverse=True)


@pytest.mark.parametrize("depth, ranks, budget",
                         [(3, 3, 10), (5, 4, 40), (16, 8, 64), (2, 5, 31), (4, 2, 64), (1, 1, 1)])
def test_device_tree_equals_the_heap_tree_without_ties(depth, ranks, budget):
    top_tokens, top_logprobs = _draft(depth, ranks, seed=depth * 100 + ranks + budget)
    host = build_tree(7, top_tokens, top_logprobs, budget)
    ids, mask = build_tree_tensors(torch.tensor([7]), top_tokens, top_logprobs, budget)
    tokens, depths, parents, count = _split(ids, budget)
    assert count == host.tokens.numel()
    assert torch.equal(tokens[:count], host.tokens) and torch.equal(parents[:count], host.parents)
    assert torch.equal(depths[:count], host.depths)
    # Padding as TargetRunner.load pads: leaves under the root holding token 0.
    assert (tokens[count:] == 0).all() and (parents[count:] == 0).all() and (depths[count:] == 1).all()
    assert torch.equal(mask, trees.parents_to_mask(parents))


@pytest.mark.parametrize("seed", range(12))
def test_device_tree_takes_the_best_prefixes_with_ties_and_missing_ranks(seed):
    depth, ranks, budget = 1 + seed % 6, 1 + seed % 4, 5 + 7 * seed
    top_tokens, top_logprobs = _draft(depth, ranks, seed, ties=True, cut=seed % 2 == 0)
    host = build_tree(7, top_tokens, top_logprobs, budget)
    ids, mask = build_tree_tensors(torch.tensor([7]), top_tokens, top_logprobs, budget)
    tokens, depths, parents, count = _split(ids, budget)
    assert count == host.tokens.numel() and int(tokens[0]) == 7 and int(parents[0]) == -1
    trees.validate_parents(parents)  # parents before children, rooted at 0
    assert torch.equal(depths[1:count], depths[parents[1:count]] + 1)
    assert torch.equal(mask, trees.parents_to_mask(parents))
    assert _path_scores(tokens, parents, depths, count, top_tokens, top_logprobs) == pytest.approx(
        sorted(host.scores.tolist(), reverse=True), abs=1e-5)


def test_ancestor_mask_matches_the_validated_builder():
    generator = torch.Generator().manual_seed(5)
    for size in (1, 2, 31, 32, 33, 64, 100):
        parents = torch.tensor([-1] + [int(torch.randint(max(0, i - 4), i, (1,), generator=generator))
                                       for i in range(1, size)])
        depth = int(trees.depths(trees.parents_to_mask(parents)).max())
        assert torch.equal(ancestor_mask(parents, max_depth=depth), trees.parents_to_mask(parents))


def test_build_tree_tensors_rejects_bad_arguments():
    with pytest.raises(ValueError, match="budget"):
        build_tree_tensors(torch.tensor([1]), torch.zeros(2, 3, dtype=torch.int64), torch.zeros(2, 3), 0)
    with pytest.raises(ValueError, match="equal"):
        build_tree_tensors(torch.tensor([1]), torch.zeros(2, 3, dtype=torch.int64), torch.zeros(2, 4), 8)


def test_device_oracle_draft_follows_its_law():
    vocab, top_k, reference = 3000, 8, list(range(1000, 1400))
    drafter = OracleDrafter(reference, vocab, top_k=top_k, p_first=0.8, decay=0.95, miss=0.3, seed=4)
    first, missing, rows = [0] * 16, [0] * 16, 0
    for position in range(0, 380, 2):
        block = drafter.draft_on_device(torch.tensor([position]), 16)
        again = drafter.draft_on_device(torch.tensor([position]), 16)
        assert torch.equal(block.top_tokens, again.top_tokens), "a position drafts the same block every time"
        for depth in range(16):
            row = block.top_tokens[depth].tolist()
            if position + depth >= len(reference):
                assert torch.isneginf(block.top_logprobs[depth]).all()
                continue
            assert len(set(row)) == top_k and all(0 <= t < vocab for t in row)
            true = reference[position + depth]
            first[depth] += row[0] == true
            missing[depth] += true not in row
            rows += depth == 0
        assert torch.equal(block.top_logprobs[0], torch.tensor(drafter._profile(1), dtype=torch.float32))
    # p_1 = 0.8 at depth 1; at depth 16, p = 0.8 * 0.95 ** 15 = 0.37, and 30% of the rest miss.
    assert abs(first[0] / rows - 0.8) < 0.1
    assert abs(first[15] / (rows - 8) - 0.8 * 0.95 ** 15) < 0.12
    assert abs(missing[15] / (rows - 8) - 0.3 * (1 - 0.8 * 0.95 ** 15)) < 0.12


# The interpreter sorts slowly: small shapes on the CPU, the decode's own (16, 8, 64) on the GPU.
_KERNEL_SHAPES = [(3, 3, 10, True, True), (5, 4, 40, True, False), (2, 5, 31, False, True), (1, 1, 2, False, False),
                  (6, 3, 7, True, True)] + ([(16, 8, 64, False, False), (16, 8, 64, True, True)] if HAS_CUDA else [])


@pytest.mark.parametrize("depth, ranks, budget, ties, cut", _KERNEL_SHAPES)
def test_tree_kernel_writes_the_tensor_builders_ids(depth, ranks, budget, ties, cut):
    top_tokens, top_logprobs = _draft(depth, ranks, seed=depth * 7 + ranks + budget, ties=ties, cut=cut)
    expected, _ = build_tree_tensors(torch.tensor([7]), top_tokens, top_logprobs, budget)
    out = torch.full((3 * budget + 1,), -5, dtype=torch.int64, device=DEVICE)
    kernel = TreeKernel(depth, ranks, budget, torch.device(DEVICE))
    kernel(torch.tensor([7], device=DEVICE), top_tokens.to(DEVICE), top_logprobs.to(DEVICE), out)
    assert torch.equal(out.cpu(), expected)


def test_tree_kernel_rejects_other_shapes():
    kernel = TreeKernel(2, 3, 8, torch.device("cpu"))
    with pytest.raises(ValueError, match=r"expected \[2, 3\]"):
        kernel(torch.tensor([1]), torch.zeros(3, 3, dtype=torch.int64), torch.zeros(3, 3),
               torch.empty(25, dtype=torch.int64))
    with pytest.raises(ValueError, match="out: expected"):
        kernel(torch.tensor([1]), torch.zeros(2, 3, dtype=torch.int64), torch.zeros(2, 3),
               torch.empty(24, dtype=torch.int64))
