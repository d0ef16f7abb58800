"""DDTree builder against brute-force enumeration of the top-B prefixes; the greedy walk."""

import itertools

import pytest
import torch

from harness.decode.tree import build_tree, walk
from verify_kernels import trees


def _draft(depth, ranks, seed):
    generator = torch.Generator().manual_seed(seed)
    logprobs = torch.log_softmax(torch.randn(depth, 50, generator=generator, dtype=torch.float64), -1)
    top = torch.topk(logprobs, ranks, dim=-1)
    return top.indices, top.values


def _paths(tree):
    parents = tree.parents.tolist()
    result = []
    for node in range(len(parents)):
        path, current = [], node
        while current > 0:
            path.append(current)
            current = parents[current]
        result.append(tuple(tree.tokens[n].item() for n in reversed(path)))
    return result


@pytest.mark.parametrize("depth, ranks, budget", [(3, 3, 10), (4, 2, 16), (5, 4, 40), (2, 5, 31)])
def test_builder_matches_brute_force_top_prefixes(depth, ranks, budget):
    top_tokens, top_logprobs = _draft(depth, ranks, seed=depth * 10 + ranks)
    tree = build_tree(7, top_tokens, top_logprobs, budget)
    every = []
    for length in range(1, depth + 1):
        for choice in itertools.product(range(ranks), repeat=length):
            score = sum(top_logprobs[d, r].item() for d, r in enumerate(choice))
            every.append((score, tuple(top_tokens[d, r].item() for d, r in enumerate(choice))))
    every.sort(key=lambda item: -item[0])
    expected = {prefix for _, prefix in every[: budget - 1]} | {()}
    assert set(_paths(tree)) == expected
    assert len(tree.tokens) == min(budget, len(every) + 1)
    trees.validate_parents(tree.parents)  # parents before children
    trees.validate_tree_mask(tree.mask)
    assert (tree.scores[1:] <= tree.scores[tree.parents[1:]] + 1e-12).all()


def test_budget_one_is_the_root_alone():
    top_tokens, top_logprobs = _draft(3, 2, seed=0)
    tree = build_tree(5, top_tokens, top_logprobs, 1)
    assert tree.tokens.tolist() == [5] and tree.parents.tolist() == [-1]
    with pytest.raises(ValueError, match="budget: expected at least 1"):
        build_tree(5, top_tokens, top_logprobs, 0)


def test_walk_follows_matching_children_and_returns_the_bonus():
    # root(9) -> a(1) -> c(3); root -> b(2)
    tree = build_tree(9, torch.tensor([[1, 2], [3, 4]]), torch.tensor([[-0.1, -0.2], [-0.3, -5.0]]), 4)
    tokens = tree.tokens.tolist()
    node_of = {t: i for i, t in enumerate(tokens)}
    target_next = torch.zeros(len(tokens), dtype=torch.long)
    target_next[node_of[9]] = 1
    target_next[node_of[1]] = 3
    target_next[node_of[3]] = 42
    accepted, bonus = walk(tree, target_next)
    assert [tokens[n] for n in accepted] == [9, 1, 3] and bonus == 42
    target_next[node_of[9]] = 77  # first pick matches no child
    assert walk(tree, target_next) == ([0], 77)


def _random_tree(seed, nodes, vocab):
    """A random parents-before-children tree whose siblings may repeat tokens (so the walk's first-child
    rule matters), with the target's picks often matching a child."""
    generator = torch.Generator().manual_seed(seed)
    parents = [-1] + [int(torch.randint(0, i, (1,), generator=generator)) for i in range(1, nodes)]
    tokens = torch.randint(0, vocab, (nodes,), generator=generator)
    picks = torch.randint(0, vocab, (nodes,), generator=generator)
    for node in range(1, nodes):  # make about half the picks lead somewhere
        if torch.rand(1, generator=generator) < 0.5:
            picks[parents[node]] = tokens[node]
    return tokens, torch.tensor(parents), picks


@pytest.mark.parametrize("seed", range(40))
def test_greedy_path_on_the_device_equals_the_walk(seed):
    """greedy_path (the walk the decode loop runs in the commit's CUDA graph) against walk(), on
    random trees with repeated sibling tokens, padded past ``count`` with leaves under the root
    whose token may equal the root's pick (padding must never be accepted)."""
    from harness.decode.tree import DraftTree, greedy_path

    generator = torch.Generator().manual_seed(1000 + seed)
    count = int(torch.randint(1, 24, (1,), generator=generator))
    bucket = count + int(torch.randint(0, 9, (1,), generator=generator))
    tokens, parents, picks = _random_tree(seed, count, vocab=3 if seed % 2 else 7)
    expected = walk(DraftTree(tokens, parents, torch.zeros(count), torch.zeros(count)), picks)
    pad = bucket - count
    padded_tokens = torch.cat([tokens, torch.full((pad,), int(picks[0]))])  # padding holds the root's pick
    padded_parents = torch.cat([parents, torch.zeros(pad, dtype=torch.int64)])
    padded_picks = torch.cat([picks, torch.randint(0, 7, (pad,), generator=generator)])
    mask = trees.ancestor_words(padded_parents.tolist())
    result = greedy_path(padded_tokens, padded_parents, padded_picks, mask, torch.tensor([count])).tolist()
    length = result[bucket]
    assert (result[:length], result[bucket + 1]) == expected
    assert result[length:bucket] == [0] * (bucket - length), "the path is padded with the root"


@pytest.mark.gpu
def test_gpu_compiled_greedy_path_equals_the_walk():
    """The decode loop's walk on the GPU goes through torch.compile (commit_graph.py): on random
    padded trees it must give walk()'s path and bonus, and the eager function's exact result."""
    from harness.decode.commit_graph import _compiled_greedy_path, walk_result
    from harness.decode.tree import DraftTree, greedy_path

    bucket = 64
    compiled = None
    for seed in range(30):
        count = 1 + seed * 2
        tokens, parents, picks = _random_tree(seed, count, vocab=3 if seed % 2 else 7)
        expected = walk(DraftTree(tokens, parents, torch.zeros(count), torch.zeros(count)), picks)
        pad = bucket - count
        padded = [torch.cat([tokens, torch.full((pad,), int(picks[0]))]),
                  torch.cat([parents, torch.zeros(pad, dtype=torch.int64)]),
                  torch.cat([picks, torch.zeros(pad, dtype=torch.int64)])]
        mask = trees.ancestor_words(padded[1].tolist())
        tree = tuple(t.cuda() for t in (*padded, mask, torch.tensor([count])))
        compiled = compiled or _compiled_greedy_path(tree)
        assert compiled is not walk_result, "torch.compile fell back to eager"
        result = compiled(*tree)  # walk_result: greedy_path's [T + 2], then the path's tokens [T] and the count
        assert torch.equal(result, walk_result(*tree))
        assert torch.equal(result[:bucket + 2], greedy_path(*tree))
        values = result.tolist()
        assert (values[:values[bucket]], values[bucket + 1]) == expected
        assert values[bucket + 2:2 * bucket + 2] == padded[0][values[:bucket]].tolist() and values[-1] == count
