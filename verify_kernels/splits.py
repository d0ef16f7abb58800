"""How many KV splits (flash-decoding) a paged variant launches, from shapes alone.

Shared by triton_splitkv and cuda_coalesced. The sequence bound is the block table's capacity:
prefix_lens lives on the device and reading it would be a host sync (and break graph capture).
"""

from __future__ import annotations

import math
from functools import lru_cache

import torch

from .arch import load_arch
from .contract import ProblemShape

# Each split covers at least this many positions: shorter splits cost more in partial-output
# traffic (R x 512 fp32 per split) than they gain in parallelism.
MIN_SPLIT_TOKENS = 256
MAX_KV_SPLITS = 64
CTAS_PER_SM = 2
CPU_ARCH = "sm_90"  # off the GPU, plan as on this arch (its SM count): CPU tests make the H200's choices


@lru_cache(maxsize=None)
def _device_sm_count(index: int) -> int:
    return torch.cuda.get_device_properties(index).multi_processor_count


def sm_count(device: torch.device) -> int:
    if device.type != "cuda":
        return load_arch(CPU_ARCH).sms
    return _device_sm_count(device.index if device.index is not None else torch.cuda.current_device())


def choose_kv_splits(shape: ProblemShape, rows_per_cta: int, block_n: int, sms: int, *,
                     ctas_per_sm: int = CTAS_PER_SM, one_wave: bool = False) -> int:
    """Enough CTAs to fill every SM ``ctas_per_sm`` times, each split >= MIN_SPLIT_TOKENS positions.

    By default the count rounds up to a power of two. ``one_wave`` instead takes the most splits
    whose CTAs all run at once (for kernels that hold an SM alone, where a second, partial wave of
    CTAs costs as much as the first).
    """
    return kv_splits_for(shape.max_pages * shape.page_size, shape.rows, shape.batch, rows_per_cta, block_n, sms,
                         ctas_per_sm=ctas_per_sm, one_wave=one_wave)


def with_kv_splits(config: dict, shape: ProblemShape, rows_per_cta: int, *, ctas_per_sm: int = CTAS_PER_SM,
                   one_wave: bool = False) -> dict:
    """``config`` with ``kv_splits`` = 0 (auto) filled by ``choose_kv_splits`` for this device (its
    BLOCK_N, the kernel's rows per CTA and split rule), then checked to be 1..MAX_KV_SPLITS."""
    if not config["kv_splits"]:
        splits = choose_kv_splits(shape, rows_per_cta, config["BLOCK_N"], sm_count(shape.device),
                                  ctas_per_sm=ctas_per_sm, one_wave=one_wave)
        config = {**config, "kv_splits": splits}
    if not 1 <= config["kv_splits"] <= MAX_KV_SPLITS:
        raise ValueError(f"config: kv_splits must be 0 (auto) or 1..{MAX_KV_SPLITS}, got {config['kv_splits']}")
    return config


def kv_splits_for(capacity: int, rows: int, batch: int, rows_per_cta: int, block_n: int, sms: int, *,
                  ctas_per_sm: int = CTAS_PER_SM, one_wave: bool = False) -> int:
    """``choose_kv_splits`` on plain numbers (capacity = max_pages x page_size), for models of a launch."""
    row_blocks = math.ceil(rows / rows_per_cta)
    by_length = max(1, capacity // max(MIN_SPLIT_TOKENS, block_n))
    if one_wave:
        return max(1, min(ctas_per_sm * sms // (row_blocks * batch), by_length, MAX_KV_SPLITS))
    wanted = math.ceil(ctas_per_sm * sms / (row_blocks * batch))
    splits = max(1, min(wanted, by_length, MAX_KV_SPLITS))
    return 1 << (splits - 1).bit_length() if splits > 1 else 1
