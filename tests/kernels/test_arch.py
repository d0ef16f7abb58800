"""The arch registry (verify_kernels/arch.py, one file per arch under verify_kernels/arches/): every
record loads with every value sourced, a device maps to its record by capability, and what reads it
(default configs, what a variant can run, the static model, the CLIs) follows a new file without
code changes."""

import shutil

import pytest
import torch
import yaml

from verify_kernels import arch, variants
from verify_kernels.contract import ProblemShape


def test_every_record_loads_with_every_field_sourced():
    assert arch.known_arches() == ["sm_89", "sm_90", "sm_100", "sm_120"]
    for name in arch.known_arches():
        record = arch.load_arch(name)
        assert record.name == name and f"sm_{record.compute}" == name
        assert set(arch.FIELDS) <= set(record.sources)
    h200, pro6000 = arch.load_arch("sm_90"), arch.load_arch("sm_120")
    assert (h200.sms, pro6000.sms) == (132, 188)
    assert pro6000.smem_per_block_kb == 99 and pro6000.max_warps_per_sm == 48 and pro6000.max_blocks_per_sm == 24
    assert h200.has("wgmma") and not pro6000.has("wgmma") and pro6000.has("bulk_copy")
    assert not arch.load_arch("sm_89").has("bulk_copy")


@pytest.mark.parametrize("change, message", [
    (lambda d: d.pop("sms"), "missing fields \\['sms'\\]"),
    (lambda d: d["sources"].pop("dram_tbps"), "without a source \\['dram_tbps'\\]"),
    (lambda d: d.update(clock_ghz=-1), "must be positive numbers"),
    (lambda d: d.update(max_blocks_per_sm=True), "must be positive numbers"),
    (lambda d: d.update(features=["mma_sync", "tcgen05"]), "unknown features \\['tcgen05'\\]"),
    (lambda d: d.update(capability=[12, 1]), "does not match capability"),
])
def test_validation_names_the_field(change, message):
    data = yaml.safe_load((arch.ARCH_DIR / "sm_120.yaml").read_text())
    change(data)
    with pytest.raises(ValueError, match=message):
        arch.parse_arch(data, "my-gpu.yaml")
    with pytest.raises(ValueError, match="no record for 'sm_75'"):
        arch.load_arch("sm_75")


def _fake_gpu(monkeypatch, capability):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: capability)


@pytest.mark.parametrize("capability, name, known", [((12, 0), "sm_120", True), ((10, 0), "sm_100", True),
                                                     ((8, 9), "sm_89", True), ((8, 6), "sm_86", False)])
def test_a_device_maps_to_its_record(monkeypatch, capability, name, known):
    _fake_gpu(monkeypatch, capability)
    device = torch.device("cuda", 0)
    assert arch.device_arch(device) == name
    assert (arch.device_record(device) is not None) == known
    assert arch.device_arch(torch.device("cpu")) is None


@pytest.mark.parametrize("name, expected", [("sm_90", "sm_90"), ("sm_120", "sm_120"), ("sm_100", "sm_90"),
                                            ("sm_89", "sm_120"), ("sm_86", None), (None, None)])
def test_default_configs_come_from_the_nearest_arch_of_the_same_shared_memory(name, expected):
    """sm_100 (227 KB per block) takes sm_90's defaults, sm_89 (99 KB) sm_120's; an arch without a
    record, and the CPU, take the variant's DEFAULT_CONFIG."""
    assert arch.config_key(name, {"sm_90", "sm_120"}) == expected
    module = variants.load_variant("cuda_ws")
    assert variants.defaults_for(module, name) == (module.DEFAULT_CONFIGS[expected] if expected
                                                   else module.DEFAULT_CONFIG)


@pytest.mark.parametrize("capability, variant, runs", [
    ((8, 9), "cuda_ws", False), ((8, 9), "cuda_coalesced", True), ((12, 0), "gluon_wgmma_ws", False),
    ((10, 0), "gluon_wgmma_sym", False), ((9, 0), "gluon_wgmma_ws", True), ((10, 0), "cuda_qreg", True),
    ((7, 5), "cuda_coalesced", False), ((8, 6), "cuda_ws", False),
])
def test_what_a_variant_runs_follows_the_records_features(monkeypatch, capability, variant, runs):
    pytest.importorskip("triton")
    module = variants.load_variant(variant)
    _fake_gpu(monkeypatch, capability)
    shape = ProblemShape(batch=1, tree_nodes=4, heads=2, head_dim=576, v_dim=512, page_size=64, num_pages=4,
                         max_pages=2, dtype=torch.bfloat16, device=torch.device("cuda", 0))
    reason = arch.missing_feature(shape,
                                  {"cuda_ws": "bulk_copy", "cuda_qreg": "bulk_copy", "cuda_coalesced": "mma_sync"}
                                  .get(variant, "wgmma"), "it")
    assert (reason is None) == runs, reason
    if not runs:
        assert f"sm_{capability[0]}{capability[1]}" in module.unsupported_reason(shape)


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not on PATH (CI has it)")
def test_sm100_is_one_file_for_the_static_model():
    """The static model compiles for sm_100 from its record alone: nvcc's target from the capability,
    the limits from the file; gluon kernels are refused (no wgmma) before compiling."""
    from harness.static.report import default_rows
    from harness.static.space import candidates, resolve

    (row,) = default_rows("cuda_ws", "sm_100")
    assert row["feasible"] and row["config"] == variants.load_variant("cuda_ws").DEFAULT_CONFIGS["sm_90"], row
    assert all("wgmma" in c.reason for c in candidates(resolve("gluon_wgmma_ws", "sm_100")))
    assert all("cp.async.bulk" in c.reason for c in candidates(resolve("cuda_qreg", "sm_89")))


def test_the_clis_offer_every_known_arch():
    from harness.cli import build_parser

    parser = build_parser()
    for argv in (["static", "--arch", "sm_100"], ["static", "--arch", "sm_89"]):
        assert parser.parse_args(argv).arch == [argv[-1]]
    with pytest.raises(SystemExit):
        parser.parse_args(["static", "--arch", "sm_75"])


def test_named_barriers_cap_blocks_per_sm_on_sm120():
    """cuda_occupancy.h from sm_90 on: a block using 16 named barriers fits 24 // 16 = 1 per SM on
    sm_120 (barriers shared with its 24-block limit) but 64 // 16 = 4 on sm_90."""
    from harness.static.occupancy import ResourceUsage, occupancy

    usage = ResourceUsage(registers=64, spill_store_bytes=0, spill_load_bytes=0, stack_bytes=0, shared_bytes=8192,
                          threads=128, barriers=16)
    assert occupancy(usage, "sm_120").blocks_per_sm == 1 and occupancy(usage, "sm_120").limiter == "barriers"
    assert occupancy(usage, "sm_90").blocks_per_sm == 4
