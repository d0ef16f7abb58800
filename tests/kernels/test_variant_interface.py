"""Every registered variant has the interface written out in ``variants.VariantModule``, and the
library stands alone: it never imports the harness."""

import ast
import inspect
from pathlib import Path

import pytest

from verify_kernels import variants

LIBRARY = Path(variants.__file__).resolve().parent


@pytest.mark.parametrize("name", sorted(variants.VARIANTS))
def test_registered_variant_satisfies_the_protocol(name):
    module = variants.load_variant(name)
    assert isinstance(module, variants.VariantModule), name
    assert isinstance(module.DEFAULT_CONFIG, dict) and module.PAGE_SIZES and set(module.CHECK_PAGE_SIZES) <= set(
        module.PAGE_SIZES)
    run = inspect.signature(module.run)
    assert [p for p, v in run.parameters.items() if v.kind is v.KEYWORD_ONLY] == [
        "sm_scale", "v_dim", "out", "config"], run
    assert list(inspect.signature(module.unsupported_reason).parameters) == ["shape"]
    for name_, default in variants.OPTIONAL.items():
        value = variants.optional(module, name_)
        if callable(default) or name_ in ("tile_work", "smem_bytes"):
            assert value is None or callable(value), name_
    specs = module.kernel_specs(variants.optional(module, "DEFAULT_CONFIGS").get("sm_90", module.DEFAULT_CONFIG))
    assert specs and all(type(spec).__module__ == "verify_kernels.kernel_spec" for spec in specs)


def test_optional_refuses_a_name_outside_the_interface():
    with pytest.raises(KeyError, match="not an optional variant name"):
        variants.optional(variants.load_variant("triton_ps1"), "ALLOW_SPILLS")


def _imports(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
    return names


def test_the_library_imports_nothing_of_the_harness():
    offenders = {str(path.relative_to(LIBRARY)): sorted(n for n in _imports(path) if n.split(".")[0] == "harness")
                 for path in LIBRARY.rglob("*.py")}
    assert not {k: v for k, v in offenders.items() if v}
