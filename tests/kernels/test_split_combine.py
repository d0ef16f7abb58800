"""The shared split-KV combine (verify_kernels/split_combine.py) on its own: its launch rule and its merge
against a float64 reference, for every column-block launch, on random partial rows (NaN in the rows of
empty splits, which must weigh nothing) and a request of one split (written by the attention kernel: left
alone). On the GPU where there is one, else through the Triton interpreter."""

import math

import pytest
import torch

from tests.conftest import DEVICE
from verify_kernels.split_combine import MAX_COLUMN_BLOCKS, CombineGrid, combine_grid, launch_combine


@pytest.mark.parametrize("rows", [1, 8, 128, 512, 1000, 2048, 4096, 65536])
@pytest.mark.parametrize("v_dim", [64, 128, 512])
@pytest.mark.parametrize("sms", [132, 188])
def test_combine_grid_is_a_legal_launch(rows, v_dim, sms):
    grid = combine_grid(rows, v_dim, sms)
    columns = v_dim // grid.column_blocks
    assert grid.column_blocks & (grid.column_blocks - 1) == 0 and grid.column_blocks <= MAX_COLUMN_BLOCKS
    assert columns * grid.column_blocks == v_dim and columns >= 32
    assert 1 <= grid.warps <= 4 and grid.split_tile & (grid.split_tile - 1) == 0
    assert grid.split_tile * columns <= 32 * 32 * grid.warps  # at most 32 partial values a thread per load
    if grid.column_blocks < MAX_COLUMN_BLOCKS and v_dim % (64 * grid.column_blocks) == 0:
        assert rows * grid.column_blocks >= 16 * sms  # stopped because the grid was large enough


def test_combine_grid_cuts_short_trees_and_keeps_large_batches():
    assert combine_grid(16 * 8, 512, 132) == CombineGrid(16, 1, 32)     # 131072 / 16 / 8: 2048 programs
    assert combine_grid(64 * 8, 512, 132) == CombineGrid(8, 1, 16)      # T 64, H 8
    assert combine_grid(16 * 128 * 8, 512, 132) == CombineGrid(1, 4, 8)  # 16 requests of T 128: one per row


def _reference(partial_out, partial_lse, split_start, rows):
    """float64 merge per request of its units' partial rows; None where a request has one unit."""
    merged = []
    for request in range(len(split_start) - 1):
        first, last = split_start[request], split_start[request + 1]
        if last - first <= 1:
            merged.append(None)
            continue
        lse = torch.stack([partial_lse[u * rows:(u + 1) * rows] for u in range(first, last)]).double()
        values = torch.stack([partial_out[u * rows:(u + 1) * rows] for u in range(first, last)]).double()
        weights = torch.softmax(lse, dim=0)  # an empty unit (lse -inf) weighs 0
        values = torch.where(weights[..., None] > 0, values, 0.0)  # and its NaN rows are never read
        merged.append((weights[..., None] * values).sum(0))
    return merged


@pytest.mark.parametrize("column_blocks", [1, 2, 4, 8, 16, None])
def test_combine_matches_reference(column_blocks):
    generator = torch.Generator().manual_seed(column_blocks or 0)
    tree_nodes, heads, v_dim = 3, 2, 512
    rows = tree_nodes * heads
    split_start = [0, 5, 6, 13, 13 + 1]  # 5 units, 1 (left alone), 7, then one unit again
    units = split_start[-1]
    partial_out = torch.randn(units * rows, v_dim, generator=generator) * 3
    partial_lse = torch.randn(units * rows, generator=generator) * 4
    empty = [2, 9, 10]  # units with no position: LSE -inf, their partial rows never written (NaN here)
    for unit in empty:
        partial_lse[unit * rows:(unit + 1) * rows] = -math.inf
        partial_out[unit * rows:(unit + 1) * rows] = math.nan
    out = torch.full((len(split_start) - 1, tree_nodes, heads, v_dim), 7.0)  # fp32: the merge's own error
    device = torch.device(DEVICE)
    out = out.to(device)
    grid = None
    if column_blocks is not None:
        columns = v_dim // column_blocks
        warps = max(1, min(4, columns // 128))
        grid = CombineGrid(column_blocks, warps, max(1, 1024 * warps // columns))
    launch_combine(partial_out.to(device), partial_lse.to(device), torch.tensor(split_start, dtype=torch.int32,
                   device=device), out, units, 7, grid)
    result = out.cpu()
    for request, expected in enumerate(_reference(partial_out, partial_lse, split_start, rows)):
        got = result[request].reshape(rows, v_dim)
        if expected is None:
            assert (got == 7.0).all(), f"request {request}: one unit, written by the attention kernel: left alone"
        else:
            assert torch.isfinite(got).all()
            torch.testing.assert_close(got.double(), expected, atol=1e-4, rtol=1e-4)
