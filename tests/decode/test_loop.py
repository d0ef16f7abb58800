"""The DDTree decode loop and plain greedy decoding: tokens, phases, timing modes, device drafting."""

import statistics
import subprocess
import sys

import pytest
import torch

from harness.decode.drafters import NgramDrafter, OracleDrafter
from harness.decode.loop import compare_tokens, ddtree_decode
from harness.decode.run import build_model, build_setup, decode_once, greedy_reference, make_prompt
from harness.decode.target_runner import TargetRunner

from conftest import HAS_CUDA
from decode_setup import _setup, tiny_model  # noqa: F401 (tiny_model: a fixture)


@pytest.mark.parametrize("context, page_size", [(0, 1), (37, 16), (130, 64), (64, 64)])
@pytest.mark.parametrize("drafter", ["oracle", "ngram"])
def test_ddtree_tokens_identical_to_greedy_in_float32(tiny_model, context, page_size, drafter):
    setup = _setup(tiny_model, context=context, page_size=page_size)
    greedy = greedy_reference(setup, variant="reference", new_tokens=30 + 16)
    result = decode_once(setup, variant="reference", drafter_name=drafter, budget=29, new_tokens=30, block_size=16,
                         temperature=0.0, seed=0, greedy=greedy)
    assert result["lossless"]["identical"], result["lossless"]
    assert result["new_tokens"] == 30 and sum(s["new_tokens"] for s in result["steps_detail"]) >= 30
    if drafter == "oracle":
        assert result["mean_accepted"] > 1.5, "the oracle drafter's trees were never accepted"
    # the cache is back at its starting length, with the pages past it returned
    assert setup.cache.prefix_len == setup.start_len
    assert len(setup.cache.pages) == -(-setup.start_len // page_size)


def test_padded_greedy_equals_plain_greedy_in_float32(tiny_model):
    """Greedy forwards padded to a budget (the batch-invariant reference) decode the same tokens:
    the padding leaves are never committed and their logits never read."""
    setup = _setup(tiny_model, context=37, page_size=16)
    plain = greedy_reference(setup, variant="reference", new_tokens=20)
    padded = greedy_reference(setup, variant="reference", new_tokens=20, rows=13)
    assert padded.tokens == plain.tokens
    assert setup.cache.prefix_len == setup.start_len


def test_perfect_oracle_accepts_whole_blocks(tiny_model):
    setup = _setup(tiny_model, context=20, page_size=16)
    greedy = greedy_reference(setup, variant="reference", new_tokens=40)
    drafter = OracleDrafter(setup.history + greedy.tokens, tiny_model.config.vocab, p_first=1.0, decay=1.0, seed=1)
    run = ddtree_decode(TargetRunner(tiny_model, setup.cache, attention="reference"), setup.history, 24, drafter,
                        budget=12, block_size=8)
    assert [s.new_tokens for s in run.steps] == [9, 9, 9]  # 8 drafted + the bonus, every step
    assert compare_tokens(run.tokens, greedy)["identical"]


def test_sampling_walk_is_seeded_and_stays_in_vocabulary(tiny_model):
    setup = _setup(tiny_model, context=10, page_size=16)
    drafter = NgramDrafter()
    runs = [ddtree_decode(TargetRunner(tiny_model, setup.cache, attention="reference"), setup.history, 12, drafter,
                          budget=16, temperature=0.8, seed=5) for _ in range(2)]
    assert runs[0].tokens == runs[1].tokens
    assert all(0 <= t < tiny_model.config.vocab for t in runs[0].tokens)


def test_overlapped_and_synced_phase_timing_decode_the_same_tokens(tiny_model):
    """The default timing (one wait per step) and the synced one give the same tokens; overlapped
    steps are timed start to start, synced steps are the sum of their phases."""
    setup = _setup(tiny_model, context=37, page_size=16)
    greedy = greedy_reference(setup, variant="reference", new_tokens=20 + 16)
    runs = {sync: decode_once(setup, variant="reference", drafter_name="oracle", budget=17, new_tokens=20,
                              block_size=16, temperature=0.0, seed=0, greedy=greedy, sync_phases=sync)
            for sync in (False, True)}
    assert runs[False]["tokens"] == runs[True]["tokens"] and runs[False]["lossless"]["identical"]
    assert (runs[False]["phase_timing"], runs[True]["phase_timing"]) == ("overlapped", "synced")
    for step in runs[False]["steps_detail"]:
        assert step["wall_ms"] > 0 and set(step["phases_ms"]) == {"draft", "tree", "mask", "verify", "walk", "commit"}
        assert step["wall_ms"] >= step["phases_ms"]["draft"] + step["phases_ms"]["tree"]
    for step in runs[True]["steps_detail"]:
        assert step["wall_ms"] is None
    synced = [sum(s["phases_ms"].values()) for s in runs[True]["steps_detail"]]
    assert runs[True]["median_step_ms"] == pytest.approx(statistics.median(synced))
    walls = [s["wall_ms"] for s in runs[False]["steps_detail"]]
    assert runs[False]["median_step_ms"] == pytest.approx(statistics.median(walls))


def _gpu_ws_setup(*, max_new):
    """The tiny preset in bf16 on the GPU with 300 context rows, prefilled with gluon_wgmma_ws, and
    its greedy run (40 tokens); skips off Hopper."""
    if torch.cuda.get_device_capability()[0] != 9:
        pytest.skip("gluon_wgmma_ws needs a Hopper GPU")
    model = build_model("tiny", seed=3, dtype=torch.bfloat16, device="cuda")
    setup = build_setup(model, make_prompt(model.config, None, 9, 3), context=300, max_new=max_new, max_tree=40,
                        page_size=64, seed=3, prefill_variant="gluon_wgmma_ws")
    return setup, greedy_reference(setup, variant="gluon_wgmma_ws", new_tokens=40)


@pytest.mark.gpu
def test_gpu_overlapped_timing_keeps_the_tokens_and_times_the_commit_on_the_gpu():
    setup, greedy = _gpu_ws_setup(max_new=48)
    runs = [decode_once(setup, variant="gluon_wgmma_ws", drafter_name="oracle", budget=32, new_tokens=24,
                        block_size=16, temperature=0.0, seed=0, greedy=greedy, sync_phases=sync)
            for sync in (False, True)]
    assert runs[0]["tokens"] == runs[1]["tokens"]
    assert all(s["wall_ms"] > 0 and s["phases_ms"]["commit"] > 0 for s in runs[0]["steps_detail"])


@pytest.mark.gpu
@pytest.mark.parametrize("variant", ["triton_splitkv", "cuda_coalesced", "triton_ps1", "gluon_wgmma_ws"])
def test_gpu_graph_replay_matches_eager_decode(variant):
    if variant == "cuda_coalesced":
        pytest.importorskip("cupy")
    if variant.startswith("gluon_wgmma") and torch.cuda.get_device_capability()[0] != 9:
        pytest.skip(f"{variant} needs a Hopper GPU")
    from harness.decode.run import page_size_for

    model = build_model("tiny", seed=3, dtype=torch.bfloat16, device="cuda")
    prompt = make_prompt(model.config, None, 9, 3)
    setup = build_setup(model, prompt, context=300, max_new=48, max_tree=40, page_size=page_size_for(variant, 64),
                        seed=3, prefill_variant=variant)
    greedy = greedy_reference(setup, variant=variant, new_tokens=40)
    runs = [decode_once(setup, variant=variant, drafter_name="oracle", budget=32, new_tokens=24, block_size=16,
                        temperature=0.0, seed=0, greedy=greedy, use_graphs=graphs) for graphs in (True, False)]
    assert runs[0]["graphs"] and not runs[1]["graphs"]
    assert runs[0]["tokens"] == runs[1]["tokens"]
    lossless = runs[0]["lossless"]  # bf16: only a near-tie of the greedy run may differ
    assert lossless["identical"] or lossless["greedy_top2_margin_at_divergence"] < 0.25, lossless


@pytest.mark.skipif(HAS_CUDA, reason="the CPU path")
def test_cpu_refuses_kernel_variants():
    completed = subprocess.run([sys.executable, "-m", "harness", "decode", "--device", "cpu", "--variants", "auto",
                                "--no-progress"], capture_output=True, text=True, timeout=120)
    assert completed.returncode != 0 and "only --variants reference" in completed.stderr


def test_compare_tokens_reports_the_margin_where_decodes_part():
    from harness.decode.loop import DecodeRun

    greedy = DecodeRun(tokens=[5, 6, 7, 8], margins=[2.0, 0.01, 0.5, 3.0], top_logits=[9.0, 8.0, 7.0, 6.0])
    assert compare_tokens([5, 6, 7, 8, 9], greedy) == {"compared": 4, "identical": True, "first_divergence": None,
                                                       "matching_prefix": 4}
    parted = compare_tokens([5, 1, 7, 8], greedy)
    assert parted["first_divergence"] == 1 and parted["greedy_top2_margin_at_divergence"] == 0.01
    assert parted["margin_rank_at_divergence"] == 0 and parted["greedy_top1_logit_at_divergence"] == 8.0


def test_drafter_gets_the_accepted_paths_hidden_states(tiny_model):
    setup = _setup(tiny_model, context=12, page_size=16)
    greedy = greedy_reference(setup, variant="reference", new_tokens=30)
    oracle = OracleDrafter(setup.history + greedy.tokens, tiny_model.config.vocab, seed=2)
    seen = []

    class Recording:
        name = "recording"

        def draft(self, history, block_size, hidden=None):
            seen.append(None if hidden is None else tuple(hidden.shape))
            return oracle.draft(history, block_size)

    run = ddtree_decode(TargetRunner(tiny_model, setup.cache, attention="reference"), setup.history, 20, Recording(),
                        budget=16, block_size=8)
    assert seen[0] is None and len(seen) == len(run.steps)
    accepted = [s.new_tokens for s in run.steps]  # accepted path = root + drafted tokens = new tokens this step
    assert seen[1:] == [(n, tiny_model.config.hidden) for n in accepted[:-1]]


@pytest.mark.parametrize("context, page_size, budget", [(0, 1, 17), (37, 16, 24), (130, 64, 40)])
def test_device_drafting_decodes_the_greedy_tokens_and_returns_the_pages(tiny_model, context, page_size, budget):
    """Draft, tree and mask on the device with the host one step behind: the greedy tokens, every
    phase timed, and the cache (pages, prefix length) as it was before the run."""
    setup = _setup(tiny_model, context=context, page_size=page_size)
    greedy = greedy_reference(setup, variant="reference", new_tokens=30 + 16)
    pages, prefix = list(setup.cache.pages), setup.cache.prefix_len
    result = decode_once(setup, variant="reference", drafter_name="oracle", budget=budget, new_tokens=30,
                         block_size=16, temperature=0.0, seed=0, greedy=greedy, draft_on="device")
    assert result["draft_on"] == "device" and result["lossless"]["identical"], result["lossless"]
    assert len(result["tokens"]) == 30 and result["mean_accepted"] > 1.5
    for step in result["steps_detail"]:
        assert step["wall_ms"] > 0 and set(step["phases_ms"]) == {"draft", "tree", "mask", "verify", "walk", "commit"}
        assert step["tree_nodes"] == budget
    assert setup.cache.pages == pages and setup.cache.prefix_len == prefix
    assert int(setup.cache.prefix_lens[0]) == prefix


@pytest.mark.gpu
def test_gpu_device_drafting_matches_the_host_loops_tokens():
    """On the GPU the device loop's graphs (draft, tree, mask, verify, walk, commit) decode the
    greedy tokens as the host loop does, every phase has a GPU time, and the cache is left as it was."""
    setup, greedy = _gpu_ws_setup(max_new=64)
    pages = list(setup.cache.pages)
    runs = [decode_once(setup, variant="gluon_wgmma_ws", drafter_name="oracle", budget=32, new_tokens=24,
                        block_size=16, temperature=0.0, seed=0, greedy=greedy, draft_on=where)
            for where in ("host", "device")]
    for run in runs:  # bf16: only a near-tie of the greedy run may differ
        lossless = run["lossless"]
        assert lossless["identical"] or lossless["greedy_top2_margin_at_divergence"] < 0.25, lossless
    assert all(s["wall_ms"] > 0 and min(s["phases_ms"].values()) > 0 for s in runs[1]["steps_detail"])
    assert setup.cache.pages == pages and int(setup.cache.prefix_lens[0]) == setup.start_len
