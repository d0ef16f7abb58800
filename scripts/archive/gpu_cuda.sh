#!/usr/bin/env bash
# cuda_coalesced on the GPU host: ceilings (with mma.sync), the gpu tests, vk check for every
# variant, compute-sanitizer memcheck and racecheck, and a config exploration beside triton_splitkv.
# Usage (repository root, GPU host): bash scripts/gpu_cuda.sh
set -uo pipefail
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
sku=$(python3 -c "from harness.measure.environment import gpu_sku; print(gpu_sku())")
mkdir -p results/check results/tests results/bench results/sanitizer
rm -f "results/check/$sku.jsonl" "results/bench/cuda-configs-$sku.jsonl"
python3 -m harness env > "results/env-$sku.json"
python3 -m harness ceilings --remeasure | tail -n 8
python3 scripts/sanitize_cuda.py 2>&1 | tail -n 5
for tool in memcheck racecheck; do
  compute-sanitizer --tool $tool --kernel-name regex:verify python3 scripts/sanitize_cuda.py \
    > "results/sanitizer/$tool-$sku.txt" 2>&1
  tail -n 3 "results/sanitizer/$tool-$sku.txt"
done
python3 -m harness bench --variants cuda_coalesced --peers --prefix 4096,131072 --tree 16,64 --heads 8 \
    --config '{}' --config '{"WARPS_M": 4, "BLOCK_N": 32}' --config '{"WARPS_M": 4, "WARPS_N": 4, "BLOCK_N": 32}' \
    --config '{"BLOCK_N": 32}' --config '{"WARPS_M": 4, "STAGES": 3}' --config '{"WARPS_M": 4, "BLOCK_N": 64, "STAGES": 1}' \
    --rep-ms 100 --no-progress --out "results/bench/cuda-configs-$sku.jsonl" > "$OUT/cuda-configs.txt" 2>&1
tail -n 28 "$OUT/cuda-configs.txt"
python3 -m pytest -q -p no:cacheprovider -m gpu -x 2>&1 | tee "results/tests/pytest-gpu-$sku.txt" | tail -n 6
python3 -m harness check --no-progress --out "results/check/$sku.jsonl" > "results/check/$sku.txt" 2>&1
grep -E "FAIL|passed" "results/check/$sku.txt" | tail -n 8
tar czf "$OUT/results.tgz" results
