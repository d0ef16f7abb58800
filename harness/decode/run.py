"""``vk decode``: set up a model and its cache, decode with DDTree (and plain greedy decoding for
the oracle drafter and the lossless check), and report the step, its phases and its floor.

The floor of one step: the weights read once (``MLAConfig.matrix_params`` x element size over the
measured copy bandwidth) plus the attention roofline floor of every layer at the step's prefix and
tree size (harness/measure/roofline.py), i.e. what a perfect memory- and tensor-bound step would cost.
"""

from __future__ import annotations

from contextlib import nullcontext
from dataclasses import dataclass

import torch

from harness.decode.counters import profile_step
from harness.decode.loop import DecodeRun, compare_tokens, ddtree_decode, greedy_decode, prefill
from harness.decode.device_loop import ddtree_decode_on_device
from harness.decode.drafters import make_drafter
from harness.decode.kv_pool import PagedKVCache
from harness.decode.model import PRESETS, MLAConfig, MLAModel, load_weights, random_weights
from harness.decode.target_runner import TargetRunner
from harness.measure.inputs import InputError, check_input_file
from harness.measure.power import PowerSampler
from harness.measure.environment import gpu_sku
from harness.measure.records import append_records, make_record
from harness.measure.roofline import load_ceilings, verify_work
from verify_kernels.variants import VARIANTS


PADDED_GREEDY = "greedy padded to the budget"  # the oracle drafter's reference with --batch-invariant-greedy


@dataclass
class DecodeSetup:
    """A model, its cache with the context and prompt in place, and the pending root."""

    config: MLAConfig
    model: MLAModel
    cache: PagedKVCache
    history: list[int]   # prompt tokens (the last one is the pending root)
    start_len: int       # rows in the cache: context + prompt - 1


def build_model(preset: str, *, seed: int, dtype: torch.dtype, device: str, weights_path: str | None = None,
                compile_layers: bool = False, gemm: str = "cublas", gemm_table: str | None = None,
                pdl: bool = False) -> MLAModel:
    if preset not in PRESETS:
        raise InputError(f"--preset: expected one of {sorted(PRESETS)}, got {preset!r}")
    config = PRESETS[preset]
    weights = (load_weights(weights_path, config, dtype=dtype, device=device) if weights_path
               else random_weights(config, seed=seed, dtype=dtype, device=device))
    return MLAModel(config, weights, compile_layers=compile_layers, gemm=gemm, gemm_table=gemm_table, pdl=pdl)


def default_gemm_table(device: str) -> str | None:
    """The tuned split-K table of this GPU (results/tuned/splitk-linear-SKU.json), if there is one."""
    if device != "cuda":
        return None
    from harness.decode.splitk_linear import tuned_table_path

    path = tuned_table_path(gpu_sku())
    return str(path) if path.exists() else None


def make_prompt(config: MLAConfig, prompt: list[int] | None, prompt_len: int, seed: int) -> list[int]:
    if prompt is None:
        generator = torch.Generator().manual_seed(seed + 1)
        prompt = torch.randint(0, config.vocab, (prompt_len,), generator=generator).tolist()
    if not prompt or any(not 0 <= t < config.vocab for t in prompt):
        bad = [t for t in prompt if not 0 <= t < config.vocab][:4]
        raise InputError(f"--prompt: expected token ids in [0, {config.vocab}) (the vocabulary), got {bad or prompt}")
    return list(prompt)


def build_setup(model: MLAModel, prompt: list[int], *, context: int, max_new: int, max_tree: int, page_size: int,
                seed: int, prefill_variant: str = "auto") -> DecodeSetup:
    """The cache for ``model`` with ``context`` random rows (seeded: the same rows for any page
    size) and the prompt prefilled after them; the prompt's last token is the pending root."""
    config = model.config
    device, dtype = model.weights["embed"].device, model.weights["embed"].dtype
    slack = 2 * page_size
    cache = PagedKVCache.for_tokens(config.layers, context + len(prompt) + max_new + max_tree + slack, page_size,
                                    config.latent_dim, dtype=dtype, device=device)
    if context:
        cache.fill_random_prefix(context, seed=seed + 2)
    prefill(TargetRunner(model, cache, attention=prefill_variant, use_graphs=False), prompt[:-1])
    return DecodeSetup(config, model, cache, list(prompt), cache.prefix_len)


