"""Peers beside our variants: each causal peer is handed our problem (checked through a model of its
semantics on its own arguments), a peer that cannot run says why, and vk report --peers."""

import pytest
import torch

from conftest import DEVICE


def test_sdpa_peer_matches_oracle():
    from harness.bench.peers import PEERS
    from verify_kernels import make_problem, reference_attention

    problem = make_problem([70, 5], 9, 2, page_size=16, seed=1, device=DEVICE)
    out = PEERS["sdpa_gathered"](problem)()
    reference = reference_attention(*problem.arguments(), **problem.kwargs())
    assert float((out.double() - reference.double()).norm() / reference.double().norm()) < 1e-2


def _relative(a, b) -> float:
    a, b = a.double().reshape(b.shape), b.double()
    return float((a - b).norm() / b.norm())


@pytest.mark.parametrize("page_size", [64, 16, 1])
@pytest.mark.parametrize("peer", ["flash_mla", "flashinfer"])
def test_each_causal_peer_is_handed_our_chain_problem(peer, page_size):
    """On a chain tree the peer's arguments, read the way the peer reads them (causal over s_q = T
    after kv_len - T keys), give the oracle's output; on a random tree they do not, so a layout or
    causal-offset slip in the adapter fails here."""
    from harness.bench.peers import flash_mla, flashinfer_mla
    from verify_kernels import make_problem, reference_attention

    def peer_output(problem):
        if peer == "flash_mla":
            return flash_mla.causal_paged_reference(**flash_mla.inputs(problem))
        return flashinfer_mla.causal_paged_reference(flashinfer_mla.inputs(problem))

    chain = make_problem([70, 133], 9, 3, page_size=page_size, tree="chain", seed=2)  # ragged, odd, NaN slots
    assert _relative(peer_output(chain), reference_attention(*chain.arguments(), **chain.kwargs())) < 1e-6
    bushy = make_problem([70, 133], 9, 3, page_size=page_size, tree="random", seed=2)
    assert _relative(peer_output(bushy), reference_attention(*bushy.arguments(), **bushy.kwargs())) > 1e-3


def test_peer_inputs_are_views_of_our_pool():
    """The peers read our pool in place (same memory, same rows), not a copy laid out for them."""
    from harness.bench.peers import flash_mla, flashinfer_mla
    from verify_kernels import make_problem

    problem = make_problem([100], 16, 8, page_size=64, tree="chain", seed=3)
    assert flash_mla.inputs(problem)["k_cache"].data_ptr() == problem.kv_cache.data_ptr()
    arguments = flashinfer_mla.inputs(problem)
    assert arguments["ckv_cache"].data_ptr() == problem.kv_cache.data_ptr()
    assert arguments["kpe_cache"].data_ptr() == problem.kv_cache.data_ptr() + 512 * problem.kv_cache.element_size()
    assert arguments["kv_indptr"].tolist() == [0, 2] and arguments["kv_len_arr"].tolist() == [116]


def test_is_causal_tells_chains_from_trees():
    from harness.bench.peers import is_causal
    from verify_kernels import make_problem

    assert is_causal(make_problem([10, 20], 7, 1, tree="chain"))
    assert not is_causal(make_problem([10, 20], 7, 1, tree="star"))
    assert not is_causal(make_problem([10], 7, 1, tree="random", seed=4))


@pytest.mark.parametrize("name", ["flash_mla", "flashinfer_fa2", "flashinfer_fa3"])
def test_a_causal_peer_says_why_it_cannot_run(name):
    from harness.bench.peers import PEERS, PeerUnavailable
    from verify_kernels import make_problem

    with pytest.raises(PeerUnavailable, match="takes no tree mask"):
        PEERS[name](make_problem([70], 9, 2, tree="random", seed=1))
    with pytest.raises(PeerUnavailable, match="Dqk 576"):
        PEERS[name](make_problem([70], 9, 2, tree="chain", head_dim=192, v_dim=128))
    if name == "flash_mla":
        with pytest.raises(PeerUnavailable, match="page size must be 64"):
            PEERS[name](make_problem([70], 9, 2, tree="chain", page_size=16))
    if not torch.cuda.is_available():
        with pytest.raises(PeerUnavailable, match="needs a CUDA GPU"):
            PEERS[name](make_problem([70], 9, 2, tree="chain"))


