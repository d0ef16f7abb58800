"""Static resource and occupancy model: is a compiled kernel feasible on an arch we may not have?

Occupancy follows cuda_occupancy.h: registers are allocated per warp in 256-register units and each
of the SM's 4 sub-partitions holds a quarter of the register file; shared memory per block is what
the kernel uses plus 1 KB the driver reserves, against the largest carve-out the SM offers; then
the warp, block and named-barrier limits per SM (an arch's barriers_per_sm shared by its blocks).
The limits are the arch registry's (verify_kernels/arch.py). A config is infeasible when it spills, needs more shared memory
per block than the arch allows, or cannot place one block on an SM.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from verify_kernels.arch import load_arch

REG_SUB_PARTITIONS = 4
REG_ALLOC_UNIT = 256          # registers per warp are allocated in these units
MAX_REGS_PER_THREAD = 255
RESERVED_SMEM_PER_BLOCK = 1024  # what the driver reserves per block since sm_80


@dataclass(frozen=True)
class ResourceUsage:
    """What the compiler reports for one kernel."""

    registers: int
    spill_store_bytes: int
    spill_load_bytes: int
    stack_bytes: int
    shared_bytes: int   # static + dynamic shared memory per block
    threads: int
    barriers: int = 1   # named barriers the kernel uses (ptxas -v), which some arches share with the block limit


@dataclass(frozen=True)
class Occupancy:
    blocks_per_sm: int
    warps_per_sm: int
    occupancy: float      # active warps / max warps per SM
    limiter: str          # registers, shared_memory, warps, blocks or barriers
    carveout_kb: int      # the smallest carve-out that holds blocks_per_sm blocks


def occupancy(usage: ResourceUsage, arch: str) -> Occupancy:
    limits = load_arch(arch)
    warps_per_block = math.ceil(usage.threads / 32)
    regs_per_warp = math.ceil(max(usage.registers, 1) * 32 / REG_ALLOC_UNIT) * REG_ALLOC_UNIT
    warps_per_partition = (limits.registers_per_sm // REG_SUB_PARTITIONS) // regs_per_warp
    by = {
        "registers": (warps_per_partition * REG_SUB_PARTITIONS) // warps_per_block,
        "shared_memory": (limits.smem_per_sm_kb * 1024) // (usage.shared_bytes + RESERVED_SMEM_PER_BLOCK),
        "warps": limits.max_warps_per_sm // warps_per_block,
        "blocks": limits.max_blocks_per_sm,
        "barriers": limits.barriers_per_sm // max(usage.barriers, 1),
    }
    limiter = min(by, key=lambda k: by[k])
    blocks = by[limiter]
    needed_kb = blocks * (usage.shared_bytes + RESERVED_SMEM_PER_BLOCK) / 1024
    carveout = next((c for c in limits.smem_carveouts_kb if c >= needed_kb), limits.smem_per_sm_kb)
    return Occupancy(blocks, blocks * warps_per_block, blocks * warps_per_block / limits.max_warps_per_sm,
                     limiter, carveout)


def infeasibility(usage: ResourceUsage, arch: str, allow_spills: bool = False) -> str | None:
    """Why a kernel with this usage must never reach the GPU (None: feasible).

    ``allow_spills``: spills are reported but not disqualifying (Triton variants, whose fastest
    measured sm_90 configs spill a few KB to L1-resident local memory).
    """
    limits = load_arch(arch)
    if not allow_spills and (usage.spill_store_bytes or usage.spill_load_bytes):
        return f"register spills ({usage.spill_store_bytes} B stored, {usage.spill_load_bytes} B loaded)"
    if usage.shared_bytes > limits.smem_per_block_bytes:
        return f"shared memory {usage.shared_bytes / 1024:.1f} KB > {limits.smem_per_block_kb} KB per block on {arch}"
    if usage.registers > MAX_REGS_PER_THREAD:
        return f"{usage.registers} registers per thread > {MAX_REGS_PER_THREAD}"
    if occupancy(usage, arch).blocks_per_sm < 1:
        return "not one block fits on an SM"
    return None


def report(usage: ResourceUsage, arch: str, allow_spills: bool = False) -> dict:
    """Usage, occupancy and feasibility as one flat record."""
    reason = infeasibility(usage, arch, allow_spills)
    row = {**asdict(usage), "arch": arch, "feasible": reason is None, "reason": reason or ""}
    if usage.shared_bytes <= load_arch(arch).smem_per_block_bytes:
        row.update(asdict(occupancy(usage, arch)))
    return row
