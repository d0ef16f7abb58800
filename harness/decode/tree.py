"""DDTree: the draft tree from a block drafter's per-position top-k, and the greedy walk over it.

Builder (best-first over prefixes, as in the DDTree paper): a prefix chooses one of the top-k
tokens at each drafted position 1..d and scores the sum of their log-probabilities. Start from the
root (the previous bonus token); pop the best prefix, then push its next sibling (same prefix,
next rank at its last position) and its first child (rank 0 at the next position). With
log-probabilities <= 0 a child never outscores its parent, so pop order puts parents before
children: node i's parent has a smaller index, which is what the tree mask needs.

Walk: follow the target's pick (greedy, or sampled at temperature > 0) through matching children;
the first pick with no matching child is the bonus token.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

import numpy
import torch

from verify_kernels import trees


@dataclass(frozen=True)
class DraftTree:
    tokens: torch.Tensor   # [T] token ids; node 0 is the root (the bonus token)
    parents: torch.Tensor  # [T] parent index, -1 for the root
    depths: torch.Tensor   # [T] 0 for the root
    scores: torch.Tensor   # [T] summed draft log-probability of the path

    @property
    def mask(self) -> torch.Tensor:
        """The contract's ancestor bitmask for this tree: [1, T, ceil(T/32)] int32."""
        return trees.parents_to_mask(self.parents)


def build_tree(root_token: int, top_tokens: torch.Tensor, top_logprobs: torch.Tensor, budget: int) -> DraftTree:
    """Best-first tree of at most ``budget`` nodes (root included).

    top_tokens, top_logprobs: [D, K] per drafted position, ranks sorted by log-probability.
    """
    if budget < 1:
        raise ValueError(f"budget: expected at least 1 node (the root), got {budget}")
    if top_tokens.shape != top_logprobs.shape or top_tokens.dim() != 2:
        raise ValueError(f"top_tokens/top_logprobs: expected equal [D, K] shapes, got "
                         f"{tuple(top_tokens.shape)} and {tuple(top_logprobs.shape)}")
    depth_limit, ranks = top_tokens.shape
    logprobs = top_logprobs.double().cpu().tolist()
    tokens_table = top_tokens.cpu().tolist()
    tokens, parents, depths, scores = [root_token], [-1], [0], [0.0]
    # Heap entries: (-score, tie-breaker, parent node, depth of the new node, rank at that depth).
    # The pushes are written out (no helper call): this loop is on the decode step's critical path.
    minus_inf = float("-inf")
    heap: list[tuple[float, int, int, int, int]] = []
    counter = 0
    if depth_limit and logprobs[0][0] > minus_inf:
        heap.append((-logprobs[0][0], 0, 0, 1, 0))
        counter = 1
    push, pop = heapq.heappush, heapq.heappop
    while heap and len(tokens) < budget:
        negative, _, parent, depth, rank = pop(heap)
        node = len(tokens)
        row = logprobs[depth - 1]
        tokens.append(tokens_table[depth - 1][rank])
        parents.append(parent)
        depths.append(depth)
        scores.append(-negative)
        if rank + 1 < ranks and row[rank + 1] > minus_inf:  # next sibling
            push(heap, (-(scores[parent] + row[rank + 1]), counter, parent, depth, rank + 1))
            counter += 1
        if depth < depth_limit and logprobs[depth][0] > minus_inf:  # first child
            push(heap, (negative - logprobs[depth][0], counter, node, depth + 1, 0))
            counter += 1
    ids = torch.from_numpy(numpy.array([tokens, parents, depths], dtype=numpy.int64))
    return DraftTree(ids[0], ids[1], ids[2], torch.from_numpy(numpy.array(scores, dtype=numpy.float64)))


def walk_with(tree: DraftTree, pick) -> tuple[list[int], int]:
    """(accepted nodes from the root, bonus token) when the target's choice at node i is
    ``pick(i)``: follow the child holding that token; the first choice with no such child is the bonus."""
    tokens = tree.tokens.tolist()
    children: dict[int, dict[int, int]] = {}
    for node, parent in enumerate(tree.parents.tolist()):
        if parent >= 0:
            children.setdefault(parent, {}).setdefault(tokens[node], node)
    accepted, current = [0], 0
    while (choice := pick(current)) in children.get(current, {}):
        current = children[current][choice]
        accepted.append(current)
    return accepted, choice


def walk(tree: DraftTree, target_next: torch.Tensor) -> tuple[list[int], int]:
    """Greedy walk. target_next [T]: the target's next token after each node."""
    picks = target_next.cpu().tolist()
    return walk_with(tree, picks.__getitem__)


def greedy_path(tokens: torch.Tensor, parents: torch.Tensor, picks: torch.Tensor, tree_mask: torch.Tensor,
                count: torch.Tensor) -> torch.Tensor:
    """The greedy walk as tensor operations on the tree's device: no host sync, so it can follow
    the verify in a CUDA graph and feed the commit directly.

    tokens, parents, picks [T] int64 (parents[0] = -1; picks = the target's next token after each
    node); tree_mask [1, T, W] the tree's ancestor mask; count [1] the real nodes (those past it are
    padding and never accepted). Returns [T + 2] int64: the accepted nodes from the root, padded
    with the root (0) to T, then their number, then the bonus token; the same as ``walk`` over the
    first ``count`` nodes. A node is accepted iff it and each of its ancestors but the root hold
    their parent's pick; of siblings holding the same token only the first counts (as in the walk).
    """
    num_nodes = tokens.shape[0]
    node = torch.arange(num_nodes, device=tokens.device)
    live = node < count
    holds_pick = (tokens == picks[parents.clamp(min=0)]) & live & (node > 0)
    earlier_twin = ((parents[:, None] == parents[None, :]) & (tokens[:, None] == tokens[None, :])
                    & (node[None, :] < node[:, None])).any(-1)
    holds_pick = (holds_pick & ~earlier_twin) | (node == 0)
    ancestors = trees.unpack_bits(tree_mask[0], num_nodes)  # [T, T]: j is i or one of its ancestors
    accepted = live & ~(ancestors & ~holds_pick[None, :]).any(-1)
    depth = ancestors.sum(-1) - 1  # the accepted nodes have depths 0..n-1: their places on the path
    path = torch.zeros(num_nodes + 1, dtype=torch.int64, device=tokens.device)
    path.scatter_(0, torch.where(accepted, depth, num_nodes), node)  # the rest land in slot T, dropped
    deepest = torch.where(accepted, node, 0).amax()  # node indices increase along a path
    return torch.cat([path[:num_nodes], accepted.sum().view(1), picks.gather(0, deepest.view(1))])


def walk_sampled(tree: DraftTree, logits: torch.Tensor, temperature: float,
                 generator: torch.Generator) -> tuple[list[int], int]:
    """Lossless sampling walk: the target sampled at temperature at each node reached (logits [T, V])."""
    def sample(node: int) -> int:
        probs = torch.softmax(logits[node].float().cpu() / temperature, dim=-1)
        return int(torch.multinomial(probs, 1, generator=generator))

    return walk_with(tree, sample)
