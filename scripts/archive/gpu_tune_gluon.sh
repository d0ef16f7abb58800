#!/usr/bin/env bash
# Tune a Hopper Gluon kernel (VARIANT, default gluon_wgmma) over the same keys as the other paged
# variants, so variant="auto" can pick it where it wins: L {4096, 32768, 131072} x T (TREES, default
# 16, 64, 256), H 8, every config of its
# 12-point space measured (events timing, L2 flushed). Resumable like gpu_tune.sh (the studies live
# in results/tuned/optuna.db); results/tuned packed into $OUT.
# TIMING=graph times by CUDA-graph replay (the kernels alone) instead of eager calls between events.
# Usage (repository root, optuna wheels in .whl/):
#   [VARIANT=gluon_wgmma_ws] [TREES=64] [TIMING=graph] bash scripts/gpu_tune_gluon.sh [seconds, default 300]
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
timeout -s INT -k 15 "${1:-300}" python3 -m harness tune --variants "${VARIANT:-gluon_wgmma}" --prefix 131072,32768,4096 \
  --tree "${TREES:-64,16,256}" --heads 8 --trials 12 --rep-ms 50 --trial-timeout 120 --timing "${TIMING:-events}" \
  --no-progress 2>&1 \
  | tee -a results/tuned/tune.txt | tail -n 12
python3 -m harness tuned --check 2>&1 | tail -n 3
tar czf "$OUT/tuned.tgz" results/tuned
