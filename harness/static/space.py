"""Search spaces as data: ``search_spaces/<variant>.yaml`` -> candidate configs with reasons.

A space lists values per tunable and constraint expressions (Python expressions over the tunable
names, plus min and max, the variant's ``smem_bytes`` and the arch's ``smem_per_block`` and
``smem_per_sm``); an optional arch section adds constraints and says whether register spills
disqualify a candidate there (``allow_spills``, default false). Arches come from the registry
(verify_kernels/arch.py): a new arch needs no section. Every candidate is either kept or
carries the reason it was dropped, in KernelTuner's spirit: nothing disappears silently.
The static model (static_feasibility) then compiles the kept ones for the arch. Each takes the
variant resolved once for the arch (``resolve``: module, space, kernel source hash, defaults).
"""

from __future__ import annotations

import functools
import itertools
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

import yaml

from verify_kernels import arch as arch_module
from verify_kernels import variants
from verify_kernels.arch import Arch, load_arch

import search_spaces
from harness.measure.paths import results_dir
from harness.static.resources import static_rows
from verify_kernels.cupy_launch import included_headers

SPACES_DIR = search_spaces.SPACES_DIR
STATIC_CACHE_DIR = results_dir() / "static"
_EXPRESSION_NAMES = {"min": min, "max": max}


@dataclass
class Candidate:
    config: dict
    reason: str = ""                          # empty: feasible so far
    static: dict = field(default_factory=dict)  # registers, spills, smem, occupancy when compiled

    @property
    def feasible(self) -> bool:
        return not self.reason


@dataclass(frozen=True)
class VariantOnArch:
    """One variant resolved once for one arch (``resolve``): its module, its search space (tunables
    resolved; None for a variant that is not tuned), its kernel source hash and its default config. The
    static model, vk tune and the predictor take this object, not the name, so a tune key or a fit
    reads each of them once."""
    name: str
    arch: str
    module: ModuleType
    space: dict | None
    source_hash: str
    defaults: dict

    @property
    def arch_record(self) -> Arch:
        """The arch's registry record (limits and rates)."""
        return load_arch(self.arch)

    @property
    def spills_allowed(self) -> bool:
        """Do register spills leave a config feasible? Yes for a variant without a search space (not
        tuned: the baseline, triton_ps1, spills by design); else the space's rule for the arch (default no)."""
        return self.space is None or bool(self.space["arch"][self.arch].get("allow_spills", False))

    def tuned_space(self) -> dict:
        """The search space; a variant without one is refused, naming the file it lacks."""
        if self.space is None:
            raise ValueError(f"variant: no search space for {self.name!r} (expected "
                             f"{SPACES_DIR / (self.name + '.yaml')})")
        return self.space


def resolve(variant: str, arch: str) -> VariantOnArch:
    """``variant`` on ``arch`` (a registry name): ValueError naming the known variants or arches."""
    module = variants.load_variant(variant)
    load_arch(arch)  # ValueError naming the known arches
    path = SPACES_DIR / f"{variant}.yaml"
    space = _read_space(path, module, variant, arch) if path.exists() else None
    return VariantOnArch(variant, arch, module, space, kernel_source_hash(variant), variants.defaults_for(module, arch))


def load_space(variant: str, arch: str) -> dict:
    """The search space of ``variant`` for ``arch`` (``resolve(variant, arch).tuned_space()``)."""
    return resolve(variant, arch).tuned_space()


def _read_space(path: Path, module: ModuleType, variant: str, arch: str) -> dict:
    space = yaml.safe_load(path.read_text())
    if "same_as" in space:
        # Another variant's space, whole (tunables, constraints, arch sections), for a kernel that shares its
        # config keys: written once. Constant names (BLOCK_N: BLOCK_N_CHOICES) resolve against this variant.
        other = SPACES_DIR / f"{space['same_as']}.yaml"
        if not other.exists():
            raise ValueError(f"search space {path.name}: same_as names {space['same_as']!r}, which has no "
                             f"{other.name} in {SPACES_DIR}")
        base = yaml.safe_load(other.read_text())
        if "same_as" in base:
            raise ValueError(f"search space {path.name}: same_as names {other.name}, which is itself a same_as")
        # Tunables of its own join the other's: a key only this kernel searches.
        own = {k: v for k, v in space.items() if k != "same_as"}
        space = {**base, **own, "tunables": {**base["tunables"], **own.get("tunables", {})}}
    for name, values in space["tunables"].items():
        # A tunable may name the variant's constant that holds its values (BLOCK_N: BLOCK_N_CHOICES),
        # so a rule the kernel enforces is written once.
        if isinstance(values, str):
            if not hasattr(module, values):
                raise ValueError(f"search space {path.name}: tunable {name} names {values!r}, which variant "
                                 f"{variant!r} does not define")
            space["tunables"][name] = list(getattr(module, values))
    space.setdefault("arch", {}).setdefault(arch, {})  # an arch without a section: no extra rules, no spills
    return space