def floor_ms(config: MLAConfig, *, prefix_len: int, tree_nodes: int, element_bytes: int) -> dict | None:
    ceilings = load_ceilings()
    if ceilings is None:
        return None
    weights_ms = config.matrix_params() * element_bytes / (ceilings.copy_tbps * 1e12) * 1e3
    attention_ms = config.layers * ceilings.floor_ms(verify_work([prefix_len], tree_nodes, config.heads))
    return {"weights_ms": weights_ms, "attention_ms": attention_ms, "step_ms": weights_ms + attention_ms,
            "ceilings_gpu": ceilings.gpu}


def decode_once(setup: DecodeSetup, *, variant: str, drafter_name: str, budget: int, new_tokens: int,
                block_size: int, temperature: float, seed: int, greedy: DecodeRun | None,
                use_graphs: bool = True, measure_attention: bool = True,
                greedy_batch_invariant: DecodeRun | None = None, sync_phases: bool = False,
                spin: bool = True, draft_on: str = "host") -> dict:
    """One DDTree run with ``variant``; compared with ``greedy`` (and with the batch-invariant
    greedy run, forwards padded to the budget) when given. The oracle drafter follows the
    batch-invariant run when there is one (the continuation this verify's numerics produce, so a
    bf16 near-tie that T = 1 greedy breaks the other way does not collapse its acceptance), else
    ``greedy``."""
    runner = TargetRunner(setup.model, setup.cache, attention=variant, use_graphs=use_graphs)
    followed = greedy_batch_invariant if greedy_batch_invariant is not None else greedy
    reference = setup.history + followed.tokens if followed is not None else None
    drafter = make_drafter(drafter_name, reference=reference, vocab=setup.config.vocab, seed=seed)
    sampler = PowerSampler(device_index=setup.cache.pool.device.index) if setup.cache.pool.is_cuda else nullcontext()
    with sampler as power:
        if draft_on == "device":
            run = ddtree_decode_on_device(runner, setup.history, new_tokens, drafter, budget=budget,
                                          block_size=block_size)
        else:
            run = ddtree_decode(runner, setup.history, new_tokens, drafter, budget=budget, block_size=block_size,
                                temperature=temperature, seed=seed, sync_phases=sync_phases, spin=spin)
    summary = run.summary()
    result = {"variant": variant, "kernel": runner.kernel(budget), "drafter": drafter_name, "budget": budget,
              "drafter_reference": None if drafter_name != "oracle" else (
                  PADDED_GREEDY if greedy_batch_invariant is not None else "greedy"),
              "block_size": block_size, "temperature": temperature, "graphs": runner.use_graphs,
              "phase_timing": "synced" if sync_phases else "overlapped" if spin else "overlapped-blocking",
              "draft_on": draft_on, **summary,
              "steps_detail": run.step_dicts()}
    if power is not None:
        result["power"] = power.summary(window=run.window)  # over the steps, not the warm-up (NVML)
    if measure_attention:
        setup.cache.reserve(setup.start_len + budget)
        attention = runner.attention_ms(budget)
        if attention is not None and summary["median_step_ms"]:
            result["attention_ms_per_step"] = attention
            result["attention_share"] = attention / summary["median_step_ms"]
            result["verify_rest_ms"] = summary["mean_phase_ms"]["verify"] - attention
        setup.cache.truncate(setup.start_len)
    element = torch.tensor([], dtype=setup.cache.pool.dtype).element_size()
    floor = floor_ms(setup.config, prefix_len=setup.start_len, tree_nodes=budget, element_bytes=element)
    if floor is not None and summary["median_step_ms"]:
        result["floor"] = floor
        result["step_over_floor"] = summary["median_step_ms"] / floor["step_ms"]
    if greedy is not None and temperature == 0:
        result["lossless"] = compare_tokens(run.tokens, greedy)
    if greedy_batch_invariant is not None and temperature == 0:
        result["lossless_batch_invariant"] = compare_tokens(run.tokens, greedy_batch_invariant)
    result["tokens"] = run.tokens
    return result


def greedy_reference(setup: DecodeSetup, *, variant: str, new_tokens: int, use_graphs: bool = True,
                     rows: int = 1) -> DecodeRun:
    """Greedy decoding from the setup's root; ``rows`` > 1: each forward padded to that many
    nodes (the batch-invariant reference, see ``greedy_decode``)."""
    runner = TargetRunner(setup.model, setup.cache, attention=variant, use_graphs=use_graphs)
    return greedy_decode(runner, setup.history, new_tokens, rows=rows)


