"""``device_tree.build_tree_tensors``'s ids as one Triton program: the same beams, sort keys and
tree, in one launch instead of a sort and its index work per depth (about 40 kernels, 0.54 ms of
GPU time per step at D = 16, K = 8, B = 64 on an H200).

One CTA owns the whole tree. Per depth it scores the B x K children of the previous beam, sorts
their keys (``tl.sort``, descending) and keeps the first B as the next beam; then it sorts the
D x B beam entries once more and takes the first B - 1 as the tree. Between steps the CTA goes
through a small global workspace (beams, sorted keys, node indices) with a barrier after each
write, since a register tensor cannot be indexed by a computed position.

Workspace (int64 unless said): scores [(D + 1) * B] float32 (row 0: the root alone), parents and
ranks [D * B] int32, keys [max(next_pow2(B * K), next_pow2(D * B))], node index [D * B].
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl



@triton.jit
def _sort_key(score, order):
    """(score descending, order ascending) as one int64; see device_tree._sort_keys."""
    bits = score.to(tl.int32, bitcast=True).to(tl.int64)
    ordered = tl.where(bits >= 0, bits, bits ^ 0x7FFFFFFF)
    key = ((ordered + 1) << 32) - 1 - order.to(tl.int64)
    return tl.where(score == float("-inf"), -9223372036854775807 - 1, key)


@triton.jit
def _key_order(key):
    return (4294967295 - (key & 4294967295)).to(tl.int32)


@triton.jit
def _tree_kernel(root_ptr, tokens_ptr, logprobs_ptr, ids_ptr, scores_ptr, parents_ptr, ranks_ptr, keys_ptr,
                 nodes_ptr, DEPTHS: tl.constexpr, RANKS: tl.constexpr, BUDGET: tl.constexpr,
                 CANDIDATES: tl.constexpr, BEAM: tl.constexpr, ENTRIES: tl.constexpr):
    slot = tl.arange(0, BEAM)
    in_beam = slot < BUDGET
    tl.store(scores_ptr + slot, tl.where(slot == 0, 0.0, float("-inf")), mask=in_beam)
    tl.debug_barrier()
    candidate = tl.arange(0, CANDIDATES)
    is_candidate = candidate < BUDGET * RANKS
    parent = candidate // RANKS
    rank = candidate % RANKS
    for depth in range(DEPTHS):
        previous = tl.load(scores_ptr + depth * BUDGET + parent, mask=is_candidate, other=float("-inf"))
        logprob = tl.load(logprobs_ptr + depth * RANKS + rank, mask=is_candidate, other=float("-inf"))
        keys = _sort_key(previous + logprob, candidate)
        tl.store(keys_ptr + candidate, tl.sort(keys, descending=True))
        tl.debug_barrier()
        key = tl.load(keys_ptr + slot, mask=in_beam, other=-9223372036854775807 - 1)
        order = _key_order(key)
        real = in_beam & (key != -9223372036854775807 - 1)
        beam_parent = tl.where(real, order // RANKS, 0)
        beam_rank = tl.where(real, order % RANKS, 0)
        score = (tl.load(scores_ptr + depth * BUDGET + beam_parent, mask=real, other=float("-inf"))
                 + tl.load(logprobs_ptr + depth * RANKS + beam_rank, mask=real, other=float("-inf")))
        row = depth * BUDGET + slot
        tl.store(scores_ptr + BUDGET + row, tl.where(real, score, float("-inf")), mask=in_beam)
        tl.store(parents_ptr + row, beam_parent, mask=in_beam)
        tl.store(ranks_ptr + row, beam_rank, mask=in_beam)
        tl.debug_barrier()
    # The tree: the best B - 1 of all beam entries (depth-major order: ties go to the shallower).
    entry = tl.arange(0, ENTRIES)
    is_entry = entry < DEPTHS * BUDGET
    keys = _sort_key(tl.load(scores_ptr + BUDGET + entry, mask=is_entry, other=float("-inf")), entry)
    tl.store(keys_ptr + entry, tl.sort(keys, descending=True))
    tl.store(nodes_ptr + entry, tl.zeros([ENTRIES], tl.int64), mask=is_entry)
    tl.debug_barrier()
    taken = slot < BUDGET - 1
    key = tl.load(keys_ptr + slot, mask=taken, other=-9223372036854775807 - 1)
    real = taken & (key != -9223372036854775807 - 1)
    chosen = tl.where(real, _key_order(key), 0)
    tl.store(nodes_ptr + chosen, (slot + 1).to(tl.int64), mask=real)
    tl.debug_barrier()
    depth_of = chosen // BUDGET  # depth - 1
    beam_parent = tl.load(parents_ptr + chosen, mask=real, other=0)
    parent_node = tl.load(nodes_ptr + (depth_of - 1) * BUDGET + beam_parent, mask=real & (depth_of > 0), other=0)
    token = tl.load(tokens_ptr + depth_of * RANKS + tl.load(ranks_ptr + chosen, mask=real, other=0), mask=real, other=0)
    node = slot + 1
    tl.store(ids_ptr + node, tl.where(real, token, 0), mask=taken)
    tl.store(ids_ptr + BUDGET + node, tl.where(real, depth_of + 1, 1).to(tl.int64), mask=taken)
    tl.store(ids_ptr + 2 * BUDGET + node, tl.where(real, parent_node, 0), mask=taken)
    first = slot == 0
    tl.store(ids_ptr + slot, tl.load(root_ptr + slot, mask=first, other=0), mask=first)
    tl.store(ids_ptr + BUDGET + slot, tl.zeros([BEAM], tl.int64), mask=first)
    tl.store(ids_ptr + 2 * BUDGET + slot, tl.full([BEAM], -1, tl.int64), mask=first)
    tl.store(ids_ptr + 3 * BUDGET + slot, (1 + tl.sum(real.to(tl.int64), axis=0)) + tl.zeros([BEAM], tl.int64),
             mask=first)


class TreeKernel:
    """The kernel with its workspace, for one (D, K, B) and device; ``__call__`` writes the tree's
    ids [3B + 1] (device_tree's layout) into ``out`` with one launch and no host sync, so a CUDA
    graph can hold it."""

    def __init__(self, depths: int, ranks: int, budget: int, device: torch.device):
        if depths < 1 or ranks < 1 or budget < 2:
            raise ValueError(f"depths, ranks, budget: expected >= 1, >= 1, >= 2, got {depths}, {ranks}, {budget}")
        self.depths, self.ranks, self.budget = depths, ranks, budget
        self.candidates = triton.next_power_of_2(budget * ranks)
        self.entries = triton.next_power_of_2(depths * budget)
        self.beam = triton.next_power_of_2(budget)
        self.scores = torch.empty((depths + 1) * budget, dtype=torch.float32, device=device)
        self.parents = torch.empty(depths * budget, dtype=torch.int32, device=device)
        self.ranks_ = torch.empty(depths * budget, dtype=torch.int32, device=device)
        self.keys = torch.empty(max(self.candidates, self.entries), dtype=torch.int64, device=device)
        self.nodes = torch.empty(depths * budget, dtype=torch.int64, device=device)

    def __call__(self, root: torch.Tensor, top_tokens: torch.Tensor, top_logprobs: torch.Tensor,
                 out: torch.Tensor) -> torch.Tensor:
        expected = (self.depths, self.ranks)
        if tuple(top_tokens.shape) != expected or tuple(top_logprobs.shape) != expected:
            raise ValueError(f"top_tokens/top_logprobs: expected {list(expected)}, got {list(top_tokens.shape)} and "
                             f"{list(top_logprobs.shape)}")
        if out.shape != (3 * self.budget + 1,) or out.dtype != torch.int64:
            raise ValueError(f"out: expected [{3 * self.budget + 1}] int64, got {list(out.shape)} {out.dtype}")
        _tree_kernel[(1,)](root.to(torch.int64), top_tokens.to(torch.int64).contiguous(),
                           top_logprobs.to(torch.float32).contiguous(), out, self.scores, self.parents, self.ranks_,
                           self.keys, self.nodes, DEPTHS=self.depths, RANKS=self.ranks, BUDGET=self.budget,
                           CANDIDATES=self.candidates, BEAM=self.beam, ENTRIES=self.entries, num_warps=4)
        return out
