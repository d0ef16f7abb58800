"""The one correctness oracle: eager tree-verify attention in float64, CPU or GPU.

For request b, node i and head h the output is softmax(sm_scale * q[b,i,h] . K^T) V over the keys
K = the request's rows at positions 0 .. prefix_len + T - 1 (V = K[:, :v_dim]), where every prefix
position is visible and tree position prefix_len + j is visible iff node j is i or an ancestor of i.

Only the rows a request owns are gathered, so nothing from unused pool slots (NaN in tests) can
reach the result. Variants never import this module.
"""

from __future__ import annotations

import torch

from . import contract, trees
from .paging import flat_slots

# Score elements per chunk of query rows (float64): bounds the oracle's memory at ~1 GB.
_SCORE_ELEMENTS_PER_CHUNK = 1 << 27


def gather_request_rows(kv_cache: torch.Tensor, block_table_row: torch.Tensor, num_positions: int) -> torch.Tensor:
    """The request's KV rows at logical positions 0 .. num_positions-1: [num_positions, Dqk]."""
    position = torch.arange(num_positions, device=kv_cache.device)
    return kv_cache.view(-1, kv_cache.shape[-1])[flat_slots(block_table_row, position, kv_cache.shape[1])]


def reference_attention(q, kv_cache, block_table, prefix_lens, tree_mask, *, sm_scale, v_dim=512,
                        validate=True) -> torch.Tensor:
    """Tree-verify attention in float64; returns [B, T, H, v_dim] float32 on q's device."""
    shape = contract.check_arguments(q, kv_cache, block_table, prefix_lens, tree_mask,
                                     sm_scale=sm_scale, v_dim=v_dim, dtypes=contract.ORACLE_DTYPES)
    if validate:
        contract.check_values(block_table, prefix_lens, tree_mask, shape)
    num_nodes, heads = shape.tree_nodes, shape.heads
    out = torch.empty(shape.batch, num_nodes, heads, v_dim, dtype=torch.float32, device=q.device)
    visible_tree = trees.unpack_bits(tree_mask, num_nodes)  # [B, T, T] bool
    for b, prefix_len in enumerate(prefix_lens.tolist()):
        keys = gather_request_rows(kv_cache, block_table[b], prefix_len + num_nodes).double()
        values = keys[:, :v_dim]
        visible = torch.ones(num_nodes, prefix_len + num_nodes, dtype=torch.bool, device=q.device)
        visible[:, prefix_len:] = visible_tree[b]
        queries = q[b].double()  # [T, H, Dqk]
        nodes_per_chunk = max(1, _SCORE_ELEMENTS_PER_CHUNK // (heads * (prefix_len + num_nodes)))
        for start in range(0, num_nodes, nodes_per_chunk):
            stop = min(num_nodes, start + nodes_per_chunk)
            scores = torch.einsum("thd,nd->thn", queries[start:stop], keys) * float(sm_scale)
            scores.masked_fill_(~visible[start:stop, None, :], float("-inf"))
            probs = torch.softmax(scores, dim=-1)
            out[b, start:stop] = torch.einsum("thn,nd->thd", probs, values).float()
    return out
