#!/usr/bin/env bash
# The seesaw experiment (experiments/seesaw/seesaw.diff -> gluon_seesaw.py, and loader.diff on it: a loader warpgroup
# instead of the consumers issuing the copies) timed round-robin beside gluon_wgmma_ws, each first
# checked against the oracle at the timed shape (scripts/ab_verify_kernels.py).
# Usage (repository root, GPU host): bash experiments/seesaw/run_ab.sh; SHAPES="L T kv_splits,..."
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; export OUT
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
sku=$(python3 -c "from harness.measure.environment import gpu_sku; print(gpu_sku())")
# Both kernels are patches: seesaw.diff on gluon_wgmma_ws.py as of commit $(cat experiments/seesaw/BASE),
# loader.diff on its output. If the registered kernel has changed since, check that file out first.
patch -s -o experiments/seesaw/gluon_seesaw.py verify_kernels/gluon_wgmma_ws.py experiments/seesaw/seesaw.diff \
  || { echo "seesaw.diff does not apply: git show $(cat experiments/seesaw/BASE):verify_kernels/gluon_wgmma_ws.py"; exit 1; }
patch -s -o experiments/seesaw/seesaw_loader.py experiments/seesaw/gluon_seesaw.py experiments/seesaw/loader.diff \
  || exit 1
IFS=',' read -ra shapes <<< "${SHAPES:-185000 64 16,131072 64 16}"
for shape in "${shapes[@]}"; do
  set -- $shape
  timeout 120 python3 scripts/ab_verify_kernels.py --prefix "$1" --tree "$2" --rounds ${ROUNDS:-6} \
    --out "$OUT/seesaw-ab-$sku.jsonl" "gluon_wgmma_ws:{\"BLOCK_N\": 64, \"kv_splits\": $3}" \
    "file=experiments/seesaw/gluon_seesaw.py:{\"kv_splits\": $3}" \
    "file=experiments/seesaw/seesaw_loader.py:{\"kv_splits\": $3}" 2>&1 | grep -v -i warn | tail -n 5
done
