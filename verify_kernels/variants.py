"""The registered verify-attention variants: one plain dict from name to module path, and the
interface every variant module has (``VariantModule``), written out once.

Variant modules are imported only when used, so importing ``verify_kernels`` needs neither Triton
nor CuPy. The harness reads a variant only through the names below: the required ones of
``VariantModule`` and the optional ones of ``OPTIONAL``, through ``optional(module, name)``.
"""

from __future__ import annotations

import importlib
import numbers
from types import ModuleType
from typing import Any, Protocol, runtime_checkable

from .arch import config_key, device_arch

VARIANTS: dict[str, str] = {
    "triton_ps1": "verify_kernels.triton_ps1",
    "triton_splitkv": "verify_kernels.triton_splitkv",
    "cuda_coalesced": "verify_kernels.cuda_coalesced",
    "cuda_ws": "verify_kernels.cuda_ws",
    "cuda_qreg": "verify_kernels.cuda_qreg",
    "gluon_wgmma_ws": "verify_kernels.gluon_wgmma_ws",
    "gluon_wgmma_sym": "verify_kernels.gluon_wgmma_sym",
}

# variant="auto" without a table entry: the first variant that runs the shape, fastest first as measured on
# the H200 (results/bench/scheduler-*-nvidia-h200.jsonl). Each GPU family finds its fastest there: Hopper
# gluon_wgmma_ws; sm_120 (no wgmma) cuda_ws, the portable kernel; GPUs before sm_90 (no bulk copies)
# triton_splitkv; a page_size=1 pool triton_ps1.
AUTO_PREFERENCE: tuple[str, ...] = ("gluon_wgmma_ws", "cuda_ws", "triton_splitkv", "cuda_coalesced",
                                    "triton_ps1")


@runtime_checkable
class VariantModule(Protocol):
    """What every variant module defines (a module, so these are module-level names)."""

    DEFAULT_CONFIG: dict            # the tunables and their defaults
    PAGE_SIZES: tuple[int, ...]     # page sizes it runs
    CHECK_PAGE_SIZES: tuple[int, ...]  # page sizes the oracle check runs it at

    def unsupported_reason(self, shape) -> str | None:
        """Why it cannot run ``shape`` (a ``ProblemShape``); None: it can."""

    def run(self, q, kv_cache, block_table, prefix_lens, tree_mask, *, sm_scale, v_dim, out, config) -> None:
        """Write ``out`` in place: no host sync, no allocation beyond what ``config`` implies."""

    def kernel_specs(self, config: dict) -> list:
        """``kernel_spec.TritonKernelSpec`` / ``CudaKernelSpec`` per kernel, for the offline compile."""


# Optional names and what a variant without one gets.
OPTIONAL: dict[str, Any] = {
    "DEFAULT_CONFIGS": {},                            # per-arch defaults ("sm_90", "sm_120"): defaults_for picks one
    "OPTIONAL_CONFIG": {},                            # keys a config may add, their values when absent (not merged)
    "CHECK_CONFIGS": (),                              # configs the oracle check runs besides the default
    "CPU_INTERPRETABLE": False,                       # runs under TRITON_INTERPRET=1 (the CPU suite)
    "complete_config": lambda config, shape: config,  # (config, shape) -> checked config, shape-derived values filled
    "config_problems": lambda config: [],             # (config) -> why a config cannot compile, before compiling
    "offline_arch_problem": lambda arch: None,        # (arch) -> why kernel_specs cannot compile for it
    "SOURCE": None,                                   # the CUDA source file of a CUDA variant (part of its hash)
    "tile_work": None,                                # (config) -> per-KV-tile work of one CTA, for the predictor
    "smem_bytes": None,                               # (config) -> dynamic shared memory per CTA, checked first
}


def optional(module: ModuleType, name: str) -> Any:
    """The module's ``name`` if it defines one, else the default in ``OPTIONAL``."""
    if name not in OPTIONAL:
        raise KeyError(f"{name!r} is not an optional variant name; expected one of {sorted(OPTIONAL)}")
    return getattr(module, name, OPTIONAL[name])


def load_variant(name: str) -> ModuleType:
    """Import a registered variant's module; unknown names raise with the list of variants."""
    if name not in VARIANTS:
        raise ValueError(f"variant: unknown variant {name!r}; expected one of {sorted(VARIANTS)} or 'auto'")
    return importlib.import_module(VARIANTS[name])


def load_variant_file(path) -> ModuleType:
    """A variant module kept as a file (an earlier version of a kernel, an experiment's patched one),
    loaded as a sibling of this package's modules so its relative imports work."""
    import importlib.util
    from pathlib import Path

    path = Path(path)
    spec = importlib.util.spec_from_file_location(f"{__package__}._file_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def defaults_for(module: ModuleType, arch_name: str | None) -> dict:
    """The variant's default config for an arch ('sm_120'; None: off the GPU): its ``DEFAULT_CONFIGS``
    entry for the arch or the registry's nearest arch of the same shared memory per block
    (``arch.config_key``), else ``DEFAULT_CONFIG``."""
    per_arch = optional(module, "DEFAULT_CONFIGS")
    key = config_key(arch_name, per_arch)
    return dict(per_arch[key] if key else module.DEFAULT_CONFIG)


def config_keys(module: ModuleType, arch_name: str | None = None) -> set[str]:
    """The keys a config of the variant may name on ``arch_name``: its defaults' and its ``OPTIONAL_CONFIG``."""
    return set(defaults_for(module, arch_name)) | set(optional(module, "OPTIONAL_CONFIG"))


def resolve_config(name: str, module: ModuleType, config: dict | None, shape) -> dict:
    """The variant's defaults for ``shape``'s GPU (``defaults_for``) overridden by ``config``, then
    checked and completed. Unknown keys raise with the known ones (the defaults' and the module's
    ``OPTIONAL_CONFIG``, which enter the result only where given). Uses shapes only (no host sync).
    """
    merged = defaults_for(module, device_arch(shape.device))
    extra = optional(module, "OPTIONAL_CONFIG")
    if config:
        unknown = sorted(set(config) - set(merged) - set(extra))
        if unknown:
            raise ValueError(f"config: unknown keys {unknown} for variant {name!r}; expected keys "
                             f"{sorted(merged)}" + (f" or the optional {sorted(extra)}" if extra else ""))
        for key, value in config.items():
            default = merged[key] if key in merged else extra[key]
            if isinstance(default, int) and (isinstance(value, bool) or not isinstance(value, numbers.Integral)):
                raise TypeError(f"config: {key} must be an int (like its default {default!r}) for variant {name!r}, "
                                f"got {value!r} ({type(value).__name__})")
            merged[key] = int(value) if isinstance(default, int) else value
    return optional(module, "complete_config")(merged, shape)
