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


def test_gluon_wgmma_sym_queue_s_is_0_or_1_and_its_default_compiles_as_before():
    """queue_s (warpgroup 0's next S behind its last P V) is an optional key: 0 or 1, anything else refused
    before a launch; at 0 the static spec sets QUEUE_S 0, the kernel whose PTX the key left alone
    (scripts/kernel_ptx_digest.py at bc549e1 against the commit that added it)."""
    module = variants.load_variant("gluon_wgmma_sym")
    problem = make_problem(100, 8, 8, device="cpu", seed=0)
    shape = check_arguments(*problem.arguments(), **problem.kwargs())
    assert "queue_s" not in variants.resolve_config("gluon_wgmma_sym", module, None, shape)
    assert variants.resolve_config("gluon_wgmma_sym", module, {"queue_s": 1}, shape)["queue_s"] == 1
    with pytest.raises(ValueError, match="queue_s must be 0 or 1, got 2"):
        variants.resolve_config("gluon_wgmma_sym", module, {"queue_s": 2}, shape)
    with pytest.raises(TypeError, match="queue_s must be an int"):
        variants.resolve_config("gluon_wgmma_sym", module, {"queue_s": True}, shape)
    (default,) = module.kernel_specs(module.DEFAULT_CONFIG)
    (queued,) = module.kernel_specs({**module.DEFAULT_CONFIG, "queue_s": 1})
    assert default.constexprs["QUEUE_S"] == 0 and queued.constexprs["QUEUE_S"] == 1


def test_gluon_wgmma_sym_launches_add_queue_s_to_the_shared_launch():
    """gluon_wgmma_ws.launch_planned names ws's constexprs only; sym's launches add QUEUE_S to each."""
    from verify_kernels.gluon_wgmma_sym import _WithConstexprs

    class Kernel:
        def __getitem__(self, grid):
            return lambda *args, **kwargs: (grid, args, kwargs)

    assert _WithConstexprs(Kernel(), QUEUE_S=1)[(2, 3)](7, BLOCK_N=64) == ((2, 3), (7,), {"BLOCK_N": 64, "QUEUE_S": 1})