def _violated(expressions: list[str], config: dict, names: dict | None = None) -> str | None:
    for expression in expressions:
        try:
            if not eval(expression, {"__builtins__": {}}, {**_EXPRESSION_NAMES, **(names or {}), **config}):  # noqa: S307
                return f"constraint: {expression}"
        except Exception as error:
            raise ValueError(f"search space constraint {expression!r} failed on {config}: {error}") from None
    return None


def candidates(target: VariantOnArch) -> list[Candidate]:
    """Every combination of the space's values, with a reason on those the rules drop: the space's
    constraints (which may name ``smem_bytes``, the variant's shared memory for the config, and the
    arch's ``smem_per_block`` and ``smem_per_sm`` in bytes), the variant's own rules, what the arch
    cannot compile (``offline_arch_problem``) and, before any compile, shared memory over the arch's
    per-block limit."""
    space, module, arch, defaults = target.tuned_space(), target.module, target.arch, target.defaults
    names = list(space["tunables"])
    record = load_arch(arch)
    rules = space.get("constraints", []) + space["arch"][arch].get("constraints", [])
    arch_problem = variants.optional(module, "offline_arch_problem")(arch)
    smem_bytes = variants.optional(module, "smem_bytes")
    result = []
    for values in itertools.product(*(space["tunables"][n] for n in names)):
        config = dict(zip(names, values))
        full = {**defaults, **config}  # what the kernel compiles: the tunables over the arch's defaults
        problems = variants.optional(module, "config_problems")(full)
        smem = smem_bytes(full) if smem_bytes and not problems else 0
        limits = {"smem_bytes": smem, "smem_per_block": record.smem_per_block_bytes,
                  "smem_per_sm": record.smem_per_sm_kb * 1024}
        reason = (arch_problem or _violated(rules, config, limits) or "; ".join(problems)
                  or (f"shared memory {smem / 1024:.1f} KB > {record.smem_per_block_kb} KB per block on {arch}"
                      if smem > record.smem_per_block_bytes else ""))
        result.append(Candidate(config, reason))
    return result


# Library modules whose code goes into the kernels or their launches; a variant's hash covers those
# it imports.
SHARED_KERNEL_MODULES = ("triton_dot", "triton_common", "gluon_common", "split_combine", "splits", "cupy_launch",
                         "planner")


def kernel_source_files(variant: str) -> list[Path]:
    """The files a variant's compiled kernels and launches depend on: its module, the shared kernel
    modules it imports (``from .name import``, followed through those modules) and, for CUDA
    variants, their ``SOURCE`` and the headers it includes."""
    module = variants.load_variant(variant)
    files = [Path(module.__file__)]
    for path in files:  # grows while it is walked: the shared modules' own imports
        text = path.read_text()
        files += [candidate for name in SHARED_KERNEL_MODULES
                  if (candidate := path.parent / f"{name}.py") not in files
                  and (f"from .{name} import" in text or re.search(rf"from \. import [\w, ]*\b{name}\b", text))]
    source = variants.optional(module, "SOURCE")
    if not source:
        return files

    return [*files, Path(source), *included_headers(Path(source))]


def kernel_source_hash(variant: str) -> str:
    """sha256 (first 16 hex) of ``kernel_source_files``: tuned and static results stay valid while
    this does not change."""
    return source_digest(kernel_source_files(variant))


def source_digest(paths: list[Path]) -> str:
    """sha256 (first 16 hex) of files' names and contents, in order."""
    import hashlib

    digest = hashlib.sha256()
    for path in paths:
        digest.update(path.name.encode() + path.read_bytes())
    return digest.hexdigest()[:16]


def static_model_hash() -> str:
    """sha256 (first 16 hex) of the static model a variant is checked with: the occupancy rules and
    the compiler front ends (Triton's and nvcc's)."""
    here = Path(__file__).parent
    return source_digest([*(here / name for name in ("occupancy.py", "triton_compile.py", "nvcc_compile.py",
                                                     "resources.py")),
                          Path(arch_module.__file__), *sorted(arch_module.ARCH_DIR.glob("*.yaml"))])


