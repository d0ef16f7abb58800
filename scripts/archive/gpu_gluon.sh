#!/usr/bin/env bash
# gluon_wgmma on the GPU host in one go: the oracle checks (gpu-marked variant tests), then the
# three paged variants side by side (graph replay, L2 flushed) at 4k..185k, T 16/64/256, H 8,
# then a small config sweep of gluon_wgmma at 128k, T 64. Records under $OUT.
# Usage (repository root): bash scripts/gpu_gluon.sh
set -uo pipefail
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
sku=$(python3 -c "from harness.measure.environment import gpu_sku; print(gpu_sku())")
timeout 330 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_variants.py -k gluon_wgmma -x --tb=short 2>&1 \
  | tail -n 25 | tee "$OUT/pytest-gluon-$sku.txt"
timeout 150 python3 -m harness bench --variants gluon_wgmma triton_splitkv cuda_coalesced --peers \
  --prefix 4096,32768,131072,185000 --tree 16,64,256 --mode graph --rep-ms 100 --no-progress \
  --out "$OUT/bench-gluon-$sku.jsonl" 2>&1 | grep -v "warn" | tail -n 40
timeout 60 python3 -m harness bench --variants gluon_wgmma --peers --prefix 131072,185000 --tree 64 --mode graph \
  --rep-ms 100 --no-progress --config '{"BLOCK_N": 32}' --config '{"BLOCK_N": 64, "kv_splits": 16}' \
  --config '{"BLOCK_N": 64, "kv_splits": 32}' --config '{"BLOCK_N": 64, "kv_splits": 64}' \
  --out "$OUT/bench-gluon-configs-$sku.jsonl" 2>&1 | grep -v "warn" | tail -n 14
