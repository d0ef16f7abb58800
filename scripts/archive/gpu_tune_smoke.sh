#!/usr/bin/env bash
# Smoke run of vk tune on the GPU host (few trials, constraints-only static filter because the sm_90
# compile cache was not complete yet): shows the worker, oracle check, storage and winners on a GPU.
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT" results/tuned
for variant in triton_splitkv cuda_coalesced; do
  timeout 100 python3 -m harness tune --variants $variant --prefix 131072 --tree 64 --heads 8 --trials 6 \
    --no-compile --rep-ms 50 --trial-timeout 60 --no-progress 2>&1 | tail -n 4
  tar czf "$OUT/tuned.tgz" results/tuned
done
