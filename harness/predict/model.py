"""Predicted kernel time from an arch spec, the static model's resources and a variant's declared
per-tile work (``tile_work``), with five or six parameters fitted on measurements (``fit.py``).

One launch: CTAs = row blocks x units (the planner's, ``planner.reference_plan``, for a variant on the
planner; else KV splits x requests by the variant's split rule), ``blocks_per_sm`` of them resident per SM
(registers, shared memory and threads: the static model), in ``waves`` over the SMs. An SM runs a
round of tiles (one per resident CTA) in

    max(mma cycles / (tensor efficiency x f), shared-memory bytes / (128 B/clk x smem efficiency x f))
        + tile overhead x barriers + copy issue x copies,   f = min(1, resident warps / saturating warps)

so a config is tensor-bound or shared-memory-bound by the arch's per-clock rates (the H200 does
~2,500 mma FLOP per SM-clock against 128 B; the RTX PRO 6000 ~1,000), and latency-bound below the
saturating warp count; "copies" are the bulk copies of a tile's KV rows the busiest compute warp
issues itself (a kernel without a producer warp), a sixth parameter for the variants that declare them
(notes/2026-12-04-qreg-ring.md priced them). The longest CTA's tiles x waves x round, plus a fixed launch
cost and the split combine's traffic, floored by the DRAM time of reading the KV once.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from verify_kernels import variants
from verify_kernels.planner import plan_bounds, reference_plan
from verify_kernels.splits import CTAS_PER_SM, kv_splits_for

from harness.static.space import VariantOnArch

PARAMETERS = ("tensor_efficiency", "smem_efficiency", "saturating_warps", "tile_overhead_cycles", "fixed_us")
# Fitted only for variants whose tile_work declares the KV copies a compute warp issues per tile.
COPY_PARAMETER = "copy_issue_cycles"
HEAD_DIM, V_DIM = 576, 512


@dataclass(frozen=True)
class Prediction:
    time_ms: float
    bound: str          # "tensor", "shared memory" or "dram"
    ctas: int
    blocks_per_sm: int
    waves: int
    tiles_per_cta: int
    warps_per_sm: int
    kv_splits: int

    def as_dict(self) -> dict:
        return asdict(self)


def parameters_for(work: dict) -> tuple[str, ...]:
    """The fitted parameters a prediction from ``work`` (a ``tile_work`` result) needs."""
    return PARAMETERS + ((COPY_PARAMETER,) if "copies_by_compute_warps" in work else ())


def tile_work_of(target: VariantOnArch):
    """The variant's ``tile_work``; ValueError naming the variants that declare one if it has none."""
    tile_work = variants.optional(target.module, "tile_work")
    if tile_work is None:
        covered = [n for n in variants.VARIANTS if variants.optional(variants.load_variant(n), "tile_work")]
        raise ValueError(f"variant: {target.name!r} declares no tile_work; the predictor covers {covered}")
    return tile_work


def predict(target: VariantOnArch, config: dict, *, prefix_len: int, tree_nodes: int, heads: int,
            blocks_per_sm: int, params: dict, batch: int = 1, page_size: int = 64,
            prefix_lens: list[int] | None = None) -> Prediction:
    """Predicted time of one launch of ``target`` (a variant resolved on the arch to predict for) at
    ``config`` (``blocks_per_sm`` from the static model); ``prefix_lens``: a ragged batch (else ``batch``
    requests of ``prefix_len``). A variant whose defaults carry the planner's ``waves`` runs on the
    planner: its units are ``planner.reference_plan``'s."""
    arch = target.arch_record
    tile_work = tile_work_of(target)
    if blocks_per_sm < 1:
        raise ValueError(f"blocks_per_sm: the config cannot place a CTA on an SM of {arch.name} (got {blocks_per_sm})")
    work = tile_work(config)
    missing = [name for name in parameters_for(work) if name not in params]
    if missing:
        raise ValueError(f"params: missing {missing}")
    rows = tree_nodes * heads
    lengths = list(prefix_lens) if prefix_lens else [prefix_len] * batch
    batch, sequence = len(lengths), max(lengths) + tree_nodes
    capacity = (math.ceil(sequence / page_size) + 1) * page_size  # a spare logical page, as tables have
    row_blocks = math.ceil(rows / work["rows"])
    if "waves" in target.defaults:  # the planner's units, on ``arch``
        bounds = plan_bounds(batch=batch, row_blocks=row_blocks, capacity=capacity, block_n=work["block_n"],
                             sms=arch.sms, kv_splits=config.get("kv_splits", 0),
                             ctas_per_sm=work["split_rule"].get("ctas_per_sm", CTAS_PER_SM),
                             waves=config.get("waves", target.defaults["waves"]))
        starts, split_len = reference_plan(lengths, tree_nodes, bounds)
        per_request = [b - a for a, b in zip(starts, starts[1:])]
        launched = bounds.spans  # the spans rule: one CTA per span, each a span's tiles (split_len)
    else:  # the kernel's own split rule for kv_splits=0, on ``arch``
        count = config.get("kv_splits") or kv_splits_for(capacity, rows, batch, work["rows"], work["block_n"],
                                                         arch.sms, **work["split_rule"])
        split_len = math.ceil(math.ceil(capacity / count) / work["block_n"]) * work["block_n"]
        per_request = [count] * batch
        launched = 0
    splits = max(per_request)
    tiles = math.ceil((split_len if launched else min(split_len, sequence)) / work["block_n"])
    ctas = row_blocks * (launched or sum(per_request))
    resident = max(1, min(blocks_per_sm, math.ceil(ctas / arch.sms)))
    waves = math.ceil(ctas / (arch.sms * blocks_per_sm))
    warps = resident * work["warps"]
    latency = min(1.0, warps / params["saturating_warps"])
    mma_rate = arch.mma_sync_flop_per_clock_per_sm * params["tensor_efficiency"] * latency
    smem_rate = arch.smem_bytes_per_clock_per_sm * params["smem_efficiency"] * latency
    mma_cycles = resident * work["mma"] * 4096 / mma_rate
    smem_cycles = resident * work["smem_bytes"] / smem_rate
    round_cycles = max(mma_cycles, smem_cycles) + params["tile_overhead_cycles"] * work["barriers"]
    if work.get("copies_by_compute_warps"):  # the refill a compute warp issues itself stalls it
        round_cycles += params["copy_issue_cycles"] * work["copies_by_compute_warps"]
    kernel_ms = waves * tiles * round_cycles / (arch.clock_ghz * 1e6)
    combine_bytes = sum(count * rows * (V_DIM + 1) * 4 + rows * V_DIM * 2 for count in per_request if count > 1)
    time_ms = kernel_ms + params["fixed_us"] / 1e3 + combine_bytes / (arch.dram_tbps * 1e9)
    dram_ms = sum(length + tree_nodes for length in lengths) * HEAD_DIM * 2 / (arch.dram_tbps * 1e9)
    bound = "tensor" if mma_cycles >= smem_cycles else "shared memory"
    if dram_ms > time_ms:
        time_ms, bound = dram_ms, "dram"
    return Prediction(time_ms, bound, ctas, blocks_per_sm, waves, tiles, warps, splits)