def page_size_for(variant: str, default: int) -> int:
    """The page size a variant runs on (the bench's rule: triton_ps1 only 1); "reference" (the
    oracle) and "auto" take any."""
    from harness.bench.sweep import page_size_for as kernel_page_size

    return default if variant in ("reference", "auto") else kernel_page_size(variant, default)


# Flags that act only on a CUDA device: refused on the CPU rather than ignored while the record claims them.
CUDA_ONLY_FLAGS = {"--gemm splitk": lambda a: a.gemm == "splitk", "--gemm-table": lambda a: a.gemm_table,
                   "--pdl": lambda a: a.pdl, "--counters": lambda a: getattr(a, "counters", False),
                   "--counters-by-kernel": lambda a: getattr(a, "counters_by_kernel", False)}
MEMORY_HEADROOM = 0.9  # of the memory available now


def available_bytes(device: str) -> int:
    if device == "cuda":
        return torch.cuda.mem_get_info()[0]
    import os

    return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def check_decode_inputs(args, device: str, dtype: torch.dtype) -> None:
    """What no run of the matrix could do, refused before a weight is built: CUDA-only flags on the
    CPU, positions past the model's, and weights plus cache that do not fit in memory."""
    if device == "cpu":
        given = [flag for flag, is_set in CUDA_ONLY_FLAGS.items() if is_set(args)]
        if given:
            raise InputError(f"{given[0]}: acts on a CUDA device only; this run is on the CPU (--device cpu or no GPU)")
    for flag in ("weights", "gemm_table"):
        if getattr(args, flag, None):
            check_input_file(getattr(args, flag), "--" + flag.replace("_", "-"))
    if getattr(args, "counters_by_kernel", False) and not getattr(args, "counters", False):
        raise InputError("--counters-by-kernel: only with --counters")

    known = {"auto", "reference", *VARIANTS}
    unknown = sorted(set(args.variants or []) - known)
    if unknown:
        raise InputError(f"--variants: unknown {unknown}; expected some of {sorted(known)}")
    if args.gemm_table and args.gemm != "splitk":
        raise InputError(f"--gemm-table: only with --gemm splitk, got --gemm {args.gemm}")
    config = PRESETS[args.preset]
    prompt_len = len(args.prompt) if args.prompt else args.prompt_len
    positions = max(args.context) + prompt_len + args.new_tokens + 64 + max(args.budget) + args.block_size
    if positions > config.max_positions:
        raise InputError(f"--context/--prompt-len/--new-tokens: the preset {args.preset} runs at most "
                         f"{config.max_positions:,} positions, these need {positions:,} (context {max(args.context):,} "
                         f"+ prompt {prompt_len:,} + new tokens {args.new_tokens} + tree and slack)")
    element = torch.finfo(dtype).bits // 8
    needed, available = config.resident_bytes(positions, element), available_bytes(device)
    if needed > MEMORY_HEADROOM * available:
        raise InputError(f"--preset {args.preset} --device {device}: needs ~{needed / 2**30:.1f} GiB of weights and "
                         f"cache in {str(dtype).removeprefix('torch.')}, {device} has {available / 2**30:.1f} GiB free")


