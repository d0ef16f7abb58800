"""FlashMLA (deepseek-ai) as a peer: its dense decode kernel, causal over s_q = T, on chain trees.

FlashMLA is installed, never copied in: scripts/build_flash_mla.sh builds the snapshot in
../shared/peers/FlashMLA on the GPU host (sm_90a only) into an ignored folder that travels.
Its decode kernel reads the pool in place: ``k_cache`` [num_pages, 64, 1, 576] is our
[num_pages, 64, 576] pool with a unit head axis, the block table and ``cache_seqlens`` = L + T are
ours. It packs the T x H query rows of a request into 64-row tiles and balances KV splits with a
tile scheduler built on the first call (``get_mla_metadata``), reused while shapes stay the same.
Only page size 64, Dqk 576, v_dim 512 and sm_90 (Hopper) are supported.
"""

from __future__ import annotations

import torch

from harness.bench.peers.base import (PeerUnavailable, import_peer, require_causal, require_cuda_arch,
                                      require_mla_dims)

PAGE_SIZE = 64


def inputs(problem) -> dict:
    """The arguments FlashMLA is handed for ``problem`` (views of our tensors, no copies but seqlens)."""
    nodes = problem.q.shape[1]
    return {"q": problem.q, "k_cache": problem.kv_cache.unsqueeze(2), "block_table": problem.block_table,
            "cache_seqlens": (problem.prefix_lens + nodes).to(torch.int32), "head_dim_v": problem.v_dim,
            "softmax_scale": problem.sm_scale}


def causal_paged_reference(q, k_cache, block_table, cache_seqlens, head_dim_v, softmax_scale) -> torch.Tensor:
    """What FlashMLA's causal decode computes, in float64 on its own arguments: query t of request
    b sees keys 0 .. cache_seqlens[b] - s_q + t. Used to test that ``inputs`` pose our problem."""
    batch, s_q, heads, _ = q.shape
    page = k_cache.shape[1]
    out = torch.empty(batch, s_q, heads, head_dim_v, dtype=torch.float64, device=q.device)
    for b in range(batch):
        count = int(cache_seqlens[b])
        position = torch.arange(count, device=q.device)
        keys = k_cache[block_table[b, position // page].long(), position % page, 0].double()
        scores = torch.einsum("thd,nd->thn", q[b].double(), keys) * softmax_scale
        last_visible = count - s_q + torch.arange(s_q, device=q.device)
        scores.masked_fill_(position[None, None, :] > last_visible[:, None, None], float("-inf"))
        out[b] = torch.einsum("thn,nd->thd", torch.softmax(scores, dim=-1), keys[:, :head_dim_v])
    return out


def flash_mla(problem):
    require_causal(problem, "flash_mla")
    require_mla_dims(problem, "flash_mla")
    if problem.page_size != PAGE_SIZE:
        raise PeerUnavailable(f"flash_mla: page size must be {PAGE_SIZE} (FlashMLA's only one); got "
                              f"{problem.page_size}")
    require_cuda_arch(problem, "flash_mla", ((9, 0),))
    module = import_peer("flash_mla", "flash_mla", "build it with scripts/build_flash_mla.sh on the GPU host")
    arguments = inputs(problem)
    schedule, _ = module.get_mla_metadata()

    def call() -> torch.Tensor:
        out, _ = module.flash_mla_with_kvcache(arguments["q"], arguments["k_cache"], arguments["block_table"],
                                               arguments["cache_seqlens"], arguments["head_dim_v"], schedule,
                                               softmax_scale=arguments["softmax_scale"], causal=True)
        return out

    return call
