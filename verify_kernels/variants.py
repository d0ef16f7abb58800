"""The registered verify-attention variants: one plain dict from name to module path.

Every variant module exposes the same four names and is imported only when used, so importing
``verify_kernels`` needs neither Triton nor CuPy:

- ``DEFAULT_CONFIG``: dict of tunables (optionally ``default_config(shape)`` for per-arch defaults,
  and ``complete_config(config, shape)`` to check a config and fill shape-derived values);
- ``unsupported_reason(shape: ProblemShape) -> str | None``: why it cannot run a shape (None: it can);
- ``run(q, kv_cache, block_table, prefix_lens, tree_mask, *, sm_scale, v_dim, out, config)``:
  writes ``out`` in place, no host sync, no allocation beyond what ``config`` implies.
"""

from __future__ import annotations

import importlib
from types import ModuleType

# Preference order for variant="auto" before tuned records exist: fastest first.
VARIANTS: dict[str, str] = {
    "triton_ps1": "verify_kernels.triton_ps1",
    "triton_splitkv": "verify_kernels.triton_splitkv",
    "cuda_coalesced": "verify_kernels.cuda_coalesced",
    "gluon_wgmma": "verify_kernels.gluon_wgmma",
    "gluon_wgmma_ws": "verify_kernels.gluon_wgmma_ws",
}

AUTO_PREFERENCE: tuple[str, ...] = ("gluon_wgmma_ws", "gluon_wgmma", "triton_splitkv", "cuda_coalesced", "triton_ps1")


def load_variant(name: str) -> ModuleType:
    """Import a registered variant's module; unknown names raise with the list of variants."""
    if name not in VARIANTS:
        raise ValueError(f"variant: unknown variant {name!r}; expected one of {sorted(VARIANTS)} or 'auto'")
    return importlib.import_module(VARIANTS[name])


def resolve_config(name: str, module: ModuleType, config: dict | None, shape) -> dict:
    """The variant's defaults for ``shape`` overridden by ``config``, then checked and completed.

    Unknown keys raise with the known ones. Uses shapes only (no host sync).
    """
    defaults = getattr(module, "default_config", None)
    merged = dict(defaults(shape) if defaults else module.DEFAULT_CONFIG)
    if config:
        unknown = sorted(set(config) - set(merged))
        if unknown:
            raise ValueError(f"config: unknown keys {unknown} for variant {name!r}; expected keys {sorted(merged)}")
        merged.update(config)
    complete = getattr(module, "complete_config", None)
    return complete(merged, shape) if complete else merged
