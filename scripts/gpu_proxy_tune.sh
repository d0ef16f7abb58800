#!/usr/bin/env bash
# Proxy tuning for sm_120 on another GPU (issue 21): vk tune --constrain-to sm_120 searches only the
# configs the sm_120 static model admits (shared memory <= 99 KB, registers, no spills) and times them
# here, by graph replay; studies and winners live apart (results/tuned/<gpu>-proxy-sm_120.yaml,
# records proxy_for: sm_120). Then the proxy winners beside the predicted sm_120 table, per key.
# The feasible configs compile first, in parallel (scripts/warm_kernel_cache.py); a trial budget at least
# the feasible count measures the whole space (the study is then the proxy measurement the predictor's
# validation reads). Needs optuna (wheels in .whl/). VARIANTS=, PREFIX=, TREE=, HEADS= narrow the keys. The
# tune's log and the comparison are appended to files named for the GPU (a run on another card never overwrites them).
# Usage (repository root):
#   bash scripts/gpu_proxy_tune.sh [configs per study, default 9] [seconds, default 400]
trials=${1:-9}
deadline=$(( $(date +%s) + ${2:-400} ))
left() { local s=$(( deadline - $(date +%s) )); echo $(( s > 1 ? s : 1 )); }
. scripts/gpu_env.sh
mkdir -p results/tuned results/predict
table="results/tuned/$sku-proxy-sm_120.yaml"
for variant in ${VARIANTS:-cuda_ws}; do
  timeout -k 5 "$(left)" python3 scripts/warm_kernel_cache.py "$variant" sm_120 | tail -n 3
done
timeout -s INT -k 15 "$(left)" python3 -m harness tune --constrain-to sm_120 --variants ${VARIANTS:-cuda_ws} \
  --prefix "${PREFIX:-4096,32768,131072,185000}" --tree "${TREE:-16,64,256}" --heads "${HEADS:-8,16}" --trials "$trials" --timing graph --rep-ms 50 \
  --trial-timeout 120 --storage sqlite:///results/tuned/optuna-proxy-sm_120.db --no-progress 2>&1 \
  | tee -a "results/tuned/proxy-sm_120-tune-$sku.txt" | tail -n 16
python3 -m harness tuned --compare "$table" verify_kernels/tuned/predicted-sm_120.yaml \
  >> "results/predict/proxy-vs-predicted-sm_120-$sku.txt" 2>&1; tail -n 24 "results/predict/proxy-vs-predicted-sm_120-$sku.txt"
pack
