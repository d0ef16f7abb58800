"""FlashInfer's MLA paged wrapper as a peer, with its ``fa2`` backend (portable: what SGLang routes
sm_120 MLA to) and its ``fa3`` backend (Hopper), causal over s_q = T, on chain trees.

FlashInfer is installed, never copied in: scripts/slim_flashinfer.py writes a slimmed 0.7.x (the
MLA path) that travels to the GPU host, where the wrappers JIT-compile their kernels on first use.
The wrapper reads the pool in place: ``ckv_cache`` and ``kpe_cache`` are the [num_pages, page, 512]
and [num_pages, page, 64] column views of our [num_pages, page, 576] pool (rows 1152 bytes apart),
``kv_indices`` the request's block-table pages in order, ``kv_len_arr`` = L + T, ``qo_indptr`` T per
request; q is split the same way into ``q_nope`` and ``q_pe`` [B*T, H, 512 | 64]. ``plan`` runs once
per problem (on the host), then ``run`` is the timed call.

fa2 picks its tiles at launch from the GPU's shared memory per SM (``DISPATCH_SMEM_CONFIG`` in its
``mla.cuh``): on the H200 2 stages of 64-token KV tiles with Q K^T sharded over its two warp halves, on
an RTX PRO 6000 (sm_120, 100 KB per SM) 1 stage of 16-token tiles, unsharded. Each fa2 call carries
the config it ran as ``config`` (read from the header it compiles, ``fa2_config``), which the bench
records as the row's resolved config. ``scripts/gpu_peers_env.sh``'s ``fa2_as_arch`` makes a
host copy of the package whose launch reads a given value instead of the GPU's (marked in the header
with ``FORCED_MARK``): fa2 run on the H200 with sm_120's tiles, the peer beside ``--proxy-for sm_120``.
"""

from __future__ import annotations

import re
from pathlib import Path

import torch

from harness.bench.peers.base import (PeerUnavailable, import_peer, require_causal, require_cuda_arch,
                                      require_mla_dims)

WORKSPACE_BYTES = 128 * 1024 * 1024
BACKEND_ARCHS = {"fa2": ((8, 0), (8, 6), (8, 9), (9, 0), (10, 0), (12, 0)), "fa3": ((9, 0),)}


