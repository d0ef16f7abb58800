"""Search spaces as data: ``search_spaces/<variant>.yaml`` -> candidate configs with reasons.

A space lists values per tunable and constraint expressions (Python expressions over the tunable
names, plus min and max); an arch section adds constraints and says whether register spills
disqualify a candidate there (``allow_spills``, default false). Every candidate is either kept or
carries the reason it was dropped, in KernelTuner's spirit: nothing disappears silently.
The static model (static_feasibility) then compiles the kept ones for the arch.
"""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from verify_kernels import variants

from .environment import PACKAGE_ROOT

SPACES_DIR = PACKAGE_ROOT / "search_spaces"
STATIC_CACHE_DIR = PACKAGE_ROOT / "results" / "static"
_EXPRESSION_NAMES = {"min": min, "max": max}
# Tunables that change only the launch, not the compiled kernel's resources.
LAUNCH_ONLY = ("kv_splits",)


@dataclass
class Candidate:
    config: dict
    reason: str = ""                          # empty: feasible so far
    static: dict = field(default_factory=dict)  # registers, spills, smem, occupancy when compiled

    @property
    def feasible(self) -> bool:
        return not self.reason


def load_space(variant: str, arch: str) -> dict:
    path = SPACES_DIR / f"{variant}.yaml"
    if not path.exists():
        raise ValueError(f"variant: no search space for {variant!r} (expected {path})")
    space = yaml.safe_load(path.read_text())
    if arch not in space.get("arch", {}):
        raise ValueError(f"arch: {path.name} has no section for {arch!r}; it has {sorted(space.get('arch', {}))}")
    return space


def _violated(expressions: list[str], config: dict) -> str | None:
    for expression in expressions:
        try:
            if not eval(expression, {"__builtins__": {}}, {**_EXPRESSION_NAMES, **config}):  # noqa: S307 (our YAML)
                return f"constraint: {expression}"
        except Exception as error:
            raise ValueError(f"search space constraint {expression!r} failed on {config}: {error}") from None
    return None


def candidates(variant: str, arch: str) -> list[Candidate]:
    """Every combination of the space's values, with a reason on those the rules drop."""
    space = load_space(variant, arch)
    names = list(space["tunables"])
    module = variants.load_variant(variant)
    rules = space.get("constraints", []) + space["arch"][arch].get("constraints", [])
    result = []
    for values in itertools.product(*(space["tunables"][n] for n in names)):
        config = dict(zip(names, values))
        reason = _violated(rules, config) or "; ".join(getattr(module, "config_problems", lambda c: [])(config))
        result.append(Candidate(config, reason))
    return result


def kernel_source_hash(variant: str) -> str:
    """sha256 (first 16 hex) of what a variant's compiled kernels depend on: its module, the shared
    Triton helpers and the CUDA sources. Static results stay valid while this does not change."""
    module = variants.load_variant(variant)
    root = Path(module.__file__).parent
    return source_digest([Path(module.__file__), root / "triton_dot.py", root / "triton_common.py",
                          *sorted(root.glob("cuda/*.cu"))])


def source_digest(paths: list[Path]) -> str:
    """sha256 (first 16 hex) of files' names and contents, in order."""
    import hashlib

    digest = hashlib.sha256()
    for path in paths:
        digest.update(path.name.encode() + path.read_bytes())
    return digest.hexdigest()[:16]


def static_model_hash(variant: str) -> str:
    """sha256 (first 16 hex) of the static model a variant is checked with: the occupancy rules
    and its compiler front end (Triton's or nvcc's)."""
    import hashlib

    here = Path(__file__).parent
    front_end = "static_triton.py" if hasattr(variants.load_variant(variant), "kernel_specs") else "static_nvcc.py"
    digest = hashlib.sha256()
    for name in ("static_model.py", front_end):
        digest.update(name.encode() + (here / name).read_bytes())
    return digest.hexdigest()[:16]


def _compile_key(config: dict) -> str:
    return json.dumps({k: v for k, v in sorted(config.items()) if k not in LAUNCH_ONLY})


def static_feasibility(variant: str, arch: str, progress: bool = True) -> list[Candidate]:
    """Candidates checked by the static model, compiled once per compile-relevant config.

    Results are cached in results/static/<variant>-<arch>.json under the kernel source hash and
    the static model's own hash, so the space compiles once per kernel or model change (and a killed
    run keeps what it compiled).
    """
    from tqdm import tqdm

    from .static_check import static_rows

    cache_path = STATIC_CACHE_DIR / f"{variant}-{arch}.json"
    cache = json.loads(cache_path.read_text()) if cache_path.exists() else {}
    current = {"kernel_source_hash": kernel_source_hash(variant), "static_model_hash": static_model_hash(variant)}
    if any(cache.get(name) != value for name, value in current.items()):
        cache = {**current, "rows": {}}
    result = candidates(variant, arch)
    to_compile = sorted({_compile_key(c.config) for c in result if c.feasible} - set(cache["rows"]))
    for key in tqdm(to_compile, desc=f"static {variant} {arch}", unit="config", disable=not progress):
        config = json.loads(key)
        config.update({name: 0 for name in LAUNCH_ONLY if name in result[0].config})
        (row,) = static_rows(variant, arch, [config])[:1]
        cache["rows"][key] = {k: row.get(k) for k in ("registers", "spill_store_bytes", "spill_load_bytes",
                                                      "shared_bytes", "blocks_per_sm", "occupancy", "limiter",
                                                      "feasible", "reason")}
        cache_path.parent.mkdir(parents=True, exist_ok=True)
        cache_path.write_text(json.dumps(cache, indent=1, sort_keys=True) + "\n")  # kill-safe: after each compile
    allow_spills = load_space(variant, arch)["arch"][arch].get("allow_spills", False)
    for candidate in result:
        if candidate.feasible:
            candidate.static = cache["rows"][_compile_key(candidate.config)]
            spilled = (candidate.static.get("spill_store_bytes") or 0) + (candidate.static.get("spill_load_bytes") or 0)
            if not candidate.static["feasible"]:
                candidate.reason = candidate.static["reason"] or "static model"
            elif spilled and not allow_spills:
                candidate.reason = f"register spills ({spilled} B stored + loaded; not allowed on {arch})"
    return result
