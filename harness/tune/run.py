"""``vk tune`` orchestration: the keys the arguments name, worker processes on one storage, and the
winners table. One study per key lives in tune.py."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from harness.measure.environment import gpu_sku
from harness.measure.optuna_storage import open_storage
from harness.measure.paths import default_optuna_storage
from harness.static.space import kernel_source_hash, resolve
from harness.tune.predicted import run_predicted_tune
from harness.tune.study import (DEFAULT_STORAGE, TuneKey, neighbour_winners, open_study, save_winner, tune_key,
                                winner_record, winners_path)
from verify_kernels import variants
from verify_kernels.arch import device_arch, known_arches
from verify_kernels.dispatch import SHIPPED_TUNED_DIR, l_bucket, load_tuned
from verify_kernels.splits import CPU_ARCH


DEFAULT_PREFIXES = [4096, 32768, 131072]


def tune_keys(args, sku: str):
    """The keys the arguments name: variants x (prefix lengths, then ragged batches) x tree sizes x
    heads, one per study: of two prefix lengths in one L bucket the first is tuned (the study and its
    winner record its length); a ragged batch (``--ragged``) is a key of its own, in its longest
    length's bucket."""
    ragged = getattr(args, "ragged", None) or []
    prefixes = args.prefix if args.prefix is not None else ([] if ragged else DEFAULT_PREFIXES)
    buckets = {}
    for length in prefixes:
        first = buckets.setdefault(l_bucket(length), length)
        if first != length:
            print(f"vk tune: --prefix {length} shares L bucket {l_bucket(length)} with {first}: tuned once, at {first}",
                  file=sys.stderr)
    batches = [((length,), ()) for length in buckets.values()]
    batches += [(tuple(lengths), tuple(lengths)) for lengths in ragged]
    for variant in args.variants:
        for lengths, ragged_lens in batches:
            for nodes in args.tree:
                for heads in args.heads:
                    yield TuneKey(variant, sku, l_bucket(max(lengths)), nodes, heads, args.page_size, args.dtype,
                                  max(lengths), ragged_lens)


