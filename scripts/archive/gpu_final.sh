#!/usr/bin/env bash
# Final H200 run: compute-sanitizer on cuda_coalesced, vk check of its sm_90 default, graph-mode
# timings at the issue targets, the H = 64 large-tree table, ncu limiter counters, the quick sweep
# with peers (vk bench --sweep harness/bench/sweeps/quick.yaml), a repeat-agreement check, and reports.
# Results are packed into $OUT after every step, so a run cut short keeps what it finished.
# Usage (repository root, GPU host): bash scripts/gpu_final.sh
set -uo pipefail
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
sku=$(python3 -c "from harness.measure.environment import gpu_sku; print(gpu_sku())")
mkdir -p results/sanitizer results/bench results/check results/ncu
pack() { tar czf "$OUT/results.tgz" results; }
bench() { python3 -m harness bench --no-progress "$@"; }

for tool in memcheck racecheck; do
  compute-sanitizer --tool $tool --kernel-name kns=verify python3 scripts/sanitize_cuda.py \
    > "results/sanitizer/$tool-$sku.txt" 2>&1
  grep -E "SUMMARY|rel_error" "results/sanitizer/$tool-$sku.txt" | tail -n 6
done
pack
python3 -m harness check --variants cuda_coalesced --no-progress --out "results/check/cuda-sm90-default-$sku.jsonl" \
  > "results/check/cuda-sm90-default-$sku.txt" 2>&1; tail -n 1 "results/check/cuda-sm90-default-$sku.txt"; pack

rm -f results/bench/targets-graph-$sku.jsonl results/bench/large-tree-$sku.jsonl results/bench/quick-$sku.jsonl \
  results/bench/repeat-$sku.jsonl
bench --peers --prefix 4096,131072 --tree 16,64 --heads 8 --mode graph --out "results/bench/targets-graph-$sku.jsonl" \
  > "results/bench/targets-graph-$sku.txt" 2>&1; tail -n 14 "results/bench/targets-graph-$sku.txt"; pack
bench --peers --prefix 32768,185000 --tree 1024 --heads 64 --rep-ms 100 --out "results/bench/large-tree-$sku.jsonl" \
  > "results/bench/large-tree-$sku.txt" 2>&1; tail -n 8 "results/bench/large-tree-$sku.txt"; pack

metrics=sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed,dram__throughput.avg.pct_of_peak_sustained_elapsed,sm__warps_active.avg.pct_of_peak_sustained_active,l1tex__data_pipe_lsu_wavefronts_mem_shared.sum,launch__registers_per_thread,gpu__time_duration.sum
for variant in triton_splitkv cuda_coalesced; do
  timeout 90 ncu --clock-control none --kernel-name regex:"verify" --launch-skip 2 --launch-count 1 --metrics $metrics \
    python3 scripts/profile_one.py --variant $variant > "results/ncu/$variant-L131072-T64-H8-$sku.txt" 2>&1
  grep -E "verify|tensor|dram|warps_active|wavefronts|registers|duration" "results/ncu/$variant-L131072-T64-H8-$sku.txt" | head -n 8
done
pack
timeout 230 python3 -m harness bench --no-progress --sweep harness/bench/sweeps/quick.yaml --rep-ms 50 --out "results/bench/quick-$sku.jsonl" \
  > "results/bench/quick-$sku.txt" 2>&1; tail -n 3 "results/bench/quick-$sku.txt"; pack
bench --peers sdpa_gathered --prefix 32768 --tree 64 --heads 8 --repeat 2 --out "results/bench/repeat-$sku.jsonl" \
  > "results/bench/repeat-$sku.txt" 2>&1; tail -n 5 "results/bench/repeat-$sku.txt"
python3 -m harness report "results/bench/quick-$sku.jsonl" --title "Quick sweep, $sku" > /dev/null 2>&1
python3 -m harness report "results/bench/targets-graph-$sku.jsonl" --title "Issue targets, CUDA-graph replay, $sku" > /dev/null 2>&1
pack
