#!/usr/bin/env bash
# The switch overlap (experiments/spans/overlap.diff -> ws_overlap.py: the next segment's first tiles and Q
# issued before a segment's epilogue) timed round-robin beside gluon_wgmma_ws on the spans rule and on its units
# rule, each first checked against the oracle at the timed shape (scripts/ab_verify_kernels.py; interleaved
# rounds, because the H200's power cap biases whichever runs second). notes/2026-12-04-spans.md says why.
# Usage (repository root, GPU host): bash experiments/spans/run_ab.sh   -> $OUT/spans-overlap-ab-<gpu>.jsonl
. scripts/gpu_env.sh
patch -s -o experiments/spans/ws_overlap.py verify_kernels/gluon_wgmma_ws.py experiments/spans/overlap.diff \
  || { echo "overlap.diff does not apply: git show $(cat experiments/spans/BASE):verify_kernels/gluon_wgmma_ws.py"; exit 1; }
for shape in "--ragged 185000,4096,32768,131072 --tree 64 --heads 8" \
             "--ragged 65536,65536,65536,65536,65536,65536,65536,65536 --tree 16 --heads 16" \
             "--ragged 64,900,4096,17000,33000,70000,110000,150000 --tree 32 --heads 16" \
             "--prefix 131072 --tree 16 --heads 8" "--prefix 32768 --tree 16 --heads 8" \
             "--prefix 524400 --tree 16 --heads 16" "--prefix 4096 --tree 64 --heads 8"; do
  timeout ${SHAPE_S:-150} python3 scripts/ab_verify_kernels.py $shape --rounds ${ROUNDS:-6} --out "results/bench/spans-overlap-ab-$sku.jsonl" \
    'gluon_wgmma_ws:{"waves": 0}' 'gluon_wgmma_ws:{"waves": 2}' 'file=experiments/spans/ws_overlap.py:{"waves": 0}' \
    2>&1 | grep -v -i warn | tail -n 5
  pack
done
