"""``vk decode``, ``vk decode-report``: the DDTree decode loop and its tables and plots."""

from __future__ import annotations

from pathlib import Path

import json

from harness.arguments import (float_at_least, int_in, int_list, int_list_in, output_dir, output_file,
                               prefix_lengths, seed)
from harness.measure.paths import results_dir
from harness.measure.environment import command_line


def cmd_decode(args) -> int:
    from harness.decode.run import format_decode_table, run_matrix

    records = run_matrix(args, command_line())
    if args.json:
        for record in records:
            print(json.dumps({k: v for k, v in record.items() if k != "steps_detail"}))
    else:
        print(format_decode_table(records))
        if any(r.get("variant") == "reference" for r in records):
            print("\nreference: no kernel ran; the float64 oracle (verify_kernels.reference_attention) did the "
                  "attention")
        if args.out:
            print(f"\nrecords appended to {args.out}")
    failed = [r for r in records if r.get("status") == "error"]
    must_match = [r for r in records if r.get("device") == "cpu" and r.get("dtype") == "float32"]
    if args.check_lossless and any(r.get("lossless") and not r["lossless"]["identical"] for r in must_match):
        return 1  # in float32 on the CPU the tokens must be identical
    return 1 if failed else 0


def cmd_decode_report(args) -> int:
    import importlib.util
    import sys

    from harness.decode.report import write_decode_report

    if "/" in args.name or not args.name.strip():
        raise SystemExit(f"vk decode-report: --name: expected a file-name stem (no '/'), got {args.name!r}")
    for path in write_decode_report(args.records, args.out_dir, args.name):
        print(path)
    if importlib.util.find_spec("matplotlib") is None:
        print("vk decode-report: no plots: they need matplotlib (pip install 'verify-kernels[plot]')", file=sys.stderr)
    return 0


def cmd_tune_gemm(args) -> int:
    from harness.decode.tune_gemm import run

    return run(args)


