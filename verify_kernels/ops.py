"""``verify_attention`` as torch custom ops, for models built with ``torch.compile`` and CUDA graphs.

Importing this module registers two ops (the one import-time side effect in the library, and the
reason this module is not imported by ``verify_kernels`` itself):

- ``torch.ops.verify_kernels.verify_attention(q, kv_cache, block_table, prefix_lens, tree_mask,
  sm_scale, v_dim=512, variant="auto") -> Tensor [B, T, H, v_dim]``;
- ``torch.ops.verify_kernels.verify_attention_out(..., out)``: writes ``out`` in place (mutated
  argument), for static buffers in captured graphs.

Both skip the value checks (``validate=False``: they need a host sync, which neither compiled
graphs nor capture allow); shapes, dtypes and devices are still checked. Their fake
implementations give ``torch.compile`` the output's shape, dtype and device without running a
kernel, so a module that calls them compiles with ``fullgraph=True``. Tuned configs come from the
shipped tables as with ``variant="auto"``; a config dict is not an op argument type.
"""

from __future__ import annotations

import torch

from .api import verify_attention as _verify_attention

__all__ = ["verify_attention", "verify_attention_out"]


@torch.library.custom_op("verify_kernels::verify_attention", mutates_args=())
def verify_attention(q: torch.Tensor, kv_cache: torch.Tensor, block_table: torch.Tensor, prefix_lens: torch.Tensor,
                     tree_mask: torch.Tensor, sm_scale: float, v_dim: int = 512, variant: str = "auto") -> torch.Tensor:
    """Tree-verify attention, a new output [B, T, H, v_dim] (see ``verify_kernels.verify_attention``)."""
    return _verify_attention(q, kv_cache, block_table, prefix_lens, tree_mask, sm_scale=sm_scale, v_dim=v_dim,
                             variant=variant, validate=False)


@verify_attention.register_fake
def _verify_attention_fake(q, kv_cache, block_table, prefix_lens, tree_mask, sm_scale, v_dim=512, variant="auto"):
    return q.new_empty(*q.shape[:3], v_dim)


@torch.library.custom_op("verify_kernels::verify_attention_out", mutates_args=("out",))
def verify_attention_out(q: torch.Tensor, kv_cache: torch.Tensor, block_table: torch.Tensor, prefix_lens: torch.Tensor,
                         tree_mask: torch.Tensor, out: torch.Tensor, sm_scale: float, v_dim: int = 512,
                         variant: str = "auto") -> None:
    """Tree-verify attention written into ``out`` [B, T, H, v_dim] in place."""
    _verify_attention(q, kv_cache, block_table, prefix_lens, tree_mask, sm_scale=sm_scale, v_dim=v_dim,
                      variant=variant, out=out, validate=False)


@verify_attention_out.register_fake
def _verify_attention_out_fake(q, kv_cache, block_table, prefix_lens, tree_mask, out, sm_scale, v_dim=512,
                               variant="auto"):
    return None
