#!/usr/bin/env bash
# Correctness on the GPU host, in one go: the gpu-marked tests, vk check over the GPU case matrix
# (every variant, pages 16/32/64, NaN-poisoned pools, ragged batches), and compute-sanitizer
# (memcheck, racecheck, synccheck, initcheck) on every variant's small adversarial shapes. Logs and records under
# results/tests/, results/check/ and results/sanitizer/, packed into $OUT after each step.
# Usage (repository root): bash scripts/gpu_check.sh [pytest seconds, default 300]
. scripts/gpu_env.sh
mkdir -p results/tests results/check results/sanitizer
pytest_log "results/tests/pytest-gpu-$sku.txt" "${1:-300}" -m gpu tests; pack
rm -f "results/check/$sku.jsonl"
python3 -m harness check --no-progress --out "results/check/$sku.jsonl" > "results/check/$sku.txt" 2>&1
tail -n 1 "results/check/$sku.txt"; pack
# compute-sanitizer on every GPU variant's small adversarial shapes (scripts/sanitize_variants.py);
# the verify kernels only, but initcheck every kernel (gpu_env.sh: sanitizer_only).
for tool in memcheck racecheck synccheck initcheck; do
  timeout 150 compute-sanitizer --tool $tool $(sanitizer_only $tool) python3 scripts/sanitize_variants.py \
    > "results/sanitizer/$tool-$sku.txt" 2>&1
  echo "$tool: $(grep -E "ERROR SUMMARY|RACECHECK SUMMARY" "results/sanitizer/$tool-$sku.txt" | tail -n 1)" \
    "$(grep -c " ok$" "results/sanitizer/$tool-$sku.txt") ok, $(grep -c FAIL "results/sanitizer/$tool-$sku.txt") FAIL"
done
pack
