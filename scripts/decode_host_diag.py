"""``vk decode`` with the host's background work cut, to tell what slows the decode step's host
phases on the GPU host (2026-12-03: draft + tree + mask took 0.3 ms in some runs and 0.6-1.0 ms in
others, same code, same machine; results/README.md).

  default  as ``vk decode`` runs;
  quiet    Inductor compiles in this process (``compile_threads = 1``: no worker pool, whose threads
           and processes stay alive after the compile) and torch's CPU ops use one thread.

The records' ``host_cpu`` (this thread's and the whole process's CPU seconds over the timed loop,
live threads) and per-step ``host_cpu_ms`` say whether the host phases waited for the core.

Usage (repository root): python3 scripts/decode_host_diag.py {default|quiet} VK-DECODE-ARGUMENTS...
"""

import sys

import torch

from harness.cli import main

MODES = ("default", "quiet")

if __name__ == "__main__":
    if len(sys.argv) < 2 or sys.argv[1] not in MODES:
        sys.exit(f"usage: decode_host_diag.py {{{'|'.join(MODES)}}} VK-DECODE-ARGUMENTS... (got {sys.argv[1:2]})")
    if sys.argv[1] == "quiet":
        import torch._inductor.config as inductor_config

        inductor_config.compile_threads = 1
        torch.set_num_threads(1)
    sys.exit(main(["decode", *sys.argv[2:]]))