@functools.lru_cache(maxsize=None)
def compiler_versions() -> str:
    """The compilers the static model runs: Triton's version and nvcc's release (part of the cache key)."""
    import importlib.metadata
    import shutil
    import subprocess

    try:
        triton = importlib.metadata.version("triton")
    except importlib.metadata.PackageNotFoundError:
        triton = None
    nvcc = shutil.which("nvcc")
    release = None
    if nvcc:
        done = subprocess.run([nvcc, "--version"], capture_output=True, text=True)
        release = next((line.split("release", 1)[1].strip() for line in done.stdout.splitlines() if "release" in line),
                       None)
    return f"triton {triton}, nvcc {release}"


def _compile_key(config: dict) -> str:
    """The static cache's key of a config: its compiled tunables (the planner's keys, launch parameters,
    dropped), and ``"spans": true`` where it plans by the spans rule, which the segment-walking kernels
    compile apart."""
    from verify_kernels import planner  # Triton: not for the CLIs that import this module

    key = {k: v for k, v in config.items() if k not in planner.PLAN_KEYS}
    return json.dumps({**key, "spans": True} if planner.walks_spans(config) else key, sort_keys=True)


def compile_key(target: VariantOnArch, config: dict) -> str:
    """The static cache's key of a config of the target (tunables, as a search space's candidates and a
    study's trials hold them): ``_compile_key`` with the planner's keys the config leaves out at the
    target's defaults, so a variant whose default walks the spans rule keys its candidates that way."""
    from verify_kernels import planner

    plan = {k: target.defaults[k] for k in planner.PLAN_KEYS if k in target.defaults}
    return _compile_key({**plan, **config})


def static_cache_path(target: VariantOnArch) -> Path:
    return STATIC_CACHE_DIR / f"{target.name}-{target.arch}.json"


def static_cache(target: VariantOnArch) -> dict:
    """The static model's cache for the target: its hashes and ``rows`` (compile key -> resources); no
    rows where the file was made for another kernel source, static model or compiler."""
    path = static_cache_path(target)
    cache = json.loads(path.read_text()) if path.exists() else {}
    current = {"kernel_source_hash": target.source_hash, "static_model_hash": static_model_hash(),
               "compilers": compiler_versions()}  # another Triton or nvcc allocates registers differently
    return cache if all(cache.get(name) == value for name, value in current.items()) else {**current, "rows": {}}


def static_feasibility(target: VariantOnArch, progress: bool = True) -> list[Candidate]:
    """Candidates checked by the static model, compiled once per compile-relevant config.

    Results are cached in results/static/<variant>-<arch>.json under the kernel source hash and
    the static model's own hash, so the space compiles once per kernel or model change (and a killed
    run keeps what it compiled).
    """
    from tqdm import tqdm

    from verify_kernels import planner

    variant, arch = target.name, target.arch
    cache_path = static_cache_path(target)
    cache = static_cache(target)
    result = candidates(target)
    to_compile = sorted({compile_key(target, c.config) for c in result if c.feasible} - set(cache["rows"]))
    plan_keys = {**target.defaults, **result[0].config}  # the planner's keys the variant takes
    for key in tqdm(to_compile, desc=f"static {variant} {arch}", unit="config", disable=not progress):
        config = json.loads(key)
        plan = {"kv_splits": 0, "waves": planner.SPANS if config.pop("spans", False) else 1}  # planned, that rule
        config.update({name: value for name, value in plan.items() if name in plan_keys})
        (row,) = static_rows(target, [config])[:1]
        cache["rows"][key] = {k: row.get(k) for k in ("registers", "spill_store_bytes", "spill_load_bytes",
                                                      "shared_bytes", "blocks_per_sm", "occupancy", "limiter",
                                                      "feasible", "reason")}
        cache_path.parent.mkdir(parents=True, exist_ok=True)
        cache_path.write_text(json.dumps(cache, indent=1, sort_keys=True) + "\n")  # kill-safe: after each compile
    spills_allowed = target.spills_allowed
    for candidate in result:
        if candidate.feasible:
            candidate.static = cache["rows"][compile_key(target, candidate.config)]
            spilled = (candidate.static.get("spill_store_bytes") or 0) + (candidate.static.get("spill_load_bytes") or 0)
            if not candidate.static["feasible"]:
                candidate.reason = candidate.static["reason"] or "static model"
            elif spilled and not spills_allowed:
                candidate.reason = f"register spills ({spilled} B stored + loaded; not allowed on {arch})"
    return result
