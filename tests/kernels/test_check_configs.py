"""Every variant's CHECK_CONFIGS resolve the way the GPU oracle runs them (CPU: the checks before a
launch). A check config the API refuses fails every oracle test of it on the GPU host, where it costs
device time to find out."""

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
    module = variants.load_variant("cuda_qreg")
    problem = make_problem(100, 8, 8, device="cpu", seed=0)
    shape = check_arguments(*problem.arguments(), **problem.kwargs())
    assert "EMPTY_BARS" not in variants.resolve_config("cuda_qreg", module, None, shape)
    assert variants.resolve_config("cuda_qreg", module, {"EMPTY_BARS": 1}, shape)["EMPTY_BARS"] == 1
    with pytest.raises(ValueError, match="or the optional"):
        variants.resolve_config("cuda_qreg", module, {"EMPTY_BAR": 1}, shape)
