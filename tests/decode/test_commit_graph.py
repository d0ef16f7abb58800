"""The commit phase: the accepted path's rows moved in every layer, the device walk and its graphs."""

import pytest
import torch

from harness.decode.kv_pool import PagedKVCache

from decode_setup import tiny_model  # noqa: F401 (tiny_model: a fixture)


def test_accepted_commit_moves_the_path_in_every_layer(tiny_model):
    """AcceptedCommit (the decode loop's commit phase) writes the path's rows at prefix_len + i in
    every layer, returns the path's hidden states, and leaves the rows before the prefix alone."""
    from harness.decode.commit_graph import AcceptedCommit

    cache = PagedKVCache.for_tokens(3, 200, 16, 8, dtype=torch.float32, device="cpu")
    cache.reserve(70)
    cache.pool.copy_(torch.randn(cache.pool.shape, generator=torch.Generator().manual_seed(0)))
    cache.set_prefix_len(37)
    slots = cache.slots(torch.arange(70))
    before = cache.pool.view(3, -1, 8)[:, slots].clone()  # [layers, position, D]
    hidden = torch.randn(20, 5)
    accepted = [0, 2, 3, 9]  # later targets are earlier sources: the gather must come first
    features = AcceptedCommit(cache, budget=20)(accepted, hidden)
    after = cache.pool.view(3, -1, 8)[:, slots]
    assert torch.equal(features, hidden[accepted])
    assert torch.equal(after[:, :37], before[:, :37])
    for i, node in enumerate(accepted):
        assert torch.equal(after[:, 37 + i], before[:, 37 + node]), f"path entry {i}"
    with pytest.raises(ValueError, match="the root"):
        AcceptedCommit(cache, budget=4)([1, 2], hidden)


def test_greedy_walk_and_commit_on_the_device_path(tiny_model):
    """start_greedy / finish_greedy (the greedy decode's walk and commit, no path upload): the path
    and bonus of walk(), the path's rows moved in every layer, padding never accepted."""
    from harness.decode.commit_graph import AcceptedCommit
    from harness.decode.tree import DraftTree, walk
    from verify_kernels import trees

    cache = PagedKVCache.for_tokens(3, 200, 16, 8, dtype=torch.float32, device="cpu")
    cache.reserve(70)
    cache.pool.copy_(torch.randn(cache.pool.shape, generator=torch.Generator().manual_seed(0)))
    cache.set_prefix_len(37)
    slots = cache.slots(torch.arange(70))
    before = cache.pool.view(3, -1, 8)[:, slots].clone()
    # root(5) -> 1:(8) -> 3:(6) -> 4:(2); root -> 2:(9); nodes 5, 6 pad the tree to the budget of 7
    parents, tokens = [-1, 0, 0, 1, 3, 0, 0], [5, 8, 9, 6, 2, 0, 0]
    picks = torch.tensor([8, 6, 1, 2, 44, 3, 3])
    count = 5
    expected = walk(DraftTree(torch.tensor(tokens[:count]), torch.tensor(parents[:count]), torch.zeros(count),
                              torch.zeros(count)), picks[:count])
    assert expected == ([0, 1, 3, 4], 44)
    hidden = torch.randn(7, 5)
    commit = AcceptedCommit(cache, budget=7)
    commit.start_greedy((torch.tensor(tokens), torch.tensor(parents), picks, trees.ancestor_words(parents),
                         torch.tensor([count])), hidden)
    accepted, bonus, features = commit.finish_greedy()
    assert (accepted, bonus) == expected
    assert torch.equal(features, hidden[accepted])
    after = cache.pool.view(3, -1, 8)[:, slots]
    assert torch.equal(after[:, :37], before[:, :37])
    for i, node in enumerate(accepted):
        assert torch.equal(after[:, 37 + i], before[:, 37 + node]), f"path entry {i}"
    with pytest.raises(RuntimeError, match="no greedy walk"):
        AcceptedCommit(cache, budget=7).finish_greedy()


@pytest.mark.gpu
def test_gpu_commit_warm_captures_the_graph_once_and_leaves_the_rows():
    """The decode loop warms the commit before timing: warm() captures its graph (the root copied
    onto itself, so no row moves), and the first real commit replays that graph."""
    from harness.decode.commit_graph import AcceptedCommit

    cache = PagedKVCache.for_tokens(3, 200, 16, 8, dtype=torch.bfloat16, device="cuda")
    cache.reserve(70)
    cache.pool.copy_(torch.randn(cache.pool.shape, device="cuda"))
    cache.set_prefix_len(37)
    slots = cache.slots(torch.arange(70, device="cuda"))
    before = cache.pool.view(3, -1, 8)[:, slots].clone()
    hidden = torch.randn(20, 5, device="cuda")
    commit = AcceptedCommit(cache, budget=20)
    commit.warm(hidden)
    graph = commit._graph
    assert graph is not None
    assert torch.equal(cache.pool.view(3, -1, 8)[:, slots], before)
    accepted = [0, 2, 3, 9]
    features = commit(accepted, hidden)
    assert commit._graph is graph
    after = cache.pool.view(3, -1, 8)[:, slots]
    assert torch.equal(features, hidden[accepted])
    assert torch.equal(after[:, :37], before[:, :37])
    for i, node in enumerate(accepted):
        assert torch.equal(after[:, 37 + i], before[:, 37 + node]), f"path entry {i}"
