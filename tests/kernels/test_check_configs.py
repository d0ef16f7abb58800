"""Every variant's CHECK_CONFIGS resolve the way the GPU oracle runs them (CPU: the checks before a
launch). A check config the API refuses fails every oracle test of it on the GPU host, where it costs
device time to find out."""

import types

import pytest

from verify_kernels import make_problem, variants
from verify_kernels.contract import check_arguments


@pytest.mark.parametrize("name", sorted(variants.VARIANTS))
def test_check_configs_resolve(name):
    module = variants.load_variant(name)
    problem = make_problem(100, 8, 8, device="cpu", seed=0)
    shape = check_arguments(*problem.arguments(), **problem.kwargs())
    for config in variants.optional(module, "CHECK_CONFIGS"):
        resolved = variants.resolve_config(name, module, config, shape)
        assert {k: resolved.get(k) for k in config} == config  # nothing dropped, nothing changed


def test_optional_config_keys_enter_only_where_given():
    module = types.SimpleNamespace(DEFAULT_CONFIG={"BLOCK": 64}, OPTIONAL_CONFIG={"LEVER": 0})
    problem = make_problem(100, 8, 8, device="cpu", seed=0)
    shape = check_arguments(*problem.arguments(), **problem.kwargs())
    assert variants.resolve_config("toy", module, None, shape) == {"BLOCK": 64}
    assert variants.resolve_config("toy", module, {"LEVER": 1}, shape) == {"BLOCK": 64, "LEVER": 1}
    with pytest.raises(ValueError, match="or the optional"):
        variants.resolve_config("toy", module, {"LEVERS": 1}, shape)


def test_cuda_qreg_empty_bars_per_arch():
    """sm_90 frees ring slots by their own mbarriers, sm_120 keeps the CTA-wide barrier; both name the key,
    so that one arch's config run on the other's card (a proxy run) keeps its own arch's value."""
    module = variants.load_variant("cuda_qreg")
    assert variants.defaults_for(module, "sm_90")["EMPTY_BARS"] == 1
    assert variants.defaults_for(module, "sm_120")["EMPTY_BARS"] == 0
    assert "EMPTY_BARS" not in module.macros(variants.defaults_for(module, "sm_120"))  # compiles as before the key
    assert module.macros(variants.defaults_for(module, "sm_90"))["EMPTY_BARS"] == 1
