#!/usr/bin/env bash
# The headline timings on the GPU host: every variant side by side (graph replay, L2 flushed) at
# L {4096, 131072, 185000} x T {16, 64, 256}, H 8, then vk report. Records under results/bench/,
# packed into $OUT. PEERS="sdpa_gathered flex_attention" times those peers beside them.
# Usage (repository root): bash scripts/gpu_bench.sh [record name, default headline]
. scripts/gpu_env.sh
name=${1:-headline}; mkdir -p results/bench
rm -f "results/bench/$name-$sku.jsonl"
python3 -m harness bench --no-progress --peers ${PEERS:-} --prefix 4096,131072,185000 --tree 16,64,256 --heads 8 --mode graph \
  --out "results/bench/$name-$sku.jsonl" > "results/bench/$name-$sku.txt" 2>&1
tail -n 30 "results/bench/$name-$sku.txt"; pack
python3 -m harness report "results/bench/$name-$sku.jsonl" --out "results/report/$name-$sku" > /dev/null 2>&1; pack
