#!/usr/bin/env bash
# What racecheck's reports on cuda_ws's spans walk are (the ws-spans step at 432f47f: 2 reports on the two ragged
# shapes, one write instruction against the consumers' shared-memory reads; the units kernel drew 1 of that form
# on 2026-12-03, the producer's bulk copy against ldmatrix, notes/2026-12-03-cuda-ws.md).
#   1. the SASS of the spans default as NVRTC builds it for the sanitizer run, the reported offsets picked out
#                                                          -> results/sanitizer/variants/cuda_ws-spans-sass-at-<c>-<gpu>.txt
#   2. racecheck of the spans walk without a producer warp (its ring is refilled after CTA barriers), then of the
#      units default on the same shapes, on this card     -> results/sanitizer/variants/racecheck-cuda_ws-*-at-<c>-<gpu>.txt
# The SASS comes first (seconds), then the two racecheck runs, RACECHECK_S seconds each (default 150).
# Usage (GPU host, repository root): [RACECHECK_S=120] bash experiments/spans/ws_racecheck.sh OFFSET...   (hex, from the report)
. scripts/gpu_env.sh
at="at-$(echo "${VK_GIT_COMMIT:-$(git rev-parse HEAD 2>/dev/null)}" | cut -c1-7)"; dir=results/sanitizer/variants
sass="$dir/cuda_ws-spans-sass-at-${at#at-}-$sku.txt"; export CUPY_CACHE_DIR=/tmp/cupy-sass; rm -rf $CUPY_CACHE_DIR
python3 - <<'PY'
import torch
from verify_kernels import cupy_launch, variants
module = variants.load_variant("cuda_ws")
config = {**variants.defaults_for(module, "sm_90"), "waves": 0}
(spec,) = module.kernel_specs(config)
cupy_launch.compiled_functions(spec.source, ("verify_ws",), tuple(spec.macros.items()), False, 0)
print("compiled", config)
PY
cubin=$(ls -t $CUPY_CACHE_DIR/*.cubin 2>/dev/null | head -n 1)
{ echo "# commit ${VK_GIT_COMMIT:-}; cuobjdump -sass of $cubin (cuda_ws sm_90 default, waves 0)"
  cuobjdump -sass "$cubin" 2>/dev/null || { tail -c +33 "$cubin" > /tmp/ws.cubin; cuobjdump -sass /tmp/ws.cubin; }
} > "$sass" 2>&1
for offset in "$@"; do
  echo "== $offset"; grep -n -B2 -A1 "/\*$(printf '%04x' $((16#$offset)))\*/" "$sass" | head -n 8
done
pack
sanitize_log racecheck "$dir/racecheck-cuda_ws-spans-noproducer-$at-$sku.txt" "${RACECHECK_S:-150}" cuda_ws \
  --config '{"waves": 0, "WARPS_M": 2, "BLOCK_N": 16, "STAGES": 3, "PRODUCER": 0, "SPLIT_K": 0}'
pack
sanitize_log racecheck "$dir/racecheck-cuda_ws-units-$at-$sku.txt" "${RACECHECK_S:-150}" cuda_ws --config '{"waves": 2}'
pack