@pytest.mark.parametrize("name, module", [("flash_mla", "flash_mla"), ("flashinfer_fa2", "flashinfer_mla")])
def test_a_peer_that_is_not_installed_gives_a_row_with_its_reason(name, module, monkeypatch):
    """Not installed: the bench row says so (status unavailable), nothing crashes."""
    import importlib

    from harness.bench import peers, sweep
    from verify_kernels import make_problem, reference_attention

    peer_module = importlib.import_module(f"harness.bench.peers.{module}")
    monkeypatch.setattr(peer_module, "require_cuda_arch", lambda *args: None)

    def missing(package):
        raise ImportError(f"No module named {package!r}")

    monkeypatch.setattr(peers.base.importlib, "import_module", missing)
    problem = make_problem([70], 9, 2, tree="chain", seed=1)
    point = sweep.BenchPoint(name, 70, 9, 2, 64, tree="chain")
    row = sweep.bench_point(point, problem, reference_attention(*problem.arguments(), **problem.kwargs()),
                            None, mode="graph", rep_ms=10)
    assert row["status"] == "unavailable" and "not installed" in row["reason"]
    assert row["implementation"] == "peer" and name in peers.PEERS


def test_flex_failure_cache_keys_on_the_whole_shape():
    """A failure at one prefix length must not skip FlexAttention at another (it once did)."""
    from harness.bench.peers.torch_peers import flex_shape_key
    from verify_kernels import make_problem

    short, long = make_problem([4096], 16, 8), make_problem([32768], 16, 8)
    assert flex_shape_key(short) != flex_shape_key(long)
    assert flex_shape_key(short) == flex_shape_key(short.with_page_size(16))


def test_sweep_points_cover_tree_kinds():
    from harness.bench.sweep import sweep_points

    points = sweep_points(["flash_mla", "sdpa_gathered"], [4096], [16], [8], [64], trees=["chain", "random"])
    assert {(p.variant, p.tree) for p in points} == {(v, t) for v in ("flash_mla", "sdpa_gathered")
                                                      for t in ("chain", "random")}


def _row(variant, median, implementation, tree="chain", length=4096, heads=8, status="ok"):
    return {"kind": "bench", "variant": variant, "implementation": implementation, "prefix_len": length,
            "tree_nodes": 64, "heads": heads, "batch": 1, "page_size": 64, "tree": tree, "status": status,
            "median_ms": median if status == "ok" else None, "pct_roofline": 50.0}


def test_peers_report_says_ahead_or_behind_per_shape():
    from harness.bench.peers_report import ahead_or_behind, peers_sections, portable_race

    records = [_row("gluon_wgmma_ws", 0.10, "variant"), _row("cuda_ws", 0.30, "variant"),
               _row("flash_mla", 0.08, "peer"), _row("flashinfer_fa2", 0.40, "peer"),
               _row("gluon_wgmma_ws", 1.0, "variant", length=131072), _row("flash_mla", 1.5, "peer", length=131072),
               _row("flashinfer_fa3", 0.01, "peer", length=131072, status="wrong"),   # never competes
               _row("cuda_ws", 1.0, "variant", tree="random"), _row("sdpa_gathered", 9.0, "peer", tree="random")]
    rows = {(r["shape"][0], r["shape"][1][0]): r for r in ahead_or_behind(records)}  # shape L: the lengths
    assert rows[("chain", 4096)]["verdict"] == "behind" and rows[("chain", 4096)]["ratio"] == pytest.approx(0.8)
    assert rows[("chain", 131072)]["verdict"] == "ahead" and rows[("chain", 131072)]["peer"]["variant"] == "flash_mla"
    assert rows[("random", 4096)]["ratio"] == pytest.approx(9.0)
    race = portable_race(records)
    assert len(race) == 1 and race[0]["ours"]["variant"] == "cuda_ws" and race[0]["ratio"] == pytest.approx(4 / 3)
    text = "\n".join(peers_sections(records))
    assert "Ahead at 2 of 3 shapes, behind at 1" in text and "flash_mla, x0.80" in text
    assert "The portable race" in text


def test_resume_skips_the_points_a_file_already_holds(tmp_path):
    """vk bench --resume: a sweep cut short goes on where it stopped (any status counts as done)."""
    from dataclasses import asdict

    from harness.bench.sweep import recorded_points, sweep_points
    from harness.measure import records

    points = sweep_points(["cuda_ws", "flash_mla"], [4096, 32768], [16], [8], [64], trees=["chain"],
                          configs=[{"STAGES": 3}])
    path = tmp_path / "bench.jsonl"
    for point in points[:3]:
        payload = {**asdict(point), "config": dict(point.config), "status": "unavailable", "reason": "x"}
        records.append_records(path, [records.make_record("bench", payload)])
    done = recorded_points(records.read_records(path))
    assert [p for p in points if p not in done] == points[3:]
    assert points[0].config == (("STAGES", 3),)