def run_matrix(args, command: str) -> list[dict]:
    """Every (context, variant, budget) of the arguments: one model, one cache per context and page
    size, one greedy reference per context; a record appended to ``args.out`` after each run."""
    from tqdm import tqdm

    if args.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("vk decode: --device: cuda requested, but torch sees no CUDA device on this machine")
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    dtype = getattr(torch, args.dtype) if args.dtype else (torch.bfloat16 if device == "cuda" else torch.float32)
    check_decode_inputs(args, device, dtype)
    variants_ = args.variants or (["auto"] if device == "cuda" else ["reference"])
    if device == "cpu" and any(v != "reference" for v in variants_):
        raise SystemExit("vk decode: on the CPU only --variants reference (the float64 oracle; the kernels "
                         "are bf16/fp16 and GPU-only outside the interpreter)")
    gemm_table = args.gemm_table or (default_gemm_table(device) if args.gemm == "splitk" else None)
    model = build_model(args.preset, seed=args.seed, dtype=dtype, device=device, weights_path=args.weights,
                        compile_layers=args.compile_layers, gemm=args.gemm, gemm_table=gemm_table, pdl=args.pdl)
    prompt = make_prompt(model.config, args.prompt, args.prompt_len, args.seed)
    reference_variant = args.greedy_variant or variants_[-1]
    need_greedy = args.check_lossless or args.drafter == "oracle"
    results = []
    timings = list(dict.fromkeys(args.phase_timing))
    if args.repeats < 1:
        raise SystemExit(f"vk decode: --repeats: expected at least 1, got {args.repeats}")
    repeats = range(args.repeats)
    draft_on = list(dict.fromkeys(args.draft_on))
    if "device" in draft_on and (args.temperature > 0 or args.drafter != "oracle"):
        raise SystemExit("vk decode: --draft-on device: greedy decoding with the oracle drafter only, got "
                         f"--temperature {args.temperature} --drafter {args.drafter}")
    # Device drafting is timed one way (overlapped: the host one step behind); its other timings are skipped.
    modes = [(t, d) for d in draft_on for t in timings if d == "host" or t == "overlapped"]
    jobs = [(c, v, b, r, m) for c in args.context for v in variants_ for b in args.budget for r in repeats
            for m in modes]  # the timings and draft places of one repeat side by side
    progress = tqdm(total=len(jobs), desc="decode", unit="run", disable=args.no_progress)
    for context in args.context:
        setups: dict[int, DecodeSetup] = {}

        def setup_for(page_size: int) -> DecodeSetup:
            if page_size not in setups:
                prefill_variant = (reference_variant if page_size_for(reference_variant, page_size) == page_size
                                   else "auto")
                setups[page_size] = build_setup(model, prompt, context=context, max_new=args.new_tokens + 64,
                                                max_tree=max(args.budget), page_size=page_size, seed=args.seed,
                                                prefill_variant=prefill_variant)
            return setups[page_size]

        greedy = None
        if need_greedy:
            setup = setup_for(page_size_for(reference_variant, args.page_size))
            greedy = greedy_reference(setup, variant=reference_variant, new_tokens=args.new_tokens + args.block_size,
                                      use_graphs=not args.no_graphs)
        padded_greedy: dict[int, DecodeRun] = {}  # budget -> greedy with forwards padded to it
        for variant in variants_:
            setup = setup_for(page_size_for(variant, args.page_size))
            for budget, repeat, (timing, drafting) in ((b, r, m) for b in args.budget for r in repeats for m in modes):
                if args.batch_invariant_greedy and args.temperature == 0 and budget not in padded_greedy:
                    padded_greedy[budget] = greedy_reference(
                        setup_for(page_size_for(reference_variant, args.page_size)), variant=reference_variant,
                        new_tokens=args.new_tokens + (args.block_size if args.drafter == "oracle" else 0),
                        use_graphs=not args.no_graphs, rows=budget)  # the oracle drafts a block past the end
                payload = {"preset": args.preset, "context": context, "prompt_len": len(prompt),
                           "page_size": setup.cache.page_size, "dtype": str(dtype).removeprefix("torch."),
                           "device": device, "new_tokens_requested": args.new_tokens, "seed": args.seed,
                           "compile_layers": args.compile_layers, "gemm": {"kind": args.gemm, "table": gemm_table},
                           "pdl": args.pdl, "repeat": repeat}
                if greedy is not None:
                    payload["greedy"] = {"variant": reference_variant, "seconds": greedy.seconds,
                                         "tokens_per_s": len(greedy.tokens) / greedy.seconds,
                                         "ms_per_token": 1e3 * greedy.seconds / len(greedy.tokens)}
                try:
                    payload.update(decode_once(setup, variant=variant, drafter_name=args.drafter, budget=budget,
                                               new_tokens=args.new_tokens, block_size=args.block_size,
                                               temperature=args.temperature, seed=args.seed, greedy=greedy,
                                               use_graphs=not args.no_graphs,
                                               greedy_batch_invariant=padded_greedy.get(budget),
                                               sync_phases=timing == "synced",
                                               spin=timing != "overlapped-blocking", draft_on=drafting))
                except Exception as error:  # a run that fails is a record too; the matrix goes on
                    payload.update({"variant": variant, "budget": budget, "draft_on": drafting, "status": "error",
                                    "reason": f"{type(error).__name__}: {str(error)[:500]}"})
                if getattr(args, "counters", False) and device == "cuda" and payload.get("status") != "error":
                    progress.set_postfix_str(f"{variant} {context}: ncu over one verify step")
                    payload["counters"] = profile_step(by_kernel=getattr(args, "counters_by_kernel", False), settings={
                        "preset": args.preset, "seed": args.seed, "dtype": str(dtype).removeprefix("torch."),
                        "context": context, "page_size": setup.cache.page_size, "budget": budget, "variant": variant,
                        "prompt_len": len(prompt), "max_new": args.new_tokens + 64,
                        "compile_layers": args.compile_layers, "gemm": args.gemm, "gemm_table": gemm_table,
                        "pdl": args.pdl})
                record = make_record("decode", payload, command)
                if args.out:
                    append_records(args.out, [record])
                results.append(record)
                progress.update()
        setups.clear()
        if device == "cuda":
            torch.cuda.empty_cache()
    progress.close()
    return results


