#!/usr/bin/env bash
# The split-K GEMM of the decode model on the GPU host, in one go:
#   1. its gpu-marked tests (k2-tp8 shapes in bf16 against float64 and cuBLAS, graph replay, with PDL too);
#   2. scripts/tune_splitk.py --pdl: every config per weight GEMM and row block beside cuBLAS, weights
#      cold; the table goes to $OUT and into results/tuned/ of this checkout, so the next steps use it;
#   3. the verify-forward profile at $CONTEXT, budget 64: cuBLAS GEMMs, then split-K GEMMs with PDL;
#   4. vk decode at $CONTEXT, budget 64, auto, the same two (same run, lossless checks).
# Usage (repository root): bash scripts/gpu_splitk.sh   Env: TUNE_S (default 300), ROWS (default 64,1,32),
# TUNE=0 / PROFILE=0 / DECODE=0 skip steps 2 / 3 / 4, CONTEXT (default 185000).
set -uo pipefail
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
context=${CONTEXT:-185000}
sku=$(python3 -c "from harness.measure.environment import gpu_sku; print(gpu_sku())")
python3 -c "import torch, torch._inductor.config as c; print('torch', torch.__version__, 'inductor enable_pdl:', hasattr(c.triton, 'enable_pdl'))"
timeout 120 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_splitk_linear.py 2>&1 | tail -n 4 \
  | tee "$OUT/pytest-splitk-gpu-$sku.txt"
if [ "${TUNE:-1}" = 1 ]; then
  timeout "${TUNE_S:-300}" python3 scripts/tune_splitk.py --pdl --rows "${ROWS:-64,1,32}" --no-progress \
    --table "$OUT/splitk-linear-$sku.json" --out "$OUT/splitk-linear-$sku.jsonl" 2>&1 | tail -n 20
  mkdir -p results/tuned && cp "$OUT/splitk-linear-$sku.json" results/tuned/
fi
variants=("--gemm cublas" "--gemm splitk --pdl")
if [ "${PROFILE:-1}" = 1 ]; then
  for flags in "${variants[@]}"; do
    name=$(echo "$flags" | tr -d ' -' )
    timeout 150 python3 scripts/profile_verify.py --context "$context" --compile-layers $flags \
      --out "$OUT/profile-verify-$name-$sku.json" 2>&1 | grep -v "warn\|name, tuned" | head -n 16
  done
fi
if [ "${DECODE:-1}" = 1 ]; then
  for flags in "${variants[@]}"; do
    timeout 200 python3 -m harness decode --preset k2-tp8 --context "$context" --budget 64 --compile-layers $flags \
      --batch-invariant-greedy --variants auto --new-tokens 48 --drafter oracle --check-lossless --no-progress \
      --out "$OUT/decode-gemm-k2-tp8-$sku.jsonl" 2>&1 | grep -v "^\s*warnings.warn\|UserWarning" | tail -n 4
  done
fi
true
