#!/usr/bin/env bash
# The TMA loader candidate as it was tried on the device (records: results/bench/ws-tma-*,
# results/tests/pytest-gluon-ws-tma-*): A/B beside the registered kernel (then commit 1c8feeb's),
# then the registered kernel's GPU test matrix with the candidate copied over it (on the device's
# copy of the tree: it overwrites verify_kernels/gluon_wgmma_ws.py).
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; export OUT PYTHONPATH=$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.sm,power.draw --format=csv,noheader
FILES=tma TIME_WRONG= AUTO= RECORD=ws-tma ROUNDS=8 \
  SHAPES="185000 64 16,131072 64 16,185000 256 4,32768 64 16,4096 64 4,131072 16 64" bash experiments/ws/run_ab.sh
timeout 120 python3 scripts/ab_verify_kernels.py --prefix 185000 --tree 64 --rounds 6 --out "$OUT/ws-tma-bn32.jsonl" \
  'gluon_wgmma_ws:{"BLOCK_N": 32, "kv_splits": 16}' 'file=experiments/ws/ws_tma.py:{"BLOCK_N": 32, "kv_splits": 16}' \
  2>&1 | grep -v -i warn | tail -n 4
cp experiments/ws/ws_tma.py verify_kernels/gluon_wgmma_ws.py
timeout 200 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_variants.py -k gluon_wgmma_ws --tb=short 2>&1 \
  | tail -n 15 | tee "$OUT/pytest-gluon-ws-tma.txt"
