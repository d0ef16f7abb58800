#!/usr/bin/env bash
# gluon_wgmma_ws's defer_pv knob and kv_splits that fill every SM, in one device call:
#   1. oracle checks of the defer_pv configs (CHECK_CONFIGS) and the default;
#   2. graph-replay bench at L 131072 / 185000, T 64 / 256: kv_splits {auto, 16, 33} x defer_pv {0, 1}.
# Usage (repository root): bash scripts/gpu_ws_defer.sh
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; export OUT
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
sku=$(python3 -c "from harness.environment import gpu_sku; print(gpu_sku())")
timeout 150 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_variants.py -k "gluon_wgmma_ws" -x --tb=short \
  2>&1 | tail -n 3 | tee "$OUT/pytest-ws-defer-$sku.txt"
configs=()
for splits in 0 16 33; do for defer in 0 1; do
  configs+=(--config "{\"BLOCK_N\": 64, \"kv_splits\": $splits, \"defer_pv\": $defer}")
done; done
timeout 300 python3 -m harness bench --variants gluon_wgmma_ws --peers --prefix 131072,185000 --tree 64,256 \
  "${configs[@]}" --mode graph --rep-ms 100 --no-progress --out "$OUT/ws-defer-$sku.jsonl" 2>&1 | grep -v warn | tail -n 30
