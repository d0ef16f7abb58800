#!/usr/bin/env bash
# Arch tables for variant="auto" on GPUs this project has no measured table for (issue 35), from one GPU
# host: vk tune --constrain-to ARCH times only the configs ARCH's static model admits, by graph replay, and
# writes them apart (results/tuned/<gpu>-proxy-<ARCH>.yaml, proxy_for: ARCH; studies in
# results/tuned/optuna-proxy-<ARCH>.db). `vk tuned --publish --file` that table ships it as
# verify_kernels/tuned/proxy-<ARCH>.yaml, which every ARCH card without its own table reads.
#   sm_90  gluon_wgmma_ws (the fastest kernel there): L 4096 / 32768 / 131072 x T 16 / 64 / 256 x H 8 / 16, two ragged
#          batches (one long request among short ones; eight mixed lengths) x T 32 / 64 x H 8 / 16, fp16 at two keys
#   sm_90-sym  gluon_wgmma_sym at sm_90's bf16 keys above, beside gluon_wgmma_ws's records in the same table: the
#          symmetric kernel is faster on long and ragged work, ws on short trees (notes/2026-12-07-symmetric-warpgroups.md)
#   sm_90-pair  both at those bf16 keys, a tree size at a time (a call cut short leaves pairs timed at the same
#          sources, which `vk tuned --publish` requires of a cross-variant pick)
#   sm_89  the kernels that run without bulk copies or wgmma (triton_splitkv, cuda_coalesced): L 4096 / 32768 /
#          131072 x T 16 / 64 / 256 x H 8, fp16 at two keys
#   sm_120 fp16 only (bf16 is scripts/gpu_proxy_tune.sh's): cuda_qreg and cuda_ws, L 4096 / 32768 / 131072 x
#          T 16 / 64 x H 8
#   sm_120-ragged  cuda_qreg (bf16; its planner keys waves and segment_cost in the space) on three ragged batches
#          (one long request among short ones, eight mixed lengths, sixteen with one of 262144) x T 32 / 128 x H 8:
#          without a ragged key auto matches a batch to a single request's record, whose units rule (waves 2) ran a
#          sixteen-request batch 4x slower than the spans rule as the proxy (bench/portable-gaps-proxy-sm_120-*)
# Usage (repository root): [TRIALS=configs per study, default 14] bash scripts/gpu_arch_tables.sh SECONDS ARCH[:SECONDS]...
. scripts/gpu_env.sh
deadline=$(( $(date +%s) + ${1:?SECONDS} )); shift
trials=${TRIALS:-14}
mkdir -p results/tuned
for item in "$@"; do
  arch=${item%%:*}; end=$deadline
  [ "$arch" != "$item" ] && end=$(( $(date +%s) + ${item#*:} < deadline ? $(date +%s) + ${item#*:} : deadline ))
  left() { local s=$(( end - $(date +%s) )); echo $(( s > 1 ? s : 1 )); }
  log="results/tuned/proxy-$arch-tune-$sku.txt"
  tune() {  # VARIANTS, then vk tune's key flags
    local variants=$1; shift
    timeout -s INT -k 15 "$(left)" python3 -m harness tune --constrain-to "$arch" --variants $variants --trials "$trials" \
      --timing graph --rep-ms 50 --trial-timeout 120 --storage "sqlite:///results/tuned/optuna-proxy-$arch.db" \
      --no-progress "$@" >> "$log" 2>&1
    pack
  }
  echo "== $arch ($(left) s)"
  case $arch in
    sm_90)
      tune gluon_wgmma_ws --prefix 4096,32768,131072 --tree 16,64,256 --heads 8,16
      tune gluon_wgmma_ws --ragged $RAGGED_LONG_AMONG_SHORT --ragged $RAGGED_MIXED \
        --tree 32,64 --heads 8,16
      tune gluon_wgmma_ws --dtype float16 --prefix 32768,131072 --tree 64 --heads 8 ;;
    sm_90-sym)
      arch=sm_90
      tune gluon_wgmma_sym --prefix 4096,32768,131072 --tree 16,64,256 --heads 8,16
      tune gluon_wgmma_sym --ragged $RAGGED_LONG_AMONG_SHORT --ragged $RAGGED_MIXED --tree 32,64 --heads 8,16 ;;
    sm_90-pair)
      arch=sm_90
      for tree in 16 64 256; do
        tune "gluon_wgmma_ws gluon_wgmma_sym" --prefix 4096,32768,131072 --tree $tree --heads 8,16
      done
      for tree in 32 64; do
        tune "gluon_wgmma_ws gluon_wgmma_sym" --ragged $RAGGED_LONG_AMONG_SHORT --ragged $RAGGED_MIXED --tree $tree \
          --heads 8,16
      done ;;
    sm_89)
      for variant in triton_splitkv cuda_coalesced; do
        timeout -k 5 "$(( $(left) / 3 ))" python3 scripts/warm_kernel_cache.py "$variant" sm_89 | tail -n 2
      done
      tune "triton_splitkv cuda_coalesced" --prefix 4096,32768,131072 --tree 16,64,256 --heads 8
      tune "triton_splitkv cuda_coalesced" --dtype float16 --prefix 32768,131072 --tree 64 --heads 8 ;;
    sm_120)
      for variant in cuda_qreg cuda_ws; do
        timeout -k 5 "$(( $(left) / 3 ))" python3 scripts/warm_kernel_cache.py "$variant" sm_120 --dtype float16 | tail -n 2
      done
      tune "cuda_qreg cuda_ws" --dtype float16 --prefix 4096,32768,131072 --tree 16,64 --heads 8 ;;
    sm_120-ragged)
      arch=sm_120
      timeout -k 5 "$(( $(left) / 4 ))" python3 scripts/warm_kernel_cache.py cuda_qreg sm_120 | tail -n 2
      tune cuda_qreg --ragged $RAGGED_LONG_AMONG_SHORT --ragged $RAGGED_MIXED --ragged $RAGGED_SIXTEEN \
        --tree 32,128 --heads 8 ;;
    *) echo "unknown arch $arch" >&2 ;;
  esac
  grep -E "^(gluon|triton|cuda)" "$log" | tail -n 40
done
