#!/usr/bin/env bash
# What slows the decode step's host phases on the GPU host: k2-tp8, auto, budget 64, at 185k and
# 4k, once as vk decode runs and once without Inductor's compile workers and with one torch CPU
# thread (scripts/decode_host_diag.py), each process's records with this thread's and the whole
# process's CPU time. Records under $OUT. Usage (repository root): bash scripts/gpu_host_diag.sh [s per run]
set -uo pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
sku=$(python3 -c "from harness.measure.environment import gpu_sku; print(gpu_sku())")
for mode in default quiet; do
  timeout "${1:-150}" python3 scripts/decode_host_diag.py "$mode" --preset k2-tp8 --context 185000,4096 --budget 64 \
    --compile-layers --batch-invariant-greedy --variants auto --new-tokens 48 --drafter oracle --check-lossless \
    --no-progress --out "$OUT/decode-host-diag-$mode-k2-tp8-$sku.jsonl" 2>&1 \
    | grep -v "warnings.warn\|UserWarning" | tail -n 4
done
python3 - "$OUT" <<'PY'
import glob, json, statistics, sys
for path in sorted(glob.glob(sys.argv[1] + "/decode-host-diag-*.jsonl")):
    for line in open(path):
        r = json.loads(line)
        steps = r["steps_detail"]
        host = statistics.median(s["wall_ms"] - s["phases_ms"]["verify"] for s in steps)
        wall = statistics.median(sum(s["phases_ms"][p] for p in ("draft", "tree", "mask")) for s in steps)
        cpu = statistics.median(s["host_cpu_ms"] for s in steps)
        print(path.split("diag-")[1].split("-")[0], r["context"], f"step {r['median_step_ms']:.2f}",
              f"step-verify {host:.3f}", f"draft+tree+mask wall {wall:.3f} cpu {cpu:.3f}", r["host_cpu"])
PY