# The shape of FlashInfer's launch-time dispatch in mla.cuh (a fixture of its form, with made-up tiles for the
# middle branch): a threshold on the shared memory per SM the launch reads, then the tiles of that branch.
_DISPATCH = """
  cudaDeviceGetAttribute(&smem_limit_per_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, device);
#define DISPATCH_SMEM_CONFIG(smem_limit_per_sm, NUM_STAGES, CTA_TILE_KV, QK_SHARD, ...) \\
  if (smem_limit_per_sm >= 221696) {         \\
    constexpr uint32_t NUM_STAGES = 2;       \\
    constexpr uint32_t CTA_TILE_KV = 64;     \\
    constexpr bool QK_SHARD = true;          \\
    __VA_ARGS__;                             \\
  } else if (smem_limit_per_sm >= 147968) {  \\
    constexpr uint32_t NUM_STAGES = 3;       \\
    constexpr uint32_t CTA_TILE_KV = 32;     \\
    constexpr bool QK_SHARD = true;          \\
    __VA_ARGS__;                             \\
  } else if (smem_limit_per_sm >= 92672) {   \\
    constexpr uint32_t NUM_STAGES = 1;       \\
    constexpr uint32_t CTA_TILE_KV = 16;     \\
    constexpr bool QK_SHARD = false;         \\
    __VA_ARGS__;                             \\
  } else {                                   \\
"""


def test_fa2_config_reads_the_branch_its_launch_takes():
    """FlashInfer fa2's tiles follow the shared memory per SM its launch reads: the GPU's, or the value a
    marked line forces (fa2_as_arch in scripts/gpu_peers_env.sh); an unparsed header says so."""
    from harness.bench.peers.flashinfer_mla import FORCED_MARK, fa2_config

    h200 = {"smem_per_sm": 233472, "smem_forced": False, "NUM_STAGES": 2, "CTA_TILE_KV": 64, "QK_SHARD": True}
    assert fa2_config(_DISPATCH, 233472) == h200
    assert fa2_config(_DISPATCH, 150000)["NUM_STAGES"] == 3
    sm120 = {"smem_per_sm": 102400, "NUM_STAGES": 1, "CTA_TILE_KV": 16, "QK_SHARD": False}
    assert fa2_config(_DISPATCH, 102400) == {**sm120, "smem_forced": False}
    line = "MaxSharedMemoryPerMultiprocessor, device);"
    forced = _DISPATCH.replace(line, f"{line} smem_limit_per_sm = 102400; /* {FORCED_MARK} */")
    assert fa2_config(forced, 233472) == {**sm120, "smem_forced": True}
    assert "below every threshold" in fa2_config(_DISPATCH, 65536)["tiles"]
    assert fa2_config("no dispatch here", 233472)["tiles"].startswith("unread")


@pytest.mark.parametrize("config, runs", [
    ({"smem_per_sm": 102400, "smem_forced": True, "NUM_STAGES": 1, "CTA_TILE_KV": 16, "QK_SHARD": False}, True),
    ({"smem_per_sm": 233472, "smem_forced": False, "NUM_STAGES": 2, "CTA_TILE_KV": 64, "QK_SHARD": True}, False),
    ({}, False),
    ({"smem_per_sm": 102400, "tiles": "unread: no mla.cuh"}, False),
])
def test_a_peer_stands_as_a_proxy_only_with_the_arch_config(config, runs, monkeypatch):
    """--proxy-for sm_120: a peer's row is a proxy run only where its call says it ran sm_120's config (the
    shared memory per SM its launch read is sm_120's 100 KB); otherwise the row is unavailable, with why,
    before anything is run."""
    from harness.bench import peers, sweep
    from verify_kernels import make_problem, reference_attention

    assert (sweep.proxy_peer_problem("flashinfer_fa2", config, "sm_120") is None) == runs
    if runs:
        return
    ran = []

    def fake_peer(problem):
        def call():
            ran.append(True)
            return torch.zeros(1)
        call.config = config
        return call

    monkeypatch.setitem(peers.PEERS, "flashinfer_fa2", fake_peer)
    problem = make_problem([70], 9, 2, tree="chain", seed=1)
    point = sweep.BenchPoint("flashinfer_fa2", 70, 9, 2, 64, tree="chain")
    row = sweep.bench_point(point, problem, reference_attention(*problem.arguments(), **problem.kwargs()), None,
                            mode="graph", rep_ms=10, proxy_for="sm_120")
    assert row["status"] == "unavailable" and "102400 bytes of shared memory per SM" in row["reason"] and not ran
    assert row["resolved_config"] == config
