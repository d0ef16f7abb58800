"""How far two correct forward paths of the same model disagree: bf16 logit noise vs greedy margins.

For each context: plain greedy decoding (one node per forward, T = 1), then ONE verify forward of
the same tokens as a chain (T = N, the DDTree verify path); for every position, the greedy token's
logit on both paths, the greedy top-2 margin, and whether the chain forward's argmax agrees.
A DDTree divergence from greedy is a near-tie when the margin there is within this path noise.

Usage (repository root): python scripts/decode_noise.py --preset k2-tp8 --context 32768,131072 \
    --tokens 48 --variant auto [--compile-layers] [--out noise.json]
"""

from __future__ import annotations

import argparse
import json
import statistics

import torch
from tabulate import tabulate

from harness.arguments import int_list
from harness.decode.run import build_model, build_setup, greedy_reference, make_prompt, page_size_for
from harness.measure.records import make_record
from harness.decode.target_runner import TargetRunner


def noise_for_context(model, prompt, *, context: int, tokens: int, variant: str, page_size: int) -> dict:
    setup = build_setup(model, prompt, context=context, max_new=tokens + 64, max_tree=tokens + 1,
                        page_size=page_size_for(variant, page_size), seed=0, prefill_variant=variant)
    greedy = greedy_reference(setup, variant=variant, new_tokens=tokens)
    chain = [setup.history[-1]] + greedy.tokens[:-1]
    runner = TargetRunner(model, setup.cache, attention=variant, use_graphs=False)
    setup.cache.reserve(setup.cache.prefix_len + len(chain))
    logits = runner.run(runner.load(chain, list(range(-1, len(chain) - 1)), list(range(len(chain))), len(chain)))
    logits = logits.float().cpu()
    picked = torch.tensor(greedy.tokens)
    on_chain = logits.gather(1, picked[:, None])[:, 0]
    deltas = (on_chain - torch.tensor(greedy.top_logits)).abs().tolist()
    agree = (logits.argmax(1) == picked).tolist()
    return {"context": context, "variant": variant, "tokens": tokens, "deltas": deltas, "margins": greedy.margins,
            "agree": agree, "median_delta": statistics.median(deltas), "max_delta": max(deltas),
            "median_margin": statistics.median(greedy.margins), "min_margin": min(greedy.margins),
            "disagreements": [i for i, ok in enumerate(agree) if not ok]}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="tiny")
    parser.add_argument("--context", type=int_list, default=[0], help="comma-separated context lengths")
    parser.add_argument("--tokens", type=int, default=48)
    parser.add_argument("--variant", default="auto")
    parser.add_argument("--page-size", type=int, default=64)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--compile-layers", action="store_true")
    parser.add_argument("--out")
    args = parser.parse_args(argv)
    dtype = torch.bfloat16 if args.device == "cuda" else torch.float32
    model = build_model(args.preset, seed=0, dtype=dtype, device=args.device, compile_layers=args.compile_layers)
    prompt = make_prompt(model.config, None, 16, 0)
    rows = [noise_for_context(model, prompt, context=c, tokens=args.tokens, variant=args.variant,
                              page_size=args.page_size) for c in args.context]
    if args.out:
        with open(args.out, "w") as handle:
            json.dump(make_record("decode_noise", {"compile_layers": args.compile_layers, "dtype": str(dtype),
                                                   "rows": rows}), handle, indent=1, default=str)
    print(tabulate([(r["context"], r["variant"], f"{r['median_delta']:.3f}", f"{r['max_delta']:.3f}",
                     f"{r['median_margin']:.3f}", f"{r['min_margin']:.3f}", r["disagreements"]) for r in rows],
                   headers=["context", "variant", "median |dlogit|", "max |dlogit|", "median margin",
                            "min margin", "argmax differs at"]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
