"""scripts/short_tree_timeline.py's contenders patch the combine where each variant looks it up (a CUDA variant
imported it into its own module), restore it after, and give bf16 partial rows only to kernels whose store converts."""

import importlib.util
from pathlib import Path

import torch

from verify_kernels import split_combine, variants

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "short_tree_timeline.py"


def load_script():
    spec = importlib.util.spec_from_file_location("short_tree_timeline", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_one_row_contender_reaches_a_variant_that_imported_the_combine_itself():
    timeline = load_script()
    qreg = variants.load_variant("cuda_qreg")
    original = qreg.launch_combine
    assert original is split_combine.launch_combine
    with timeline.Patched(one_row=True, variant_module=qreg):
        for module in (qreg, split_combine):
            assert module.launch_combine.keywords == {"grid": timeline.ONE_ROW}
    assert qreg.launch_combine is original and split_combine.launch_combine is original


def test_bf16_partial_rows_only_where_the_store_converts():
    timeline = load_script()
    buffers = split_combine.partial_buffers
    with timeline.Patched(bf16_partials=True, variant_module=variants.load_variant("gluon_wgmma_ws")):
        partial_out, partial_lse = split_combine.partial_buffers(torch.empty(2, 16, 8, 512), 3)
    assert split_combine.partial_buffers is buffers
    assert partial_out.shape == (3 * 16 * 8, 512) and partial_out.dtype == torch.bfloat16
    assert partial_lse.shape == (3 * 16 * 8,) and partial_lse.dtype == torch.float32
    assert "cuda_qreg" not in timeline.BF16_PARTIAL_VARIANTS and "cuda_ws" not in timeline.BF16_PARTIAL_VARIANTS
