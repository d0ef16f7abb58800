#!/usr/bin/env bash
# One device call for gluon_wgmma_ws (issue 7): its oracle checks at the default config and its
# decode graph-replay test, tuning at the decode tree size (T 64) so "auto" picks it there, then
# the k2-tp8 decode rows with triton_ps1 and auto in the same run, layers compiled. Records in $OUT.
# Usage (repository root, optuna wheels in .whl/):
#   bash scripts/gpu_session_ws.sh [tune seconds, 110] [decode seconds, 300]
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; export OUT
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
sku=$(python3 -c "from harness.measure.environment import gpu_sku; print(gpu_sku())")
{ timeout 100 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_variants.py -k "gluon_wgmma_ws and default" \
    -x --tb=short 2>&1 | tail -n 3
  timeout 60 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_decode.py -k gluon_wgmma_ws --tb=short 2>&1 \
    | tail -n 3; } | tee "$OUT/pytest-gluon-ws-$sku.txt"
VARIANT=gluon_wgmma_ws TREES=64 bash scripts/gpu_tune_gluon.sh "${1:-110}"
COMPILE=1 MAIN_S=${2:-300} SWEEP_S=0 bash scripts/gpu_decode.sh 48 skip-tests
