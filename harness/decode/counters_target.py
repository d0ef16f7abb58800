"""The profiled verify step of ``vk decode --counters`` (harness.decode.counters), run under ncu.

    python -m harness.decode.counters_target '{"preset": "k2-tp8", "context": 185000, ...}'
"""

from __future__ import annotations

import json
import sys

import torch

from harness.decode.run import build_model, build_setup, make_prompt
from harness.decode.target_runner import TargetRunner
from harness.measure.counters import replay_profiled


def main(argument: str) -> int:
    """Build the decode point of ``argument`` (JSON: preset, seed, dtype, context, page_size,
    budget, variant, prompt_len, max_new, compile_layers, gemm, gemm_table, pdl) and replay its
    verify graph inside the profiled NVTX range."""
    s = json.loads(argument)
    model = build_model(s["preset"], seed=s["seed"], dtype=getattr(torch, s["dtype"]), device="cuda",
                        compile_layers=s["compile_layers"], gemm=s["gemm"], gemm_table=s["gemm_table"], pdl=s["pdl"])
    prompt = make_prompt(model.config, None, s["prompt_len"], s["seed"])
    setup = build_setup(model, prompt, context=s["context"], max_new=s["max_new"], max_tree=s["budget"],
                        page_size=s["page_size"], seed=s["seed"], prefill_variant="auto")
    runner = TargetRunner(setup.model, setup.cache, attention=s["variant"], use_graphs=True)
    setup.cache.reserve(setup.start_len + s["budget"])
    bucket = runner.warm(s["budget"])
    replay_profiled(lambda: runner.run(bucket))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
