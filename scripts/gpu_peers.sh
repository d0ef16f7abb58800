#!/usr/bin/env bash
# The peers side by side (issue 22) on the GPU host. Installs what travelled in .peers/:
#   .peers/flashinfer/ (python scripts/slim_flashinfer.py): FlashInfer 0.7.x slimmed to its MLA path
#   .peers/flash_mla/flash_mla-sm90.tar.xz.* (scripts/build_flash_mla.sh build): FlashMLA, built
#   .peers/flashinfer/jit-cache.tar.xz.* (written to $OUT by an earlier run): FlashInfer's compiled kernels
# then runs the steps named, in order, each with a share of the seconds given:
#   build   start the FlashMLA build in the background (its archive and log land in $OUT)
#   smoke   one small chain problem through every peer and cuda_ws (compiles FlashInfer's kernels)
#   chain   vk bench --sweep harness/bench/sweeps/peers.yaml          -> results/bench/peers-<gpu>.jsonl
#   random  vk bench --sweep harness/bench/sweeps/peers-random.yaml   -> the same file
#   page1   vk bench --sweep harness/bench/sweeps/peers-page1.yaml    -> the same file
#   report  vk report --peers                                         -> results/report/peers-<gpu>.*
#   wait    wait for the background build (a build started by an earlier invocation of this call too)
# Usage (repository root): bash scripts/gpu_peers.sh SECONDS STEP[:SECONDS]...
. scripts/gpu_env.sh
export XZ_OPT=-T0
deadline=$(( $(date +%s) + ${1:?SECONDS} )); shift
. scripts/gpu_peers_env.sh
save_jit() { rm -f "$OUT"/jit-cache.tar.xz.*; tar -cJf - -C $FLASHINFER_WORKSPACE_BASE .cache 2>/dev/null \
  | split -b 15m -d -a 1 - "$OUT/jit-cache.tar.xz."; }
records="results/bench/peers-$sku.jsonl"; mkdir -p results/bench results/report
for item in "$@"; do
  step=${item%%:*}; end=$deadline  # STEP:SECONDS caps one step
  [ "$step" != "$item" ] && end=$(( $(date +%s) + ${item#*:} < deadline ? $(date +%s) + ${item#*:} : deadline ))
  left() { local s=$(( end - $(date +%s) )); echo $(( s > 1 ? s : 1 )); }
  echo "== $step ($(left) s)"
  case $step in
    build) { bash scripts/build_flash_mla.sh build "$OUT"; echo "rc $?"; } > "$OUT/flash_mla-build.log" 2>&1 & ;;
    smoke) timeout -k 10 "$(left)" python3 -m harness bench --no-progress --variants cuda_ws \
             --peers flash_mla flashinfer_fa2 flashinfer_fa3 sdpa_gathered --tree-kind chain --prefix 4100 \
             --tree 16 --heads 8 --mode graph --rep-ms 50 --out "results/bench/peers-smoke-$sku.jsonl" 2>&1; pack
           save_jit ;;
    chain|random|page1)
      sweep=harness/bench/sweeps/peers.yaml; [ $step = chain ] || sweep=harness/bench/sweeps/peers-$step.yaml
      timeout -s INT -k 15 "$(left)" python3 -m harness bench --no-progress --resume --sweep $sweep --out "$records" \
        >> "results/bench/peers-$step-$sku.txt" 2>&1
      tail -n 5 "results/bench/peers-$step-$sku.txt"; pack; save_jit ;;
    report) python3 -m harness report "$records" --peers --title "Peers side by side ($sku)" \
              --out "results/report/peers-$sku" > /dev/null 2>&1; pack
            sed -n '/## Ours against the peers/,$p' "results/report/peers-$sku.md" | head -n 80 ;;
    wait) while ! grep -q '^rc ' "$OUT/flash_mla-build.log" 2>/dev/null && [ "$(left)" -gt 2 ]; do sleep 2; done
          tail -n 5 "$OUT/flash_mla-build.log"
          # Installed at once, so the steps after this one (chain) run it.
          unpack "$OUT/flash_mla-sm90.tar.xz" /tmp/site ;;
    *) echo "unknown step $step" >&2 ;;
  esac
done
