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
  ``draft_on_device`` drafts the same way from tensors on the device (position and reference
  there, counter-based random draws instead of Python's), so a CUDA graph can draft without the
  host: the stand-in for a learned drafter, whose top-k is on the device anyway.
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
        self._device_tables: dict = {}  # draft_on_device's reference and profiles, on its device

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


    def draft_on_device(self, position: torch.Tensor, block_size: int) -> BlockDraft:
        """The block after ``position`` ([1] int64 on the device: the history's length) as
        [block_size, K] tensors on that device, without a host sync. Same law as ``draft``: at
        depth d the true token is first with probability p_d, else (probability ``miss``) absent,
        else at a uniform lower rank; the K wrong tokens are distinct and spread over the
        vocabulary. Positions past the reference get -inf (no node there). Draws: a hash of
        (seed, position, depth, draw), so a step drafts the same block in any process."""
        device = position.device
        key = (device, block_size)
        if self._device_tables.get("key") != key:
            profiles = [self._profile(depth) for depth in range(1, block_size + 1)]
            self._device_tables = {
                "key": key, "reference": torch.tensor(self.reference, dtype=torch.int64, device=device),
                "profile": torch.tensor(profiles, dtype=torch.float32, device=device),
                "p_first": torch.tensor([self.p_true_first(d) for d in range(1, block_size + 1)], device=device)}
        tables = self._device_tables
        reference, vocab, top_k = tables["reference"], self.vocab, self.top_k
        depth = torch.arange(block_size, device=device)
        at = position.to(torch.int64).view(1) + depth  # [D] reference index of each drafted position
        inside = at < reference.numel()
        true = reference[at.clamp(max=reference.numel() - 1)]
        draws = _uniform_hash(self.seed, at[:, None], torch.arange(4, device=device)[None, :])  # [D, 4]
        # K distinct wrong tokens: true + 1 + (start + j * stride) mod (V - 1), j < K, stride * (K - 1) < V - 1.
        stride = 1 + (draws[:, 0] * ((vocab - 1) // top_k - 1)).long()
        start = (draws[:, 1] * (vocab - 1)).long()
        rank = torch.arange(top_k, device=device)
        others = (true[:, None] + 1 + (start[:, None] + rank[None, :] * stride[:, None]) % (vocab - 1)) % vocab
        true_rank = torch.where(draws[:, 2] < tables["p_first"], 0,
                                torch.where(draws[:, 3] < self.miss, top_k,
                                            1 + ((draws[:, 3] - self.miss) / (1 - self.miss) * (top_k - 1)).long()
                                            .clamp(max=top_k - 1)))
        shifted = torch.cat([others[:, :1], others[:, :-1]], 1)  # others[k - 1] at rank k
        tokens = torch.where(rank[None, :] < true_rank[:, None], others,
                             torch.where(rank[None, :] == true_rank[:, None], true[:, None], shifted))
        logprobs = torch.where(inside[:, None], tables["profile"], float("-inf"))
        return BlockDraft(tokens, logprobs)


def _uniform_hash(seed: int, position: torch.Tensor, draw: torch.Tensor) -> torch.Tensor:
    """Uniform floats in [0, 1) from (seed, position, draw) integer tensors (broadcast): a
    murmur3-style mix of 32-bit words in int64 arithmetic (exact on the CPU and the GPU)."""
    mask = 0xFFFFFFFF
    # Multipliers of the index tensors below 2**31: Inductor's Triton code multiplies an index in int32.
    x = (position * 0x165667B1 + draw * 0x27D4EB2F + (seed & mask) * 0xC2B2AE3D) & mask
    for multiplier in (0x85EBCA6B, 0xC2B2AE35):
        x = ((x ^ (x >> 16)) * multiplier) & mask
    x = x ^ (x >> 16)
    return (x >> 8).float() / float(1 << 24)


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
