"""``vk tune``, ``vk tuned``, ``vk tune-quality``: Optuna studies, their winners, and TPE's quality."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from verify_kernels.arch import known_arches

from harness.arguments import PREFIX_MAX, float_at_least, int_in, int_list_in, output_file, prefix_lengths, seed
from harness.measure.inputs import check_source_checkout, read_yaml_mapping
from harness.tune.quality import format_quality, plot_quality, trials_to_reach
from harness.tune.run import run_tune
from harness.tune.study import TUNED_DIR, check_winners, publish_winners
from verify_kernels import dispatch, variants
from verify_kernels.dispatch import SHIPPED_TUNED_DIR


def needs_optuna(command: str) -> None:
    import importlib.util

    if importlib.util.find_spec("optuna") is None:
        raise SystemExit(f"vk {command}: needs Optuna, which is not installed: pip install 'verify-kernels[tune]'")


def cmd_tune(args) -> int:
    needs_optuna("tune")

    return run_tune(args, sys.argv[1:])


def tuned_tables(args) -> list[tuple[str, Path]]:
    """(kind, path) of the tables ``vk tuned`` shows: --file, else every measured table under
    results/tuned/ and every table shipped in the package (verify_kernels/tuned/)."""

    if args.file:
        return [("given", args.file)]
    shipped = sorted(SHIPPED_TUNED_DIR.glob("*.yaml"))
    return ([("measured", path) for path in sorted(TUNED_DIR.glob("*.yaml"))] +
            [("shipped", path) for path in shipped if not path.name.startswith("predicted-")] +
            [("shipped, PREDICTED (not measured)", path) for path in shipped if path.name.startswith("predicted-")])


WINNER_FIELDS = ("variant", "l_bucket", "tree_nodes", "heads", "page_size", "config")


def read_winners(path: Path, flag: str) -> dict:
    """A winners table (``vk tune``'s or a predicted one): a YAML mapping of study name -> record, each
    with WINNER_FIELDS; anything else is refused naming the file and the entry."""
    table = read_yaml_mapping(path, flag, allow_empty=True)
    for name, record in table.items():
        missing = [f for f in WINNER_FIELDS if not isinstance(record, dict) or f not in record]
        if missing:
            raise SystemExit(f"vk tuned: {flag}: {path}: entry {str(name)[:60]!r} is not a winner record "
                             f"(missing {', '.join(missing)})")
    return table


def compare_tables(first: Path, second: Path) -> list[dict]:
    """Per key (variant, L bucket, T, H, page size) present in both tables: each one's winner, its time
    (measured, proxy or predicted, as the record says) and the config keys where they differ."""

    def by_key(path: Path) -> dict:
        out = {}
        for record in read_winners(path, "--compare").values():
            key = (record["variant"], record["l_bucket"], record["tree_nodes"], record["heads"], record["page_size"],
                   tuple(record.get("prefix_lens") or ()))  # a ragged batch's record is a key of its own
            out[key] = record
        return out

    def kind(record: dict) -> str:
        if record.get("predicted"):
            return f"predicted {record.get('arch')}"
        if record.get("proxy_for"):
            return f"proxy for {record['proxy_for']} on {record.get('measured_on')}"
        return f"measured on {record.get('gpu')}"

    a, b = by_key(first), by_key(second)
    rows = []
    for key in sorted(set(a) & set(b)):
        ra, rb = a[key], b[key]
        ca, cb = ra["config"], rb["config"]
        differ = sorted(k for k in set(ca) | set(cb) if ca.get(k) != cb.get(k))
        rows.append({"variant": key[0], "l_bucket": key[1], "tree_nodes": key[2], "heads": key[3],
                     "first": {"kind": kind(ra), "config": ca, "ms": ra.get("median_ms", ra.get("predicted_ms"))},
                     "second": {"kind": kind(rb), "config": cb, "ms": rb.get("median_ms", rb.get("predicted_ms"))},
                     "same_config": not differ, "differ_in": differ})
    return rows


def default_order_pick(arch: str, page_size: int) -> tuple[str | None, list[str]]:
    """The variant ``variant="auto"`` runs from the default order on ``arch`` at ``page_size`` where no table
    answers, and why each variant before it does not run there (the arch's features, from its registry
    record, through each variant's ``offline_arch_problem``; the variant's page sizes). An arch without a
    record is not resolved: the run-time checks read the device itself."""
    passed = []
    for name in variants.AUTO_PREFERENCE:
        module = variants.load_variant(name)
        arch_problem = variants.optional(module, "offline_arch_problem")
        why = arch_problem(arch) if arch_problem and arch in known_arches() else None
        if why is None and page_size not in module.PAGE_SIZES:
            why = f"{name} runs page sizes {list(module.PAGE_SIZES)}"
        if why is None:
            return name, passed
        passed.append(why)
    return None, passed


def explain_auto(args) -> str:
    """What ``variant="auto"`` would run on ``--arch`` (and GPU ``--gpu``) for one shape, and which record,
    in which table, decided it (verify_kernels.dispatch.choose)."""

    bucket = dispatch.l_bucket(args.prefix + args.tree)
    choice = dispatch.choose(args.gpu or "(no GPU named)", args.arch, bucket, args.tree, args.heads, args.page_size,
                             args.dtype, args.batch)
    shape = (f"L {args.prefix} (bucket {bucket}), T {args.tree}, H {args.heads}, page {args.page_size}, "
             f"{args.dtype}" + (f", a batch of {args.batch}" if args.batch > 1 else ""))
    if choice.variant is None:
        name, passed = default_order_pick(args.arch, args.page_size)
        if name is None:
            return (f"auto on {args.arch} at {shape}: no table entry, and no variant of the default order "
                    f"{list(variants.AUTO_PREFERENCE)} runs there: " + "; ".join(passed))
        config = variants.defaults_for(variants.load_variant(name), args.arch)
        return (f"auto on {args.arch} at {shape}: no table entry; the default order runs {name} {config} (its "
                f"default config for {args.arch})" + (" before it: " + "; ".join(passed) if passed else ""))
    record = choice.record
    key = (f"L bucket {record['l_bucket']}, T {record['tree_nodes']}, H {record['heads']}, "
           f"page {record['page_size']}")
    if record.get("prefix_lens"):
        key += f", ragged batch {record['prefix_lens']}"
    how = "the same key" if choice.distance == 0 else f"the nearest key ({key}; log-distance {choice.distance:g})"
    time = record.get("median_ms", record.get("predicted_ms"))
    text = (f"auto on {args.arch} at {shape}: {choice.variant} {choice.config}\n"
            f"decided by a {choice.source.upper()} record at {how}, {time:.4f} ms, in {choice.table}")
    ties = record.get("model_ties")
    if ties:
        text += (f"\nthe model cannot tell {len(ties['configs'])} configs apart (predicted within "
                 f"{ties['within']:.0%}); taken: {ties['decided_by']}. A proxy tune (vk tune --constrain-to "
                 f"{args.arch}) measures them first")
    return text


def cmd_tuned(args) -> int:
    import yaml

    if args.explain:
        missing = [flag for flag, value in (("--arch", args.arch), ("--prefix", args.prefix), ("--tree", args.tree),
                                            ("--heads", args.heads)) if value is None]
        if missing:
            raise SystemExit(f"vk tuned: --explain needs {', '.join(missing)}")
        print(explain_auto(args))
        return 0

    if args.compare:
        import json

        from tabulate import tabulate

        rows = compare_tables(*args.compare)
        if not rows:
            raise SystemExit("vk tuned: --compare: the two tables share no key (variant, L bucket, T, H, page size)")
        print(f"first: {args.compare[0]} ({rows[0]['first']['kind']}); second: {args.compare[1]} "
              f"({rows[0]['second']['kind']})")
        print(tabulate([(r["variant"], f"{r['l_bucket']:,}", r["tree_nodes"], r["heads"], f"{r['first']['ms']:.4f}",
                         f"{r['second']['ms']:.4f}", "same" if r["same_config"] else ", ".join(
                             f"{k} {r['first']['config'].get(k)}/{r['second']['config'].get(k)}"
                             for k in r["differ_in"]))
                        for r in rows],
                       headers=["variant", "L bucket", "T", "H", "first ms", "second ms", "configs (first/second)"]))
        if args.json:
            print(json.dumps(rows))
        return 0
    tables = tuned_tables(args)
    if args.json and not args.compare:
        raise SystemExit("vk tuned: --json: only with --compare")
    if args.publish:
        if args.file is None:
            raise SystemExit("vk tuned: --publish needs --file, the measured table to ship (results/tuned/<gpu>.yaml)")
        check_source_checkout("--publish")
        table = read_winners(args.file, "--file")
        problems = publish_problems(table)
        if problems:
            raise SystemExit(f"vk tuned: --publish: {args.file}: {problems[0]}"
                             + (f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""))
        stale = check_winners(args.file)
        if stale:
            print("\n".join(stale))
            raise SystemExit(f"vk tuned: --publish: {len(stale)} stale records in {args.file}; re-tune them first")
        unfair = cross_source_picks(table)
        if unfair and not args.mixed_sources:
            print("\n".join(unfair))
            raise SystemExit(f"vk tuned: --publish: at {len(unfair)} keys a variant wins over another's record timed "
                             "at other library sources (a re-stamp keeps the old time; host code such as the "
                             "combine may have changed since): tune both in one run, or pass --mixed-sources")
        proxy_for = next(iter(table.values())).get("proxy_for")  # one for the whole table (publish_problems)
        print(f"published {publish_winners(args.file, proxy_for)}")
        return 0
    if args.check:
        stale = [line for _, path in tables for line in check_winners(path)]
        for line in stale:
            print(line)
        names = ", ".join(str(path) for _, path in tables) or "(no tables)"
        print(f"ok: every tuned record in {names} matches the current source" if not stale else
              f"{len(stale)} stale records")
        return 1 if stale or not tables else 0
    if not tables:
        print("no tuned tables: `vk tune` writes results/tuned/<gpu>.yaml; `vk tuned --publish --file ...` ships one")
    for kind, path in tables:
        print(f"# {kind}: {path}")
        table = read_winners(path, "--file" if kind == "given" else "table")
        if kind == "given" and not table:
            raise SystemExit(f"vk tuned: --file: {path}: expected winner records, got an empty table")
        print(yaml.safe_dump(table, sort_keys=True))
    return 0


def cross_source_picks(table: dict) -> list[str]:
    """Keys of a winner table where the fastest record beats another variant's record measured at other
    library sources (``source_hash``): two kernels' times compare fairly only under the same host code
    (plan, combine, launches), which a kernel re-stamp does not re-measure."""
    by_key: dict[str, list[dict]] = {}
    for name, record in table.items():
        by_key.setdefault(name.split("|", 1)[-1], []).append(record)
    lines = []
    for key, records in sorted(by_key.items()):
        best = min(records, key=lambda record: record["median_ms"])
        others = [record for record in records if record["variant"] != best["variant"]
                  and record.get("source_hash") != best.get("source_hash")]
        if others:
            lines.append(f"{key}: {best['variant']} ({best['median_ms']:.4f} ms, sources {best.get('source_hash')}) "
                         "over " + ", ".join(f"{record['variant']} ({record['median_ms']:.4f} ms, sources "
                                             f"{record.get('source_hash')})" for record in others))
    return lines


def publish_problems(table: dict) -> list[str]:
    """Why a table may not be shipped as what ``variant="auto"`` runs: it must hold measured records
    (a median from a real GPU: not predicted, not VK_TUNE_FAKE's fake costs), all of one GPU's own or all
    of one proxy tune (the same ``proxy_for``)."""
    if not table:
        return ["the table is empty"]
    problems = []
    proxies = {record.get("proxy_for") for record in table.values()}
    if len(proxies) > 1:
        problems.append(f"proxy and measured records mixed (proxy_for: {sorted(map(str, proxies))}): one table per "
                        "source")
    for name, record in table.items():
        if record.get("predicted"):
            problems.append(f"{name}: a predicted record (vk predict-fit --ship ships those)")
        elif str(record.get("gpu", "")).startswith("fake-") or not isinstance(record.get("median_ms"), (int, float)):
            problems.append(f"{name}: not a measurement (gpu {record.get('gpu')!r}, "
                            f"median_ms {record.get('median_ms')!r})")
    return problems


def cmd_tune_quality(args) -> int:
    needs_optuna("tune-quality")

    result = trials_to_reach(args.storage, args.study, seeds=args.seeds, within=args.within)
    print(format_quality(result))
    if args.plot:
        plot_quality(result, args.plot)
        print(f"figure: {args.plot}")
    return 0


def add_commands(sub) -> None:
    """Register this package's subcommands on the ``vk`` parser."""
    tune = sub.add_parser("tune", help="Optuna over the statically feasible space, one study per key")
    tune.add_argument("--variants", nargs="+", default=["triton_splitkv", "cuda_coalesced", "cuda_ws"],
                      help="variants with a search space")
    tune.add_argument("--prefix", type=prefix_lengths, help="prefix lengths L, one key per L bucket (default: 4096, "
                      "32768, 131072; none when --ragged is given alone)")
    tune.add_argument("--ragged", type=prefix_lengths, action="append", default=[],
                      help="a ragged batch, one prefix length per request, comma-separated: a key of its own, "
                           "which variant='auto' reads for batches of about its size (repeatable)")
    tune.add_argument("--tree", type=int_list_in(1, 1024), default=[16, 64, 256], help="tree sizes T")
    tune.add_argument("--heads", type=int_list_in(1, 128), default=[8], help="heads H")
    tune.add_argument("--page-size", type=int_in(1), default=64, help="KV pool page size")
    tune.add_argument("--dtype", choices=["bfloat16", "float16"], default="bfloat16")
    tune.add_argument("--trials", type=int_in(0), default=30,
                      help="configs measured per study, counting earlier runs (pruned proposals and duplicates "
                           "are free; 0: only collect the winners)")
    tune.add_argument("--minutes", type=float_at_least(0, strict=True), help="wall-clock budget per study")
    tune.add_argument("--storage", help=f"any Optuna storage URL (default {'sqlite:///results/tuned/optuna.db'})")
    tune.add_argument("--workers", type=int_in(1), default=1,
                      help="worker processes, one per local GPU, shared storage")
    tune.add_argument("--arch", choices=known_arches(), help="static model's arch (default: this GPU's)")
    tune.add_argument("--gpu", help="GPU SKU for the keys (default: this GPU's)")
    tune.add_argument("--constrain-to", choices=known_arches(),
                      help="proxy tuning: search only the configs this arch's static model admits, timed on this "
                           "GPU; studies and winners apart (results/tuned/<gpu>-proxy-<arch>.yaml, proxy_for: <arch>)")
    tune.add_argument("--objective", choices=["measured", "predicted"], default="measured",
                      help="measured (time each config on this GPU) or predicted: the predictor's time on --arch, "
                           "no GPU; winners into results/predict/predicted-<arch>.yaml, predicted: true")
    tune.add_argument("--fitted-on", default="sm_90", choices=known_arches(),
                      help="with --objective predicted: the arch whose "
                                                            "measurements fitted the predictor's parameters")
    tune.add_argument("--seed", type=seed, default=0)
    tune.add_argument("--trial-timeout", type=float_at_least(0, strict=True), default=180.0,
                      help="seconds before a trial counts as hung")
    tune.add_argument("--rep-ms", type=float_at_least(0, strict=True), default=100.0,
                      help="time budget of timed calls per trial")
    tune.add_argument("--timing", choices=["events", "graph"], default="events",
                      help="events: eager calls between CUDA events (a launch's host time shows once it exceeds "
                           "the kernel's); graph: CUDA-graph replay, the kernels alone (how the decode runs them)")
    tune.add_argument("--exhaustive", action="store_true",
                      help="measure every feasible config once (study '<key>|exhaustive'), for vk tune-quality")
    tune.add_argument("--winners", type=output_file, help="winners YAML (default results/tuned/<gpu-sku>.yaml)")
    tune.add_argument("--no-compile", action="store_true",
                      help="static model without the compiler: constraints and kernel rules only")
    tune.add_argument("--worker-only", action="store_true", help=argparse.SUPPRESS)
    tune.add_argument("--no-progress", action="store_true")
    tune.set_defaults(func=cmd_tune)

    tuned = sub.add_parser("tuned",
                           help="show tuned winners: measured (results/tuned/) and shipped (verify_kernels/tuned/)",
                           description="Show the tuned winner tables: those vk tune measured under results/tuned/ and "
                                       "those the package ships for variant='auto' (verify_kernels/tuned/).")
    tuned.add_argument("--check", action="store_true", help="exit 1 when a record's kernel source hash is stale")
    tuned.add_argument("--file", type=Path, help="one table instead of all of them")
    tuned.add_argument("--compare", type=Path, nargs=2, metavar=("FIRST", "SECOND"),
                       help="per shared key, the two tables' winners side by side: e.g. a proxy table "
                            "(vk tune --constrain-to sm_120) against the predicted one (predicted-sm_120.yaml)")
    tuned.add_argument("--json", action="store_true", help="with --compare: also print the rows as JSON")
    tuned.add_argument("--explain", action="store_true",
                       help="what variant='auto' runs on --arch for one shape (--prefix, --tree, --heads, "
                            "--page-size, --dtype; --gpu for its measured table) and which record decided it")
    tuned.add_argument("--arch", choices=known_arches(),
                       help="with --explain: the GPU arch (its predicted table)")
    tuned.add_argument("--gpu", help="with --explain: the GPU SKU whose measured table to read, e.g. nvidia-h200")
    tuned.add_argument("--prefix", type=int_in(0, PREFIX_MAX),
                       help="with --explain: the prefix length L (auto buckets L + T "
                                                                                "by the block table's capacity)")
    tuned.add_argument("--tree", type=int_in(1, 1024), help="with --explain: tree nodes T")
    tuned.add_argument("--heads", type=int_in(1, 128), help="with --explain: heads H")
    tuned.add_argument("--page-size", type=int_in(1), default=64, help="with --explain: the pool's page size")
    tuned.add_argument("--dtype", choices=["bfloat16", "float16"], default="bfloat16", help="with --explain")
    tuned.add_argument("--batch", type=int_in(1), default=1, help="with --explain: the batch's requests (ragged "
                       "batches' records, vk tune --ragged, are matched by it)")
    tuned.add_argument("--publish", action="store_true",
                       help="copy --file (a measured table) into the package, where variant='auto' reads it")
    tuned.add_argument("--mixed-sources", action="store_true",
                       help="with --publish: ship even where a variant wins over another's record timed at other "
                            "library sources (refused by default)")
    tuned.set_defaults(func=cmd_tuned)

    quality = sub.add_parser("tune-quality", help="trials TPE needs to reach the exhaustive best (replayed)")
    quality.add_argument("--storage", required=True, help="the Optuna storage URL holding the study")
    quality.add_argument("--study", required=True, help="a study holding an exhaustive measurement of one key")
    quality.add_argument("--seeds", type=int_in(1), default=5, help="TPE replays, one per seed")
    quality.add_argument("--within", type=float_at_least(0), default=0.03,
                         help="how close to the best counts as reaching it (fraction)")
    quality.add_argument("--plot", type=output_file, help="write the best-so-far figure (PNG) here")
    quality.set_defaults(func=cmd_tune_quality)
