"""Peers timed beside the variants: what a serving stack could use instead of a dedicated kernel.

A peer is not a variant: it does not honour the contract's no-allocation, graph-safe rules, and it
is never dispatched to. Each factory takes a VerifyProblem and returns a callable producing
[B, T, H, v_dim]; a factory raises PeerUnavailable (with the reason) when the peer cannot run the
problem here, and the bench records that reason as the row.

- ``sdpa_gathered``: per request, gather the KV rows through the block table (timed: that is what
  such a stack does), build the dense visibility mask, and call
  ``torch.nn.functional.scaled_dot_product_attention`` with the single latent head broadcast.
- ``flex_attention``: PyTorch FlexAttention on the gathered rows with a block mask built from the
  prefix length and the ancestor bitmask (compiled once per problem).
- ``flashinfer``: recorded as unavailable unless the package imports.
"""

from __future__ import annotations

import importlib.util

import torch
import torch.nn.functional as F

from verify_kernels import trees
from verify_kernels.paging import flat_slots


class PeerUnavailable(RuntimeError):
    """This peer cannot run the problem on this machine; the message says why."""


def _gather_positions(problem, request: int) -> torch.Tensor:
    """Flat slot ids of the request's rows, computed once (a serving stack keeps its indices)."""
    count = int(problem.prefix_lens[request]) + problem.q.shape[1]
    position = torch.arange(count, device=problem.q.device)
    return flat_slots(problem.block_table[request], position, problem.page_size)


def _visibility(problem, request: int) -> torch.Tensor:
    """Bool [T, L + T]: every prefix position, plus the node's ancestors among the tree tokens."""
    nodes = problem.q.shape[1]
    prefix_len = int(problem.prefix_lens[request])
    visible = torch.ones(nodes, prefix_len + nodes, dtype=torch.bool, device=problem.q.device)
    visible[:, prefix_len:] = trees.unpack_bits(problem.tree_mask[request], nodes)
    return visible


def sdpa_gathered(problem):
    flat_pool = problem.kv_cache.view(-1, problem.kv_cache.shape[-1])
    slots = [_gather_positions(problem, b) for b in range(problem.q.shape[0])]
    masks = [_visibility(problem, b) for b in range(problem.q.shape[0])]
    v_dim = problem.v_dim

    def call() -> torch.Tensor:
        outputs = []
        for b, (slot, mask) in enumerate(zip(slots, masks)):
            rows = flat_pool[slot]                         # [L+T, 576] gathered
            query = problem.q[b].transpose(0, 1)           # [H, T, 576]
            key = rows.unsqueeze(0)                        # [1, L+T, 576], broadcast over heads
            value = rows[:, :v_dim].unsqueeze(0)
            out = F.scaled_dot_product_attention(query.unsqueeze(0), key.unsqueeze(0), value.unsqueeze(0),
                                                 attn_mask=mask, scale=problem.sm_scale, enable_gqa=True)
            outputs.append(out[0].transpose(0, 1))         # [T, H, v_dim]
        return torch.stack(outputs)

    return call


# (Dqk, v_dim, dtype, T, H) -> the reason FlexAttention failed: compiling again for every prefix
# length of a sweep costs minutes and fails the same way. (Keyed by T and H too: on an H200 it
# compiled at T = 16 and 64 and ran out of shared memory at T = 256.)
_FLEX_FAILURES: dict[tuple, str] = {}


def flex_attention(problem):
    dims = (problem.q.shape[-1], problem.v_dim, problem.q.dtype, problem.q.shape[1], problem.q.shape[2])
    if dims in _FLEX_FAILURES:
        raise PeerUnavailable(_FLEX_FAILURES[dims] + " (not compiled again: this T, H and dims failed earlier "
                              "in this run)")
    try:
        from torch.nn.attention.flex_attention import create_block_mask
        from torch.nn.attention.flex_attention import flex_attention as flex
    except ImportError as error:
        raise PeerUnavailable(f"torch.nn.attention.flex_attention not importable: {error}") from None
    if problem.q.shape[0] != 1:
        raise PeerUnavailable("bench wiring covers one request (B = 1)")
    device = problem.q.device
    prefix_len = int(problem.prefix_lens[0])
    nodes, heads = problem.q.shape[1], problem.q.shape[2]
    keys = prefix_len + nodes
    rows = problem.kv_cache.view(-1, problem.kv_cache.shape[-1])[_gather_positions(problem, 0)]
    ancestor = trees.unpack_bits(problem.tree_mask[0], nodes)  # [T, T]

    def mask_mod(b, h, q_idx, kv_idx):
        tree_col = (kv_idx - prefix_len).clamp(min=0)
        return (kv_idx < prefix_len) | ancestor[q_idx, tree_col]

    compiled = torch.compile(flex, dynamic=False)
    try:
        block_mask = create_block_mask(mask_mod, None, None, nodes, keys, device=device)
        query = problem.q[0].transpose(0, 1).unsqueeze(0)            # [1, H, T, 576]
        key = rows.unsqueeze(0).unsqueeze(0).expand(1, heads, keys, rows.shape[-1])
        value = rows[:, :problem.v_dim].unsqueeze(0).unsqueeze(0).expand(1, heads, keys, problem.v_dim)

        def call() -> torch.Tensor:
            return compiled(query, key, value, block_mask=block_mask, scale=problem.sm_scale)[0].transpose(0, 1)[None]

        call()  # compile now, so a failure is the peer's reason, not a timing crash
    except Exception as error:  # compilation failures are the finding, recorded as the row
        reason = (f"FlexAttention failed for Dqk={rows.shape[-1]}, Dv={problem.v_dim}: "
                  f"{type(error).__name__}: {(str(error).splitlines() or [''])[0][:300]}")
        _FLEX_FAILURES[dims] = reason
        raise PeerUnavailable(reason) from None
    return call


def flashinfer(problem):
    if importlib.util.find_spec("flashinfer") is None:
        raise PeerUnavailable("flashinfer is not installed on this machine")
    raise PeerUnavailable("flashinfer is importable but its tree-mask MLA wiring is not written yet")


PEERS = {
    "sdpa_gathered": sdpa_gathered,
    "flex_attention": flex_attention,
    "flashinfer": flashinfer,
}
