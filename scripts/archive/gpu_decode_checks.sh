#!/usr/bin/env bash
# Closing device call for issue 7: the gpu-marked decode tests on the final code, the bf16 path
# noise (scripts/decode_noise.py: greedy T=1 vs one chain verify forward, compiled layers, auto),
# and the budget sweep at SWEEP_CONTEXTS (compiled layers). Records under $OUT.
# Usage (repository root): bash scripts/gpu_decode_checks.sh
set -uo pipefail
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; export OUT
sku=$(python3 -c "from harness.measure.environment import gpu_sku; print(gpu_sku())")
timeout 110 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_decode.py 2>&1 \
  | tail -n 4 | tee "$OUT/pytest-decode-gpu-$sku.txt"
timeout 150 python3 scripts/decode_noise.py --preset k2-tp8 --context 32768,131072 --tokens 48 --variant auto \
  --compile-layers --out "$OUT/decode-noise-k2-tp8-$sku.json" 2>&1 | grep -v "warn" | tail -n 5
COMPILE=1 MAIN_S=0 SWEEP_S=${SWEEP_S:-150} SWEEP_CONTEXTS=${SWEEP_CONTEXTS:-32768} bash scripts/gpu_decode.sh 48 skip-tests
