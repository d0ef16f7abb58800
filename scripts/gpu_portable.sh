#!/usr/bin/env bash
# The second-generation portable kernel (cuda_qreg, issue 34) on the GPU host in one call, each step
# packed into $OUT as it ends:
#   test      its oracle suite, the planner's graph-replay test and the layout property test
#                                                               -> results/check/portable-test-<gpu>.log
#   sanitize  compute-sanitizer memcheck, racecheck, synccheck and initcheck (every kernel instrumented:
#             the plan is a Triton kernel's) of cuda_qreg (its sm_90 and sm_120 defaults), memcheck of the
#             kernels the planner changed (cuda_ws, gluon_wgmma_ws, triton_splitkv)
#                                                  -> results/sanitizer/variants/<tool>-<name>-<gpu>.txt
#   bench     issue 34's shapes: cuda_qreg and cuda_ws with their sm_90 defaults beside FlashInfer fa2
#             and FlashMLA (chain trees, graph replay, L2 flushed)    -> results/bench/portable-<gpu>.jsonl
#   pipeline  cuda_qreg's two phase orders (PIPELINE 0 and 1) side by side at its sm_90 default and, as the
#             sm_120 proxy, at its sm_120 default                  -> results/bench/qreg-pipeline-<gpu>.jsonl
#   configs   cuda_qreg configs side by side ($QREG_CONFIGS: JSON overrides, one per line, over the arch's
#             default; the default itself first) at 32768/131072/185000 x 64 x 8 (or $QREG_SHAPES, vk bench shape
#             flags, one set per line) with the sm_90 default, and those that fit sm_120 ($QREG_PROXY_CONFIGS) as
#             the sm_120 proxy; $QREG_TAG names a file of its own (an experiment timed afresh, not resumed)
#                                                         -> results/bench/qreg-configs[-<tag>]-<gpu>.jsonl
#   spans     cuda_qreg's spans walk (waves 0) beside its units rule (waves 2) on issue 33's ragged batches and
#             short trees, the sm_90 default and (marked proxy_for sm_120) the sm_120 default, FlashMLA beside
#             the sm_90 rows                                          -> results/bench/qreg-spans-<gpu>.jsonl
#   proxy     the same shapes with each kernel's sm_120 default, marked proxy_for sm_120, and FlashInfer fa2 with
#             the tiles it takes on sm_120 (100 KB per SM: 1 stage, 16-token tiles, unsharded; fa2_as_arch in
#             scripts/gpu_peers_env.sh; the record's resolved config says so)
#                                                        -> results/bench/portable-proxy-sm120-<gpu>.jsonl
#   ncu       counters of one call at 131072 / 64 / 8, both defaults, or $QREG_NCU ("label=JSON ...", the JSON
#             over the arch named by the label's first part), and the stall samples per SASS instruction (`vk stalls`)
#                                                  -> results/ncu/cuda_qreg-*-<gpu>.txt, .sass.csv.xz
# Usage (repository root): bash scripts/gpu_portable.sh SECONDS STEP[:SECONDS]...
. scripts/gpu_env.sh
deadline=$(( $(date +%s) + ${1:?SECONDS} )); shift
. scripts/gpu_peers_env.sh
mkdir -p results/bench results/check results/sanitizer/variants results/ncu
default() {  # variant arch -> its default config as JSON
  python3 -c "import json, importlib; print(json.dumps(importlib.import_module('verify_kernels.$1').DEFAULT_CONFIGS['$2']))"
}
merged() {  # JSON JSON -> the first with the second's keys over it
  python3 -c "import json, sys; print(json.dumps({**json.loads(sys.argv[1]), **json.loads(sys.argv[2])}))" "$1" "$2"
}
bench_shapes() {  # out proxy-flag... ; the rest of the flags per group
  local out=$1; shift
  for shape in "--prefix 32768,131072,185000 --tree 64 --heads 8" "--prefix 185000 --tree 256 --heads 8" \
               "--prefix 131072 --tree 16 --heads 8" "--prefix 65536 --tree 64 --heads 16" \
               "--prefix 32768 --tree 64 --heads 128" "--ragged $RAGGED_LONG_AMONG_SHORT --tree 64 --heads 8"; do
    bench_chain "$(left)" "$out" $shape "$@"
  done
  tail -n 4 "${out%.jsonl}.txt"
}
for item in "$@"; do
  step=${item%%:*}; end=$deadline
  [ "$step" != "$item" ] && end=$(( $(date +%s) + ${item#*:} < deadline ? $(date +%s) + ${item#*:} : deadline ))
  left() { local s=$(( end - $(date +%s) )); echo $(( s > 1 ? s : 1 )); }
  echo "== $step ($(left) s)"
  case $step in
    test)
      log="results/check/portable-test-$sku.log"
      tests=(tests/kernels/test_variants.py tests/kernels/test_planner.py tests/kernels/test_layouts.py -k cuda_qreg)
      pytest_log "$log" "$(left)" "${tests[@]}"; pack ;;
    sanitize)
      runs=("memcheck:cuda_qreg:{}" "racecheck:cuda_qreg:{}" "synccheck:cuda_qreg:{}" "initcheck:cuda_qreg:{}"
            "memcheck:cuda_qreg-sm120:$(default cuda_qreg sm_120)" "racecheck:cuda_qreg-sm120:$(default cuda_qreg sm_120)"
            "memcheck:cuda_ws:{}" "memcheck:gluon_wgmma_ws:{}" "memcheck:triton_splitkv:{}")
      for run in "${runs[@]}"; do
        tool=${run%%:*}; rest=${run#*:}; name=${rest%%:*}; config=${rest#*:}
        sanitize_log "$tool" "results/sanitizer/variants/$tool-$name-$sku.txt" "$(( $(left) < 150 ? $(left) : 150 ))" \
          "${name%-sm120}" --config "$config"
      done; pack ;;
    bench)
      bench_shapes "results/bench/portable-$sku.jsonl" --variants cuda_qreg cuda_ws --peers flashinfer_fa2 flash_mla
      pack ;;
    pipeline)
      out="results/bench/qreg-pipeline-$sku.jsonl"
      for arch in sm_90 sm_120; do
        off=$(default cuda_qreg $arch); on=${off/\"PIPELINE\": 0/\"PIPELINE\": 1}; proxy=()
        [ $arch = sm_120 ] && proxy=(--proxy-for sm_120)
        for shape in "--prefix 32768,131072,185000 --tree 64 --heads 8" "--prefix 131072 --tree 16 --heads 8" \
                     "--prefix 32768 --tree 64 --heads 128"; do
          bench_chain "$(left)" "$out" $shape --variants cuda_qreg --peers "${proxy[@]}" --config "$off" --config "$on"
        done
      done
      tail -n 8 "${out%.jsonl}.txt"; pack ;;
    configs)
      out="results/bench/qreg-configs${QREG_TAG:+-$QREG_TAG}-$sku.jsonl"
      for arch in sm_90 sm_120; do
        list=${QREG_CONFIGS:-}; proxy=()
        [ $arch = sm_120 ] && { list=${QREG_PROXY_CONFIGS:-}; proxy=(--proxy-for sm_120); }
        [ -z "$list" ] && continue
        base=$(default cuda_qreg $arch); flags=(--config "$base")
        while read -r line; do
          [ -n "$line" ] && flags+=(--config "$(merged "$base" "$line")")
        done <<< "$list"
        mapfile -t overrides <<< "$list"
        timeout -k 5 "$(( $(left) / 3 ))" python3 scripts/warm_kernel_cache.py cuda_qreg $arch --configs "${overrides[@]}" | tail -n 2
        while read -r shape; do
          [ -n "$shape" ] && bench_chain "$(left)" "$out" $shape --variants cuda_qreg --peers "${proxy[@]}" "${flags[@]}"
        done <<< "${QREG_SHAPES:---prefix 32768,131072,185000 --tree 64 --heads 8}"
      done
      tail -n 24 "${out%.jsonl}.txt"; pack ;;
    spans)
      out="results/bench/qreg-spans-$sku.jsonl"
      for arch in sm_90 sm_120; do
        base=$(default cuda_qreg $arch); proxy=(--peers flash_mla)
        [ $arch = sm_120 ] && proxy=(--peers --proxy-for sm_120)
        for shape in "--ragged $RAGGED_LONG_AMONG_SHORT --tree 64 --heads 8" "--ragged $RAGGED_MIXED --tree 32 --heads 16" \
                     "--ragged $RAGGED_EQUAL --tree 16 --heads 16" \
                     "--prefix 4096,32768,131072 --tree 16 --heads 8" "--prefix 4096,185000 --tree 64 --heads 8"; do
          bench_chain "$(left)" "$out" $shape --variants cuda_qreg "${proxy[@]}" --config "$base" \
            --config "$(merged "$base" '{"waves": 0}')"
        done
      done
      tail -n 30 "${out%.jsonl}.txt"; pack ;;
    proxy)
      out="results/bench/portable-proxy-sm120-$sku.jsonl"
      for variant in cuda_qreg cuda_ws; do
        bench_shapes "$out" --variants $variant --peers --proxy-for sm_120 --config "$(default $variant sm_120)"
      done
      ( fa2_as_arch sm_120 && bench_shapes "$out" --variants flashinfer_fa2 --peers --proxy-for sm_120 )
      pack ;;
    ncu)
      # $QREG_NCU ("label=JSON" entries, JSON without spaces over the default of the arch the label starts with)
      for entry in ${QREG_NCU:-sm_90-default= sm_120-default=}; do
        label=${entry%%=*}; arch=${label%%-*}; override=${entry#*=}
        config=$(default cuda_qreg $arch)
        [ -n "$override" ] && config=$(merged "$config" "$override")
        log="results/ncu/cuda_qreg-131072-64-8-$label-$sku.txt"
        { echo "commit ${VK_GIT_COMMIT:-$(git rev-parse HEAD 2>/dev/null)}"; echo "config $config"; } > "$log"
        spec="{\"variant\": \"cuda_qreg\", \"prefix_len\": 131072, \"tree_nodes\": 64, \"heads\": 8, \"page_size\": 64, \"config\": $config, \"seed\": 0}"
        rep=/tmp/qreg-ncu-$label; rm -f "$rep.ncu-rep"
        timeout -k 5 "$(( $(left) / 2 ))" ncu --clock-control none --nvtx --nvtx-include vk_counters/ --kernel-name verify_qreg \
          --section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis \
          --section WarpStateStats --section Occupancy --section SchedulerStats --section SourceCounters -o "$rep" \
          --metrics sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,l1tex__data_pipe_lsu_wavefronts_mem_shared.avg.pct_of_peak_sustained_elapsed,smsp__average_warp_latency_issue_stalled_barrier.ratio,smsp__average_warp_latency_issue_stalled_long_scoreboard.ratio,smsp__average_warp_latency_issue_stalled_short_scoreboard.ratio,smsp__average_warp_latency_issue_stalled_math_pipe_throttle.ratio,smsp__average_warp_latency_issue_stalled_mio_throttle.ratio,smsp__average_warp_latency_issue_stalled_wait.ratio,smsp__average_warp_latency_issue_stalled_lg_throttle.ratio \
          python3 -m harness.bench.counters_target "$spec" >> "$log" 2>&1
        ncu -i "$rep.ncu-rep" --page details >> "$log" 2>&1
        sass_samples "$rep.ncu-rep" "${log%.txt}.sass.csv.xz"
        python3 -m harness stalls --top 6 "${log%.txt}.sass.csv.xz" | tail -n 10  # the waits per barrier
        grep -E "^config|hmma|wavefronts_mem_shared|stalled|Duration|Registers Per|Achieved Active Warps|Shared Memory Conf" "$log" | cut -c1-120
      done; pack ;;
    *) echo "unknown step $step" >&2 ;;
  esac
done
