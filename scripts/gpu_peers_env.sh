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
# fa2_as_arch ARCH: FlashInfer's fa2 with the tiles it takes on ARCH (its shared memory per SM from the arch
# registry; sm_120: 102400 bytes, its 1-stage, 16-token, unsharded config) on this GPU, for a proxy run beside ours
# (--proxy-for ARCH). A copy of the package whose launch reads that value after asking the GPU (one line added
# to mla.cuh, marked with the adapter's FORCED_MARK; nothing else changes), first on PYTHONPATH, with its own JIT
# workspace. Call it in a subshell: it changes PYTHONPATH and FLASHINFER_WORKSPACE_BASE.
fa2_as_arch() {
  local arch=${1:?ARCH} bytes site header mark
  [ -d /tmp/site/flashinfer ] || { echo "fa2_as_arch: no FlashInfer in /tmp/site (.peers/flashinfer)" >&2; return 1; }
  bytes=$(python3 -c "from harness.bench.sweep import smem_per_sm_bytes; print(smem_per_sm_bytes('$arch'))") || return 1
  mark=$(python3 -c "from harness.bench.peers.flashinfer_mla import FORCED_MARK; print(FORCED_MARK)")
  site=/tmp/site-fa2-$arch; rm -rf "$site"; mkdir -p "$site"; cp -r /tmp/site/flashinfer "$site/"
  header="$site/flashinfer/data/include/flashinfer/attention/mla.cuh"
  sed -i "s|\(cudaDeviceGetAttribute(&smem_limit_per_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, device);\)|\1 smem_limit_per_sm = $bytes; /* $mark */|" "$header"
  grep -q "smem_limit_per_sm = $bytes; /\* $mark" "$header" || { echo "fa2_as_arch: mla.cuh did not take the edit" >&2; return 1; }
  export PYTHONPATH=$site:$PYTHONPATH FLASHINFER_WORKSPACE_BASE=/tmp/fi-workspace-$arch
  mkdir -p "$FLASHINFER_WORKSPACE_BASE"
}
