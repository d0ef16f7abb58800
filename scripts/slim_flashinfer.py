"""Write a slimmed FlashInfer (the MLA path only) and the wheels it needs, small enough to travel.

flashinfer-python 0.7.x is a ~100 MB wheel (716 MB installed), more than the 64 MiB that travels to
the offline GPU host in one go. Its MLA wrappers JIT-compile three sources each (``batch_mla_*.cu``
for the fa2 backend, ``batch_mla_sm90_*.cu`` for fa3) against ``data/include``, CUTLASS and CCCL.
This script keeps every Python module (``import flashinfer`` imports most of them), ``data/`` but
for the other kernels' sources in ``data/csrc``, and drops every other kernel source (.cu, .cuh, .c,
.h) shipped beside the Python code. Nothing is edited: files are only left out.

    python scripts/slim_flashinfer.py            # writes .peers/flashinfer/ (ignored by git)

On the GPU host (scripts/gpu_peers.sh does this):
    tar -xJf .peers/flashinfer/flashinfer-slim.tar.xz -C /tmp/site
    pip install --no-index --no-deps --target /tmp/site .peers/flashinfer/wheels/*.whl
"""

from __future__ import annotations

import argparse
import pathlib
import subprocess
import sys
import tarfile
import tempfile
import zipfile

VERSION = "0.7.4"
# What ``import flashinfer`` and the MLA JIT need beyond what the GPU host has (torch, jinja2, ninja,
# einops, click, requests, packaging, nvidia-ml-py: /work/.library/device/KINDS.md's package list).
DEPENDENCIES = ["apache-tvm-ffi>=0.1.11,<0.2"]
PLATFORMS = ["manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_24_x86_64", "manylinux_2_17_x86_64",
             "manylinux2014_x86_64", "any"]
MLA_CSRC = ("batch_mla_", "tvm_ffi_utils.h", "pytorch_extension_utils.h")
SOURCE_SUFFIXES = {".cu", ".cuh", ".c", ".h", ".cpp", ".md"}


def download(requirement: str, dest: pathlib.Path) -> None:
    platforms = [arg for p in PLATFORMS for arg in ("--platform", p)]
    subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
                    "--python-version", "3.12", "--implementation", "cp", *platforms, "-d", str(dest),
                    requirement], check=True)


def keep(name: str) -> bool:
    """Whether a file of the wheel is needed by ``import flashinfer`` and its MLA wrappers."""
    parts = name.split("/")
    if parts[:3] == ["flashinfer", "data", "csrc"]:
        return len(parts) == 4 and parts[3].startswith(MLA_CSRC)
    if parts[:2] == ["flashinfer", "data"]:
        return True
    return pathlib.PurePosixPath(name).suffix not in SOURCE_SUFFIXES


def slim(wheel: pathlib.Path, archive: pathlib.Path) -> tuple[int, int]:
    kept = dropped = 0
    with zipfile.ZipFile(wheel) as source, tarfile.open(archive, "w:xz") as tar, \
            tempfile.TemporaryDirectory() as scratch:
        for info in source.infolist():
            if info.is_dir() or not keep(info.filename):
                dropped += 0 if info.is_dir() else 1
                continue
            path = pathlib.Path(source.extract(info, scratch))
            tar.add(path, arcname=info.filename)
            path.unlink()
            kept += 1
    return kept, dropped


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=".peers/flashinfer", help="folder to write (default: %(default)s)")
    args = parser.parse_args(argv)
    out = pathlib.Path(args.out)
    wheels = out / "wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as scratch:
        download(f"flashinfer-python=={VERSION}", pathlib.Path(scratch))
        wheel = next(pathlib.Path(scratch).glob("flashinfer_python-*.whl"))
        kept, dropped = slim(wheel, out / "flashinfer-slim.tar.xz")
    for requirement in DEPENDENCIES:
        download(requirement, wheels)
    total = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
    print(f"flashinfer {VERSION}: kept {kept} files, left out {dropped}; {out} holds {total / 2**20:.1f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
