"""Static resource model: occupancy arithmetic by hand, and offline compiles for sm_90 and sm_120."""

import json
import os
import subprocess
import sys

import pytest
import torch

from harness.static.occupancy import ResourceUsage, infeasibility, occupancy


def usage(registers, threads, shared_bytes, spills=0):
    return ResourceUsage(registers, spills, spills, 0, shared_bytes, threads)


def test_occupancy_register_limited_sm90():
    # 255 regs -> 8160 per warp, rounded to 8192; 16384 per sub-partition -> 2 warps each -> 8 warps
    # per SM -> one 256-thread block.
    result = occupancy(usage(255, 256, 16 * 1024), "sm_90")
    assert (result.blocks_per_sm, result.limiter) == (1, "registers")
    assert result.occupancy == pytest.approx(8 / 64)


def test_occupancy_shared_memory_limited_sm120():
    # 128 regs -> 4096 per warp -> 16 warps by registers -> 4 blocks of 4 warps; 80 KB + 1 KB reserved
    # per block against a 100 KB carve-out -> 1 block.
    result = occupancy(usage(128, 128, 80 * 1024), "sm_120")
    assert (result.blocks_per_sm, result.limiter, result.carveout_kb) == (1, "shared_memory", 100)
    assert result.occupancy == pytest.approx(4 / 48)


def test_occupancy_warp_and_block_limits():
    # 32 regs, 1024 threads: registers allow 64 warps; sm_120 holds 48 warps -> 1 block of 32 warps.
    assert occupancy(usage(32, 1024, 0), "sm_120").blocks_per_sm == 1
    assert occupancy(usage(32, 1024, 0), "sm_90").blocks_per_sm == 2
    # Tiny blocks hit the block limit: 24 on sm_120, 32 on sm_90.
    assert occupancy(usage(16, 32, 0), "sm_120") .blocks_per_sm == 24
    assert occupancy(usage(16, 32, 0), "sm_90").limiter == "blocks"


def test_carveout_is_the_smallest_step_that_fits():
    # 32 regs -> 1024 per warp -> 64 warps by registers -> 4 blocks of 16 warps (also the warp
    # limit); shared memory allows 228 // 41 = 5. 4 x (40 KB + 1 KB) = 164 KB: exactly a step.
    result = occupancy(usage(32, 512, 40 * 1024), "sm_90")
    assert result.blocks_per_sm == 4 and result.carveout_kb == 164
    # 2 blocks of 48 + 1 KB = 98 KB -> the 100 KB step.
    assert occupancy(usage(32, 1024, 48 * 1024), "sm_90").carveout_kb == 100


def test_infeasibility_reasons():
    assert "spills" in infeasibility(usage(255, 256, 0, spills=8), "sm_120")
    assert infeasibility(usage(255, 256, 0, spills=8), "sm_120", allow_spills=True) is None
    assert "99 KB" in infeasibility(usage(128, 128, 100 * 1024), "sm_120")
    assert infeasibility(usage(128, 128, 100 * 1024), "sm_90") is None
    with pytest.raises(ValueError, match="arch: no record for .sm_75.*known"):
        occupancy(usage(1, 32, 0), "sm_75")


def vk_static(*args) -> list[dict]:
    """`vk static --json` in a clean process: this test session runs Triton in interpreter mode,
    whose kernels cannot be compiled."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    completed = subprocess.run([sys.executable, "-m", "harness", "static", "--json", *args],
                               capture_output=True, text=True, env=env)
    assert completed.stdout.strip().startswith("["), completed.stderr[-2000:]
    return json.loads(completed.stdout)


def test_triton_splitkv_defaults_offline_for_sm120_and_sm90():
    """Both defaults compile without a GPU; sm_120's fits 99 KB of shared memory and does not spill."""
    sm120, sm90 = vk_static("--variant", "triton_splitkv", "--arch", "sm_120", "sm_90")
    assert sm120["arch"] == "sm_120" and sm120["shared_bytes"] <= 99 * 1024, sm120
    assert sm120["spill_store_bytes"] == 0 and sm120["spill_load_bytes"] == 0, sm120
    assert sm120["feasible"] and sm120["blocks_per_sm"] >= 1, sm120
    assert sm90["arch"] == "sm_90" and sm90["shared_bytes"] <= 227 * 1024 and sm90["feasible"], sm90


