#!/usr/bin/env bash
# Device call for the device-drafting decode loop (harness/decode/device_loop.py, 2026-12-03):
#   1. the tree kernel against the tensor builder (also at the decode's shapes), the tests of the
#      device loop (greedy tokens, every phase timed on the GPU, the cache left as it was) and of
#      the overlapped host loop; stops here if they fail;
#   2. 185k, budget 64, auto: the host loop and the device loop side by side, three repeats each
#      (--draft-on host device --repeats 3), for the step's spread;
#   3. the k2-tp8 decode rows with the device loop, triton_ps1 and auto in the same run (compiled
#      layers; tokens against plain greedy and greedy padded to the budget).
# Records under $OUT; a short table last. Usage (repository root): bash scripts/gpu_device_draft.sh [185k s] [rows s]
set -uo pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; export OUT
sku=$(python3 -c "from harness.measure.environment import gpu_sku; print(gpu_sku())")
quiet() { grep -v "warnings.warn\|UserWarning\|select_variant(variant" | tail -n "$1"; }
timeout 150 python3 -m pytest -q -p no:cacheprovider tests/test_device_tree.py tests/test_decode.py \
  -k "kernel or device_drafting or overlapped_timing" \
  --tb=short 2>&1 | grep -v DEBUG | grep -E "^E  |passed|failed|error" | tail -n 25 | tee "$OUT/pytest-decode-device-draft-gpu-$sku.txt"
grep -q " passed" "$OUT/pytest-decode-device-draft-gpu-$sku.txt" && ! grep -q "failed\|error" "$OUT/pytest-decode-device-draft-gpu-$sku.txt" \
  || { echo "gpu tests failed: no timed runs"; exit 1; }
common=(decode --preset k2-tp8 --budget 64 --compile-layers --batch-invariant-greedy --new-tokens 48 --drafter oracle
        --check-lossless --no-progress)
[ "${1:-190}" = 0 ] || timeout "${1:-190}" python3 -m harness "${common[@]}" --context 185000 --variants auto \
  --draft-on host device --repeats 3 --out "$OUT/decode-device-draft-185k-k2-tp8-$sku.jsonl" 2>&1 | quiet 9
[ "${2:-230}" = 0 ] || timeout "${2:-230}" python3 -m harness "${common[@]}" --context 185000,131072,32768,4096 \
  --variants triton_ps1 auto --draft-on device --out "$OUT/decode-device-draft-k2-tp8-$sku.jsonl" 2>&1 | quiet 11
