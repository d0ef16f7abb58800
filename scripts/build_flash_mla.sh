#!/usr/bin/env bash
# FlashMLA as a peer (issue 22), built from the unmodified snapshot in ../shared/peers/FlashMLA and
# never copied into the repository: the snapshot and the build live in .peers/ (ignored by git),
# which travels to the GPU host.
#   bash scripts/build_flash_mla.sh pack        # here: .peers/flash_mla/FlashMLA-src.tar.xz (~5 MB)
#   bash scripts/build_flash_mla.sh build DIR   # GPU host: sm_90a only (FLASH_MLA_DISABLE_SM100=1);
#       writes DIR/flash_mla-sm90.tar.xz.0 (.1, ... past 15 MiB): the flash_mla package with its extension
# Keep those parts in .peers/flash_mla/; scripts/gpu_peers.sh installs them into /tmp/site.
set -euo pipefail
case "${1:-}" in
  pack)
    mkdir -p .peers/flash_mla
    tar -cJf .peers/flash_mla/FlashMLA-src.tar.xz -C "${FLASH_MLA_SRC:-../shared/peers}" FlashMLA
    ls -la .peers/flash_mla ;;
  build)
    out=$(realpath "${2:?build DIR: where to write flash_mla-sm90.tar.xz}")
    work=/tmp/flash_mla-build; rm -rf "$work"; mkdir -p "$work"
    tar -xJf .peers/flash_mla/FlashMLA-src.tar.xz -C "$work"
    cd "$work/FlashMLA"
    # CUDA 13 keeps libcu++ (cuda/std/...) under include/cccl, which nvcc adds and g++ (api.cpp) does not.
    cccl=$(dirname "$(command -v nvcc)")/../include/cccl
    [ -d "$cccl" ] && export CPLUS_INCLUDE_PATH=$(realpath "$cccl")${CPLUS_INCLUDE_PATH:+:$CPLUS_INCLUDE_PATH}
    start=$(date +%s)
    FLASH_MLA_DISABLE_SM100=1 NVCC_THREADS=1 MAX_JOBS=${MAX_JOBS:-16} python3 setup.py build_ext --inplace
    echo "flash_mla built in $(( $(date +%s) - start )) s"
    ls -la flash_mla
    # Files come back from the host at most 16 MiB each: split larger archives (cat them to install).
    tar -cJf - flash_mla | split -b 15m -d -a 1 - "$out/flash_mla-sm90.tar.xz."
    ls -la "$out"/flash_mla-sm90.tar.xz.* ;;
  *) echo "usage: $0 pack | build DIR" >&2; exit 2 ;;
esac
