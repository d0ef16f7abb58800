#!/usr/bin/env bash
# One device call after the decode step's host phases were cut (2026-12-03): the greedy walk and
# the commit in one graph behind the verify, the drafter, tree builder and tree upload made cheaper.
#   1. the gpu-marked decode and ddtree tests (the compiled walk == walk(); graph replay == eager
#      for every kernel, so also the walk on
#      the device, and the commit graph's warm-up);
#   2. the k2-tp8 decode rows, triton_ps1 and auto in the same run (compiled layers; tokens against
#      plain greedy and greedy padded to the budget);
#   3. if OLD names a copy of the previous harness (git archive 6ddceef harness verify_kernels
#      results/tuned), the 185k auto row again with that code, for a same-machine comparison.
# Records under $OUT. Usage (repository root): bash scripts/gpu_host_phases.sh [decode s] [old s]
set -uo pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; export OUT
sku=$(python3 -c "from harness.environment import gpu_sku; print(gpu_sku())")
timeout 150 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_decode.py tests/test_ddtree.py --tb=short 2>&1 \
  | tail -n 6 | tee "$OUT/pytest-decode-gpu-host-phases-$sku.txt"
COMPILE=1 BATCH_INVARIANT=1 MAIN_S=${1:-300} SWEEP_S=0 bash scripts/gpu_decode.sh 48 skip-tests
if [ -n "${OLD:-}" ]; then
  (cd "$OLD" && PYTHONPATH=$PWD timeout "${2:-150}" python3 -m harness decode --preset k2-tp8 --context 185000 \
    --budget 64 --compile-layers --batch-invariant-greedy --variants auto --new-tokens 48 --drafter oracle \
    --check-lossless --no-progress --out "$OUT/decode-before-host-phases-k2-tp8-$sku.jsonl" 2>&1 \
    | grep -v "warnings.warn\|UserWarning" | tail -n 8)
fi
