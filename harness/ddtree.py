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
    heap: list[tuple[float, int, int, int, int]] = []
    counter = 0

    def push(parent: int, depth: int, rank: int, parent_score: float) -> None:
        nonlocal counter
        if depth <= depth_limit and rank < ranks and logprobs[depth - 1][rank] > float("-inf"):
            score = parent_score + logprobs[depth - 1][rank]
            heapq.heappush(heap, (-score, counter, parent, depth, rank))
            counter += 1

    push(0, 1, 0, 0.0)
    while heap and len(tokens) < budget:
        negative, _, parent, depth, rank = heapq.heappop(heap)
        node = len(tokens)
        tokens.append(tokens_table[depth - 1][rank])
        parents.append(parent)
        depths.append(depth)
        scores.append(-negative)
        push(parent, depth, rank + 1, scores[parent])   # next sibling
        push(node, depth + 1, 0, -negative)             # first child
    return DraftTree(torch.tensor(tokens), torch.tensor(parents), torch.tensor(depths),
                     torch.tensor(scores, dtype=torch.float64))


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


def walk_sampled(tree: DraftTree, logits: torch.Tensor, temperature: float,
                 generator: torch.Generator) -> tuple[list[int], int]:
    """Lossless sampling walk: the target sampled at temperature at each node reached (logits [T, V])."""
    def sample(node: int) -> int:
        probs = torch.softmax(logits[node].float().cpu() / temperature, dim=-1)
        return int(torch.multinomial(probs, 1, generator=generator))

    return walk_with(tree, sample)