def _match(lossless: dict | None) -> str:
    if lossless is None:
        return "-"
    if lossless["identical"]:
        return "identical"
    return f"diverged at {lossless['first_divergence']} (margin {lossless['greedy_top2_margin_at_divergence']:.3f})"


def timing_suffix(record: dict) -> str:
    """" synced" for a run timed with a sync after every phase (``--phase-timing synced``), " blocking"
    for one that waited in cudaEventSynchronize (``overlapped-blocking``), else ""; then
    " device-draft" for a run that drafted on the device (``--draft-on device``)."""
    timing = {"synced": " synced", "overlapped-blocking": " blocking"}.get(record.get("phase_timing"), "")
    return timing + (" device-draft" if record.get("draft_on") == "device" else "")


def _variant_label(record: dict) -> str:
    """The requested variant, with the kernel "auto" resolved to, and the timing suffix."""
    kernel = (record.get("kernel") or {}).get("variant")
    label = record["variant"] if kernel in (None, record["variant"]) else f"{record['variant']} ({kernel})"
    return label + timing_suffix(record)


def format_decode_table(records: list[dict]) -> str:
    from tabulate import tabulate

    padded = any("lossless_batch_invariant" in r for r in records)
    rows = []
    for r in records:
        if r.get("status") == "error":
            rows.append((r["context"], r["variant"], r["budget"], "error: " + r["reason"][:60]) + ("",) * (8 + padded))
            continue
        phases = r["mean_phase_ms"]
        rows.append((r["context"], _variant_label(r), r["budget"], f"{r['median_step_ms']:.2f}",
                     f"{phases['verify']:.2f}",
                     f"{r['attention_ms_per_step']:.2f}" if "attention_ms_per_step" in r else "-",
                     f"{phases['draft'] + phases['tree'] + phases['mask']:.2f}",
                     f"{phases['walk'] + phases['commit']:.2f}",
                     f"{r['mean_accepted']:.2f}", f"{r['tokens_per_s']:.1f}",
                     f"{r['step_over_floor']:.3f}x" if "step_over_floor" in r else "-", _match(r.get("lossless")))
                    + ((_match(r.get("lossless_batch_invariant")),) if padded else ()))
    headers = (["context", "variant", "budget", "step ms", "verify ms", "attn ms", "draft+tree+mask", "walk+commit",
                "tokens/step", "tokens/s", "vs floor", "vs greedy"] + (["vs padded greedy"] if padded else []))
    if any("power" in r or "counters" in r for r in records):
        rows = [(*row, *_counter_cells(r)) for row, r in zip(rows, records)]
        headers += ["W median", "mem ctrl %", "step tensor %", "step DRAM %"]
    return tabulate(rows, headers=headers)


def _counter_cells(record: dict) -> tuple[str, str, str, str]:
    """NVML power and memory-controller % over the run; ncu tensor-pipe and DRAM % over one step."""
    power = record.get("power") or {}
    found = record.get("counters") or {}
    step = found.get("step") or (found.get("by_class") or {}).get("all") or {}
    watts = f"{power['power_w_median']:.0f}" if power.get("status") == "ok" else "-"
    memory = f"{power['mem_util_pct_median']:.0f}" if power.get("status") == "ok" else "-"
    if found.get("status") == "ok":
        cells = tuple("-" if step.get(k) is None else f"{step[k]:.1f}" for k in ("tensor_pipe_pct", "dram_pct"))
    else:
        cells = (found.get("status", "-"),) * 2
    return watts, memory, *cells
