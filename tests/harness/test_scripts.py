"""The scripts beside the harness: the A/B script's contenders."""



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
