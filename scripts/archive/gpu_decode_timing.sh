#!/usr/bin/env bash
# The decode step timed both ways (issue 7): overlapped (one wait per step, the walk's; the default)
# and synced (a device sync after every phase), same runs, in one device call:
#   1. the gpu-marked decode tests of gluon_wgmma_ws and of the overlapped timing (tiny preset);
#   2. k2-tp8 at context 185k and 128k, budget 64, auto, layers compiled, tokens compared with greedy
#      and with greedy padded to the budget.
# Usage (repository root): bash scripts/gpu_decode_timing.sh [new tokens per run, default 48]
set -uo pipefail
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
sku=$(python3 -c "from harness.measure.environment import gpu_sku; print(gpu_sku())")
timeout 120 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_decode.py -k "overlapped or gluon_wgmma_ws" 2>&1 \
  | tail -n 3 | tee "$OUT/pytest-decode-timing-gpu-$sku.txt"
timeout 330 python3 -m harness decode --preset k2-tp8 --context 185000,131072 --budget 64 --compile-layers \
  --batch-invariant-greedy --variants auto --phase-timing overlapped synced --new-tokens "${1:-48}" --drafter oracle \
  --check-lossless --no-progress --out "$OUT/decode-timing-k2-tp8-$sku.jsonl" 2>&1 \
  | grep -v "^\s*warnings.warn\|UserWarning" | tail -n 8
