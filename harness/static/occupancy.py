"""Static resource and occupancy model: is a compiled kernel feasible on an arch we may not have?

Occupancy follows cuda_occupancy.h: registers are allocated per warp in 256-register units and each
of the SM's 4 sub-partitions holds a quarter of the register file; shared memory per block is what
the kernel uses plus 1 KB the driver reserves, against the largest carve-out the SM offers; then
the warp and block limits per SM. A config is infeasible when it spills, needs more shared memory
per block than the arch allows, or cannot place one block on an SM.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

REG_SUB_PARTITIONS = 4


@dataclass(frozen=True)
class ArchLimits:
    name: str
    sm_count: int
    max_warps_per_sm: int
    max_blocks_per_sm: int
    smem_per_sm_kb: int           # the largest carve-out
    smem_per_block_max_bytes: int
    smem_carveouts_kb: tuple[int, ...]
    regs_per_sm: int = 65536
    max_regs_per_thread: int = 255
    reg_alloc_unit: int = 256     # registers per warp are allocated in these units
    reserved_smem_per_block: int = 1024


ARCHES = {
    "sm_90": ArchLimits("sm_90", sm_count=132, max_warps_per_sm=64, max_blocks_per_sm=32, smem_per_sm_kb=228,
                        smem_per_block_max_bytes=227 * 1024,
                        smem_carveouts_kb=(0, 8, 16, 32, 64, 100, 132, 164, 196, 228)),
    "sm_120": ArchLimits("sm_120", sm_count=188, max_warps_per_sm=48, max_blocks_per_sm=24, smem_per_sm_kb=100,
                         smem_per_block_max_bytes=99 * 1024, smem_carveouts_kb=(0, 8, 16, 32, 64, 100)),
}


def arch_limits(arch: str) -> ArchLimits:
    if arch not in ARCHES:
        raise ValueError(f"arch: expected one of {sorted(ARCHES)}, got {arch!r}")
    return ARCHES[arch]


@dataclass(frozen=True)
class ResourceUsage:
    """What the compiler reports for one kernel."""

    registers: int
    spill_store_bytes: int
    spill_load_bytes: int
    stack_bytes: int
    shared_bytes: int   # static + dynamic shared memory per block
    threads: int


@dataclass(frozen=True)
class Occupancy:
    blocks_per_sm: int
    warps_per_sm: int
    occupancy: float      # active warps / max warps per SM
    limiter: str          # registers, shared_memory, warps or blocks
    carveout_kb: int      # the smallest carve-out that holds blocks_per_sm blocks


def occupancy(usage: ResourceUsage, arch: str) -> Occupancy:
    limits = arch_limits(arch)
    warps_per_block = math.ceil(usage.threads / 32)
    regs_per_warp = math.ceil(max(usage.registers, 1) * 32 / limits.reg_alloc_unit) * limits.reg_alloc_unit
    warps_per_partition = (limits.regs_per_sm // REG_SUB_PARTITIONS) // regs_per_warp
    by = {
        "registers": (warps_per_partition * REG_SUB_PARTITIONS) // warps_per_block,
        "shared_memory": (limits.smem_per_sm_kb * 1024) // (usage.shared_bytes + limits.reserved_smem_per_block),
        "warps": limits.max_warps_per_sm // warps_per_block,
        "blocks": limits.max_blocks_per_sm,
    }
    limiter = min(by, key=lambda k: by[k])
    blocks = by[limiter]
    needed_kb = blocks * (usage.shared_bytes + limits.reserved_smem_per_block) / 1024
    carveout = next((c for c in limits.smem_carveouts_kb if c >= needed_kb), limits.smem_per_sm_kb)
    return Occupancy(blocks, blocks * warps_per_block, blocks * warps_per_block / limits.max_warps_per_sm,
                     limiter, carveout)


def infeasibility(usage: ResourceUsage, arch: str, allow_spills: bool = False) -> str | None:
    """Why a kernel with this usage must never reach the GPU (None: feasible).

    ``allow_spills``: spills are reported but not disqualifying (Triton variants, whose fastest
    measured sm_90 configs spill a few KB to L1-resident local memory).
    """
    limits = arch_limits(arch)
    if not allow_spills and (usage.spill_store_bytes or usage.spill_load_bytes):
        return f"register spills ({usage.spill_store_bytes} B stored, {usage.spill_load_bytes} B loaded)"
    if usage.shared_bytes > limits.smem_per_block_max_bytes:
        return (f"shared memory {usage.shared_bytes / 1024:.1f} KB > {limits.smem_per_block_max_bytes // 1024} KB "
                f"per block on {arch}")
    if usage.registers > limits.max_regs_per_thread:
        return f"{usage.registers} registers per thread > {limits.max_regs_per_thread}"
    if occupancy(usage, arch).blocks_per_sm < 1:
        return "not one block fits on an SM"
    return None


def report(usage: ResourceUsage, arch: str, allow_spills: bool = False) -> dict:
    """Usage, occupancy and feasibility as one flat record."""
    reason = infeasibility(usage, arch, allow_spills)
    row = {**asdict(usage), "arch": arch, "feasible": reason is None, "reason": reason or ""}
    if usage.shared_bytes <= arch_limits(arch).smem_per_block_max_bytes:
        row.update(asdict(occupancy(usage, arch)))
    return row
