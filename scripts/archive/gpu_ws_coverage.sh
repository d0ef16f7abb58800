#!/usr/bin/env bash
# gluon_wgmma_ws beyond T 64 (issue 7's budget sweep runs T 16..512), in one device call:
#   1. tune it at T 16 and 256 over L {4096, 32768, 131072} (scripts/gpu_tune_gluon.sh; tuned.tgz to $OUT);
#   2. gluon_wgmma_ws beside gluon_wgmma at their default configs (vk bench does not read tuned records), at those keys and 185k, graph replay (bench record);
#   3. ncu counters of the ws kernel at L 185000, T 64, H 8 (what limits it at the decode's operating point).
# Usage (repository root, optuna wheels in .whl/): bash scripts/gpu_ws_coverage.sh [tune seconds, default 260]
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; export OUT
VARIANT=gluon_wgmma_ws TREES=16,256 bash scripts/gpu_tune_gluon.sh "${1:-260}"
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
sku=$(python3 -c "from harness.measure.environment import gpu_sku; print(gpu_sku())")
timeout 150 python3 -m harness bench --variants gluon_wgmma_ws gluon_wgmma --prefix 131072,185000 --tree 16,256 \
  --mode graph --rep-ms 100 --no-progress --out "$OUT/ws-coverage-$sku.jsonl" 2>&1 | grep -v "warn" | tail -n 16
metrics=sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed,dram__throughput.avg.pct_of_peak_sustained_elapsed,sm__warps_active.avg.pct_of_peak_sustained_active,l1tex__data_pipe_lsu_wavefronts_mem_shared.sum,launch__registers_per_thread,gpu__time_duration.sum,lts__t_sector_hit_rate.pct,sm__throughput.avg.pct_of_peak_sustained_elapsed
timeout 120 ncu --clock-control none --kernel-name regex:"verify" --launch-skip 2 --launch-count 1 --metrics $metrics \
  --section WarpStateStats python3 scripts/profile_one.py --variant gluon_wgmma_ws --prefix 185000 \
  > "$OUT/ncu-gluon_wgmma_ws-L185000-T64-H8-$sku.txt" 2>&1
grep -E "verify|tensor|dram|warps_active|registers|duration|hit_rate|Stall|stall|throughput" \
  "$OUT/ncu-gluon_wgmma_ws-L185000-T64-H8-$sku.txt" | head -n 30
