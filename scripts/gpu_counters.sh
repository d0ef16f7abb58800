#!/usr/bin/env bash
# Hardware counters beside the timings on the GPU host (issue 26), records under results/ packed into
# $OUT as each step ends:
#   bench:  the quick sweep's long-context rows (L 131072 and 185000, T 64, H 8), every variant and the
#           baseline, timed side by side by graph replay with NVML power sampled over each row, then
#           each row profiled once under ncu (harness/bench/sweeps/counters.yaml, vk bench --counters);
#           one raw ncu CSV kept as the parser's sample;
#   decode: k2-tp8 at 185k, budget 64, triton_ps1 and auto, with power over the run and ncu over one
#           verify step (vk decode --counters).
# Usage (repository root): bash scripts/gpu_counters.sh [bench] [decode]   (default: both)
# Env: DECODE_S (time limit of the decode step, default 330), NEW_TOKENS (default 16).
. scripts/gpu_env.sh
steps=" ${*:-bench decode} "
mkdir -p results/bench results/decode/counters results/ncu results/report
if [[ $steps == *" bench "* ]]; then
  out="results/bench/counters-$sku.jsonl"; rm -f "$out"
  timeout 300 python3 -m harness bench --sweep harness/bench/sweeps/counters.yaml --counters --no-progress \
    --out "$out" > "${out%.jsonl}.txt" 2>&1; echo "bench rc=$?"; tail -n 16 "${out%.jsonl}.txt" | cut -c1-200
  python3 -m harness report "$out" --out "results/report/counters-$sku" --title "Counters beside timings" \
    > /dev/null 2>&1
  # The parser's sample (tests/harness/measure/data): one raw CSV of cuda_ws at 131072 / 64 / 8.
  python3 - > results/ncu/raw-sample-cuda_ws-131072-64-8-$sku.csv 2>/dev/null <<'EOF'
import subprocess
from harness.bench.sweep import BenchPoint, counters_argv
from harness.measure.counters import METRICS, STALL_METRICS, ncu_command
argv = counters_argv(BenchPoint("cuda_ws", 131072, 64, 8, 64), 0)
done = subprocess.run(ncu_command(argv, [*METRICS.values(), *STALL_METRICS.values()]), capture_output=True, text=True)
print(done.stdout, end="")
EOF
  pack
fi
if [[ $steps == *" decode "* ]]; then
  out="results/decode/counters/decode-counters-k2-tp8-$sku.jsonl"; rm -f "$out"
  timeout "${DECODE_S:-330}" python3 -m harness decode --preset k2-tp8 --context 185000 --budget 64 \
    --variants triton_ps1 auto --new-tokens "${NEW_TOKENS:-16}" --drafter oracle --counters --no-progress \
    --out "$out" 2>&1 | grep -v "^\s*warnings.warn\|UserWarning" | tail -n 8
  python3 - "$out" <<'EOF'
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    step = (r.get("counters") or {}).get("step") or {}
    power = r.get("power") or {}
    print(r.get("variant"), r.get("median_step_ms"), "tensor%", step.get("tensor_pipe_pct"), "dram%",
          step.get("dram_pct"), "W", power.get("power_w_median"), power.get("power_w_peak"), "mem%",
          power.get("mem_util_pct_median"), (r.get("counters") or {}).get("reason", "")[:200])
EOF
  pack
fi
