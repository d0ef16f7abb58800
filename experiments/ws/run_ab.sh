#!/usr/bin/env bash
# Ablations and candidates of gluon_wgmma_ws (experiments/ws/*.diff, each a patch of the kernel at
# source hash 189877040873e776), timed round-robin beside the registered kernel with
# scripts/ab_verify_kernels.py --time-wrong (an ablation removes a part on purpose; its rows say
# passes_oracle false). The patched modules are written to experiments/ws/ws_NAME.py (git-ignored).
# Usage (repository root, GPU host): bash experiments/ws/run_ab.sh; FILES="nocopy noexp" SHAPES="185000 64 16"
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; export OUT
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
sku=$(python3 -c "from harness.environment import gpu_sku; print(gpu_sku())")
files=${FILES:-"nocopy noexp prefetch_table pipe_s chunked"}
for f in $files; do
  patch -s -o "experiments/ws/ws_$f.py" verify_kernels/gluon_wgmma_ws.py "experiments/ws/$f.diff" || exit 1
done
for shape in ${SHAPES:-"185000 64 16" "131072 64 16" "185000 256 4"}; do
  set -- $shape
  args=()
  for f in $files; do args+=("file=experiments/ws/ws_$f.py:{\"BLOCK_N\": 64, \"kv_splits\": $3}"); done
  timeout 200 python3 scripts/ab_verify_kernels.py --time-wrong --prefix "$1" --tree "$2" --rounds ${ROUNDS:-8} \
    --out "$OUT/ws-ablation-$sku.jsonl" "gluon_wgmma_ws:{\"BLOCK_N\": 64, \"kv_splits\": $3}" "${args[@]}" 2>&1 \
    | grep -v -i warn | tail -n 12
done
