"""commit_accepted on odd page layouts: the accepted path becomes contiguous, nothing else moves."""

import pytest
import torch

from verify_kernels import make_problem
from verify_kernels.commit import commit_accepted

from conftest import DEVICE


@pytest.mark.parametrize("page_size", [1, 16, 64])
@pytest.mark.parametrize("prefix_lens", [pytest.param([0, 63], id="empty_and_page_edge"),
                                         pytest.param([97, 5, 130], id="odd")])
def test_accepted_rows_become_contiguous(page_size, prefix_lens):
    problem = make_problem(prefix_lens, 40, 1, page_size=page_size, tree="binary", seed=2, device=DEVICE)
    before = [problem.logical_rows(b).clone() for b in range(len(prefix_lens))]
    # Paths in a binary tree (parent of i is (i - 1) // 2): 0 -> 2 -> 6 -> 13 -> 27, 0 -> 1, 0.
    paths = [[0, 2, 6, 13, 27], [0, 1], [0]][: len(prefix_lens)]
    width = max(len(p) for p in paths)
    accepted = torch.tensor([p + [5] * (width - len(p)) for p in paths], device=DEVICE)  # padded with junk
    accepted_lens = torch.tensor([len(p) for p in paths], dtype=torch.int32, device=DEVICE)
    new_lens = commit_accepted(problem.kv_cache, problem.block_table, problem.prefix_lens, accepted, accepted_lens)
    assert new_lens.tolist() == [length + len(p) for length, p in zip(prefix_lens, paths)]
    for b, (length, path) in enumerate(zip(prefix_lens, paths)):
        after = problem.logical_rows(b)
        expected = before[b].clone()
        expected[length:length + len(path)] = before[b][[length + node for node in path]]
        torch.testing.assert_close(after, expected, rtol=0, atol=0, equal_nan=True)


def test_commit_rejects_bad_shapes():
    problem = make_problem([10], 4, 1, page_size=16)
    with pytest.raises(ValueError, match=r"accepted: expected shape \[B=1, A\]"):
        commit_accepted(problem.kv_cache, problem.block_table, problem.prefix_lens, torch.zeros(2, 1, dtype=torch.long),
                        torch.ones(1, dtype=torch.int32))