def test_sm120_search_spaces_have_20_feasible_spill_free_configs():
    """The target arch's spaces pass the static model (results/static/ caches the compiles per
    kernel source hash; a changed kernel recompiles here, which takes minutes)."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    code = ("import json; from harness.static.space import resolve, static_feasibility as s; "
            "print(json.dumps({v: [c.static for c in s(resolve(v, 'sm_120'), progress=False) if c.feasible] "
            "for v in ('triton_splitkv', 'cuda_coalesced')}))")
    completed = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert completed.returncode == 0, completed.stderr[-2000:]
    feasible = json.loads(completed.stdout.strip().splitlines()[-1])
    for variant, rows in feasible.items():
        assert len(rows) >= 20, f"{variant}: {len(rows)} feasible configs on sm_120"
        assert all(not r["spill_store_bytes"] and r["shared_bytes"] <= 99 * 1024 for r in rows), variant


def test_triton_spec_specialises_like_the_launcher():
    """Aligned pointers and ints divisible by 16 get tt.divisibility, an int equal to 1 becomes a
    constant: without this the static compile under-counts shared memory (seen on the H200)."""
    from types import SimpleNamespace

    from verify_kernels.kernel_spec import TritonKernelSpec

    kernel = SimpleNamespace(arg_names=["Q", "sm_scale", "stride_a", "stride_b", "one", "T", "BLOCK"])
    spec = TritonKernelSpec("k", kernel, {"Q": "*bf16"}, {"BLOCK": 64}, 4, 1,
                            int_values={"stride_a": 576, "stride_b": 8, "one": 1, "T": 33})
    assert spec.signature() == {"Q": "*bf16", "sm_scale": "fp32", "stride_a": "i32", "stride_b": "i32",
                                "one": "constexpr", "T": "i32", "BLOCK": "constexpr"}
    assert spec.specialised_constexprs() == {"BLOCK": 64, "one": 1}
    assert spec.divisibility_attrs() == {(0,): [["tt.divisibility", 16]], (2,): [["tt.divisibility", 16]]}


@pytest.mark.parametrize("variant", ["gluon_wgmma_ws", "gluon_wgmma_sym"])
def test_gluon_kernels_compile_for_sm90_and_are_refused_for_sm120(variant):
    """The Hopper kernels compile offline for sm_90 (both tiles: no spills, one CTA per SM within
    227 KB of shared memory); sm_120 has no wgmma and is refused with that reason, not compiled.
    (gluon_wgmma_sym spills under a Triton other than the GPU host's: test_sass.spills_expected.)"""
    from test_sass import spills_expected

    rows = vk_static("--variant", variant, "--arch", "sm_90", "sm_120",
                     "--config", '{"BLOCK_N": 64}', "--config", '{"BLOCK_N": 32}')
    sm90 = [r for r in rows if r["arch"] == "sm_90"]
    sm120 = [r for r in rows if r["arch"] == "sm_120"]
    assert len(sm90) == 2 and len(sm120) == 2, rows
    for row in sm90:
        assert row["feasible"] and row["blocks_per_sm"] == 1, row
        assert row["spill_store_bytes"] == 0 or spills_expected(variant), row
        assert row["shared_bytes"] <= 227 * 1024, row
    assert all(not r["feasible"] and "wgmma" in r["reason"] for r in sm120), sm120


@pytest.mark.parametrize("dtype, block_n", [(torch.bfloat16, 64), (torch.float16, 32)])
def test_ws_tma_descriptors_match_what_the_static_compile_declares(dtype, block_n):
    """gluon_wgmma_ws's TMA descriptors (built on the host, here over a CPU pool) cover the pool's
    rows, the latent columns from element 0 and the rope columns from element v_dim, and Triton
    types them exactly as kernel_specs declares them, so `vk static` compiles the launched kernel."""
    from triton.runtime.jit import mangle_type

    from verify_kernels import gluon_wgmma_ws as ws

    pool = torch.empty(7, 64, 576, dtype=dtype)
    latent, rope = ws.kv_descriptors(pool, block_n, 512)
    assert latent.base.data_ptr() == pool.data_ptr() and rope.base.data_ptr() == pool.data_ptr() + 512 * 2
    assert list(latent.shape) == [7 * 64, 512] and list(rope.shape) == [7 * 64, 64]
    assert list(latent.strides) == list(rope.strides) == [576, 1]
    assert latent.block_shape == [block_n, 512] and rope.block_shape == [block_n, 64]
    signature = ws.kernel_specs({"BLOCK_N": block_n, "kv_splits": 4},
                                dtype={torch.bfloat16: "bf16", torch.float16: "fp16"}[dtype])[0].signature()
    assert (signature["LatDesc"], signature["RopeDesc"]) == (mangle_type(latent), mangle_type(rope))


@pytest.mark.parametrize("dtype, block_n", [(torch.bfloat16, 64), (torch.float16, 32)])
def test_sym_tma_descriptors_match_what_the_static_compile_declares(dtype, block_n):
    """gluon_wgmma_sym's three TMA descriptors cover the pool's rows: columns [0, 256) from element 0,
    [256, 512) from element 256 (in boxes of 128 columns) and the rope columns from element 512, each a box of
    block_n rows that Triton types exactly as kernel_specs declares, so `vk static` compiles the launched kernel."""
    from triton.runtime.jit import mangle_type

    from verify_kernels import gluon_wgmma_sym as sym

    pool = torch.empty(7, 64, 576, dtype=dtype)
    low, high, rope = sym.kv_descriptors(pool, block_n, 512)
    assert [d.base.data_ptr() - pool.data_ptr() for d in (low, high, rope)] == [0, 256 * 2, 512 * 2]
    assert [list(d.shape) for d in (low, high, rope)] == [[7 * 64, 256], [7 * 64, 256], [7 * 64, 64]]
    assert all(list(d.strides) == [576, 1] for d in (low, high, rope))
    assert [d.block_shape for d in (low, high, rope)] == [[block_n, 256], [block_n, 128], [block_n, 64]]
    signature = sym.kernel_specs({"BLOCK_N": block_n, "kv_splits": 4},
                                 dtype={torch.bfloat16: "bf16", torch.float16: "fp16"}[dtype])[0].signature()
    assert [signature[k] for k in ("LoDesc", "HiDesc", "RopeDesc")] == [mangle_type(d) for d in (low, high, rope)]


def test_one_wave_split_choice():
    """one_wave: the most splits whose CTAs all fit on the SMs at once, capped by length and
    MAX_KV_SPLITS; the default rounds up to a power of two."""
    from verify_kernels.contract import ProblemShape
    from verify_kernels.splits import choose_kv_splits

    def shape(tree_nodes, batch=1, pages=2048):
        return ProblemShape(batch=batch, tree_nodes=tree_nodes, heads=8, head_dim=576, v_dim=512, page_size=64,
                            max_pages=pages, num_pages=pages, dtype=torch.bfloat16, device=torch.device("cpu"))

    wave = dict(ctas_per_sm=1, one_wave=True)
    assert choose_kv_splits(shape(64), 64, 64, 132, **wave) == 16      # 8 row blocks x 16 = 128 CTAs
    assert choose_kv_splits(shape(16), 64, 64, 132, **wave) == 64      # 66, capped
    assert choose_kv_splits(shape(256), 64, 64, 132, **wave) == 4
    assert choose_kv_splits(shape(256, batch=5), 64, 64, 132, **wave) == 1
    assert choose_kv_splits(shape(64, pages=8), 64, 64, 132, **wave) == 2  # 512 positions / 256
    assert choose_kv_splits(shape(64), 64, 64, 132) == 64                # the default: ceil(264 / 8) -> 64


def test_the_static_cache_keys_the_spans_rule_apart(tmp_path, monkeypatch):
    """kv_splits and waves only launch, but the spans rule (both 0) compiles another kernel (SPANS):
    its cache row is its own, compiled at waves 0; every units rule shares one, compiled at waves 1."""
    from harness.static import space
    from verify_kernels import planner

    units = {"BLOCK_N": 32, "kv_splits": 0, "waves": 2}
    key = space._compile_key
    assert key(units) == key({**units, "waves": 1}) == key({**units, "kv_splits": 8, "waves": 0})
    assert key({**units, "waves": 0}) != key(units)
    # A candidate without the planner's keys (cuda_ws's space tunes none) is keyed at its defaults: spans.
    ws = space.resolve("cuda_ws", "sm_90")
    assert planner.walks_spans(ws.defaults)
    assert space.compile_key(ws, {"BLOCK_N": 32}) == key({"BLOCK_N": 32, "kv_splits": 0, "waves": 0})
    assert space.compile_key(ws, {"BLOCK_N": 32, "waves": 2}) == key(units)

    compiled = []
    row = {"registers": 1, "spill_store_bytes": 0, "spill_load_bytes": 0, "shared_bytes": 1, "blocks_per_sm": 1,
           "occupancy": 0.1, "limiter": "", "feasible": True, "reason": ""}
    monkeypatch.setattr(space, "STATIC_CACHE_DIR", tmp_path)
    monkeypatch.setattr(space, "static_rows", lambda target, configs: compiled.extend(configs) or [row])
    target = space.resolve("gluon_wgmma_ws", "sm_90")
    result = space.static_feasibility(target, progress=False)
    spans = {key(c.config) for c in result if c.feasible and planner.walks_spans(c.config)}
    assert spans and len(spans) < len({key(c.config) for c in result if c.feasible}), "both rules in the space"
    assert {key(c) for c in compiled if planner.walks_spans(c)} == spans
    assert all(c["kv_splits"] == 0 and c["waves"] in (planner.SPANS, 1) for c in compiled), compiled


def test_a_space_with_same_as_is_the_other_variants_space_under_its_own_name(tmp_path, monkeypatch):
    """gluon_wgmma_sym's file says `same_as: gluon_wgmma_ws` (its searched config keys are ws's): the space is ws's,
    whole, with its own variant name; tunables of its own join ws's; a same_as naming no file, or a chain of them, is
    refused with the file's name."""
    import shutil

    from harness.static import space

    sym, ws = space.load_space("gluon_wgmma_sym", "sm_90"), space.load_space("gluon_wgmma_ws", "sm_90")
    assert sym["variant"] == "gluon_wgmma_sym" and "same_as" not in sym
    assert {k: v for k, v in sym.items() if k != "variant"} == {k: v for k, v in ws.items() if k != "variant"}
    assert sym["tunables"]["BLOCK_N"] == [32, 64]  # the constant name resolved, not copied as text

    shutil.copy(space.SPACES_DIR / "gluon_wgmma_ws.yaml", tmp_path)
    monkeypatch.setattr(space, "SPACES_DIR", tmp_path)
    (tmp_path / "gluon_wgmma_sym.yaml").write_text("variant: gluon_wgmma_sym\nsame_as: gluon_wgmma_ws\n"
                                                   "tunables:\n  extra_key: [0, 1]\n")
    assert space.load_space("gluon_wgmma_sym", "sm_90")["tunables"] == {**ws["tunables"], "extra_key": [0, 1]}
    (tmp_path / "gluon_wgmma_sym.yaml").write_text("variant: gluon_wgmma_sym\nsame_as: no_such_variant\n")
    with pytest.raises(ValueError, match="same_as names 'no_such_variant'"):
        space.load_space("gluon_wgmma_sym", "sm_90")
    (tmp_path / "gluon_wgmma_ws.yaml").write_text("variant: gluon_wgmma_ws\nsame_as: gluon_wgmma\n")
    (tmp_path / "gluon_wgmma_sym.yaml").write_text("variant: gluon_wgmma_sym\nsame_as: gluon_wgmma_ws\n")
    with pytest.raises(ValueError, match="itself a same_as"):
        space.load_space("gluon_wgmma_sym", "sm_90")