def inputs(problem) -> dict:
    """The plan and run arguments FlashInfer is handed for ``problem`` (views of our pool and q)."""
    batch, nodes, heads, head_dim = problem.q.shape
    v_dim, page = problem.v_dim, problem.page_size
    device = problem.q.device
    kv_len = (problem.prefix_lens + nodes).to(torch.int32)
    pages = [(int(n) + page - 1) // page for n in kv_len.tolist()]
    kv_indices = torch.cat([problem.block_table[b, :count] for b, count in enumerate(pages)]).to(torch.int32)
    kv_indptr = torch.tensor([0, *torch.tensor(pages).cumsum(0).tolist()], dtype=torch.int32, device=device)
    qo_indptr = torch.arange(batch + 1, dtype=torch.int32, device=device) * nodes
    q_rows = problem.q.view(batch * nodes, heads, head_dim)
    return {"qo_indptr": qo_indptr, "kv_indptr": kv_indptr, "kv_indices": kv_indices, "kv_len_arr": kv_len,
            "num_heads": heads, "head_dim_ckv": v_dim, "head_dim_kpe": head_dim - v_dim, "page_size": page,
            "sm_scale": problem.sm_scale, "q_nope": q_rows[..., :v_dim], "q_pe": q_rows[..., v_dim:],
            "ckv_cache": problem.kv_cache[..., :v_dim], "kpe_cache": problem.kv_cache[..., v_dim:]}


MLA_HEADER = Path("data/include/flashinfer/attention/mla.cuh")  # under the flashinfer package
FORCED_MARK = "vk: forced shared memory per SM"
_BRANCH = re.compile(r"smem_limit_per_sm\s*>=\s*(\d+)\s*\)\s*\{[^}]*?NUM_STAGES\s*=\s*(\d+);[^}]*?"
                     r"CTA_TILE_KV\s*=\s*(\d+);[^}]*?QK_SHARD\s*=\s*(true|false);", re.S)
_FORCED = re.compile(r"smem_limit_per_sm\s*=\s*(\d+);\s*/\*\s*" + re.escape(FORCED_MARK))


def fa2_config(header: str, smem_per_sm: int) -> dict:
    """The tiles fa2's launch takes, from its header's text: the shared memory per SM it reads (the GPU's,
    or the value a ``FORCED_MARK`` line sets), then the first ``DISPATCH_SMEM_CONFIG`` branch whose
    threshold that meets: ``NUM_STAGES``, ``CTA_TILE_KV``, ``QK_SHARD``. A header this does not parse
    gives the shared memory and why, so a record never claims tiles it did not read."""
    forced = _FORCED.search(header)
    config = {"smem_per_sm": int(forced.group(1)) if forced else smem_per_sm, "smem_forced": bool(forced)}
    branches = [(int(t), int(stages), int(tile), shard == "true") for t, stages, tile, shard in _BRANCH.findall(header)]
    if not branches:
        return {**config, "tiles": "unread: no DISPATCH_SMEM_CONFIG branch found in mla.cuh"}
    for threshold, stages, tile, shard in sorted(branches, reverse=True):
        if config["smem_per_sm"] >= threshold:
            return {**config, "NUM_STAGES": stages, "CTA_TILE_KV": tile, "QK_SHARD": shard}
    return {**config, "tiles": f"none: below every threshold {sorted(t for t, *_ in branches)}"}


def causal_paged_reference(arguments: dict) -> torch.Tensor:
    """What the wrapper computes with ``causal=True``, in float64 on its own arguments: query t of
    request b sees keys 0 .. kv_len[b] - q_len[b] + t of the pages kv_indices[kv_indptr[b]:]. Used to
    test that ``inputs`` pose our problem. Returns [B*T, H, head_dim_ckv]."""
    a = arguments
    page = a["page_size"]
    out = torch.empty(*a["q_nope"].shape, dtype=torch.float64, device=a["q_nope"].device)
    for b in range(len(a["kv_len_arr"])):
        q0, q1 = int(a["qo_indptr"][b]), int(a["qo_indptr"][b + 1])
        count, first_page = int(a["kv_len_arr"][b]), int(a["kv_indptr"][b])
        position = torch.arange(count, device=out.device)
        slot_page = a["kv_indices"][first_page + position // page].long()
        ckv = a["ckv_cache"][slot_page, position % page].double()
        kpe = a["kpe_cache"][slot_page, position % page].double()
        scores = (torch.einsum("thd,nd->thn", a["q_nope"][q0:q1].double(), ckv)
                  + torch.einsum("thd,nd->thn", a["q_pe"][q0:q1].double(), kpe)) * a["sm_scale"]
        last_visible = count - (q1 - q0) + torch.arange(q1 - q0, device=out.device)
        scores.masked_fill_(position[None, None, :] > last_visible[:, None, None], float("-inf"))
        out[q0:q1] = torch.einsum("thn,nd->thd", torch.softmax(scores, dim=-1), ckv)
    return out


def _peer(backend: str):
    name = f"flashinfer_{backend}"

    def factory(problem):
        require_causal(problem, name)
        require_mla_dims(problem, name)
        require_cuda_arch(problem, name, BACKEND_ARCHS[backend])
        mla = import_peer("flashinfer.mla", "flashinfer",
                          "scripts/slim_flashinfer.py writes a copy that travels to the GPU host")
        a = inputs(problem)
        workspace = torch.empty(WORKSPACE_BYTES, dtype=torch.uint8, device=problem.q.device)
        wrapper = mla.BatchMLAPagedAttentionWrapper(workspace, backend=backend)
        try:
            wrapper.plan(a["qo_indptr"], a["kv_indptr"], a["kv_indices"], a["kv_len_arr"], a["num_heads"],
                         a["head_dim_ckv"], a["head_dim_kpe"], a["page_size"], True, a["sm_scale"],
                         problem.q.dtype, problem.kv_cache.dtype)
        except (ValueError, RuntimeError, NotImplementedError) as error:
            raise PeerUnavailable(f"{name}: plan refused the problem: {type(error).__name__}: "
                                  f"{(str(error).splitlines() or [''])[0][:300]}") from None
        batch, nodes, heads, _ = problem.q.shape
        out = torch.empty(batch * nodes, heads, problem.v_dim, dtype=problem.q.dtype, device=problem.q.device)

        def call() -> torch.Tensor:
            wrapper.run(a["q_nope"], a["q_pe"], a["ckv_cache"], a["kpe_cache"], out=out)
            return out.view(batch, nodes, heads, problem.v_dim)

        if backend == "fa2":
            header = Path(mla.__file__).resolve().parent.parent / MLA_HEADER  # flashinfer/mla/ -> flashinfer/
            smem = torch.cuda.get_device_properties(problem.q.device).shared_memory_per_multiprocessor
            call.config = (fa2_config(header.read_text(), smem) if header.exists()
                           else {"smem_per_sm": smem, "tiles": f"unread: no {header}"})
        return call

    factory.__name__ = name
    return factory


flashinfer_fa2 = _peer("fa2")
flashinfer_fa3 = _peer("fa3")
