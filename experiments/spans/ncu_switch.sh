#!/usr/bin/env bash
# Does a CTA of the planner's spans rule lose time switching between requests (notes/2026-12-04-spans.md)?
# gluon_wgmma_ws's kernels timed alone by ncu (base clock) on ragged batches against one request of the same tiles.
#   cost  8 x 65536 (T 16, H 16) against one 524400, and the 4-request batch (T 64, H 8) against one 353000;
#         spans (waves 0) and units (waves 2)                    -> results/ncu/spans-switch-<gpu>.csv
#   tail  T 16, H 16, 8217 tiles, spans: A three requests on span boundaries, whole last tiles; B boundaries
#         inside spans (two CTAs switch); E on boundaries, partial last tiles; C one request
#                                                                  -> results/ncu/spans-switch-vs-tail-<gpu>.csv
#   sections  A and C of tail, then cost's four (spans only) with ncu's sections (stalls, local-memory requests),
#         and the cubins Triton built for them (the batch's power of two is a constant: spills differ by batch)
#                                              -> results/ncu/spans-sections-<gpu>.txt, $OUT/cubins/
#   peers  the same sections of gluon_wgmma_ws and FlashMLA's kernels (chain trees) on the 4-request batch (T 64,
#         H 8) and on one request of its tiles (installs the peers that travelled in .peers/)
#                                              -> results/ncu/spans-vs-flash_mla-<gpu>.txt
# Usage (GPU host, repository root): bash experiments/spans/ncu_switch.sh cost|tail|sections|peers [ncu flags...]
. scripts/gpu_env.sh
case=${1:?cost, tail, sections or peers}; shift
flags=("$@"); [ ${#flags[@]} = 0 ] && flags=(--metrics gpu__time_duration.sum --csv)
out=results/ncu/spans-$([ "$case" = cost ] && echo switch || echo switch-vs-tail)-$sku.csv; mkdir -p results/ncu
kernels="ws_verify|combine|plan"
if [ "$case" = sections ] || [ "$case" = peers ]; then
  flags=(--section SpeedOfLight --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis)
  out=results/ncu/spans-sections-$sku.txt; export TRITON_CACHE_DIR=/tmp/triton-sections; rm -rf "$TRITON_CACHE_DIR"
fi
if [ "$case" = peers ]; then
  . scripts/gpu_peers_env.sh; out=results/ncu/spans-vs-flash_mla-$sku.txt; kernels="ws_verify|mla"
fi
{ echo "# commit ${VK_GIT_COMMIT:-$(git rev-parse HEAD 2>/dev/null)} (ncu locks the SM clock at base)"
  echo "# command: bash experiments/spans/ncu_switch.sh $case ${flags[*]}"; } > "$out"
CASE=$case ncu --kernel-name regex:"$kernels" "${flags[@]}" python3 - >> "$out" 2>&1 <<'PY'
import os

import torch

from verify_kernels import make_problem, verify_attention

if os.environ["CASE"] == "peers":  # ours and FlashMLA on the same chain-tree problems, each kernel once
    from harness.bench.peers import PEERS

    for lengths, name in (([185000, 4096, 32768, 131072], "ragged"), ([353000], "one")):
        problem = make_problem(lengths, 64, 8, page_size=64, tree="chain", device="cuda", seed=1)
        for label, call in (("gluon_wgmma_ws", lambda: verify_attention(*problem.arguments(), **problem.kwargs(),
                                                                         variant="gluon_wgmma_ws")),
                            ("flash_mla", PEERS["flash_mla"](problem))):
            print(name, lengths, label, flush=True)
            call()
            torch.cuda.synchronize()
    raise SystemExit(0)

if os.environ["CASE"] == "cost":
    cases = [([65536] * 8, 16, 16, "ragged"), ([524400], 16, 16, "one"),
             ([185000, 4096, 32768, 131072], 64, 8, "ragged"), ([353000], 64, 8, "one")]
    configs = ({"waves": 0}, {"waves": 2})
elif os.environ["CASE"] == "sections":
    cases = [([175280] * 3, 16, 16, "A"), ([525872], 16, 16, "C"), ([65536] * 8, 16, 16, "ragged"),
             ([524400], 16, 16, "one"), ([185000, 4096, 32768, 131072], 64, 8, "ragged"), ([353000], 64, 8, "one")]
    configs = ({"waves": 0},)
else:
    cases = [([175280] * 3, 16, 16, "A"), ([181680, 175280, 168880], 16, 16, "B"), ([175248] * 3, 16, 16, "E"),
             ([525872], 16, 16, "C")]
    configs = ({"waves": 0},)
for lengths, tree_nodes, heads, name in cases:
    problem = make_problem(lengths, tree_nodes, heads, page_size=64, device="cuda", seed=1)
    for config in configs:
        print(name, lengths[:4], tree_nodes, heads, config, flush=True)
        verify_attention(*problem.arguments(), **problem.kwargs(), variant="gluon_wgmma_ws", config=config)
        torch.cuda.synchronize()
PY
grep -E '^[A-Z]|ws_verify' "$out" | tail -n 12
if [ "$case" = peers ]; then
  grep -hE '^[a-z]+ \[|Duration|Issued Ipc|Compute \(SM\) Throughput|No Eligible|Warp Cycles Per Issued' "$out"
fi
if [ "$case" = sections ] && [ -n "$OUT" ]; then
  for cubin in "$TRITON_CACHE_DIR"/*/_ws_verify_kernel.cubin; do
    dir=$OUT/cubins/$(basename "$(dirname "$cubin")"); mkdir -p "$dir"; cp "$cubin" "${cubin%.cubin}.json" "$dir"/
  done
  grep -hE '^[A-Z]|Duration|Local Memory Spilling Requests  |L2 Hit Rate  |No Eligible|Warp Cycles Per Issued' "$out"
fi