def run_tune(args, argv: list[str]) -> int:
    """Tune every key the arguments name (or fan out to --workers processes), then print the winners."""
    import torch

    import optuna

    optuna.logging.set_verbosity(optuna.logging.ERROR)  # the tables below say what happened; one line per refusal
    check_tune_inputs(args)
    if args.objective == "predicted":
        return run_predicted_tune(args, tune_keys)
    fake = bool(os.environ.get("VK_TUNE_FAKE"))
    if not torch.cuda.is_available() and not fake:
        raise SystemExit("vk tune: needs a CUDA GPU (VK_TUNE_FAKE=1 runs the machinery with a fake cost)")
    if args.workers > 1:
        return _tune_workers(args, argv)
    arch = args.arch or (device_arch(torch.device("cuda")) if torch.cuda.is_available() else CPU_ARCH)
    if arch not in known_arches():
        raise SystemExit(f"vk tune: this GPU is {arch}, which the arch registry lacks (verify_kernels/arches/); "
                         f"give --arch, one of {known_arches()}")
    sku = args.gpu or gpu_sku_or_fake(fake)
    proxy_for = getattr(args, "constrain_to", None)
    if proxy_for and args.arch and args.arch != proxy_for:
        raise SystemExit(f"vk tune: --arch {args.arch} and --constrain-to {proxy_for}: give one arch")
    if proxy_for:
        arch = proxy_for  # the static model (and so the space) of the target arch, timed on this GPU
        sku = proxy_label(sku, proxy_for)
    storage = args.storage or DEFAULT_STORAGE
    if storage.startswith("sqlite:///"):
        Path(storage.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
    path = args.winners or winners_path(sku)
    rows, targets = [], {}
    for key in tune_keys(args, sku):
        if key.variant not in targets:  # module, space, kernel source hash and defaults: once per variant
            targets[key.variant] = resolve(key.variant, arch)
        # A proxy tune measures first the configs the predictor could not tell apart at this key.
        warm_start = neighbour_winners(path, key) + (predicted_ties(arch, key) if proxy_for else [])
        study = tune_key(key, targets[key.variant], storage=storage, trials=args.trials, minutes=args.minutes,
                         seed=args.seed, warm_start=warm_start,
                         timeout_s=args.trial_timeout, rep_ms=args.rep_ms, progress=not args.no_progress,
                         compile=not args.no_compile, exhaustive=args.exhaustive, timing=args.timing)
        if args.worker_only or args.exhaustive:
            continue
        record = winner_record(study, key)
        if record:
            if proxy_for:
                record.update(proxy_for=proxy_for, measured_on=sku.removesuffix(f"-proxy-{proxy_for}"), arch=arch)
            save_winner(record, path)
            rows.append((key.variant, ",".join(map(str, key.prefix_lens)) or key.prefix_len, key.tree_nodes, key.heads,
                         f"{record['median_ms']:.4f}",
                         f"{record['default_median_ms']:.4f}" if record["default_median_ms"] else "-",
                         f"{record['speedup_over_default']:.2f}x" if record["speedup_over_default"] else "-",
                         record["measured"], record["failed"], json.dumps(record["config"])))
    if rows:
        from tabulate import tabulate

        print(tabulate(rows, headers=["variant", "L", "T", "H", "best ms", "default ms", "speed-up", "measured",
                                      "failed", "config"]))
        print(f"\nwinners in {path}; storage {storage}")
    return 0


def predicted_ties(arch: str, key) -> list[dict]:
    """The configs the shipped predicted table of ``arch`` could not tell apart at ``key`` (its
    ``model_ties``; harness/predict/report.py), for a proxy tune to measure first."""

    for record in load_tuned(f"predicted-{arch}", str(SHIPPED_TUNED_DIR)).values():
        if (record["variant"], record["l_bucket"], record["tree_nodes"], record["heads"], record["page_size"]) == (
                key.variant, key.l_bucket, key.tree_nodes, key.heads, key.page_size):
            return [dict(config) for config in record.get("model_ties", {}).get("configs", [])]
    return []


def check_tune_inputs(args) -> None:
    """Refuse what no key could run, before a worker, a GPU or a study is touched: unknown variants,
    a page size none of them runs, a storage that cannot be opened."""
    for lengths in getattr(args, "ragged", None) or []:
        if len(lengths) < 2:
            raise SystemExit(f"vk tune: --ragged: a batch of at least two prefix lengths, got {lengths} "
                             "(one request is --prefix)")
    unknown = sorted(set(args.variants) - set(variants.VARIANTS))
    if unknown:
        raise SystemExit(f"vk tune: --variants: unknown {unknown}; expected some of {sorted(variants.VARIANTS)}")
    for name in args.variants:
        pages = variants.load_variant(name).PAGE_SIZES
        if args.page_size not in pages:
            raise SystemExit(f"vk tune: --page-size: {name} runs page sizes {list(pages)}, got {args.page_size}")
    open_storage(args.storage or default_optuna_storage())  # StorageError: one line, at once


def proxy_label(sku: str, arch: str) -> str:
    """The key's GPU label in a proxy run (``vk tune --constrain-to``): its studies and winners table
    are apart from this GPU's own, and no GPU's dispatch reads them."""
    return f"{sku}-proxy-{arch}"


def gpu_sku_or_fake(fake: bool) -> str:
    sku = gpu_sku()
    return "fake-" + sku if fake else sku


def _tune_workers(args, argv: list[str]) -> int:
    """One `vk tune --worker-only` process per local GPU on the shared storage, then the winners."""
    import subprocess

    import torch

    storage = args.storage or DEFAULT_STORAGE
    if storage.startswith("sqlite:///"):
        Path(storage.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
    opened = open_storage(storage)  # the schema and the studies once, before the workers race to create them
    sku = args.gpu or gpu_sku_or_fake(bool(os.environ.get("VK_TUNE_FAKE")))
    if getattr(args, "constrain_to", None):
        sku = proxy_label(sku, args.constrain_to)
    hashes = {variant: kernel_source_hash(variant) for variant in args.variants}
    for key in tune_keys(args, sku):
        open_study(key.study_name + ("|exhaustive" if args.exhaustive else ""), opened, args.seed,
                   hashes[key.variant], args.timing)
    gpus = max(1, torch.cuda.device_count())
    argv = _without_option(argv, "--workers")
    processes = []
    for worker in range(args.workers):
        # Each worker stops when the study holds --trials finished trials (MaxTrialsCallback).
        extra = ["--worker-only", "--storage", storage, "--seed", str(args.seed + worker), "--no-progress"]
        env = {**os.environ, "CUDA_VISIBLE_DEVICES": str(worker % gpus)}
        processes.append(subprocess.Popen([sys.executable, "-m", "harness", *argv, *extra], env=env))
    codes = [p.wait() for p in processes]
    if any(codes):
        raise SystemExit(f"vk tune: workers exited with {codes}")
    final = [sys.executable, "-m", "harness", *argv, "--storage", storage, "--trials", "0"]
    return subprocess.call(final)


def _without_option(argv: list[str], option: str) -> list[str]:
    """argv less ``option VALUE`` and ``option=VALUE``."""
    result, skip = [], False
    for arg in argv:
        if skip:
            skip = False
        elif arg == option:
            skip = True
        elif not arg.startswith(option + "="):
            result.append(arg)
    return result
