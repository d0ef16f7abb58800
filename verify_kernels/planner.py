"""The work planner of the paged split-KV variants: which CTA attends which request's rows to which
KV positions, decided on the device from ``prefix_lens`` (no host sync, so a CUDA graph captured
once stays right when the lengths change), with bounds known from shapes alone.

The unit of work is (request b, split s) x row block: the rows r0.. r0+ROWS-1 of request b against
the positions [s * chunk, min((s + 1) * chunk, prefix_len_b + T)). A plan is

```
plan[0 .. B]   split_start: exclusive prefix sum of each request's split count (plan[B] = all units)
plan[B + 1]    chunk: positions per split (a multiple of BLOCK_N)
```

and unit u (0 <= u < plan[B]) is split u - split_start[b] of the request b with split_start[b] <= u <
split_start[b + 1]. The attention kernel's grid is (row blocks, ``max_units``); a program whose unit
is past plan[B] has nothing to do. Partial outputs are indexed by unit, so a request's splits are
contiguous and the combine reads them in one run.

Two rules fill it:
- balanced (``kv_splits`` = 0): every request's positions in chunks of the same size, the smallest
  (never under MIN_CHUNK_TOKENS: a split costs a partial output and a combine read) whose units
  all fit in ``waves`` waves of ``ctas_per_sm`` CTAs on every SM (a binary search over the chunk on
  the device). A long request gets many splits and a short one few, so a ragged batch keeps every
  SM busy until the end, and no partial last wave doubles the time;
- fixed (``kv_splits`` = N > 0): N splits per request of ceil(capacity / N) positions (the block
  table's capacity), as before the planner; a tuned config that names a split count keeps it.
A kernel that cuts its own splits (``gluon_wgmma``) hands the combine ``fixed_plan``: the same layout.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from .splits import CTAS_PER_SM, MAX_KV_SPLITS, MIN_SPLIT_TOKENS

MIN_CHUNK_TOKENS = MIN_SPLIT_TOKENS  # a unit as short as a split may be: its partial rows cost as much
MAX_WAVES = 16
PLAN_KEYS = ("kv_splits", "waves")  # the config keys the planner reads: launch parameters, not compiled
# A one-wave plan is kept when its busiest unit holds at most 1/ONE_WAVE_BALANCE of an even share.
ONE_WAVE_BALANCE = 0.9


@dataclass(frozen=True)
class PlanBounds:
    """What the launch needs to know without reading the plan: its grid and buffer sizes."""

    max_units: int       # grid dimension of units; programs past the plan's count exit
    max_splits: int      # the most units one request can have (the combine's width)
    fixed_splits: int    # 0: balanced rule; N: N splits per request
    target_units: int    # balanced: the most units the plan may have, ``waves`` waves of them (0 with fixed splits)
    wave_units: int      # balanced: the units of one wave (0 with fixed splits)
    fixed_chunk: int     # fixed: positions per split (0 with the balanced rule)
    min_chunk: int       # balanced: the smallest chunk (positions)
    block_n: int


def plan_bounds(*, batch: int, row_blocks: int, capacity: int, block_n: int, sms: int, kv_splits: int,
                ctas_per_sm: int = CTAS_PER_SM, waves: int = 1, min_chunk_tokens: int = MIN_CHUNK_TOKENS) -> PlanBounds:
    """The plan's bounds from shapes alone (``capacity``: positions the block table holds per request).
    ``waves`` > 1 lets the plan cut a batch that one wave balances badly (below ONE_WAVE_BALANCE: a
    short request's unit beside a long one's) into that many waves of smaller units: the hardware
    hands each SM the next CTA as one finishes, so they even out, at the cost of more partial rows
    and more per-unit set-up. A batch one wave balances well (a single request, equal ones) keeps
    one wave."""
    if kv_splits:
        chunk = triton.cdiv(triton.cdiv(capacity, kv_splits), block_n) * block_n
        return PlanBounds(batch * kv_splits, kv_splits, kv_splits, 0, 0, chunk, 0, block_n)
    wave = max(1, ctas_per_sm * sms // row_blocks)
    target = wave * waves
    min_chunk = triton.cdiv(max(min_chunk_tokens, block_n), block_n) * block_n
    # At most the target (one wave), or one unit per request when there are more requests; and no
    # request has more splits than its capacity holds chunks.
    per_request = max(1, min(target, triton.cdiv(capacity, min_chunk)))
    return PlanBounds(max(batch, min(target, batch * per_request)), per_request, 0, target, wave, 0, min_chunk,
                      block_n)


def check_plan_config(config: dict) -> dict:
    """A variant's planner keys: ``kv_splits`` 0 (balanced) or 1..MAX_KV_SPLITS (fixed), ``waves`` 1..MAX_WAVES."""
    if not 0 <= config["kv_splits"] <= MAX_KV_SPLITS:
        raise ValueError(f"config: kv_splits must be 0 (planned) or 1..{MAX_KV_SPLITS}, got {config['kv_splits']}")
    if not 1 <= config.get("waves", 1) <= MAX_WAVES:
        raise ValueError(f"config: waves must be 1..{MAX_WAVES}, got {config['waves']}")
    return config


