# The preamble every GPU-host script sources (repository root): wheels that travelled in .whl/
# (optuna and friends, ../shared/gpu/README.md), the import path, $OUT, the GPU's SKU, and pack,
# which tars results/ into $OUT after each step so a run cut short keeps what it finished.
#   . scripts/gpu_env.sh
# Records carry the checkout's git commit; where the host's copy of .git is stale, start the call
# with VK_GIT_COMMIT=<the commit sent> (harness/measure/environment.py).
set -uo pipefail
if [ -d .whl ] && ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site:$PWD
else
  export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
fi
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; export OUT
sku=$(python3 -c "from harness.measure.environment import gpu_sku; print(gpu_sku())")
# Issue 33's ragged batches, one place for every device script: one long request among short ones, eight
# mixed lengths, eight equal ones (vk bench / vk tune --ragged).
RAGGED_LONG_AMONG_SHORT=185000,4096,32768,131072
RAGGED_MIXED=64,900,4096,17000,33000,70000,110000,150000
RAGGED_EQUAL=65536,65536,65536,65536,65536,65536,65536,65536
# and two more the spans rule was checked on: sixteen requests with one of 262144 (T 128), six with H 64 (T 16).
RAGGED_SIXTEEN=262144,0,100,1000,3000,5000,9000,20000,40000,700,64,2048,4096,12000,30000,60000
RAGGED_SIX=100000,50000,25000,12000,6000,3000
pack() { tar czf "$OUT/results.tgz" "${@:-results}"; }
# sass_samples REPORT OUT.csv.xz [ncu -i flags]: a report's stall samples per SASS instruction (`vk stalls` reads them)
sass_samples() {
  ncu -i "$1" "${@:3}" --page source --csv --print-source sass 2> /dev/null | xz -6 > "$2"
}
# One `vk bench` call the way the device scripts time side by side: chain trees (causal-only peers run them),
# page 64, graph replay, 100 ms a point, resumable; records to OUT (JSONL), the table to OUT's .txt; cut at SECONDS.
#   bench_chain SECONDS OUT [vk bench flags...]
bench_chain() {
  local seconds=$1 out=$2; shift 2
  timeout -s INT -k 15 "$seconds" python3 -m harness bench --no-progress --resume --tree-kind chain --page-size 64 \
    --mode graph --rep-ms 100 --out "$out" "$@" >> "${out%.jsonl}.txt" 2>&1
}
# compute-sanitizer's kernel filter for TOOL: the verify kernels only (their names hold "verify"), but initcheck
# instruments every kernel: it counts memory as written only by kernels it instruments, and the plan the
# verify kernels read is written by the planner's Triton kernel.   compute-sanitizer --tool T $(sanitizer_only T) ...
sanitizer_only() { [ "$1" = initcheck ] || echo "--kernel-name kns=verify"; }
# One pytest run logged the way results/ keeps test logs: the commit and the command first, then every test's id
# and outcome (-rap), cut at SECONDS; prints the log's last line and its first failures.
#   pytest_log LOG SECONDS [pytest arguments...]
pytest_log() {
  local log=$1 seconds=$2 status; shift 2
  mkdir -p "$(dirname "$log")"
  { echo "commit ${VK_GIT_COMMIT:-$(git rev-parse HEAD 2>/dev/null)}"
    echo "command: python3 -m pytest -q -p no:cacheprovider -rap $(printf '%q ' "$@")"; } > "$log"
  timeout -k 10 "$seconds" python3 -m pytest -q -p no:cacheprovider -rap "$@" >> "$log" 2>&1; status=$?
  tail -n 1 "$log"; grep -E "^(FAILED|ERROR)" "$log" | head -n 5
  return $status
}
# One compute-sanitizer run of scripts/sanitize_variants.py, logged the same way (commit, command), cut at SECONDS;
# prints the tool's summary and how many shapes matched the oracle.
#   sanitize_log TOOL LOG SECONDS [sanitize_variants.py arguments...]
sanitize_log() {
  local tool=$1 log=$2 seconds=$3 status; shift 3
  mkdir -p "$(dirname "$log")"
  { echo "commit ${VK_GIT_COMMIT:-$(git rev-parse HEAD 2>/dev/null)}"
    echo "command: compute-sanitizer --tool $tool $(sanitizer_only "$tool") python3 scripts/sanitize_variants.py $(printf '%q ' "$@")"; } > "$log"
  timeout -k 5 "$seconds" compute-sanitizer --tool "$tool" $(sanitizer_only "$tool") python3 scripts/sanitize_variants.py "$@" \
    >> "$log" 2>&1; status=$?
  echo "$tool $*: rc=$status $(grep -hE 'ERROR SUMMARY|RACECHECK SUMMARY' "$log" | tail -n 1) ok=$(grep -c ' ok$' "$log")"
}
