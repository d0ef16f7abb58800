#!/usr/bin/env bash
# Variants run on the GPU host: ceilings, the whole test suite, vk check for every variant, a small
# config exploration for triton_splitkv, and every variant side by side over the sweeps.
# Usage (repository root, GPU host): bash scripts/gpu_variants.sh
set -uo pipefail
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
sku=$(python3 -c "from harness.measure.environment import gpu_sku; print(gpu_sku())")
mkdir -p results/check results/tests results/bench
rm -f "results/check/$sku.jsonl" results/bench/*-"$sku".jsonl
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv
python3 -m harness env > "results/env-$sku.json"
python3 -m harness ceilings --remeasure

python3 -m pytest -q -p no:cacheprovider 2>&1 | tee "results/tests/pytest-$sku.txt" | tail -n 5
python3 -m harness check --no-progress --out "results/check/$sku.jsonl" > "results/check/$sku.txt" 2>&1
grep -E "FAIL|passed" "results/check/$sku.txt" | tail -n 5

python3 -m harness bench --variants triton_splitkv --prefix 4096,131072 --tree 16,64 --heads 8 \
    --config '{}' --config '{"BLOCK_N": 64}' --config '{"num_warps": 4}' --config '{"BLOCK_M": 128}' \
    --config '{"BLOCK_N": 64, "num_stages": 1}' --config '{"BLOCK_M": 32}' --config '{"BLOCK_M": 32, "BLOCK_N": 64}' \
    --config '{"BLOCK_M": 32, "num_warps": 4}' --config '{"BLOCK_M": 16, "num_warps": 4}' \
    --rep-ms 100 --no-progress --out "results/bench/splitkv-configs-$sku.jsonl" > "$OUT/configs.txt" 2>&1
tail -n 40 "$OUT/configs.txt"
python3 -m harness bench --variants triton_ps1 triton_splitkv --prefix 4096,32768,131072,185000 --tree 16,64 \
    --heads 8 --rep-ms 300 --no-progress --out "results/bench/variants-h8-$sku.jsonl" \
    > "results/bench/variants-h8-$sku.txt" 2>&1
python3 -m harness bench --variants triton_ps1 triton_splitkv --prefix 32768,185000 --tree 256,1024 \
    --heads 64 --rep-ms 300 --no-progress --out "results/bench/variants-h64-$sku.jsonl" \
    > "results/bench/variants-h64-$sku.txt" 2>&1
tar czf "$OUT/results.tgz" results
tail -n 20 "results/bench/variants-h8-$sku.txt"; tail -n 12 "results/bench/variants-h64-$sku.txt"
