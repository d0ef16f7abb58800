#!/usr/bin/env bash
# The 4-stage BLOCK_N 32 pipelined experiment (pipe4.diff) beside the registered gluon_wgmma_ws,
# round-robin (scripts/ab_verify_kernels.py), each checked against the oracle first.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; export OUT
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
sku=$(python3 -c "from harness.environment import gpu_sku; print(gpu_sku())")
patch -s -o experiments/ws/ws_pipe4.py verify_kernels/gluon_wgmma_ws.py experiments/ws/pipe4.diff || exit 1
# A hang (a barrier protocol error) shows here, in a bounded run, before the long loop.
timeout 90 python3 scripts/ab_verify_kernels.py --prefix 4096 --tree 64 --rounds 1 \
  "file=experiments/ws/ws_pipe4.py:{\"BLOCK_N\": 32, \"kv_splits\": 0, \"stages\": 4}" 2>&1 | grep -v -i warn | tail -n 4
[ "${PIPESTATUS[0]}" = 0 ] || { echo "pipe4 smoke run failed"; exit 1; }
for shape in ${SHAPES:-"185000 64 16" "131072 64 16" "185000 256 4" "131072 16 64" "32768 64 16" "4096 64 4"}; do
  set -- $shape
  timeout 200 python3 scripts/ab_verify_kernels.py --prefix "$1" --tree "$2" --rounds ${ROUNDS:-8} \
    --out "$OUT/ws-pipe4-$sku.jsonl" "gluon_wgmma_ws:{\"BLOCK_N\": 64, \"kv_splits\": $3}" \
    "gluon_wgmma_ws:{\"BLOCK_N\": 64, \"kv_splits\": 0}" \
    "file=experiments/ws/ws_pipe4.py:{\"BLOCK_N\": 32, \"kv_splits\": $3, \"stages\": 4}" \
    "file=experiments/ws/ws_pipe4.py:{\"BLOCK_N\": 32, \"kv_splits\": 0, \"stages\": 4}" 2>&1 \
    | grep -v -i warn | tail -n 8
done
