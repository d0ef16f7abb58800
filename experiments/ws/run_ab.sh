#!/usr/bin/env bash
# Ablations and candidates of gluon_wgmma_ws (experiments/ws/*.diff, each a patch of the kernel at
# source hash 189877040873e776, commit 1c8feeb), timed round-robin beside the registered kernel with
# scripts/ab_verify_kernels.py. The kernel has changed since (tma.diff was adopted); to time them as
# the records did, first restore that source as the registered one:
#   git show 1c8feeb:verify_kernels/gluon_wgmma_ws.py > verify_kernels/gluon_wgmma_ws.py The patched modules are written to experiments/ws/ws_NAME.py
# (git-ignored). A bounded one-round run of each first, so a hang (a barrier protocol error) ends
# the call early.
#
# Settings (environment):
#   FILES       patches to time                 default: nocopy noexp prefetch_table pipe_s chunked
#   CONFIG      their config, SPLITS = the shape's kv_splits  default: {"BLOCK_N": 64, "kv_splits": SPLITS}
#   TIME_WRONG  "--time-wrong" times ablations (wrong on purpose; records say passes_oracle false);
#               empty: contenders that fail the oracle are not timed   default: --time-wrong
#   AUTO        1: also time every contender at kv_splits 0 (its auto rule)   default: empty
#   SHAPES      "L T kv_splits" entries, comma-separated   default: 185000 64 16,131072 64 16,185000 256 4
#   RECORD      the JSONL name under $OUT             default: ws-ablation
# The two runs in results/: bash experiments/ws/run_ab.sh, and
#   FILES=pipe4 CONFIG='{"BLOCK_N": 32, "kv_splits": SPLITS, "stages": 4}' TIME_WRONG= AUTO=1 RECORD=ws-pipe4 \
#   SHAPES="185000 64 16,131072 64 16,185000 256 4,131072 16 64,32768 64 16,4096 64 4" bash experiments/ws/run_ab.sh
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; export OUT
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
sku=$(python3 -c "from harness.measure.environment import gpu_sku; print(gpu_sku())")
files=${FILES:-"nocopy noexp prefetch_table pipe_s chunked"}
config=${CONFIG:-'{"BLOCK_N": 64, "kv_splits": SPLITS}'}
time_wrong=${TIME_WRONG---time-wrong}
for f in $files; do
  patch -s -o "experiments/ws/ws_$f.py" verify_kernels/gluon_wgmma_ws.py "experiments/ws/$f.diff" || exit 1
  timeout 90 python3 scripts/ab_verify_kernels.py $time_wrong --prefix 4096 --tree 64 --rounds 1 \
    "file=experiments/ws/ws_$f.py:${config//SPLITS/0}" 2>&1 | grep -v -i warn | tail -n 3
  [ "${PIPESTATUS[0]}" = 0 ] || { echo "$f: smoke run failed or hung"; exit 1; }
done
IFS=',' read -ra shapes <<< "${SHAPES:-185000 64 16,131072 64 16,185000 256 4}"
for shape in "${shapes[@]}"; do
  set -- $shape
  args=("gluon_wgmma_ws:{\"BLOCK_N\": 64, \"kv_splits\": $3}")
  [ -n "${AUTO:-}" ] && args+=("gluon_wgmma_ws:{\"BLOCK_N\": 64, \"kv_splits\": 0}")
  for f in $files; do
    args+=("file=experiments/ws/ws_$f.py:${config//SPLITS/$3}")
    [ -n "${AUTO:-}" ] && args+=("file=experiments/ws/ws_$f.py:${config//SPLITS/0}")
  done
  timeout 200 python3 scripts/ab_verify_kernels.py $time_wrong --prefix "$1" --tree "$2" --rounds ${ROUNDS:-8} \
    --out "$OUT/${RECORD:-ws-ablation}-$sku.jsonl" "${args[@]}" 2>&1 | grep -v -i warn | tail -n 12
done
