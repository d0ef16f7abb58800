#!/usr/bin/env bash
# Closing device call for issue 7, in one go: the oracle checks of gluon_wgmma_ws (every case, page
# size and check config), the gpu decode tests (graph replay == eager for every variant, with the
# pinned tree upload and the graph-captured commit), the k2-tp8 decode rows with triton_ps1 and
# auto in the same run (compiled layers; tokens against plain greedy and greedy padded to the
# budget), then the verify forward's kernel profile at 185k. Records under $OUT.
# Usage (repository root): bash scripts/gpu_closing_checks.sh [decode seconds, default 240]
set -uo pipefail
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; export OUT
sku=$(python3 -c "from harness.measure.environment import gpu_sku; print(gpu_sku())")
timeout 150 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_variants.py -k gluon_wgmma_ws --tb=short 2>&1 \
  | tail -n 4 | tee "$OUT/pytest-gluon-ws-$sku.txt"
timeout 110 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_decode.py --tb=short 2>&1 \
  | tail -n 4 | tee "$OUT/pytest-decode-gpu-$sku.txt"
COMPILE=1 BATCH_INVARIANT=1 MAIN_S=${1:-240} SWEEP_S=0 bash scripts/gpu_decode.sh 48 skip-tests
timeout 80 python3 scripts/profile_verify.py --context 185000 --compile-layers --out "$OUT/profile-verify-k2-tp8-$sku.json" \
  2>&1 | grep -v -i "warn" | tail -n 30