@triton.jit
def _smallest_chunk(tiles, valid, total, units_allowed, min_tiles):
    """The smallest chunk (in tiles) whose units fit ``units_allowed``: units(chunk) falls as the chunk
    grows; at the longest request's tile count every request is one unit (more than allowed only
    when there are more requests)."""
    lo = tl.maximum(min_tiles, (total + units_allowed - 1) // units_allowed)
    hi = tl.maximum(lo, tl.max(tiles, 0))
    for _ in range(32):
        mid = (lo + hi) // 2
        fits = tl.sum(tl.where(valid, (tiles + mid - 1) // mid, 0), 0) <= units_allowed
        hi = tl.where(fits, mid, hi)
        lo = tl.where(fits, lo, mid + 1)
    return hi


@triton.jit
def _plan_kernel(PrefixLens, Plan, B, T, target_units, wave_units, fixed_chunk, min_chunk,
                 FIXED_SPLITS: tl.constexpr, BLOCK_N: tl.constexpr, B_POW2: tl.constexpr,
                 BALANCE: tl.constexpr):
    """One program: every request's split count, their exclusive prefix sum and the chunk."""
    b = tl.arange(0, B_POW2)
    valid = b < B
    lengths = tl.load(PrefixLens + b, mask=valid, other=0) + T
    if FIXED_SPLITS > 0:
        chunk = fixed_chunk
        splits = tl.where(valid, FIXED_SPLITS, 0)
    else:
        tiles = tl.where(valid, (lengths + BLOCK_N - 1) // BLOCK_N, 0)
        total = tl.sum(tiles, 0)
        one_wave = _smallest_chunk(tiles, valid, total, wave_units, min_chunk // BLOCK_N)
        several = _smallest_chunk(tiles, valid, total, target_units, min_chunk // BLOCK_N)
        balanced = total.to(tl.float32) >= BALANCE * (one_wave * wave_units).to(tl.float32)
        chunk_tiles = tl.where(balanced, one_wave, several)
        chunk = chunk_tiles * BLOCK_N
        splits = tl.where(valid, (tiles + chunk_tiles - 1) // chunk_tiles, 0)
    ends = tl.cumsum(splits, 0)
    tl.store(Plan + 1 + b, ends, mask=valid)
    tl.store(Plan + b, ends - splits, mask=b == 0)
    tl.store(Plan + B + 1, chunk)


def fixed_plan(batch: int, kv_splits: int, device) -> torch.Tensor:
    """The plan of a kernel that launches ``kv_splits`` splits for every request itself (units
    b * kv_splits + s; ``gluon_wgmma``): what the combine reads of it, chunk unused."""
    return torch.arange(0, (batch + 2) * kv_splits, kv_splits, dtype=torch.int32, device=device)


def make_plan(prefix_lens: torch.Tensor, tree_nodes: int, bounds: PlanBounds) -> torch.Tensor:
    """The plan (int32 [B + 2], on prefix_lens' device) for this call: one tiny launch, no sync."""
    batch = prefix_lens.shape[0]
    plan = torch.empty(batch + 2, dtype=torch.int32, device=prefix_lens.device)
    _plan_kernel[(1,)](prefix_lens, plan, batch, tree_nodes, bounds.target_units, bounds.wave_units,
                       bounds.fixed_chunk, bounds.min_chunk, FIXED_SPLITS=bounds.fixed_splits, BLOCK_N=bounds.block_n,
                       B_POW2=triton.next_power_of_2(batch), BALANCE=ONE_WAVE_BALANCE, num_warps=1)
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
    if bounds.fixed_splits:
        splits = [bounds.fixed_splits] * len(prefix_lens)
        chunk = bounds.fixed_chunk
    else:
        tiles = [-(-(length + tree_nodes) // bounds.block_n) for length in prefix_lens]

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

        one_wave = smallest_chunk(bounds.wave_units)
        balanced = sum(tiles) >= ONE_WAVE_BALANCE * one_wave * bounds.wave_units
        chunk_tiles = one_wave if balanced else smallest_chunk(bounds.target_units)
        chunk = chunk_tiles * bounds.block_n
        splits = [-(-t // chunk_tiles) for t in tiles]
    starts = [0]
    for count in splits:
        starts.append(starts[-1] + count)
    return starts, chunk
