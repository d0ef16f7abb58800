"""The work planner of the paged split-KV variants: which CTA attends which request's rows to which
KV positions, decided on the device from ``prefix_lens`` (no host sync, so a CUDA graph captured
once stays right when the lengths change), with bounds known from shapes alone.

The unit of work is (request b, split s) x row block: the rows r0.. r0+ROWS-1 of request b against
the positions [s * chunk, min((s + 1) * chunk, prefix_len_b + T)). A plan is

```
plan[0 .. B]          split_start: exclusive prefix sum of each request's split count (plan[B] = all units)
plan[B + 1]           chunk: positions per split, or per span (a multiple of BLOCK_N)
plan[B + 2 .. 2B + 2] tile_start: the batch's tiles (of BLOCK_N positions, a request's last one partial)
                      before each request (plan[2B + 2] = all tiles)
plan[2B + 3]          gap: spans rule, the tiles of balance laid before each request but the first (0: none)
```

and unit u (0 <= u < plan[B]) is split u - split_start[b] of the request b with split_start[b] <= u <
split_start[b + 1]. The attention kernel's grid is (row blocks, ``grid``); a program whose unit is
past plan[B] has nothing to do. Partial outputs are indexed by unit, so a request's splits are
contiguous and the combine reads them in one run.

Three rules fill it:
- balanced (``kv_splits`` = 0): every request's positions in chunks of the same size, the smallest
  (never under MIN_CHUNK_TOKENS: a split costs a partial output and a combine read) whose units
  all fit in ``waves`` waves of ``ctas_per_sm`` CTAs on every SM (a binary search over the chunk on
  the device). A long request gets many splits and a short one few, so a ragged batch keeps every
  SM busy until the end, and no partial last wave doubles the time. Every request needs a unit, so a
  batch of about as many requests as the target leaves a long one few units (as many requests: one,
  its whole length in one CTA); the chunk whose units fit one per request but the first and a wave
  more (``crowded_units``) is taken instead where its waves x chunk, the time of equal units, is shorter;
- spans (``kv_splits`` = 0, ``waves`` = 0; FlashMLA's schedule): one wave of ``spans`` CTAs per row
  block, CTA c owning tiles [c * span, (c + 1) * span) of the batch's tiles laid end to end, so its
  range may cross request boundaries and every CTA gets the same work however ragged the batch.
  A CTA walks its range as segments (the part of its range inside one request); the segments,
  numbered in order, are the units: each writes its own partial rows and a request's are contiguous
  (split_start), so the combine is the same. The kernel finds its segments with ``cta_range`` /
  ``segment_at``'s arithmetic (``reference_segments`` states it): segment ids are ranks among the
  span starts and the request starts that are not span starts. Needs a kernel that walks segments
  (``gluon_wgmma_ws``; ``cuda_ws`` and ``cuda_qreg`` compiled with ``SPANS``). A segment costs a
  fixed set-up (Q rows, partial rows, the ring's refill) whatever its tiles, so a span that meets
  many request starts runs longer: ``segment_cost`` (positions; FlashMLA's fixed overhead per split)
  lays a gap of that many positions' tiles before every request but the first, in which no tile is
  computed, and a span that meets it gets fewer tiles. A kernel walks the gaps (compiled with ``GAPS``:
  ``gluon_wgmma_ws``, ``cuda_ws``, ``cuda_qreg``): a segment's tiles in its request are those past the gap,
  maybe none (an empty unit: its partial rows weigh nothing in the combine);
- fixed (``kv_splits`` = N > 0): N splits per request of ceil(capacity / N) positions (the block
  table's capacity), as before the planner; a tuned config that names a split count keeps it.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from .plan_scope import keep_plan, shared_plan
from .splits import CTAS_PER_SM, MAX_KV_SPLITS, MIN_SPLIT_TOKENS

MIN_CHUNK_TOKENS = MIN_SPLIT_TOKENS  # a unit as short as a split may be: its partial rows cost as much
MAX_WAVES = 16
SPANS = 0  # ``waves`` 0: the spans rule (CTA ranges across requests)
PLAN_KEYS = ("kv_splits", "waves")  # the config keys the planner reads: launch parameters, not compiled
# A one-wave plan is kept when its busiest unit holds at most 1/ONE_WAVE_BALANCE of an even share.
ONE_WAVE_BALANCE = 0.9


@dataclass(frozen=True)
class PlanBounds:
    """What the launch needs to know without reading the plan: its grid and buffer sizes."""

    max_units: int       # the most units a plan can have: partial buffers' size, in units
    max_splits: int      # the most units one request can have (the combine's width)
    fixed_splits: int    # 0: balanced rule; N: N splits per request
    target_units: int    # balanced: the most units the plan may have, ``waves`` waves of them (0 with fixed splits)
    wave_units: int      # balanced: the units of one wave (0 with fixed splits)
    crowded_units: int   # balanced: the most units a batch of many requests may have, B - 1 + a wave (0: as target)
    fixed_chunk: int     # fixed: positions per split (0 with the balanced rule)
    min_chunk: int       # balanced: the smallest chunk (positions)
    block_n: int
    spans: int = 0       # spans rule: CTAs per row block (0: a units rule)
    gap_tiles: int = 0   # spans rule: tiles laid before each request but the first (``segment_cost``)

    @property
    def grid(self) -> int:
        """Programs per row block: one per unit, or one per span."""
        return self.spans or self.max_units


def plan_bounds(*, batch: int, row_blocks: int, capacity: int, block_n: int, sms: int, kv_splits: int,
                ctas_per_sm: int = CTAS_PER_SM, waves: int = 1, min_chunk_tokens: int = MIN_CHUNK_TOKENS,
                segment_cost: int = 0) -> PlanBounds:
    """The plan's bounds from shapes alone (``capacity``: positions the block table holds per request).
    ``waves`` > 1 lets the plan cut a batch that one wave balances badly (below ONE_WAVE_BALANCE: a
    short request's unit beside a long one's) into that many waves of smaller units: the hardware
    hands each SM the next CTA as one finishes, so they even out, at the cost of more partial rows
    and more per-unit set-up. A batch one wave balances well (a single request, equal ones) keeps
    one wave. ``waves`` 0 is the spans rule: ``ctas_per_sm`` x ``sms`` CTAs over the row blocks,
    at most spans + batch - 1 segments (a span's end inside a request adds one); ``segment_cost``
    (positions, spans rule only) the gap laid before each request but the first."""
    check_segment_cost(segment_cost, kv_splits, waves)
    if kv_splits:
        chunk = triton.cdiv(triton.cdiv(capacity, kv_splits), block_n) * block_n
        return PlanBounds(batch * kv_splits, kv_splits, kv_splits, 0, 0, 0, chunk, 0, block_n)
    wave = max(1, ctas_per_sm * sms // row_blocks)
    min_chunk = triton.cdiv(max(min_chunk_tokens, block_n), block_n) * block_n
    if waves == SPANS:
        gap = triton.cdiv(segment_cost, block_n)
        per_request = min(wave, triton.cdiv(capacity + gap * block_n, min_chunk) + 1)
        return PlanBounds(wave + batch - 1, per_request, 0, 0, wave, 0, 0, min_chunk, block_n, spans=wave,
                          gap_tiles=gap)
    target = wave * waves
    crowded = batch - 1 + wave if batch - 1 + wave > target else 0
    # At most the target, or a unit per request but the first and a wave more when the plan takes that; and no
    # request has more splits than its capacity holds chunks (at most the target: a wave or more).
    per_request = max(1, min(target, triton.cdiv(capacity, min_chunk)))
    return PlanBounds(max(batch, min(max(target, crowded), batch * per_request)), per_request, 0, target, wave,
                      crowded, 0, min_chunk, block_n)


def walks_spans(config: dict) -> bool:
    """Whether ``config`` plans by the spans rule (``kv_splits`` 0, ``waves`` 0). A kernel that walks
    segments compiles another program for it (its ``SPANS``), so this is a compile-time fact too."""
    return config.get("kv_splits", 0) == 0 and config.get("waves") == SPANS


def lays_gaps(config: dict) -> bool:
    """Whether ``config``'s plan lays gaps (a ``segment_cost``): a kernel that walks them compiles another
    program for it (``GAPS``), so this is a compile-time fact too."""
    return config.get("segment_cost", 0) > 0


def walk_macros(config: dict) -> dict:
    """What a CUDA kernel that walks segments (plan_walk.cuh) is compiled with for ``config``'s plan: ``SPANS``
    for the spans rule, ``GAPS`` where it lays gaps; neither named otherwise, so a units config compiles
    exactly as before the spans walk."""
    return {**({"SPANS": 1} if walks_spans(config) else {}), **({"GAPS": 1} if lays_gaps(config) else {})}


def check_segment_cost(cost, kv_splits: int, waves: int) -> None:
    """``segment_cost``: an int >= 0 (positions), non-zero with the spans rule only."""
    if not isinstance(cost, int) or isinstance(cost, bool) or cost < 0:
        raise ValueError(f"config: segment_cost must be an int >= 0 (positions), got {cost!r}")
    if cost and (kv_splits or waves != SPANS):
        raise ValueError(f"config: segment_cost {cost} needs the spans rule (kv_splits 0, waves 0), got "
                         f"kv_splits {kv_splits}, waves {waves}")


def check_plan_config(config: dict, *, spans: bool = False) -> dict:
    """A variant's planner keys: ``kv_splits`` 0 (balanced) or 1..MAX_KV_SPLITS (fixed), ``waves``
    1..MAX_WAVES, or 0 (spans) where the variant walks segments (``spans`` True), and ``segment_cost``
    (``check_segment_cost``) where it names one."""
    if not 0 <= config["kv_splits"] <= MAX_KV_SPLITS:
        raise ValueError(f"config: kv_splits must be 0 (planned) or 1..{MAX_KV_SPLITS}, got {config['kv_splits']}")
    lowest = 0 if spans else 1
    if not lowest <= config.get("waves", 1) <= MAX_WAVES:
        needs = " (0, the spans rule, needs a kernel that walks segments: gluon_wgmma_ws, cuda_ws, cuda_qreg)"
        raise ValueError(f"config: waves must be {lowest}..{MAX_WAVES}{'' if spans else needs}, got {config['waves']}")
    check_segment_cost(config.get("segment_cost", 0), config["kv_splits"], config.get("waves", 1))
    return config


@triton.jit
def _smallest_chunk(tiles, valid, total, units_allowed, min_tiles):
    """The smallest chunk (in tiles) whose units fit ``units_allowed``: units(chunk) falls as the chunk
    grows; at the longest request's tile count every request is one unit (more than allowed only
    when there are more requests)."""
    lo = tl.maximum(min_tiles, (total + units_allowed - 1) // units_allowed)
    hi = tl.maximum(lo, tl.max(tiles, 0))
    while lo < hi:  # log2(hi - lo) steps; a fixed 32 made cuda_qreg's sm_120 plan 6.9 us (spans, no search: 1.4)
        mid = (lo + hi) // 2
        fits = tl.sum(tl.where(valid, (tiles + mid - 1) // mid, 0), 0) <= units_allowed
        hi = tl.where(fits, mid, hi)
        lo = tl.where(fits, lo, mid + 1)
    return hi


@triton.jit
def _units_time(tiles, valid, chunk_tiles, wave_units):
    """Waves x chunk: the time (in tiles) of a plan's units were they all a chunk long."""
    units = tl.sum(tl.where(valid, (tiles + chunk_tiles - 1) // chunk_tiles, 0), 0)
    return (units + wave_units - 1) // wave_units * chunk_tiles


@triton.jit
def _plan_kernel(PrefixLens, Plan, B, T, target_units, wave_units, crowded_units, fixed_chunk, min_chunk, gap_tiles,
                 FIXED_SPLITS: tl.constexpr, SPANS: tl.constexpr, BLOCK_N: tl.constexpr, B_POW2: tl.constexpr,
                 BALANCE: tl.constexpr, LAUNCH_DEPENDENTS: tl.constexpr):
    """One program: every request's split count, their exclusive prefix sum, the chunk and the
    requests' first tiles (laid after their gaps: ``gap_tiles`` before each request but the first)."""
    if LAUNCH_DEPENDENTS:  # the attention kernel, launched programmatically, may start its prologue
        tl.extra.cuda.gdc_launch_dependents()
    b = tl.arange(0, B_POW2)
    valid = b < B
    lengths = tl.load(PrefixLens + b, mask=valid, other=0) + T
    tiles = tl.where(valid, (lengths + BLOCK_N - 1) // BLOCK_N, 0)
    laid = tiles + tl.where(valid & (b >= 1), gap_tiles, 0)  # a request's tiles and the gap before it
    tile_ends = tl.cumsum(laid, 0)
    total = tl.sum(laid, 0)
    if SPANS:
        chunk_tiles = tl.maximum(min_chunk // BLOCK_N, (total + wave_units - 1) // wave_units)
        # a request's first segment: the span starts before its first tile, plus the request starts
        # before it that are not span starts (each one ends a segment inside a span)
        starts = tile_ends - laid
        inner = valid & (b >= 1) & (starts % chunk_tiles != 0)
        cut_before = tl.cumsum(inner.to(tl.int32), 0) - inner.to(tl.int32)
        first = (starts + chunk_tiles - 1) // chunk_tiles + cut_before
        tl.store(Plan + b, first, mask=valid)
        cuts = tl.sum(inner.to(tl.int32), 0)
        tl.store(Plan + B, (total + chunk_tiles - 1) // chunk_tiles + cuts)
        chunk = chunk_tiles * BLOCK_N
    else:
        if FIXED_SPLITS > 0:
            chunk = fixed_chunk
            splits = tl.where(valid, FIXED_SPLITS, 0)
        else:
            one_wave = _smallest_chunk(tiles, valid, total, wave_units, min_chunk // BLOCK_N)
            several = _smallest_chunk(tiles, valid, total, target_units, min_chunk // BLOCK_N)
            if crowded_units > 0:  # many requests: a wave more for the long ones where that is faster
                crowded = _smallest_chunk(tiles, valid, total, crowded_units, min_chunk // BLOCK_N)
                faster = (_units_time(tiles, valid, crowded, wave_units)
                          < _units_time(tiles, valid, several, wave_units))
                several = tl.where(faster, crowded, several)
            balanced = total.to(tl.float32) >= BALANCE * (one_wave * wave_units).to(tl.float32)
            chunk_tiles = tl.where(balanced, one_wave, several)
            chunk = chunk_tiles * BLOCK_N
            splits = tl.where(valid, (tiles + chunk_tiles - 1) // chunk_tiles, 0)
        ends = tl.cumsum(splits, 0)
        tl.store(Plan + 1 + b, ends, mask=valid)
        tl.store(Plan + b, ends - splits, mask=b == 0)
    tl.store(Plan + B + 1, chunk)
    tl.store(Plan + B + 2 + b, tile_ends - laid, mask=valid)
    tl.store(Plan + 2 * B + 2, total)
    tl.store(Plan + 2 * B + 3, gap_tiles)


def make_plan(prefix_lens: torch.Tensor, tree_nodes: int, bounds: PlanBounds, *,
              launch_dependents: bool = False) -> torch.Tensor:
    """The plan (int32 [2B + 4], on prefix_lens' device) for this call: one tiny launch, no sync, or
    none inside ``plan_scope.plan_once`` where a call of the block made it for the same lengths.
    ``launch_dependents``: the next launch is programmatic (``launch_pdl``) and waits for
    the plan on the device, so it may be scheduled while the plan is made."""
    shared = shared_plan(prefix_lens, tree_nodes, bounds)
    if shared is not None:
        return shared
    batch = prefix_lens.shape[0]
    plan = torch.empty(2 * batch + 4, dtype=torch.int32, device=prefix_lens.device)
    _plan_kernel[(1,)](prefix_lens, plan, batch, tree_nodes, bounds.target_units, bounds.wave_units,
                       bounds.crowded_units, bounds.fixed_chunk, bounds.min_chunk, bounds.gap_tiles,
                       FIXED_SPLITS=bounds.fixed_splits, SPANS=bool(bounds.spans), BLOCK_N=bounds.block_n,
                       B_POW2=triton.next_power_of_2(batch), BALANCE=ONE_WAVE_BALANCE,
                       LAUNCH_DEPENDENTS=launch_dependents, num_warps=1)
    keep_plan(prefix_lens, tree_nodes, bounds, plan)
    return plan


@triton.jit
def unit_of(Plan, unit, B, B_POW2: tl.constexpr):
    """(request, split, first position, chunk, splits of the request, units in the plan) of ``unit``;
    request is B when ``unit`` is past the plan."""
    b = tl.arange(0, B_POW2)
    ends = tl.load(Plan + 1 + b, mask=b < B, other=2147483647)
    request = tl.sum((ends <= unit).to(tl.int32), 0)
    safe = tl.minimum(request, B - 1)
    first_unit = tl.load(Plan + safe)
    splits = tl.load(Plan + safe + 1) - first_unit
    chunk = tl.load(Plan + B + 1)
    split = unit - first_unit
    return request, split, split * chunk, chunk, splits, tl.load(Plan + B)


def reference_plan(prefix_lens: list[int], tree_nodes: int, bounds: PlanBounds) -> tuple[list[int], int]:
    """The same plan in Python (split_start with B + 1 entries, chunk), for tests and models."""
    tiles = [-(-(length + tree_nodes) // bounds.block_n) for length in prefix_lens]
    if bounds.spans:  # a request's first unit: the spans before it, and the request starts inside spans
        tile_start = reference_tile_starts(prefix_lens, tree_nodes, bounds.block_n, bounds.gap_tiles)
        span = max(bounds.min_chunk // bounds.block_n, -(-tile_start[-1] // bounds.spans))
        inner_before = [0, 0]  # request starts strictly inside a span, before request b (b = 0, 1, ...)
        for start in tile_start[1:-1]:
            inner_before.append(inner_before[-1] + (start % span != 0))
        return [-(-t // span) + inner for t, inner in zip(tile_start, inner_before)], span * bounds.block_n
    if bounds.fixed_splits:
        splits = [bounds.fixed_splits] * len(prefix_lens)
        chunk = bounds.fixed_chunk
    else:
        def smallest_chunk(allowed: int) -> int:
            low = max(bounds.min_chunk // bounds.block_n, -(-sum(tiles) // allowed))
            high = max(low, max(tiles))
            while low < high:
                middle = (low + high) // 2
                if sum(-(-t // middle) for t in tiles) <= allowed:
                    high = middle
                else:
                    low = middle + 1
            return high

        def units_time(chunk_tiles: int) -> int:
            return -(-sum(-(-t // chunk_tiles) for t in tiles) // bounds.wave_units) * chunk_tiles

        one_wave = smallest_chunk(bounds.wave_units)
        balanced = sum(tiles) >= ONE_WAVE_BALANCE * one_wave * bounds.wave_units
        several = smallest_chunk(bounds.target_units)
        if bounds.crowded_units:
            crowded = smallest_chunk(bounds.crowded_units)
            several = crowded if units_time(crowded) < units_time(several) else several
        chunk_tiles = one_wave if balanced else several
        chunk = chunk_tiles * bounds.block_n
        splits = [-(-t // chunk_tiles) for t in tiles]
    starts = [0]
    for count in splits:
        starts.append(starts[-1] + count)
    return starts, chunk


def reference_tile_starts(prefix_lens: list[int], tree_nodes: int, block_n: int, gap_tiles: int = 0) -> list[int]:
    """plan[B + 2 .. 2B + 2]: the tiles laid before each request (its gap included), and all of them last."""
    starts = [0]
    for request, length in enumerate(prefix_lens):
        starts.append(starts[-1] + -(-(length + tree_nodes) // block_n) + (gap_tiles if request else 0))
    return starts


def reference_segment(tile_start: list[int], gap_tiles: int, request: int, position: int,
                      end: int) -> tuple[int, int, int]:
    """The segment of ``request`` from laid tile ``position`` to its end or ``end``: (its first tile in the
    request, its tiles, the laid tiles it spans). The tiles of the gap before the request are none of its:
    a segment inside the gap has no tile."""
    gap = gap_tiles if request else 0
    stop = min(end, tile_start[request + 1])
    first = max(position - tile_start[request] - gap, 0)
    return first, max(stop - tile_start[request] - gap - first, 0), stop - position


def reference_segments(prefix_lens: list[int], tree_nodes: int, bounds: PlanBounds) -> list[list[tuple]]:
    """Per CTA of the spans rule, its segments in order as (request, first tile in the request,
    tiles (none for a segment inside a request's gap), unit): what the kernel derives from the plan with
    the same arithmetic (``cta_range``, ``segment_at`` in gluon_common)."""
    starts, chunk = reference_plan(prefix_lens, tree_nodes, bounds)
    span = chunk // bounds.block_n
    tile_start = reference_tile_starts(prefix_lens, tree_nodes, bounds.block_n, bounds.gap_tiles)
    total, inner = tile_start[-1], tile_start[1:-1]
    per_cta = []
    for cta in range(bounds.spans):
        begin, end = min(cta * span, total), min((cta + 1) * span, total)
        unit = cta + sum(1 for t in inner if t < begin and t % span)
        request = sum(1 for t in inner if t <= begin)  # then one request a segment: each has a laid tile
        segments, position = [], begin
        while position < end:
            first, tiles, laid = reference_segment(tile_start, bounds.gap_tiles, request, position, end)
            segments.append((request, first, tiles, unit))
            unit, position, request = unit + 1, position + laid, request + 1
        per_cta.append(segments)
    assert [s[3] for segments in per_cta for s in segments] == list(range(starts[-1])), "units in order"
    return per_cta