def add_commands(sub) -> None:
    """Register this package's subcommands on the ``vk`` parser."""
    decode = sub.add_parser("decode", help="DDTree decode loop on an MLA model: step phases, tokens/s, lossless check")
    decode.add_argument("--preset", default="tiny", choices=["tiny", "k2-tp8"],
                        help="tiny (CPU tests) or k2-tp8 (one GPU's slice of Kimi K2 at TP8)")
    decode.add_argument("--context", type=prefix_lengths, default=[0],
                        help="random latent rows before the prompt (list)")
    decode.add_argument("--budget", type=int_list_in(1, 1024), default=[64],
                        help="tree nodes per step, root included (list)")
    decode.add_argument("--new-tokens", type=int_in(1), default=64, help="tokens to decode per run")
    decode.add_argument("--variants", "--variant", nargs="+",
                        help="attention variants (auto, triton_ps1, ...; reference = the float64 oracle, the CPU "
                             "default); triton_ps1 runs on a page_size=1 pool")
    decode.add_argument("--drafter", choices=["oracle", "ngram"], default="oracle",
                        help="oracle: follows the greedy run at a calibrated acceptance; ngram: the context's n-grams")
    decode.add_argument("--block-size", type=int_in(1), default=16, help="drafted positions per step")
    decode.add_argument("--temperature", type=float_at_least(0), default=0.0,
                        help="> 0 samples the target at each node")
    decode.add_argument("--check-lossless", action="store_true",
                        help="compare with plain greedy decoding (CPU float32: must be identical)")
    decode.add_argument("--batch-invariant-greedy", action="store_true",
                        help="also compare with greedy decoding whose forwards are padded to the budget (the verify's "
                             "GEMM shapes): separates bf16 shape noise from the tree's own effect")
    decode.add_argument("--greedy-variant",
                        help="variant of the greedy reference run (default: the last of --variants)")
    decode.add_argument("--prompt", type=int_list, help="prompt token ids (default: --prompt-len random ids)")
    decode.add_argument("--prompt-len", type=int_in(1), default=16, help="random prompt tokens (without --prompt)")
    decode.add_argument("--page-size", type=int_in(1), default=64,
                        help="KV pool page size (triton_ps1 always runs on 1)")
    decode.add_argument("--device", choices=["cpu", "cuda"])
    decode.add_argument("--dtype", choices=["bfloat16", "float16", "float32"],
                        help="default: bfloat16 on the GPU, float32 on the CPU")
    decode.add_argument("--weights", type=Path,
                        help="a safetensors file in DeepSeek-V3 tensor names (default: random, --seed)")
    decode.add_argument("--seed", type=seed, default=0)
    decode.add_argument("--no-graphs", action="store_true", help="eager verify forward instead of CUDA graphs")
    decode.add_argument("--compile-layers", action="store_true",
                        help="torch.compile each layer's two halves around attention (fuses norms, RoPE, SwiGLU)")
    decode.add_argument("--gemm", choices=["cublas", "splitk"], default="cublas",
                        help="the layers' weight GEMMs: cuBLAS, or the split-K Triton kernel "
                             "(harness/decode/splitk_linear.py)")
    decode.add_argument("--gemm-table", type=Path, help="split-K configs (JSON from vk tune-gemm; default: "
                        "results/tuned/splitk-linear-SKU.json for this GPU if present, else built-in defaults)")
    decode.add_argument("--pdl", action="store_true",
                        help="programmatic dependent launches between the compiled layers' kernels and the split-K "
                        "GEMMs (Hopper+; with --compile-layers --gemm splitk)")
    decode.add_argument("--phase-timing", nargs="+", choices=["overlapped", "overlapped-blocking", "synced"],
                        default=["overlapped"],
                        help="overlapped (default): one wait for the GPU per step, the walk's, polled, so the commit "
                             "overlaps the next draft; overlapped-blocking: the same, waiting in cudaEventSynchronize; "
                             "synced: a device sync after every phase, so phases add up to the step. Several: each "
                             "run once per choice (harness/decode/loop.py)")
    decode.add_argument("--draft-on", nargs="+", choices=["host", "device"], default=["host"],
                        help="host (default): the host drafts, builds the tree and its mask between steps; device: "
                             "all three run on the device in CUDA graphs and the host stays one step behind (greedy, "
                             "oracle drafter; phase timing overlapped only). Both: each run once per choice "
                             "(harness/decode/device_loop.py)")
    decode.add_argument("--repeats", type=int_in(1), default=1,
                        help="runs of each (context, variant, budget, timing), back to back in one process, for the "
                             "run-to-run spread of the step (records carry ``repeat``)")
    decode.add_argument("--counters", action="store_true",
                        help="also profile one verify step per point under ncu (a separate process, never a "
                             "timed step): tensor-pipe and DRAM %% over the step's verify graph")
    decode.add_argument("--counters-by-kernel", action="store_true",
                        help="with --counters: profile each kernel of the step and split by class (attention, "
                             "GEMMs, the rest); one ncu pass per kernel, minutes at long context")
    decode.add_argument("--out", type=output_file, help="append JSONL records here")
    decode.add_argument("--json", action="store_true")
    decode.add_argument("--no-progress", action="store_true")
    decode.set_defaults(func=cmd_decode)

    decode_report = sub.add_parser("decode-report", help="decode records -> markdown table and plots")
    decode_report.add_argument("records", type=Path, nargs="+", help="JSONL files written by vk decode --out")
    decode_report.add_argument("--out-dir", type=output_dir, default=results_dir() / "decode",
                               help="where the table and plots go")
    decode_report.add_argument("--name", default="decode", help="file-name stem of the table and plots")
    decode_report.set_defaults(func=cmd_decode_report)

    tune_gemm = sub.add_parser("tune-gemm", help="tune the decode model's split-K weight GEMMs beside cuBLAS (GPU)")
    tune_gemm.add_argument("--preset", default="k2-tp8", choices=["tiny", "k2-tp8"],
                           help="the model whose weight GEMMs are tuned")
    tune_gemm.add_argument("--rows", type=int_list_in(1, 1024), default=[64, 1, 32],
                           help="row counts M (one per BLOCK_M), in order")
    tune_gemm.add_argument("--shapes", nargs="+", help="a subset of the weight GEMMs (default: all five)")
    tune_gemm.add_argument("--table", type=output_file, required=True,
                           help="winners JSON (read by vk decode --gemm-table)")
    tune_gemm.add_argument("--out", type=output_file, required=True, help="JSONL records, one per (shape, M)")
    tune_gemm.add_argument("--pdl", action="store_true",
                           help="tune the programmatic-dependent-launch build (what vk decode --pdl runs)")
    tune_gemm.add_argument("--no-progress", action="store_true")
    tune_gemm.set_defaults(func=cmd_tune_gemm)
