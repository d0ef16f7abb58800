"""The DDTree builder and its ancestor mask as tensor operations: no host sync and no Python loop
over nodes. The device-drafting loop builds its mask with ``ancestor_mask`` on any device and its
tree with ``build_tree_tensors`` on the CPU; on the GPU the tree comes from one Triton program
(tree_kernel.py) that this function is the reference for (as compiled tensor operations it
took 0.54 ms of GPU time per step).

Same tree as ``ddtree.build_tree`` (the best ``budget - 1`` prefixes under the root by summed
log-probability), built depth by depth instead of with a heap. A prefix at depth d is a prefix at
depth d - 1 plus one of the K tokens at position d. The best B prefixes at depth d all extend
the best B at depth d - 1: each depth-(d-1) prefix that beats a parent has a best child that beats
its child. So a beam of B per depth holds every prefix the tree can take. The tree is the best
B - 1 entries of all the beams, ordered by score (ties: shallower first, then beam order), so a
parent comes before its children, as the heap's pop order has it.

Ties between equal scores may pick other prefixes than the heap does (same scores, other tokens);
both are trees of the best prefixes. Positions whose log-probabilities are -inf take no node;
when fewer than B - 1 prefixes are finite, the rest is padding: leaves under the root holding
token 0, as ``TargetRunner.load`` pads.

Shapes: top_tokens, top_logprobs [D, K]; beam [D, B]; output ids [3B + 1] int64 (tokens, depths,
parents with -1 for the root, then the real node count: the layout of the verify bucket's ids)
and mask [1, B, ceil(B / 32)] int32 (the contract's tree_mask).
"""

from __future__ import annotations

import torch

from verify_kernels import trees

_NO_KEY = torch.iinfo(torch.int64).min


def _sort_keys(scores: torch.Tensor, order: torch.Tensor) -> torch.Tensor:
    """int64 keys that sort like (score descending, ``order`` ascending); -inf scores below all.

    A float32's bits, read as int32, order like the float once the magnitude bits of negative
    values are flipped; ``order`` < 2**32 fills the low word, inverted: ordered * 2**32 + (2**32 -
    1 - order), written so no constant past int32 meets an index (Inductor's Triton code keeps
    index arithmetic in int32)."""
    bits = scores.float().view(torch.int32).to(torch.int64)
    ordered = torch.where(bits >= 0, bits, bits ^ 0x7FFFFFFF)
    keys = ((ordered + 1) << 32) - 1 - order
    return torch.where(torch.isneginf(scores), _NO_KEY, keys)


def _best(keys: torch.Tensor, count: int) -> torch.Tensor:
    """Indices of the ``count`` largest keys, largest first (keys are distinct)."""
    return torch.sort(keys, descending=True).indices[:count]


def build_tree_tensors(root: torch.Tensor, top_tokens: torch.Tensor, top_logprobs: torch.Tensor,
                       budget: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(ids [3B + 1] int64, mask [1, B, W] int32) of the best-first tree of ``budget`` = B nodes.

    root [1] int64 (the pending bonus token), top_tokens [D, K] int64, top_logprobs [D, K] (<= 0,
    ranks sorted; -inf: no such candidate). Everything stays on their device."""
    if budget < 1:
        raise ValueError(f"budget: expected at least 1 node (the root), got {budget}")
    if top_tokens.shape != top_logprobs.shape or top_tokens.dim() != 2:
        raise ValueError(f"top_tokens/top_logprobs: expected equal [D, K] shapes, got "
                         f"{tuple(top_tokens.shape)} and {tuple(top_logprobs.shape)}")
    device = top_tokens.device
    depth_limit, ranks = top_tokens.shape
    width = budget  # beam per depth
    logprobs = top_logprobs.float()
    slot = torch.arange(width, device=device)
    candidate = torch.arange(width * ranks, device=device)
    # Depth 0: the root alone, score 0.
    previous = torch.where(slot == 0, 0.0, float("-inf"))
    beam_scores, beam_parents, beam_ranks = [], [], []
    for depth in range(depth_limit):
        scores = (previous[:, None] + logprobs[depth][None, :]).flatten()  # [B * K]: parent slot, rank
        best = _best(_sort_keys(scores, candidate), width)
        previous = scores[best]
        beam_scores.append(previous)
        beam_parents.append(best // ranks)
        beam_ranks.append(best % ranks)
    stack = (lambda rows, dtype: torch.stack(rows).flatten() if rows  # [D * B], depth-major
             else torch.empty(0, dtype=dtype, device=device))
    scores = stack(beam_scores, torch.float32)
    entry_parents, entry_ranks = stack(beam_parents, torch.int64), stack(beam_ranks, torch.int64)
    order = torch.arange(scores.numel(), device=device)  # depth-major: ties go to the shallower entry
    chosen = _best(_sort_keys(scores, order), min(budget - 1, scores.numel()))
    real = torch.isfinite(scores[chosen])  # the chosen entries that are prefixes, not -inf filler
    depth_of = chosen // width  # depth - 1
    # Node index of each beam entry that made the tree (1..), 0 (the root) for the others.
    node_of = torch.zeros(scores.numel(), dtype=torch.int64, device=device)
    node_of.scatter_(0, chosen, torch.where(real, torch.arange(1, chosen.numel() + 1, device=device), 0))
    parent_entry = (depth_of - 1).clamp(min=0) * width + entry_parents[chosen]
    parents = torch.where(depth_of > 0, node_of[parent_entry], 0)
    tokens = top_tokens.flatten()[depth_of * ranks + entry_ranks[chosen]]
    pad = budget - 1 - chosen.numel()
    zeros = torch.zeros(pad, dtype=torch.int64, device=device)
    ids = torch.cat([
        root.to(torch.int64).view(1), torch.where(real, tokens, 0), zeros,                 # tokens
        torch.zeros(1, dtype=torch.int64, device=device), torch.where(real, depth_of + 1, 1), zeros + 1,  # depths
        torch.full((1,), -1, dtype=torch.int64, device=device), torch.where(real, parents, 0), zeros,  # parents
        1 + real.sum().view(1)])                                                           # count
    return ids, ancestor_mask(ids[2 * budget:3 * budget], max_depth=depth_limit)


def ancestor_mask(parents: torch.Tensor, *, max_depth: int) -> torch.Tensor:
    """tree_mask [1, T, W] int32 of a tree given by ``parents`` [T] (-1 for the root, parents
    before children) no deeper than ``max_depth``: ``max_depth`` pointer steps, no validation and
    no host sync (``trees.parents_to_mask`` validates, which syncs)."""
    num_nodes = parents.shape[0]
    node = torch.arange(num_nodes, device=parents.device)
    ancestors = node[:, None] == node[None, :]
    current = parents
    for _ in range(max(max_depth, 1)):
        ancestors = ancestors | (current[:, None] == node[None, :])
        current = torch.where(current >= 0, parents[current.clamp(min=0)], -1)
    return trees.pack_bits(ancestors)[None]
