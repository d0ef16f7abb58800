#!/usr/bin/env bash
# The work planner (issue 33) and the argument layouts (issue 32) on the GPU host, in one call:
#   test    the layout property test (every variant), the planner's graph-replay test, the torch ops
#                                                              -> results/check/scheduler-test-<gpu>.log
#   oracle  the oracle suite of the planned variants and of those whose combine changed
#                                                              -> results/check/scheduler-oracle-<gpu>.log
#   bench   ragged batches and short trees, planned kernels beside FlashMLA and FlashInfer (chain trees,
#           graph replay, L2 flushed)                              -> results/bench/scheduler-<gpu>.jsonl
#   report  vk report --peers of it                                -> results/report/scheduler-<gpu>.md
#   cuda_ws cuda_ws on the planner: its oracle suite and graph-replay test, then the bench shapes
#           (no peers: they ran beside it in bench)          -> results/bench/scheduler-cuda_ws-<gpu>.jsonl
#   waves   the planned kernels at plan waves 1, 2 and 4 on a ragged batch and a short tree
#                                                              -> results/bench/scheduler-waves-<gpu>.jsonl
#   spans   gluon_wgmma_ws on the spans rule (waves 0: CTA ranges across requests) against its units rule
#           (waves 2): the bench shapes and two batches not benched before, beside the peers
#                                                  -> results/bench/spans-at-<commit>-<gpu>.jsonl
#   spans-test      gluon_wgmma_ws's oracle suite and graph-replay test (~330 s warm, ~510 s cold)
#                                                  -> results/check/spans-test-at-<commit>-<gpu>.log
#   spans-sanitize  compute-sanitizer memcheck, racecheck, synccheck of gluon_wgmma_ws's default (the spans
#                   rule) on the sanitizer shapes  -> results/sanitizer/variants/<tool>-gluon_wgmma_ws-spans-at-<commit>-<gpu>.txt
#   ws-spans  cuda_ws's spans walk (waves 0, compiled with SPANS): its oracle suite and graph-replay tests, the
#             three sanitizers, then the bench shapes at waves 0 and 2 beside the peers
#                                                  -> results/{check,sanitizer/variants,bench}/...ws-spans...-at-<commit>-<gpu>.*
#   gaps      gluon_wgmma_ws's spans with a segment cost (planner.plan_bounds' segment_cost, FlashMLA's fixed cost
#             per split): its oracle cases and graph replay, memcheck and synccheck, then the ragged batches and two
#             single requests at segment_cost 0 / 320 / 640 beside FlashMLA
#                                                  -> results/{check,sanitizer/variants,bench}/...gaps...-at-<commit>-<gpu>.*
#   gaps-ab   the gaps' bench again with the order of the configs reversed (320 first, then 0), the batches only
#             where they differ (one request has no gap)   -> results/bench/gaps-ab-at-<commit>-<gpu>.jsonl
#   portable-gaps  the gaps for the portable kernels (cuda_ws, cuda_qreg; compiled with GAPS): their segment_cost
#             oracle cases and graph replay        -> results/check/portable-gaps-test-at-<commit>-<gpu>.log
#   portable-gaps-sanitize  memcheck and synccheck of both at segment_cost 320
#                                                  -> results/sanitizer/variants/<tool>-<variant>-gaps-at-<commit>-<gpu>.txt
#   portable-gaps-bench  both at segment_cost 320 and 0 (that order) on the ragged batches beside FlashMLA
#                                                  -> results/bench/portable-gaps-ab-at-<commit>-<gpu>.jsonl
#   gaps-counters  gluon_wgmma_ws at segment_cost 320 beside FlashMLA under ncu (vk bench --counters: a separate
#             replay of each timed row): the 16-request batch, the 8 equal requests and the short tree 131072 / 16 / 8
#                                                  -> results/bench/gaps-counters-at-<commit>-<gpu>.jsonl
#   combine-test  the combine's column blocks and plan_once: their tests, every planned variant's graph replay, and
#             the oracle suites of gluon_wgmma_ws and triton_splitkv   -> results/check/combine-test-at-<commit>-<gpu>.log
#   combine-bench  gluon_wgmma_ws beside FlashMLA on the short trees and the five ragged batches, every call planning
#             (--plan call) and then one plan a graph (--plan once)
#                                                  -> results/bench/combine-plan-{call,once}-at-<commit>-<gpu>.jsonl
#   crowded   the units rule's crowded allowance (a long request among many short ones): cuda_qreg as sm_120's proxy
#             at waves 1 and 2 and its spans default, on the batches whose plan it changes, no peers; first at OLD (a
#             tree of an earlier commit, OLD_COMMIT its hash) where given, then here
#                                                  -> results/bench/crowded-at-<commit>-<gpu>.jsonl, and OLD's
#                                                     crowded-at-<old>-beside-<commit>-<gpu>.jsonl
#   plan-sanitize  compute-sanitizer memcheck of the planner's plan kernel alone (the Triton `_plan_kernel`) under
#             the planner's tests, the crowded batches among them
#                                                  -> results/sanitizer/variants/memcheck-plan-kernel-at-<commit>-<gpu>.txt
#   sym-test  gluon_wgmma_sym (the symmetric warpgroups, issue 33): the sanitizer shapes against the oracle first (a
#             hang or a wrong answer shows in seconds), then its oracle suite and graph replay, stopping at the first
#             failure (SYM_FROM=n: from its n-th test on)  -> results/check/sym-test-at-<commit>-<gpu>{-smoke,,-from-n}.log
#   sym-sanitize  compute-sanitizer memcheck, synccheck and racecheck of gluon_wgmma_sym on the sanitizer shapes
#                                                  -> results/sanitizer/variants/<tool>-gluon_wgmma_sym-at-<commit>-<gpu>.txt
#   sym-bench gluon_wgmma_sym beside gluon_wgmma_ws and FlashMLA: the five ragged batches, then issue 33's single
#             requests                             -> results/bench/sym-at-<commit>-<gpu>.jsonl
#   sym-ab    gluon_wgmma_sym of an earlier tree (OLD, its hash OLD_COMMIT) first, then this tree's beside gluon_wgmma_ws
#             and FlashMLA: the five ragged batches and 185000 / 64 / 8
#                                                  -> results/bench/sym-ab-at-<commit>-<gpu>.jsonl, and OLD's
#                                                     sym-ab-at-<old>-beside-<commit>-<gpu>.jsonl
#   sym-heldout  gluon_wgmma_sym and gluon_wgmma_ws at their defaults beside FlashMLA on shapes no sm_90 key was tuned at
#             (three ragged batches, four single requests): which of the two auto should pick there (vk tuned --explain)
#                                                  -> results/bench/sym-heldout-at-<commit>-<gpu>.jsonl
#   sym-counters  gluon_wgmma_sym beside gluon_wgmma_ws and FlashMLA under ncu (vk bench --counters): the
#             16-request batch, the 8 equal requests and 185000 / 64 / 8  -> results/bench/sym-counters-at-<commit>-<gpu>.jsonl
#   timeline  the short trees' kernel timeline of gluon_wgmma_ws beside FlashMLA, with the bf16-partials experiment
#                                                  -> results/bench/short-tree-timeline-at-<commit>-<gpu>.*
#   timeline-proxy  the short trees' kernel timeline of cuda_qreg as sm_120's proxy (scripts/short_tree_timeline.py)
#                                                  -> results/bench/short-tree-timeline-proxy-sm_120-at-<commit>-<gpu>.*
# (<commit>: VK_GIT_COMMIT's first 7 characters: each kernel's records apart, and --resume never skips a point
# because an earlier kernel measured it.)
# Installs the peers that travelled in .peers/ (scripts/gpu_peers_env.sh).
# Usage (repository root): [PEERS=...] bash scripts/gpu_scheduler.sh SECONDS STEP[:SECONDS]...
. scripts/gpu_env.sh
deadline=$(( $(date +%s) + ${1:?SECONDS} )); shift
. scripts/gpu_peers_env.sh
records="results/bench/scheduler-$sku.jsonl"; mkdir -p results/bench results/report results/check
at="at-$(echo "${VK_GIT_COMMIT:-$(git rev-parse HEAD 2>/dev/null)}" | cut -c1-7)"
ours="gluon_wgmma_ws cuda_ws triton_splitkv"
peers=${PEERS-flash_mla flashinfer_fa3 flashinfer_fa2}  # PEERS=flash_mla: no FlashInfer JIT (a cold cache costs minutes)
old_records() {  # STEP: OLD's records of STEP, a file per pair of trees (--resume never skips OLD's points of an earlier call)
  echo "$PWD/results/bench/$1-at-$(echo "$OLD_COMMIT" | cut -c1-7)-beside-${at#at-}-$sku.jsonl"
}
bench() {  # the shape flags of one group of points
  bench_chain "$(left)" "$records" --variants $ours --peers $peers "$@"
  tail -n 3 "${records%.jsonl}.txt"
}
ragged_batches() {  # the five ragged batches the spans rule and its gaps were timed on [more vk bench flags]
  bench --ragged $RAGGED_SIXTEEN --tree 128 --heads 8 "$@"
  bench --ragged $RAGGED_MIXED --tree 32 --heads 16 "$@"
  bench --ragged $RAGGED_LONG_AMONG_SHORT --tree 64 --heads 8 "$@"
  bench --ragged $RAGGED_SIX --tree 16 --heads 64 "$@"
  bench --ragged $RAGGED_EQUAL --tree 16 --heads 16 "$@"
}
bench_shapes() {  # three ragged batches and five single requests (issue 33's table)
  bench --ragged $RAGGED_LONG_AMONG_SHORT --tree 64 --heads 8
  bench --ragged $RAGGED_MIXED --tree 32 --heads 16
  bench --ragged $RAGGED_EQUAL --tree 16 --heads 16
  bench --prefix 131072,32768 --tree 16 --heads 8
  bench --prefix 4096,185000 --tree 64 --heads 8
  bench --prefix 185000 --tree 256 --heads 8
}
for item in "$@"; do
  step=${item%%:*}; end=$deadline
  [ "$step" != "$item" ] && end=$(( $(date +%s) + ${item#*:} < deadline ? $(date +%s) + ${item#*:} : deadline ))
  left() { local s=$(( end - $(date +%s) )); echo $(( s > 1 ? s : 1 )); }
  echo "== $step ($(left) s)"
  case $step in
    test|oracle)
      log="results/check/scheduler-$step-$sku.log"
      if [ $step = test ]; then
        tests=(tests/kernels/test_layouts.py tests/kernels/test_planner.py tests/kernels/test_ops.py)
      else  # the variants the plan or the one combine changed
        tests=(tests/kernels/test_variants.py -k "not triton_ps1 and not cuda_coalesced")
      fi
      pytest_log "$log" "$(left)" "${tests[@]}"; pack ;;
    bench)
      bench_shapes
      pack ;;
    cuda_ws)
      log="results/check/scheduler-cuda_ws-$sku.log"
      pytest_log "$log" "$(( $(left) / 2 ))" tests/kernels/test_variants.py tests/kernels/test_planner.py -k cuda_ws
      pack
      ours=cuda_ws; peers=""; records="results/bench/scheduler-cuda_ws-$sku.jsonl"
      bench_shapes
      pack ;;
    waves)
      for shape in "--ragged $RAGGED_MIXED --tree 32 --heads 16" \
                   "--prefix 131072 --tree 16 --heads 8"; do
        bench_chain "$(left)" "results/bench/scheduler-waves-$sku.jsonl" --variants gluon_wgmma_ws triton_splitkv \
          --peers $shape --config '{"waves": 1}' --config '{"waves": 2}' --config '{"waves": 4}'
      done
      tail -n 8 "results/bench/scheduler-waves-$sku.txt"; pack ;;
    spans)
      ours="gluon_wgmma_ws --config {\"waves\":0} --config {\"waves\":2}"; records="results/bench/spans-$at-$sku.jsonl"
      bench_shapes
      bench --ragged $RAGGED_SIXTEEN --tree 128 --heads 8
      bench --ragged $RAGGED_SIX --tree 16 --heads 64
      pack ;;
    gaps)
      pytest_log "results/check/gaps-test-$at-$sku.log" "$(( $(left) / 2 ))" tests/kernels/test_variants.py \
        tests/kernels/test_planner.py -k "gluon_wgmma_ws and segment_cost"; pack
      for tool in memcheck synccheck; do
        sanitize_log "$tool" "results/sanitizer/variants/$tool-gluon_wgmma_ws-gaps-$at-$sku.txt" "$(( $(left) / 6 ))" \
          gluon_wgmma_ws --config '{"segment_cost": 320}'
      done; pack
      ours="gluon_wgmma_ws --config {\"segment_cost\":0} --config {\"segment_cost\":320} --config {\"segment_cost\":640}"
      records="results/bench/gaps-$at-$sku.jsonl"
      ragged_batches
      bench --prefix 131072 --tree 16 --heads 8
      bench --prefix 185000 --tree 64 --heads 8
      pack ;;
    gaps-ab)
      ours="gluon_wgmma_ws --config {\"segment_cost\":320} --config {\"segment_cost\":0}"
      records="results/bench/gaps-ab-$at-$sku.jsonl"
      ragged_batches
      pack ;;
    portable-gaps)
      pytest_log "results/check/portable-gaps-test-$at-$sku.log" "$(left)" tests/kernels/test_variants.py \
        tests/kernels/test_planner.py -k "(cuda_ws or cuda_qreg) and segment_cost"; pack ;;
    portable-gaps-sanitize)
      runs=4  # each run gets an equal share of what is left
      for variant in cuda_qreg cuda_ws; do
        for tool in memcheck synccheck; do
          sanitize_log "$tool" "results/sanitizer/variants/$tool-$variant-gaps-$at-$sku.txt" "$(( $(left) / runs ))" \
            "$variant" --config '{"segment_cost": 320}'
          runs=$(( runs - 1 ))
        done
      done; pack ;;
    portable-gaps-bench)
      ours="cuda_qreg cuda_ws --config {\"segment_cost\":320} --config {\"segment_cost\":0}"
      records="results/bench/portable-gaps-ab-$at-$sku.jsonl"; peers=flash_mla
      ragged_batches
      pack ;;
    gaps-counters)
      ours="gluon_wgmma_ws --config {\"segment_cost\":320}"; peers=flash_mla
      records="results/bench/gaps-counters-$at-$sku.jsonl"
      bench --ragged $RAGGED_SIXTEEN --tree 128 --heads 8 --counters
      bench --ragged $RAGGED_EQUAL --tree 16 --heads 16 --counters
      bench --prefix 131072 --tree 16 --heads 8 --counters
      pack ;;
    spans-test)
      log="results/check/spans-test-$at-$sku.log"
      tests=(tests/kernels/test_variants.py tests/kernels/test_planner.py tests/harness/static/test_sass.py -k gluon_wgmma_ws)
      pytest_log "$log" "$(left)" "${tests[@]}"; pack ;;
    spans-sanitize)
      for tool in memcheck racecheck synccheck; do
        sanitize_log "$tool" "results/sanitizer/variants/$tool-gluon_wgmma_ws-spans-$at-$sku.txt" "$(( $(left) / 2 ))" \
          gluon_wgmma_ws
      done; pack ;;
    ws-spans)
      pytest_log "results/check/ws-spans-test-$at-$sku.log" "$(( $(left) / 3 ))" tests/kernels/test_variants.py \
        tests/kernels/test_planner.py -k cuda_ws; pack
      for tool in memcheck racecheck synccheck; do
        sanitize_log "$tool" "results/sanitizer/variants/$tool-cuda_ws-spans-$at-$sku.txt" "$(( $(left) / 4 ))" \
          cuda_ws --config '{"waves": 0}'
      done; pack
      ours="cuda_ws --config {\"waves\":0} --config {\"waves\":2}"; records="results/bench/ws-spans-$at-$sku.jsonl"
      bench_shapes
      pack ;;
    combine-test)
      log="results/check/combine-test-$at-$sku.log"
      pytest_log "$log" "$(( $(left) / 3 ))" tests/kernels/test_split_combine.py tests/kernels/test_plan_scope.py \
        tests/kernels/test_planner.py; pack
      pytest_log "${log%.log}-oracle.log" "$(left)" tests/kernels/test_variants.py -k "gluon_wgmma_ws or triton_splitkv"
      pack ;;
    combine-bench)
      ours=gluon_wgmma_ws; peers=flash_mla
      for plan in call once; do
        records="results/bench/combine-plan-$plan-$at-$sku.jsonl"
        bench --prefix 131072,32768 --tree 16 --heads 8 --plan $plan
        bench --prefix 4096 --tree 16,64 --heads 8 --plan $plan
        bench --prefix 185000 --tree 64 --heads 8 --plan $plan
        ragged_batches --plan $plan
      done; pack ;;
    crowded)
      crowded_bench() {  # [vk bench flags...]: the three batches whose units plan the crowded allowance changes
        local config='--config {"waves":1} --config {"waves":2} --config {"waves":0,"segment_cost":320}'
        for shape in "--ragged $RAGGED_SIXTEEN --tree 128 --heads 8" "--ragged $RAGGED_SIX --tree 16 --heads 64" \
                     "--ragged 50000$(printf ',3000%.0s' $(seq 11)) --tree 64 --heads 8"; do
          bench_chain "$(( $(left) / 2 ))" "$records" --variants cuda_qreg $config --proxy-for sm_120 $shape "$@"
        done
        tail -n 4 "${records%.jsonl}.txt"
      }
      if [ -n "${OLD:-}" ]; then
        records=$(old_records crowded)
        (export PYTHONPATH="${PYTHONPATH/$PWD/$OLD}" VK_GIT_COMMIT=$OLD_COMMIT; cd "$OLD" && crowded_bench)
      fi
      records="results/bench/crowded-$at-$sku.jsonl"; crowded_bench; pack ;;
    plan-sanitize)
      log="results/sanitizer/variants/memcheck-plan-kernel-$at-$sku.txt"; mkdir -p "$(dirname "$log")"
      command=(compute-sanitizer --tool memcheck --kernel-name kns=_plan_kernel python3 -m pytest -q -p no:cacheprovider
               -rap tests/kernels/test_planner.py)
      { echo "commit ${VK_GIT_COMMIT:-$(git rev-parse HEAD 2>/dev/null)}"; echo "command: ${command[*]}"; } > "$log"
      timeout -k 5 "$(( $(left) / 2 ))" "${command[@]}" >> "$log" 2>&1
      echo "plan kernel memcheck: rc=$? $(grep -h 'ERROR SUMMARY' "$log" | tail -n 1) $(tail -n 1 "$log")"; pack ;;
    sym-test)
      log="results/check/sym-test-$at-$sku.log"
      { echo "commit ${VK_GIT_COMMIT:-$(git rev-parse HEAD 2>/dev/null)}"
        echo "command: python3 scripts/sanitize_variants.py gluon_wgmma_sym"; } > "${log%.log}-smoke.log"
      timeout -k 5 90 python3 -u scripts/sanitize_variants.py gluon_wgmma_sym >> "${log%.log}-smoke.log" 2>&1
      echo "smoke: rc=$? ok=$(grep -c ' ok$' "${log%.log}-smoke.log")"; tail -n 4 "${log%.log}-smoke.log"; pack
      tests=(tests/kernels/test_variants.py -k gluon_wgmma_sym)
      if [ -n "${SYM_FROM:-}" ]; then  # from the SYM_FROM-th test of the suite on (an earlier run passed those before)
        log="${log%.log}-from-$SYM_FROM.log"
        mapfile -t tests < <(python3 -m pytest --collect-only -q -p no:cacheprovider "${tests[@]}" | grep '::' \
                             | tail -n +"$SYM_FROM")
      fi
      pytest_log "$log" "$(left)" -x "${tests[@]}"; pack ;;
    sym-sanitize)
      for tool in memcheck synccheck racecheck; do
        sanitize_log "$tool" "results/sanitizer/variants/$tool-gluon_wgmma_sym-$at-$sku.txt" "$(( $(left) / 2 ))" \
          gluon_wgmma_sym
      done; pack ;;
    sym-bench)
      ours="gluon_wgmma_sym gluon_wgmma_ws"; peers=flash_mla; records="results/bench/sym-$at-$sku.jsonl"
      ragged_batches
      bench --prefix 131072,32768 --tree 16 --heads 8
      bench --prefix 4096,185000 --tree 64 --heads 8
      bench --prefix 185000 --tree 256 --heads 8
      pack ;;
    sym-ab)
      sym_ab_bench() {
        ragged_batches
        bench --prefix 185000 --tree 64 --heads 8
      }
      if [ -n "${OLD:-}" ]; then
        (ours=gluon_wgmma_sym; peers=""; records=$(old_records sym-ab)
         export PYTHONPATH="${PYTHONPATH/$PWD/$OLD}" VK_GIT_COMMIT=$OLD_COMMIT; cd "$OLD" && sym_ab_bench)
      fi
      ours="gluon_wgmma_sym gluon_wgmma_ws"; peers=flash_mla; records="results/bench/sym-ab-$at-$sku.jsonl"
      sym_ab_bench; pack ;;
    sym-heldout)
      ours="gluon_wgmma_sym gluon_wgmma_ws"; peers=flash_mla; records="results/bench/sym-heldout-$at-$sku.jsonl"
      bench --ragged 50000,3000,3000,3000,3000,3000,3000,3000,3000,3000,3000,3000 --tree 64 --heads 8
      bench --ragged $RAGGED_SIX --tree 32 --heads 16
      bench --ragged $RAGGED_EQUAL --tree 64 --heads 8
      bench --prefix 65536 --tree 32 --heads 8
      bench --prefix 16384 --tree 16 --heads 16
      bench --prefix 8192 --tree 64 --heads 8
      bench --prefix 185000 --tree 128 --heads 16
      pack ;;
    sym-counters)
      ours="gluon_wgmma_sym gluon_wgmma_ws"; peers=flash_mla; records="results/bench/sym-counters-$at-$sku.jsonl"
      bench --ragged $RAGGED_SIXTEEN --tree 128 --heads 8 --counters
      bench --ragged $RAGGED_EQUAL --tree 16 --heads 16 --counters
      bench --prefix 185000 --tree 64 --heads 8 --counters
      pack ;;
    timeline|timeline-proxy)
      out="results/bench/short-tree-timeline-$at-$sku.jsonl"; flags=()
      [ $step = timeline-proxy ] && out="${out/timeline-/timeline-proxy-sm_120-}" && flags=(--variant cuda_qreg --proxy-for sm_120)
      timeout -s INT -k 15 "$(left)" python3 scripts/short_tree_timeline.py "${flags[@]}" --out "$out" \
        --shapes "131072,16,8;32768,16,8;4096,64,8" > "${out%.jsonl}.txt" 2>&1
      tail -n 16 "${out%.jsonl}.txt"; pack ;;
    report) python3 -m harness report "$records" --peers --title "The planner beside the peers ($sku)" \
              --out "results/report/scheduler-$sku" > /dev/null 2>&1; pack
            sed -n '/## Ours against the peers/,/## The portable race/p' "results/report/scheduler-$sku.md" | head -n 40 ;;
    *) echo "unknown step $step" >&2 ;;
  esac
done
