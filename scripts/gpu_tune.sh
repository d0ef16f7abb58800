#!/usr/bin/env bash
# Tuning run on a GPU host (the issue's H200 run, or the same on an sm_120 card):
#   1. both paged variants over L {4096, 32768, 131072} x T {16, 64, 256}, H = 8 (vk tune);
#   2. an exhaustive measurement of one key, then the tuning-quality replay (vk tune-quality);
#   3. vk tuned --check; results/tuned/ packed into $OUT.
# Needs optuna (wheels in .whl/, see ../shared/gpu/README.md). On an sm_120 machine with network,
# `pip install -e ".[tune,cuda]" && bash scripts/gpu_tune.sh` is the whole procedure.
# Usage (repository root): bash scripts/gpu_tune.sh [configs measured per study, default 16] [seconds, default 560]
# Within the time limit it goes as far as it gets and packs what it did; run it again (with the
# returned results/tuned/optuna.db in place) and it resumes where it stopped: no trial is lost.
trials=${1:-16}
deadline=$(( $(date +%s) + ${2:-560} ))
left() { local s=$(( deadline - $(date +%s) )); echo $(( s > 1 ? s : 1 )); }
. scripts/gpu_env.sh
mkdir -p results/tuned
pack() { tar czf "$OUT/tuned.tgz" results/tuned results/static; }  # only what tuning writes
python3 -m harness static --space --arch "$(python3 -c 'import torch; print("sm_120" if torch.cuda.get_device_capability()[0] >= 12 else "sm_90")')" \
  > results/tuned/static-space.txt 2>&1; tail -n 4 results/tuned/static-space.txt; pack
timeout -s INT -k 15 "$(left)" python3 -m harness tune --variants triton_splitkv cuda_coalesced --prefix 4096,32768,131072 \
  --tree 16,64,256 --heads 8 --trials "$trials" --rep-ms 50 --trial-timeout 120 --no-progress 2>&1 \
  | tee -a results/tuned/tune.txt | tail -n 22; pack
# Exhaustive measurement of one key (every feasible config), then TPE replayed against it.
timeout -s INT -k 15 "$(left)" python3 -m harness tune --variants cuda_coalesced --prefix 32768 --tree 64 --heads 8 --exhaustive \
  --rep-ms 50 --trial-timeout 120 --no-progress >> results/tuned/exhaustive.txt 2>&1; pack
python3 -m harness tune-quality --storage sqlite:///results/tuned/optuna.db \
  --study "cuda_coalesced|$sku|L32768|T64|H8|ps64|bfloat16|exhaustive" | tee results/tuned/quality.txt
python3 -m harness tuned --check; pack
# Ship the winners with the package (variant="auto" reads verify_kernels/tuned/):
#   vk tuned --publish --file results/tuned/$sku.yaml
