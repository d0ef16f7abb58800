#!/usr/bin/env bash
# compute-sanitizer on every GPU variant in one call (issue 25), each log under results/sanitizer/
# and packed into $OUT as it ends; the shapes are scripts/sanitize_variants.py's six adversarial ones.
#   probe: racecheck of a kernel that is only Triton's warp_specialize (scripts/racecheck_ws_probe.py);
#   ws:    racecheck of gluon_wgmma_ws and of it with its P hand-off behind CTA barriers, counted and
#          not (experiments/sanitizer/cta_handoff*.diff); synccheck of it and of its version before the
#          cp.async arrivals counted one per thread (experiments/sanitizer/ws_before_noinc.py, written
#          from git by `git show 30a4190:verify_kernels/gluon_wgmma_ws.py`, carried where .git is stale);
#   race:  racecheck of triton_ps1 (the other variants' logs: results/sanitizer/);
#   init:  initcheck of every variant;
#   check: gluon_wgmma_ws's gpu-marked oracle tests, and its time beside its before-noinc version
#          (scripts/ab_verify_kernels.py, graph replay, four shapes; results/ab/).
# Usage (repository root): bash scripts/gpu_sanitize.sh [probe] [ws] [race] [init] [check]   (default: all)
. scripts/gpu_env.sh
steps=" ${*:-probe ws race init check} "
dir=results/sanitizer/variants; mkdir -p "$dir"
for diff in experiments/sanitizer/*.diff; do  # the patched kernels (git-ignored; carried when the host lacks patch)
  command -v patch >/dev/null || break
  patch -s -o "$(sed -n 's/^+++ \([^ \t]*\).*/\1/p' "$diff")" "$(sed -n 's/^--- \([^ \t]*\).*/\1/p' "$diff")" \
    "$diff" || exit 1  # in name order: a patch's base (its --- line) is the kernel or an earlier output
done
before_file=experiments/sanitizer/ws_before_noinc.py
if [ ! -s "$before_file" ]; then  # never leave an empty file behind: a later run would load it
  git show 30a4190:verify_kernels/gluon_wgmma_ws.py > "$before_file.tmp" && mv "$before_file.tmp" "$before_file" || {
    rm -f "$before_file.tmp"; echo "gpu_sanitize: no 30a4190 in this .git: carry $before_file" >&2; exit 1; }
fi
cta=file=experiments/sanitizer/ws_cta_handoff.py@gluon_wgmma_ws
before=file=experiments/sanitizer/ws_before_noinc.py@gluon_wgmma_ws
summary() {  # tool log: one line
  echo "$1 $(basename "$2" "-$sku.txt"): rc=$3 $(grep -hE 'ERROR SUMMARY|RACECHECK SUMMARY' "$2" | tail -n 1 | \
    sed 's/=* //') ok=$(grep -c ' ok$' "$2")"
}
sanitize() {  # tool label seconds target...: compute-sanitizer on the verify kernels of the targets (gpu_env.sh)
  local tool=$1 label=$2 seconds=$3; shift 3
  local log="$dir/$tool-$label-$sku.txt"
  timeout "$seconds" compute-sanitizer --tool "$tool" $(sanitizer_only "$tool") \
    python3 scripts/sanitize_variants.py "$@" > "$log" 2>&1
  summary "$tool" "$log" $?
}
if [[ $steps == *" probe "* ]]; then
  log="$dir/racecheck-ws-probe-$sku.txt"
  timeout 60 compute-sanitizer --tool racecheck python3 scripts/racecheck_ws_probe.py > "$log" 2>&1
  summary racecheck "$log" $?; grep -E "Race reported|Access at|racecheck_ws_probe.py" "$log" | head -n 6; pack
fi
if [[ $steps == *" ws "* ]]; then
  sanitize racecheck gluon_wgmma_ws 120 gluon_wgmma_ws; pack
  sanitize racecheck gluon_wgmma_ws-cta-handoff 120 "$cta"; pack
  sanitize racecheck gluon_wgmma_ws-cta-handoff-nocount 120 "${cta%.py@*}_nocount.py@gluon_wgmma_ws"; pack
  sanitize synccheck gluon_wgmma_ws 120 gluon_wgmma_ws; pack
  sanitize synccheck gluon_wgmma_ws-before-noinc 120 "$before"; pack
fi
if [[ $steps == *" race "* ]]; then
  sanitize racecheck triton_ps1 90 triton_ps1; pack
fi
if [[ $steps == *" init "* ]]; then
  for name in triton_ps1 triton_splitkv cuda_coalesced cuda_ws gluon_wgmma_ws; do
    sanitize initcheck "$name" 100 "$name"
  done; pack
fi
if [[ $steps == *" check "* ]]; then
  mkdir -p results/tests results/ab
  pytest_log "results/tests/pytest-gpu-gluon_wgmma_ws-noinc-$sku.txt" 240 -m gpu tests/kernels/test_variants.py \
    -k "gluon_wgmma_ws or deterministic"
  ab="results/ab/gluon_wgmma_ws-noinc-$sku.jsonl"; rm -f "$ab"
  for shape in "185000 64 64" "131072 256 64" "4096 16 64" "32768 64 16"; do
    read -r prefix tree page <<< "$shape"
    timeout 120 python3 scripts/ab_verify_kernels.py --prefix "$prefix" --tree "$tree" --page-size "$page" \
      --rounds 8 --out "$ab" gluon_wgmma_ws "file=experiments/sanitizer/ws_before_noinc.py" 2>&1 | tail -n 3
  done; pack
fi
