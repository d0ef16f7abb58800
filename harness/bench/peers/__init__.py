"""Peers timed beside the variants: what a serving stack could use instead of a dedicated kernel.

- ``sdpa_gathered``, ``flex_attention`` (torch_peers.py): PyTorch's attention on rows gathered from
  the pool; any tree.
- ``flash_mla`` (flash_mla.py): FlashMLA's dense decode kernel; chain trees, page 64, sm_90.
- ``flashinfer_fa2``, ``flashinfer_fa3`` (flashinfer_mla.py): FlashInfer's MLA paged wrapper; chain
  trees.

The contract every factory follows is in base.py.
"""

from harness.bench.peers import flash_mla, flashinfer_mla, torch_peers
from harness.bench.peers.base import PeerUnavailable, is_causal

PEERS = {
    "sdpa_gathered": torch_peers.sdpa_gathered,
    "flex_attention": torch_peers.flex_attention,
    "flash_mla": flash_mla.flash_mla,
    "flashinfer_fa2": flashinfer_mla.flashinfer_fa2,
    "flashinfer_fa3": flashinfer_mla.flashinfer_fa3,
}

__all__ = ["PEERS", "PeerUnavailable", "is_causal"]
