"""``verify_attention``: the one entry point every caller uses, whatever variant runs."""

from __future__ import annotations

import torch

from . import contract, dispatch, variants


class UnsupportedProblemError(ValueError):
    """The requested variant (or every variant, for "auto") cannot run this problem."""


def _supported_variants(shape: contract.ProblemShape) -> dict[str, str | None]:
    """Variant name -> None if it runs ``shape``, else the reason it does not."""
    reasons = {}
    for name in variants.VARIANTS:
        try:
            reasons[name] = variants.load_variant(name).unsupported_reason(shape)
        except ImportError as error:  # e.g. CuPy or Triton missing on this machine
            reasons[name] = f"cannot import: {error}"
    return reasons


def select_variant(variant: str, shape: contract.ProblemShape) -> tuple[str, dict | None]:
    """Resolve ``variant`` for ``shape``: (name, tuned config or None).

    An explicit name never falls back to another variant. "auto" takes the tuned winner for this
    GPU and shape bucket when one exists (dispatch.py), else the first supporting variant in
    AUTO_PREFERENCE with its default config.
    """
    if variant != "auto":
        module = variants.load_variant(variant)
        reason = module.unsupported_reason(shape)
        if reason is not None:
            supported = [n for n, r in _supported_variants(shape).items() if r is None]
            raise UnsupportedProblemError(
                f"variant {variant!r} does not support this problem: {reason}. "
                f"Variants that do: {supported or 'none'}"
            )
        return variant, None
    tuned = dispatch.tuned_choice(shape)
    if tuned is not None and variants.load_variant(tuned[0]).unsupported_reason(shape) is None:
        return tuned
    reasons = _supported_variants(shape)
    for name in variants.AUTO_PREFERENCE:
        if reasons.get(name) is None:
            return name, None
    details = "; ".join(f"{n}: {r}" for n, r in reasons.items())
    raise UnsupportedProblemError(f"variant 'auto': no variant supports this problem ({details})")


def verify_attention(q, kv_cache, block_table, prefix_lens, tree_mask, *, sm_scale, v_dim=512,
                     variant="auto", config=None, out=None, validate=True) -> torch.Tensor:
    """Tree-verify attention over a paged latent KV cache; returns ``out`` [B, T, H, v_dim].

    ``validate=True`` also checks values (page ids, capacity, tree-mask structure), which needs a
    host sync; pass ``validate=False`` inside CUDA-graph capture. Shape, dtype and device checks
    always run.
    """
    shape = contract.check_arguments(q, kv_cache, block_table, prefix_lens, tree_mask,
                                     sm_scale=sm_scale, v_dim=v_dim)
    if out is not None:
        contract.check_out(out, shape)
    if validate:
        contract.check_values(block_table, prefix_lens, tree_mask, shape)
    name, tuned_config = select_variant(variant, shape)
    module = variants.load_variant(name)
    resolved = variants.resolve_config(name, module, config if config is not None else tuned_config, shape)
    # Views (strided prefix_lens, a column of a larger q, a transposed out) are copied into layouts the
    # kernels honour, never read as if they were contiguous.
    q, block_table, prefix_lens, tree_mask, kernel_out = contract.kernel_layouts(q, block_table, prefix_lens,
                                                                                 tree_mask, out)
    if kernel_out is None:
        kernel_out = torch.empty(shape.batch, shape.tree_nodes, shape.heads, shape.v_dim, dtype=q.dtype,
                                 device=q.device)
    module.run(q, kv_cache, block_table, prefix_lens, tree_mask, sm_scale=float(sm_scale), v_dim=shape.v_dim,
               out=kernel_out, config=resolved)
    if out is None:
        return kernel_out
    if kernel_out is not out:
        out.copy_(kernel_out)
    return out
