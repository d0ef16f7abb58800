#!/usr/bin/env bash
# What limits gluon_wgmma_ws at the decode's operating point (L 185000, T 64, H 8): ncu's speed-of-light,
# memory-workload (L2, shared memory), compute-workload and warp-state sections, with the L2 and shared
# memory counters named, in one device call. Usage (repository root): bash scripts/gpu_ws_limits.sh
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; export OUT
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
sku=$(python3 -c "from harness.measure.environment import gpu_sku; print(gpu_sku())")
report="$OUT/ncu-limits-gluon_wgmma_ws-L185000-T64-H8-$sku.txt"
metrics=lts__t_sectors_op_read.sum,lts__t_sectors_srcunit_tex_op_read.sum,lts__throughput.avg.pct_of_peak_sustained_elapsed,\
lts__t_sector_hit_rate.pct,l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum,l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum,\
l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum,smsp__inst_executed_op_ldgsts.sum,l1tex__throughput.avg.pct_of_peak_sustained_elapsed,\
sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed,sm__cycles_elapsed.avg.per_second,gpu__time_duration.sum,\
dram__bytes_read.sum,lts__t_sectors_srcunit_ltcfabric.sum
timeout 240 ncu --clock-control none --kernel-name regex:"verify" --launch-skip 2 --launch-count 1 --metrics $metrics \
  --section SpeedOfLight --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis --section WarpStateStats \
  --print-details all python3 scripts/profile_one.py --variant gluon_wgmma_ws --prefix 185000 > "$report" 2>&1
grep -E "Throughput|Busy|Bandwidth|Hit|Stall|stall|pct|sum|duration|per_second|Pipe|Issue" "$report" | head -n 80
