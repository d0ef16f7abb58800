#!/usr/bin/env bash
# gluon_wgmma_ws as a file (an earlier or candidate version) beside the current one, timed round-robin
# (scripts/ab_verify_kernels.py) at the decode's shapes, so the H200's power capping weighs on both alike.
# Each shape: the file's and the current kernel at the same whole splits per row block, and the
# current one at kv_splits 0 (its auto rule).
# Usage (repository root): bash scripts/gpu_ws_ab.sh PATH_TO_OTHER_gluon_wgmma_ws.py
#   e.g. git show f4c5889:verify_kernels/gluon_wgmma_ws.py > ws_even_split.py (untracked, carried)
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; export OUT
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
sku=$(python3 -c "from harness.measure.environment import gpu_sku; print(gpu_sku())")
other=$1
for shape in "185000 64 16" "131072 64 16" "185000 256 4" "131072 16 64"; do
  set -- $shape
  timeout 150 python3 scripts/ab_verify_kernels.py --prefix "$1" --tree "$2" --rounds 8 --out "$OUT/ws-ab-$sku.jsonl" \
    "file=$other:{\"BLOCK_N\": 64, \"kv_splits\": $3}" \
    "gluon_wgmma_ws:{\"BLOCK_N\": 64, \"kv_splits\": 0}" \
    "gluon_wgmma_ws:{\"BLOCK_N\": 64, \"kv_splits\": $3}" 2>&1 | grep -v warn | tail -n 5
done
