"""PyTorch's own attention as peers: they take any tree mask, over rows gathered from the pool.

- ``sdpa_gathered``: per request, gather the KV rows through the block table (timed: that is what
  such a stack does), build the dense visibility mask, and call
  ``torch.nn.functional.scaled_dot_product_attention`` with the single latent head broadcast.
- ``flex_attention``: PyTorch FlexAttention on the gathered rows with a block mask built from the
  prefix length and the ancestor bitmask (compiled once per problem).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from verify_kernels import trees
from verify_kernels.paging import flat_slots

from harness.bench.peers.base import PeerUnavailable


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


# Shape -> the reason FlexAttention failed there, so the same shape at another page size is not
# compiled again. Keyed by the whole shape (L, T, H, tree, dims): a failure at one prefix length
# says nothing about another (the key once left L out, and FlexAttention was then never run at
# L >= 32768 after failing at 4096).
_FLEX_FAILURES: dict[tuple, str] = {}


def flex_shape_key(problem) -> tuple:
    """The failure cache's key: prefix lengths, T, H, Dqk, v_dim, dtype and tree kind."""
    return (tuple(problem.prefix_lens.tolist()), *problem.q.shape[1:], problem.v_dim, problem.q.dtype,
            problem.tree_kind)


def flex_attention(problem):
    dims = flex_shape_key(problem)
    if dims in _FLEX_FAILURES:
        raise PeerUnavailable(_FLEX_FAILURES[dims] + " (not compiled again: this shape failed earlier in this "
                              "run at another page size)")
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

    torch._dynamo.reset()  # one compile per shape; a sweep would otherwise hit dynamo's recompile limit
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

