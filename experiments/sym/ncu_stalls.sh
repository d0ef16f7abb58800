#!/usr/bin/env bash
# Where gluon_wgmma_sym's warps wait, beside gluon_wgmma_ws and FlashMLA (issue 33): each kernel once under ncu
# (base clock) on the 4-request batch (185000, 4096, 32768, 131072; T 64, H 8; chain trees), with the warp-state
# sections and the per-instruction stall samples (SourceCounters).
#   -> results/ncu/sym-stalls-at-<commit>-<gpu>.txt (sections), .sass-<kernel>.csv.xz (stall samples per SASS
#      instruction; `vk stalls` sums them per mbarrier)
# Usage (GPU host, repository root): [BATCH=L,L.../T/H] bash experiments/sym/ncu_stalls.sh
#   BATCH: another batch (e.g. 32768/16/8, a short tree), its records named -L-T-H after the commit
. scripts/gpu_env.sh
. scripts/gpu_peers_env.sh
at="at-$(echo "${VK_GIT_COMMIT:-$(git rev-parse HEAD 2>/dev/null)}" | cut -c1-7)"
out=results/ncu/sym-stalls-$at-$sku; mkdir -p results/ncu
[ -n "${BATCH:-}" ] && out=results/ncu/sym-stalls-$at-$(echo "$BATCH" | tr ',/' '--')-$sku
rep=/tmp/sym-stalls; rm -f "$rep.ncu-rep"
{ echo "# commit ${VK_GIT_COMMIT:-$(git rev-parse HEAD 2>/dev/null)} (ncu locks the SM clock at base)"
  echo "# command: ${BATCH:+BATCH=$BATCH }bash experiments/sym/ncu_stalls.sh"; } > "$out.txt"
timeout -k 5 ${NCU_S:-240} ncu --kernel-name regex:"sym_verify|ws_verify|mla" --section SpeedOfLight --section WarpStateStats \
  --section SchedulerStats --section SourceCounters --import-source yes -o "$rep" python3 - "${BATCH:-185000,4096,32768,131072/64/8}" >> "$out.txt" 2>&1 <<'PY'
import sys

import torch

from harness.bench.peers import PEERS
from verify_kernels import make_problem, verify_attention

lengths, tree_nodes, heads = sys.argv[1].split("/")
problem = make_problem([int(n) for n in lengths.split(",")], int(tree_nodes), int(heads), page_size=64, tree="chain",
                       device="cuda", seed=1)
for label in ("gluon_wgmma_sym", "gluon_wgmma_ws", "flash_mla"):
    print(label, flush=True)
    if label == "flash_mla":
        PEERS["flash_mla"](problem)()
    else:
        verify_attention(*problem.arguments(), **problem.kwargs(), variant=label)
    torch.cuda.synchronize()
PY
echo "ncu rc=$?"
ncu -i "$rep.ncu-rep" --page details >> "$out.txt" 2>&1
grep -hE '^  [a-zA-Z_]|Duration|Issued Ipc|No Eligible|Warp Cycles Per Issued|Active Warps' "$out.txt" | head -n 40
for kernel in sym_verify ws_verify mla; do
  sass_samples "$rep.ncu-rep" "$out.sass-$kernel.csv.xz" --kernel-name regex:"$kernel"
  echo "$kernel: $(xz -dc "$out.sass-$kernel.csv.xz" | wc -l) SASS rows"
done
pack
python3 -m harness stalls --top 8 "$out".sass-{sym_verify,ws_verify}.csv.xz  # the waits per mbarrier
