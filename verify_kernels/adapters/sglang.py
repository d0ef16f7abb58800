"""From SGLang's extend-attention verify call to ``verify_attention``'s arguments.

SGLang verifies a draft tree with its Triton extend kernel,
``extend_attention_fwd(q_extend, k_extend, v_extend, o_extend, k_buffer, v_buffer, qo_indptr,
kv_indptr, kv_indices, custom_mask, is_causal, mask_indptr, max_len_extend, ...)``, over a
page_size=1 pool:

- ``q_extend`` [sum T_b, H, 576]: the tree tokens' queries, request after request;
- ``k_buffer`` [slots, 1, 576]: the latent pool (MLA: one KV head; V is its first 512 columns);
- ``kv_indptr`` [B + 1], ``kv_indices``: each request's prefix token slots;
- ``out_cache_loc`` [sum T_b]: the slots where the tree tokens' KV was written before attention
  (SGLang passes these rows again as ``k_extend``; here they are read from the pool);
- ``custom_mask`` (bool, flat) and ``mask_indptr`` [B + 1]: per request a T_b x (prefix_b + T_b)
  row-major block, True where a tree token may attend.

:func:`from_extend_attention` turns these into a :class:`~verify_kernels.problem.VerifyProblem` on
the same pool (page_size 1: ``variant="triton_ps1"`` or ``"auto"`` runs it) after checking that
every mask row is a well-formed ancestor set that sees the whole prefix. The paged route:
``problem.with_page_size(64)`` copies the rows into a pool of 64-token pages for the paged
variants; a serving stack that keeps such a pool calls ``commit_accepted`` after each verify so the
accepted path's rows become contiguous (pages > 1 need that). The conversion reads lengths and
masks on the host: it is preparation, not a step to capture in a CUDA graph.
"""

from __future__ import annotations

import torch

from .. import contract, trees
from ..problem import VerifyProblem

HEAD_DIM = 576


def from_extend_attention(q_extend: torch.Tensor, k_buffer: torch.Tensor, qo_indptr: torch.Tensor,
                          kv_indptr: torch.Tensor, kv_indices: torch.Tensor, out_cache_loc: torch.Tensor,
                          custom_mask: torch.Tensor, mask_indptr: torch.Tensor, *, sm_scale: float | None = None,
                          v_dim: int = 512) -> VerifyProblem:
    """SGLang's extend-kernel arguments (above) -> the contract's, on the same page_size=1 pool."""
    if q_extend.dim() != 3 or q_extend.shape[-1] != HEAD_DIM:
        raise ValueError(f"q_extend: expected [tokens, heads, {HEAD_DIM}], got {tuple(q_extend.shape)}")
    if k_buffer.dim() not in (2,
                              3) or k_buffer.shape[-1] != HEAD_DIM or (k_buffer.dim() == 3 and k_buffer.shape[1] != 1):
        raise ValueError(f"k_buffer: expected the MLA latent pool [slots, 1, {HEAD_DIM}], got {tuple(k_buffer.shape)}")
    contract.check_pool_layout("k_buffer", k_buffer)  # the problem shares the pool, never copies it
    tree_sizes = (qo_indptr[1:] - qo_indptr[:-1]).tolist()
    prefix_lens = (kv_indptr[1:] - kv_indptr[:-1]).tolist()
    if len(set(tree_sizes)) != 1 or tree_sizes[0] < 1:
        raise ValueError("qo_indptr: every request must verify the same number of tree tokens (>= 1), got "
                         f"{tree_sizes}")
    if len(prefix_lens) != len(tree_sizes):
        raise ValueError(f"kv_indptr: expected {len(tree_sizes) + 1} entries like qo_indptr, got "
                         f"{len(prefix_lens) + 1}")
    if q_extend.shape[0] != sum(tree_sizes) or out_cache_loc.shape[0] != sum(tree_sizes):
        raise ValueError(f"q_extend / out_cache_loc: expected {sum(tree_sizes)} tree tokens (qo_indptr[-1]), got "
                         f"{q_extend.shape[0]} / {out_cache_loc.shape[0]}")
    batch, nodes, heads = len(tree_sizes), tree_sizes[0], q_extend.shape[1]
    device = q_extend.device

    # Token-granular block table: prefix slots, then the tree tokens' slots, then padding (slot 0).
    block_table = torch.zeros(batch, max(prefix_lens) + nodes, dtype=torch.int32, device=device)
    bits = torch.zeros(batch, nodes, nodes, dtype=torch.bool, device=device)
    for b, (prefix, start) in enumerate(zip(prefix_lens, kv_indptr.tolist())):
        block_table[b, :prefix] = kv_indices[start:start + prefix].to(torch.int32)
        block_table[b, prefix:prefix + nodes] = out_cache_loc[b * nodes:(b + 1) * nodes].to(torch.int32)
        first, width = int(mask_indptr[b]), prefix + nodes
        if custom_mask.shape[0] < first + nodes * width:
            raise ValueError(f"custom_mask: request {b} needs entries [{first}, {first + nodes * width}), "
                             f"the mask has {custom_mask.shape[0]}")
        block = custom_mask[first:first + nodes * width].reshape(nodes, width).bool()
        if not block[:, :prefix].all():
            row = int((~block[:, :prefix]).any(1).nonzero()[0])
            raise ValueError(f"custom_mask: request {b} tree token {row} does not see its whole prefix "
                             f"({prefix} tokens): not a verify mask")
        bits[b] = block[:, prefix:]
    tree_mask = trees.pack_bits(bits)
    problems = trees.tree_mask_problems(tree_mask)
    if problems:
        raise ValueError("custom_mask: a tree token's row is not an ancestor set: "
                         + "; ".join(p.replace("tree ", "request ").replace("row ",
                                                                            "tree token ") for p in problems[:3]))
    if (block_table.to(torch.int64) >= k_buffer.shape[0]).any() or (block_table < 0).any():
        raise ValueError(f"kv_indices / out_cache_loc: slots must lie in the pool [0, {k_buffer.shape[0]})")
    return VerifyProblem(
        q=q_extend.reshape(batch, nodes, heads, HEAD_DIM), kv_cache=k_buffer.view(-1, 1, HEAD_DIM),
        block_table=block_table, prefix_lens=torch.tensor(prefix_lens, dtype=torch.int32, device=device),
        tree_mask=tree_mask, parents=trees.mask_to_parents(tree_mask),
        sm_scale=float(sm_scale) if sm_scale is not None else HEAD_DIM ** -0.5, v_dim=v_dim, seed=0,
        tree_kind="sglang")
