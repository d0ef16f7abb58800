#!/usr/bin/env bash
# The end-to-end DDTree decode loop on the GPU host (issue 7), in one go:
#   1. the gpu-marked decode tests (tiny preset: graph replay == eager, per variant);
#   2. k2-tp8 at context 4k / 32k / 128k / 185k, budget 64, oracle drafter, triton_ps1 and auto
#      (the tuned winner) in the same run, tokens compared with plain greedy decoding: with the
#      defaults below, the README's headline command (draft, tree and mask on the device, compiled
#      layers, greedy also padded to the budget);
#   3. the budget sweep 16..512 at 32k and 128k with auto.
# Records (JSONL, one per run, appended as each run ends) go to $OUT; `vk decode-report` turns them
# into the table and plots under results/decode/.
# Usage (repository root): bash scripts/gpu_decode.sh [new tokens per run, default 48] [skip-tests]
# Env: MAIN_S / SWEEP_S time limits (0 skips that part), CONTEXTS (default 185000,131072,32768,4096),
# SWEEP_CONTEXTS (default 131072,32768),
# COMPILE=1 (default) passes --compile-layers (torch.compile around attention in every layer),
# BATCH_INVARIANT=1 (default) passes --batch-invariant-greedy (also compare with greedy padded to the budget),
# DRAFT_ON=device (default; or host) where the draft, tree and mask are built.
# Longest contexts first, so a run cut by its time limit loses the cheap rows.
. scripts/gpu_env.sh
new=${1:-48}
main_s=${MAIN_S:-300}; sweep_s=${SWEEP_S:-170}; contexts=${CONTEXTS:-185000,131072,32768,4096}
sweep_contexts=${SWEEP_CONTEXTS:-131072,32768}
compile=(--draft-on "${DRAFT_ON:-device}"); [ "${COMPILE:-1}" = 1 ] && compile+=(--compile-layers)
[ "${BATCH_INVARIANT:-1}" = 1 ] && compile+=(--batch-invariant-greedy)
[ "${2:-}" = skip-tests ] || pytest_log "$OUT/pytest-decode-gpu-$sku.txt" 100 -m gpu tests/decode
[ "$main_s" = 0 ] || timeout "$main_s" python3 -m harness decode --preset k2-tp8 --context "$contexts" --budget 64 \
  "${compile[@]}" --variants triton_ps1 auto --new-tokens "$new" --drafter oracle --check-lossless --no-progress \
  --out "$OUT/decode-k2-tp8-$sku.jsonl" 2>&1 | grep -v "^\s*warnings.warn\|UserWarning" | tail -n 14
[ "$sweep_s" = 0 ] || timeout "$sweep_s" python3 -m harness decode --preset k2-tp8 --context "$sweep_contexts" \
  --budget 16,32,64,128,256,512 "${compile[@]}" --variants auto --new-tokens "$new" --drafter oracle --check-lossless --no-progress \
  --out "$OUT/decode-budget-k2-tp8-$sku.jsonl" 2>&1 | grep -v "^\s*warnings.warn\|UserWarning" | tail -n 16
