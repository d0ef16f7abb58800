#!/usr/bin/env bash
# One device call after gluon_wgmma_ws took its TMA loader (2026-12-03), most needed first: the gpu
# decode test of gluon_wgmma_ws (graph replay == eager, so also the greedy picks computed in the
# verify graph); the k2-tp8 decode rows, triton_ps1 and auto in the same run (compiled layers;
# tokens against plain greedy and greedy padded to the budget); then its re-tune at T 64 (the
# decode's budget; vk tune archives its studies of the cp.async kernel), timed by graph replay (the
# run of 2026-12-03 timed eager calls, measured the launch path and was discarded: results/README.md,
# Tuning). Records and results/tuned (tuned.tgz) under $OUT.
# Usage (repository root, optuna wheels in .whl/): bash scripts/gpu_tma_closing.sh [decode s] [tune s]
set -uo pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; export OUT
sku=$(python3 -c "from harness.measure.environment import gpu_sku; print(gpu_sku())")
timeout 90 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_decode.py -k "gluon_wgmma_ws" --tb=short 2>&1 \
  | tail -n 4 | tee "$OUT/pytest-decode-gpu-tma-$sku.txt"
COMPILE=1 BATCH_INVARIANT=1 MAIN_S=${1:-250} SWEEP_S=0 bash scripts/gpu_decode.sh 48 skip-tests
VARIANT=gluon_wgmma_ws TREES=64 TIMING=graph bash scripts/gpu_tune_gluon.sh "${2:-150}"
