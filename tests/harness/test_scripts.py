"""The scripts beside the harness: the A/B script's contenders, the PTX digest's re-stamp."""



def test_ab_script_loads_a_registered_variant_and_a_kernel_file(tmp_path):
    """scripts/ab_verify_kernels.py: 'variant:json' and 'file=PATH:json' contenders (a copy of a
    variant module loaded from a file keeps its relative imports)."""
    import importlib.util
    import shutil
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    spec = importlib.util.spec_from_file_location("ab_verify_kernels", root / "scripts" / "ab_verify_kernels.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    label, module, config = script.load_contender('triton_splitkv:{"BLOCK_N": 32}')
    assert module.__name__ == "verify_kernels.triton_splitkv" and config == {"BLOCK_N": 32}
    copy = tmp_path / "splitkv_before.py"
    shutil.copy(root / "verify_kernels" / "triton_splitkv.py", copy)
    label, module, config = script.load_contender(f"file={copy}:")
    assert label.startswith("splitkv_before") and config == {} and hasattr(module, "run")
    assert module is not script.load_contender("triton_splitkv")[1]


def test_restamp_moves_only_records_measured_at_the_digests_source(tmp_path, capsys):
    """scripts/kernel_ptx_digest.py --restamp: a record measured at the source the before-digest was made at,
    whose config compiles to the same PTX now, takes the current hash; one that was stale already keeps its, and
    so does a retired variant's (gluon_wgmma: no longer registered)."""
    import importlib.util
    from pathlib import Path

    import yaml

    from harness.static.space import kernel_source_hash
    from verify_kernels import variants

    root = Path(__file__).resolve().parents[2]
    spec = importlib.util.spec_from_file_location("kernel_ptx_digest", root / "scripts" / "kernel_ptx_digest.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    module = variants.load_variant("triton_splitkv")
    ptx = {f"triton_splitkv|sm_90|{script.config_key(module, dict(module.DEFAULT_CONFIG))}|kernel": "same"}
    before = {f"{script.SOURCE_KEY}|triton_splitkv": "a" * 16, **ptx}
    after = {f"{script.SOURCE_KEY}|triton_splitkv": kernel_source_hash("triton_splitkv"), **ptx}
    table = tmp_path / "t.yaml"
    retired = {"variant": "gluon_wgmma", "config": {}, "kernel_source_hash": "a" * 16}
    table.write_text(yaml.safe_dump({**{name: {"variant": "triton_splitkv", "config": {}, "kernel_source_hash": stamp}
                                        for name, stamp in (("at_digest", "a" * 16), ("older", "b" * 16))},
                                     "retired": retired}))
    script.restamp([table], before, after, Path("digest.json"))
    records = yaml.safe_load(table.read_text())
    assert records["at_digest"]["kernel_source_hash"] == kernel_source_hash("triton_splitkv")
    assert records["at_digest"]["restamped"]["from_kernel_source_hash"] == "a" * 16
    assert records["older"]["kernel_source_hash"] == "b" * 16 and "restamped" not in records["older"]
    assert records["retired"] == retired
    printed = capsys.readouterr().out
    assert f"older: measured at {'b' * 16}, the digest at {'a' * 16}: left as it was" in printed
