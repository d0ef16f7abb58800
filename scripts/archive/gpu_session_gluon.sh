#!/usr/bin/env bash
# One device call for issue 7 with gluon_wgmma: tune it (so "auto" picks it where it wins), measure
# this GPU's ceilings (the floor of the decode step), then the k2-tp8 decode rows with triton_ps1
# and auto in the same run, layers compiled (COMPILE=0 for eager). Records, ceilings, tuned/ in $OUT.
# Usage (repository root, optuna wheels in .whl/):
#   CONTEXTS=185000,131072,32768,4096 bash scripts/gpu_session_gluon.sh [tune seconds, 120] [decode seconds, 400]
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; export OUT
bash scripts/gpu_tune_gluon.sh "${1:-120}"
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
python3 -m harness ceilings 2>&1 | tail -n 3 && cp results/ceilings/*.json "$OUT/"
COMPILE=${COMPILE:-1} MAIN_S=${2:-400} SWEEP_S=0 bash scripts/gpu_decode.sh 48 skip-tests
