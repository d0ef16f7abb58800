"""Drafters: per-position distributions for the next block of tokens, behind one interface.

``draft(history, block_size) -> BlockDraft``: ``history`` is every token so far (prompt, accepted
tokens and the pending root); the draft covers the ``block_size`` positions after it. A
distribution is returned as its top-k (tokens and log-probabilities, ranks sorted), which is all
the DDTree builder reads. A learned block-diffusion drafter conditioned on the target's hidden
states fits the same interface: the loop passes ``hidden`` [A, hidden], the target's final hidden
states at the previous step's accepted path (None on the first step), which the two drafters here
ignore.

- ``OracleDrafter``: controlled acceptance. It knows the target's greedy continuation (from a
  reference run) and ranks the true token first at depth d with probability p_d = p_1 * decay^(d-1);
  otherwise the true token sits at a random lower rank, or (probability ``miss``) not in the top-k at
  all. The log-probabilities follow a fixed descending profile over ranks, so the tree builder sees
  a realistic shape. Seeded: the same step of the same run drafts the same block.
- ``NgramDrafter``: prompt lookup, model-free. The longest suffix of the history (up to ``max_n``
  tokens) that occurred earlier; the tokens that followed its occurrences, counted per offset, are
  the ranked candidates.
"""

from __future__ import annotations

import math
import random
from collections import Counter
from dataclasses import dataclass
from typing import Protocol

import numpy
import torch


@dataclass(frozen=True)
class BlockDraft:
    top_tokens: torch.Tensor    # [D, K] int64, ranks sorted by probability
    top_logprobs: torch.Tensor  # [D, K] float64, <= 0, non-increasing along K


class Drafter(Protocol):
    name: str

    def draft(self, history: list[int], block_size: int, hidden: torch.Tensor | None = None) -> BlockDraft: ...


def _rank_profile(top_k: int, head: float) -> list[float]:
    """Log-probabilities of ranks 0..K-1: ``head`` on rank 0, the rest geometric over the others."""
    rest = [0.5 ** rank for rank in range(1, top_k)]
    scale = (1.0 - head) / sum(rest) if rest else 0.0
    return [math.log(head)] + [math.log(scale * r) for r in rest]


class OracleDrafter:
    name = "oracle"

    def __init__(self, reference: list[int], vocab: int, *, top_k: int = 8, p_first: float = 0.8,
                 decay: float = 0.95, miss: float = 0.3, seed: int = 0):
        if not 0.0 < p_first <= 1.0 or not 0.0 < decay <= 1.0:
            raise ValueError(f"p_first, decay: expected in (0, 1], got {p_first}, {decay}")
        if top_k < 2 or vocab <= top_k:
            raise ValueError(f"top_k: expected 2 <= top_k < vocab ({vocab}), got {top_k}")
        self.reference, self.vocab, self.top_k = list(reference), vocab, top_k
        self.p_first, self.decay, self.miss, self.seed = p_first, decay, miss, seed
        self._profiles: dict[int, list[float]] = {}

    def p_true_first(self, depth: int) -> float:
        return self.p_first * self.decay ** (depth - 1)

    def _profile(self, depth: int) -> list[float]:
        """The rank log-probabilities at ``depth`` (computed once per depth)."""
        if depth not in self._profiles:
            head = min(0.99, max(0.3, self.p_true_first(depth)))
            self._profiles[depth] = _rank_profile(self.top_k, head=head)
        return self._profiles[depth]

    def draft(self, history: list[int], block_size: int, hidden=None) -> BlockDraft:
        rng = random.Random(hash((self.seed, len(history))))
        uniform, vocab, top_k = rng.random, self.vocab, self.top_k
        truth = self.reference[len(history):len(history) + block_size]
        tokens, logprobs = [], []
        for depth, true in enumerate(truth, start=1):
            others: list[int] = []
            while len(others) < top_k:  # distinct wrong tokens, uniform over the vocabulary
                candidate = int(uniform() * vocab)
                if candidate != true and candidate not in others:
                    others.append(candidate)
            if uniform() < self.p_true_first(depth):
                row = [true] + others[:top_k - 1]
            elif uniform() < self.miss:
                row = others
            else:
                rank = 1 + int(uniform() * (top_k - 1))
                row = others[:rank] + [true] + others[rank:top_k - 1]
            tokens.append(row)
            logprobs.append(self._profile(depth))
        return _block(tokens, logprobs, top_k)


class NgramDrafter:
    name = "ngram"

    def __init__(self, *, max_n: int = 3, top_k: int = 4):
        self.max_n, self.top_k = max_n, top_k

    def draft(self, history: list[int], block_size: int, hidden=None) -> BlockDraft:
        for n in range(min(self.max_n, len(history) - 1), 0, -1):
            suffix = history[-n:]
            starts = [i + n for i in range(len(history) - n) if history[i:i + n] == suffix]
            if starts:
                break
        else:
            return _block([], [], self.top_k)
        tokens, logprobs = [], []
        for offset in range(block_size):
            counts = Counter(history[s + offset] for s in starts if s + offset < len(history))
            if not counts:
                break
            ranked = counts.most_common(self.top_k)
            total = sum(counts.values())
            tokens.append([token for token, _ in ranked])
            logprobs.append([math.log(0.9 * count / total) for _, count in ranked])
        return _block(tokens, logprobs, self.top_k)


def _block(tokens: list[list[int]], logprobs: list[list[float]], top_k: int) -> BlockDraft:
    """[D, K] tensors; rows shorter than K are padded with rank copies at -inf (never popped)."""
    width = max([len(row) for row in tokens] or [top_k])
    if any(len(row) != width for row in tokens):
        tokens = [row + [row[0]] * (width - len(row)) for row in tokens]
        logprobs = [row + [-math.inf] * (width - len(row)) for row in logprobs]
    shape = (len(tokens), width)
    return BlockDraft(torch.from_numpy(numpy.array(tokens, dtype=numpy.int64).reshape(shape)),
                      torch.from_numpy(numpy.array(logprobs, dtype=numpy.float64).reshape(shape)))


def make_drafter(name: str, *, reference: list[int] | None, vocab: int, seed: int) -> Drafter:
    if name == "oracle":
        if reference is None:
            raise ValueError("drafter 'oracle': needs the target's greedy continuation (a reference run)")
        return OracleDrafter(reference, vocab, seed=seed)
    if name == "ngram":
        return NgramDrafter()
    raise ValueError(f"drafter: expected 'oracle' or 'ngram', got {name!r}")
