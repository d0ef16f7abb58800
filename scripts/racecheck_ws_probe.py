"""A Gluon kernel that is only ``gl.warp_specialize``: no shared memory of its own, for racecheck.

    compute-sanitizer --tool racecheck python3 scripts/racecheck_ws_probe.py

Triton lowers ``warp_specialize`` with its own shared-memory words: the default partition writes
a state word (which partition to run, or exit) and the captured arguments, and the worker warps
read them between CTA-wide ``barrier.sync 1``. racecheck's reports in ``gluon_wgmma_ws`` at the
kernel's ``def`` line and its ``gl.warp_specialize`` line name those accesses. This kernel has
the same two partitions (4 + 4 warps, the worker's registers capped) and nothing else, and its
CTAs end unevenly (a partition may do no work, like a split past the sequence), so any report
here is Triton's runtime, not a verify kernel's. Exit 1 when the output is wrong.
"""

import sys

import torch
from triton.experimental import gluon
from triton.experimental.gluon import language as gl

ROWS = gl.constexpr(128)


@gluon.jit
def _default_partition(out, work):
    """4 warps: write ``work`` (this CTA's loop count) summed ``work`` times to the first half."""
    layout: gl.constexpr = gl.BlockedLayout([1], [32], [4], [0])
    cta = gl.program_id(0)
    n = gl.load(work + cta)
    acc = gl.zeros([ROWS], gl.float32, layout)
    for _ in range(n):
        acc += 1.0
    gl.store(out + cta * 2 * ROWS + gl.arange(0, ROWS, layout), acc)


@gluon.jit
def _worker_partition(out, work):
    """4 warps: the same into the second half, with twice the loop count."""
    layout: gl.constexpr = gl.BlockedLayout([1], [32], [4], [0])
    cta = gl.program_id(0)
    n = gl.load(work + cta) * 2
    acc = gl.zeros([ROWS], gl.float32, layout)
    for _ in range(n):
        acc += 1.0
    gl.store(out + cta * 2 * ROWS + ROWS + gl.arange(0, ROWS, layout), acc)


@gluon.jit
def _probe_kernel(out, work):
    gl.warp_specialize([(_default_partition, (out, work)), (_worker_partition, (out, work))], [4], [232])


def main() -> int:
    ctas, rows = 264, ROWS.value
    work = (torch.arange(ctas, dtype=torch.int32, device="cuda") * 7) % 5  # 0 for every fifth CTA
    out = torch.full((ctas, 2, rows), float("nan"), device="cuda")
    _probe_kernel[(ctas,)](out, work, num_warps=4)
    torch.cuda.synchronize()
    expected = torch.stack([work, 2 * work], 1).float()[:, :, None].expand(-1, -1, rows)
    ok = torch.equal(out.cpu(), expected.cpu())
    print(f"warp_specialize probe, {ctas} CTAs: {'ok' if ok else 'FAIL'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
