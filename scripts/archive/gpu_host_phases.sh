#!/usr/bin/env bash
# Device calls after the decode step's host phases were cut (2026-12-03): the greedy walk on the
# device (its graph and the commit's queued behind the verify), cheaper oracle drafts, tree build
# and tree upload, and waits that poll the event instead of blocking in cudaEventSynchronize.
#   1. 185k, budget 64, auto: the same run waiting both ways (--phase-timing overlapped-blocking
#      overlapped), for the host's share of the step (step - verify GPU time);
#   2. the k2-tp8 decode rows, triton_ps1 and auto in the same run (compiled layers; tokens against
#      plain greedy and greedy padded to the budget);
#   3. the gpu-marked decode and ddtree tests (the compiled walk == walk(); graph replay == eager
#      for every kernel, so also the walk on the device and the commit graph's warm-up);
#   4. if OLD names a copy of an earlier harness (git archive 6ddceef harness verify_kernels
#      results/tuned), the 185k auto row again with that code, for a same-machine comparison.
# Records under $OUT. Usage (repository root): bash scripts/gpu_host_phases.sh [waits s] [rows s] [old s]
set -uo pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; export OUT
sku=$(python3 -c "from harness.measure.environment import gpu_sku; print(gpu_sku())")
quiet() { grep -v "warnings.warn\|UserWarning\|select_variant(variant" | tail -n "$1"; }
decode_185k=(decode --preset k2-tp8 --context 185000 --budget 64 --compile-layers --batch-invariant-greedy
             --variants auto --new-tokens 48 --drafter oracle --check-lossless --no-progress)
[ "${1:-120}" = 0 ] || timeout "${1:-120}" python3 -m harness "${decode_185k[@]}" \
  --phase-timing overlapped-blocking overlapped --out "$OUT/decode-waits-k2-tp8-$sku.jsonl" 2>&1 | quiet 6
COMPILE=1 BATCH_INVARIANT=1 MAIN_S=${2:-250} SWEEP_S=0 bash scripts/gpu_decode.sh 48 skip-tests
timeout 150 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_decode.py tests/test_ddtree.py --tb=short 2>&1 \
  | tail -n 2 | tee "$OUT/pytest-decode-gpu-host-phases-$sku.txt"
if [ -n "${OLD:-}" ]; then
  (cd "$OLD" && PYTHONPATH=$PWD timeout "${3:-150}" python3 -m harness "${decode_185k[@]}" \
    --out "$OUT/decode-before-host-phases-k2-tp8-$sku.jsonl" 2>&1 | quiet 4)
fi
