# The peers that travelled in .peers/, installed on the GPU host (sourced after gpu_env.sh by the scripts
# that time peers: gpu_peers.sh, gpu_scheduler.sh; gpu_peers.sh says how .peers/ is made):
#   .peers/flashinfer/  FlashInfer slimmed to its MLA path, its wheels, its JIT cache from an earlier run
#   .peers/flash_mla/   FlashMLA built for sm_90a
# Archives may come in 15 MiB parts (.0, .1, ...): files come back from the host at most 16 MiB each.
if [ -d .peers/flashinfer ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .peers/flashinfer/wheels/*.whl
  tar -xJf .peers/flashinfer/flashinfer-slim.tar.xz -C /tmp/site
  export PYTHONPATH=/tmp/site:$PWD
fi
export FLASHINFER_WORKSPACE_BASE=/tmp/fi-workspace; mkdir -p $FLASHINFER_WORKSPACE_BASE
unpack() { ls "$1".* >/dev/null 2>&1 && cat "$1".* | tar -xJ -C "$2"; }  # ARCHIVE (without .N) DIR
unpack .peers/flashinfer/jit-cache.tar.xz $FLASHINFER_WORKSPACE_BASE
unpack .peers/flash_mla/flash_mla-sm90.tar.xz /tmp/site
