#!/usr/bin/env bash
# cuda_ws on the GPU host in one call, each step's records packed into $OUT as it ends:
#   check: the gpu-marked oracle cases, graph replay and determinism;
#   bench: its sm_90 configs beside every other variant, then its whole sm_120 space as a proxy
#          (records carry proxy_for: sm_120), graph replay, L2 flushed;
#   sanitize: compute-sanitizer memcheck, racecheck and synccheck on small adversarial shapes;
#   ncu: counters of one call at 185000 / 64 / 8 per config in NCU_CONFIGS (JSON, ';'-separated).
# Usage (repository root): bash scripts/gpu_cuda_ws.sh [check] [bench] [sanitize] [ncu]   (default: all four)
. scripts/gpu_env.sh
steps=" ${*:-check bench sanitize ncu} "
mkdir -p results/bench results/tests results/sanitizer/cuda_ws results/ncu
if [[ $steps == *" check "* ]]; then
  pytest_log "results/tests/pytest-gpu-cuda_ws-$sku.txt" 240 -m gpu tests/kernels/test_variants.py \
    -k "cuda_ws or deterministic"; pack
fi
if [[ $steps == *" bench "* ]]; then
  for sweep in cuda_ws-configs:cuda_ws-side-by-side cuda_ws-sm120-proxy:cuda_ws-sm120-proxy; do
    out="results/bench/${sweep#*:}-$sku.jsonl"; rm -f "$out"
    python3 -m harness bench --sweep "harness/bench/sweeps/${sweep%%:*}.yaml" --no-progress --out "$out" \
      > "${out%.jsonl}.txt" 2>&1
    python3 scripts/best_configs.py "$out"; pack
  done
fi
if [[ $steps == *" sanitize "* ]]; then
  # name:config pairs; "default" is the GPU's default (sm_90 here), "sm120-default" the sm_120 one.
  sm120=$(python3 -c "import json; from verify_kernels.cuda_ws import DEFAULT_CONFIGS as d; print(json.dumps(d['sm_120']))")
  p0='{"WARPS_M":2,"BLOCK_N":16,"STAGES":2,"MIN_BLOCKS":2,"PRODUCER":0,"SPLIT_K":0}'
  for run in 'memcheck:default:{}' 'racecheck:default:{}' 'synccheck:default:{}' "racecheck:sm120-default:$sm120" \
             "memcheck:sm120-default:$sm120" "racecheck:WARPSM2BLOCKN16STAGES2MINBLOCKS2PRODUCER0SPLITK0:$p0"; do
    tool=${run%%:*}; rest=${run#*:}; name=${rest%%:*}; config=${rest#*:}
    log="results/sanitizer/cuda_ws/$tool-$name-$sku.txt"
    timeout 100 compute-sanitizer --tool "$tool" --kernel-name kns=verify_ws \
      python3 scripts/sanitize_variants.py cuda_ws --config "$config" > "$log" 2>&1
    echo "$tool $config: rc=$? $(grep -hE 'ERROR SUMMARY|RACECHECK SUMMARY' "$log" | tail -n 1) ok=$(grep -c ' ok$' "$log")/6"
  done; pack
fi
if [[ $steps == *" ncu "* ]]; then
  IFS=';' read -ra ncu_configs <<< "${NCU_CONFIGS:-{\}}"; i=0
  for config in "${ncu_configs[@]}"; do
    log="results/ncu/cuda_ws-185000-64-8-$i-$sku.txt"; i=$((i + 1)); echo "config $config" > "$log"
    spec="{\"variant\": \"cuda_ws\", \"prefix_len\": 185000, \"tree_nodes\": 64, \"heads\": 8, \"page_size\": 64, \"config\": $config, \"seed\": 0}"
    timeout 200 ncu --clock-control none --nvtx --nvtx-include vk_counters/ --kernel-name verify_ws \
      --section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis \
      --section WarpStateStats --section Occupancy --section SchedulerStats \
      --metrics sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,l1tex__data_pipe_lsu_wavefronts_mem_shared.avg.pct_of_peak_sustained_elapsed,smsp__average_warp_latency_issue_stalled_barrier.ratio,smsp__average_warp_latency_issue_stalled_long_scoreboard.ratio,smsp__average_warp_latency_issue_stalled_short_scoreboard.ratio,smsp__average_warp_latency_issue_stalled_math_pipe_throttle.ratio,smsp__average_warp_latency_issue_stalled_mio_throttle.ratio,smsp__average_warp_latency_issue_stalled_wait.ratio,smsp__average_warp_latency_issue_stalled_membar.ratio \
      python3 -m harness.bench.counters_target "$spec" >> "$log" 2>&1
    grep -E "^config|hmma|wavefronts_mem_shared|stalled|Duration|Issue Slots Busy|Registers Per|Achieved Active Warps" "$log" | cut -c1-120
  done; pack
fi
