#!/usr/bin/env bash
# gluon_wgmma_ws with its work dealt out evenly over every SM (kv_splits 0), in one device call:
#   1. its oracle checks (every case, page size and CHECK_CONFIGS) and its decode graph-replay test;
#   2. graph-replay bench at L 131072 / 185000: the balanced wave (kv_splits 0) beside the whole
#      splits per row block that the old one-wave rule chose (T 16: 64, T 64: 16, T 256: 4).
# Usage (repository root): bash scripts/gpu_ws_balanced.sh
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; export OUT
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
sku=$(python3 -c "from harness.environment import gpu_sku; print(gpu_sku())")
{ timeout 300 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_variants.py -k "gluon_wgmma_ws" -x --tb=short \
    2>&1 | tail -n 4
  timeout 90 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_decode.py -k gluon_wgmma_ws --tb=short 2>&1 \
    | tail -n 2; } | tee "$OUT/pytest-ws-balanced-$sku.txt"
for pair in "16 64" "64 16" "256 4"; do
  set -- $pair
  timeout 150 python3 -m harness bench --variants gluon_wgmma_ws --peers --prefix 131072,185000 --tree "$1" \
    --config '{"BLOCK_N": 64, "kv_splits": 0}' --config "{\"BLOCK_N\": 64, \"kv_splits\": $2}" \
    --mode graph --rep-ms 100 --no-progress --out "$OUT/ws-balanced-$sku.jsonl" 2>&1 | grep -E "^gluon" 
done
