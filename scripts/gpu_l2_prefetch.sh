#!/usr/bin/env bash
# Experiment (issue 7): weights pulled into L2 while each layer's attention runs (--l2-prefetch MB:DELAY_US,
# harness/l2_prefetch.py), in one device call:
#   1. the gpu-marked test that the prefetch leaves the tokens unchanged;
#   2. k2-tp8 at context 185k, budget 64, auto, layers compiled: without the prefetch, then with each
#      setting of PREFETCHES (default 32:300 32:330 16:330; the attention takes about 365 us there).
# Usage (repository root): bash scripts/gpu_l2_prefetch.sh [new tokens per run, default 24]
set -uo pipefail
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
sku=$(python3 -c "from harness.environment import gpu_sku; print(gpu_sku())")
timeout 60 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_decode.py -k "l2_prefetch" 2>&1 | tail -n 2 \
  | tee "$OUT/pytest-l2-prefetch-gpu-$sku.txt"
for setting in none ${PREFETCHES:-32:300 32:330 16:330}; do
  extra=(); [ "$setting" = none ] || extra=(--l2-prefetch "$setting")
  timeout 110 python3 -m harness decode --preset k2-tp8 --context 185000 --budget 64 --compile-layers --variants auto \
    "${extra[@]}" --new-tokens "${1:-24}" --drafter oracle --no-progress --out "$OUT/decode-l2-prefetch-k2-tp8-$sku.jsonl" \
    2>&1 | grep -E "^\s+185000" | sed "s/^/$setting /"
done
python3 - "$OUT/decode-l2-prefetch-k2-tp8-$sku.jsonl" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    print(f"l2_prefetch {r.get('l2_prefetch')}: step {r.get('median_step_ms', 0):.2f} ms, "
          f"verify {r.get('mean_phase_ms', {}).get('verify', 0):.2f} ms, status {r.get('status', 'ok')}")
PY
