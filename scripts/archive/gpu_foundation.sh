#!/usr/bin/env bash
# Foundation run on the GPU host: ceilings, the whole test suite on the GPU, vk check over the GPU
# case matrix, and the baseline's timings. Writes under results/ and packs results/ into $OUT.
# Usage (repository root, GPU host): bash scripts/gpu_foundation.sh
set -uo pipefail
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
sku=$(python3 -c "from harness.measure.environment import gpu_sku; print(gpu_sku())")
mkdir -p results/check results/tests results/bench
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv
python3 -m harness env | tee "results/env-$sku.json"

python3 -m harness ceilings --remeasure
python3 -m pytest -q -p no:cacheprovider 2>&1 | tee "results/tests/pytest-$sku.txt"
python3 -m harness check --no-progress --out "results/check/$sku.jsonl" 2>&1 | tee "results/check/$sku.txt"
python3 -m harness bench --variants triton_ps1 --prefix 4096,32768,131072,185000 --tree 16,64 \
    --heads 8 --rep-ms 300 --no-progress --out "results/bench/baseline-$sku.jsonl" 2>&1 \
    | tee "results/bench/baseline-$sku.txt"
tar czf "$OUT/results.tgz" results
tail -n 3 "results/tests/pytest-$sku.txt"; tail -n 1 "results/check/$sku.txt"
cat "results/bench/baseline-$sku.txt" | tail -n 12
