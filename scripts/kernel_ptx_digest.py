"""Digest of every variant's compiled device code, for showing that a refactor left kernels alone.

    python scripts/kernel_ptx_digest.py > before.json   # at one commit (any checkout)
    python scripts/kernel_ptx_digest.py > after.json    # at another
    diff before.json after.json                          # empty: the same PTX at every config
    python scripts/kernel_ptx_digest.py --tuned T.yaml --restamp before.json   # then re-stamp T's records
    python scripts/kernel_ptx_digest.py --variants cuda_ws ...                  # one variant's kernels only

``--restamp`` gives a tuned table's records the current kernel source hash where the record was measured
at the source ``before.json`` was made at (the digest names each variant's kernel source hash; make it with
the same ``--tuned`` tables, so that it holds their configs) and every kernel of the record's config
compiles to the same PTX now as in it, and notes where the stamp came from after any earlier note (the
chain back to the measured hash stays readable). Host-side launch code is not compared: use it only
after a change that leaves the launches alone (say so in the commit), or name what changed in them with
``--note`` (it joins the records' note: e.g. a shared launch that every config's time includes alike).

For each variant with an offline compile path, its default config, its CHECK_CONFIGS and every
config of a tuned table (``--tuned``) are compiled for sm_90 (and sm_120 where the variant
compiles there) with the variant's own ``kernel_specs``; the PTX is hashed after dropping
debug-line directives (``.loc``, ``.file``), the debug ranges' temporary labels (``$L__tmpN:``), the
DWARF sections and comments, which move with the source lines and helper names.
CUDA variants hash the nvcc PTX of their ``kernel_specs`` (source and macros). No GPU needed.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path.cwd()))


def normalized_digest(ptx: str) -> str:
    code = re.split(r"^\s*\.section\s+\.debug", ptx, maxsplit=1, flags=re.M)[0]  # DWARF: source lines and names
    # and the temporary labels the debug ranges point at ($L__tmpN), whose order beside a block label moves with
    # where a helper is defined
    kept = [line for line in code.splitlines() if not re.match(r"\s*(\.loc|\.file|//|\$L__tmp\d+:)", line)]
    return hashlib.sha256("\n".join(kept).encode()).hexdigest()[:16]


def config_key(module, config: dict) -> str:
    """The config as a digest key, without the optional keys at the value the kernel takes when they are not
    named (``OPTIONAL_CONFIG``: they compile as if absent, so a digest made before a default named them matches)."""
    from verify_kernels import variants

    absent = variants.optional(module, "OPTIONAL_CONFIG")
    return json.dumps({k: v for k, v in config.items() if k not in absent or absent[k] != v}, sort_keys=True)


def triton_ptx(spec, arch: str) -> str:
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    if getattr(spec.kernel, "is_gluon", lambda: False)():
        from triton.experimental.gluon._runtime import GluonASTSource as source_class
    else:
        source_class = ASTSource
    source = source_class(spec.kernel, spec.signature(), constexprs=spec.specialised_constexprs(),
                          attrs=spec.divisibility_attrs())
    from verify_kernels.arch import load_arch

    compiled = triton.compile(source, target=GPUTarget("cuda", load_arch(arch).compute, 32),
                              options={"num_warps": spec.num_warps, "num_stages": spec.num_stages})
    return compiled.asm["ptx"]


def cuda_ptx(source: Path, macros: dict, arch: str) -> str:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "k.ptx"
        subprocess.run(["nvcc", "-ptx", f"-arch={arch}", "-std=c++17", *(f"-D{k}={v}" for k, v in macros.items()),
                        str(source), "-o", str(out)], check=True, capture_output=True)
        return out.read_text()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tuned", type=Path, nargs="*", default=[], help="tuned winner tables (YAML)")
    parser.add_argument("--restamp", type=Path, help="a digest JSON made at the tuned records' source")
    parser.add_argument("--note", default="", help="with --restamp: what changed outside the compared PTX (the "
                                                   "records' note says it)")
    parser.add_argument("--arches", nargs="+", default=["sm_90", "sm_120"],
                        help="archs to compile for (those of the digest compared against)")
    parser.add_argument("--variants", nargs="+", help="only these variants (default: every variant)")
    args = parser.parse_args()
    import yaml

    from harness.static.space import kernel_source_hash
    from verify_kernels import variants

    tuned = {}
    for path in args.tuned:
        for record in (yaml.safe_load(path.read_text()) or {}).values():
            tuned.setdefault(record["variant"], []).append(record["config"])
    digests = {}
    for name in args.variants or variants.VARIANTS:
        module = variants.load_variant(name)
        arches = [arch for arch in args.arches if not variants.optional(module, "offline_arch_problem")(arch)]
        base = dict(module.DEFAULT_CONFIG)
        digests[f"{SOURCE_KEY}|{name}"] = kernel_source_hash(name)
        configs = [base, *({**base, **c} for c in getattr(module, "CHECK_CONFIGS", ())),
                   *({**base, **c} for c in tuned.get(name, []))]
        for config in configs:
            key = config_key(module, config)
            for arch in arches:
                if getattr(module, "SOURCE", None):  # CUDA variants: the PTX of their kernel (source and macros)
                    (spec,) = module.kernel_specs(config)
                    digests[f"{name}|{arch}|{key}"] = normalized_digest(cuda_ptx(spec.source, spec.macros, arch))
                    continue
                for spec in module.kernel_specs(config):
                    digests[f"{name}|{arch}|{key}|{spec.name}"] = normalized_digest(triton_ptx(spec, arch))
    if args.restamp:
        restamp(args.tuned, json.loads(args.restamp.read_text()), digests, args.restamp, args.note)
    else:
        print(json.dumps(digests, indent=1, sort_keys=True))


SOURCE_KEY = "kernel_source_hash"  # digest entries "kernel_source_hash|<variant>": the source it was made at


def restamp(tables: list[Path], before: dict, after: dict, before_path: Path, note: str = "") -> None:
    import yaml

    from harness.static.space import kernel_source_hash
    from verify_kernels import variants

    for path in tables:
        records = yaml.safe_load(path.read_text()) or {}
        for key, record in records.items():
            if record["variant"] not in variants.VARIANTS:  # a retired variant's record: history, never dispatched
                print(f"{key}: {record['variant']} is no longer a variant: left as it was")
                continue
            module = variants.load_variant(record["variant"])
            prefix = f"{record['variant']}|"
            config = config_key(module, {**module.DEFAULT_CONFIG, **record["config"]})
            if f"{SOURCE_KEY}|{record['variant']}" not in after:
                continue  # a variant this digest did not compile (--variants)
            mine = [k for k in after if k.startswith(prefix) and k.split("|")[2] == config]
            same = bool(mine) and all(before.get(k) == after[k] for k in mine)
            current = kernel_source_hash(record["variant"])
            made_at = before.get(f"{SOURCE_KEY}|{record['variant']}")
            if record["kernel_source_hash"] not in (made_at, current):  # stale before: this digest says nothing of it
                print(f"{key}: measured at {record['kernel_source_hash']}, the digest at {made_at}: left as it was")
                continue
            if not same or record["kernel_source_hash"] == current:
                print(f"{key}: {'unchanged' if same else 'PTX differs or missing: left stale'}")
                continue
            earlier = record.get("restamped", {})
            measured_at = earlier.get("from_kernel_source_hash", record["kernel_source_hash"])
            why = (f"identical PTX for {len(mine)} kernel/arch pairs of this config "
                   f"(scripts/kernel_ptx_digest.py against {before_path.name})" + (f"; {note}" if note else ""))
            record["restamped"] = {"from_kernel_source_hash": measured_at,  # the hash it was measured at
                                   "why": restamp_note(earlier.get("why"), why)}
            record["kernel_source_hash"] = current
            print(f"{key}: restamped {record['restamped']['from_kernel_source_hash']} -> {current}")
        path.write_text(yaml.safe_dump(records, sort_keys=True))


def restamp_note(earlier: str | None, why: str) -> str:
    """The record's chain of re-stamps with ``why`` added, unless it already ends with it (a second re-stamp
    against the same digest adds nothing the reader needs)."""
    if not earlier:
        return why
    return earlier if earlier.split("; then ")[-1] == why else f"{earlier}; then {why}"


if __name__ == "__main__":
    main()
