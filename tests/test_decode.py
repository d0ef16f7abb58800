"""The end-to-end DDTree decode loop on the tiny MLA preset: lossless against greedy decoding
(CPU, float32, attention through the float64 oracle), drafters, weights and the page allocator."""

import json
import statistics
import subprocess
import sys

import pytest
import torch

from harness.decode.loop import compare_tokens, ddtree_decode, greedy_decode
from harness.decode.run import build_model, build_setup, decode_once, greedy_reference, make_prompt
from harness.decode.drafters import NgramDrafter, OracleDrafter
from harness.decode.kv_pool import PageAllocator, PagedKVCache
from harness.decode.model import PRESETS, MLAModel, load_weights, random_weights, to_deepseek_tensors
from harness.decode.target_runner import TargetRunner

from conftest import HAS_CUDA


@pytest.fixture(scope="module")
def tiny_model():
    return build_model("tiny", seed=3, dtype=torch.float32, device="cpu")


def _setup(model, *, context, page_size, prompt_len=9, seed=3):
    prompt = make_prompt(model.config, None, prompt_len, seed)
    return build_setup(model, prompt, context=context, max_new=48, max_tree=40, page_size=page_size, seed=seed,
                       prefill_variant="reference")


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


def test_accepted_commit_moves_the_path_in_every_layer(tiny_model):
    """AcceptedCommit (the decode loop's commit phase) writes the path's rows at prefix_len + i in
    every layer, returns the path's hidden states, and leaves the rows before the prefix alone."""
    from harness.decode.commit_graph import AcceptedCommit

    cache = PagedKVCache.for_tokens(3, 200, 16, 8, dtype=torch.float32, device="cpu")
    cache.reserve(70)
    cache.pool.copy_(torch.randn(cache.pool.shape, generator=torch.Generator().manual_seed(0)))
    cache.set_prefix_len(37)
    slots = cache.slots(torch.arange(70))
    before = cache.pool.view(3, -1, 8)[:, slots].clone()  # [layers, position, D]
    hidden = torch.randn(20, 5)
    accepted = [0, 2, 3, 9]  # later targets are earlier sources: the gather must come first
    features = AcceptedCommit(cache, budget=20)(accepted, hidden)
    after = cache.pool.view(3, -1, 8)[:, slots]
    assert torch.equal(features, hidden[accepted])
    assert torch.equal(after[:, :37], before[:, :37])
    for i, node in enumerate(accepted):
        assert torch.equal(after[:, 37 + i], before[:, 37 + node]), f"path entry {i}"
    with pytest.raises(ValueError, match="the root"):
        AcceptedCommit(cache, budget=4)([1, 2], hidden)


def test_greedy_walk_and_commit_on_the_device_path(tiny_model):
    """start_greedy / finish_greedy (the greedy decode's walk and commit, no path upload): the path
    and bonus of walk(), the path's rows moved in every layer, padding never accepted."""
    from harness.decode.commit_graph import AcceptedCommit
    from harness.decode.tree import DraftTree, walk
    from verify_kernels import trees

    cache = PagedKVCache.for_tokens(3, 200, 16, 8, dtype=torch.float32, device="cpu")
    cache.reserve(70)
    cache.pool.copy_(torch.randn(cache.pool.shape, generator=torch.Generator().manual_seed(0)))
    cache.set_prefix_len(37)
    slots = cache.slots(torch.arange(70))
    before = cache.pool.view(3, -1, 8)[:, slots].clone()
    # root(5) -> 1:(8) -> 3:(6) -> 4:(2); root -> 2:(9); nodes 5, 6 pad the tree to the budget of 7
    parents, tokens = [-1, 0, 0, 1, 3, 0, 0], [5, 8, 9, 6, 2, 0, 0]
    picks = torch.tensor([8, 6, 1, 2, 44, 3, 3])
    count = 5
    expected = walk(DraftTree(torch.tensor(tokens[:count]), torch.tensor(parents[:count]), torch.zeros(count),
                              torch.zeros(count)), picks[:count])
    assert expected == ([0, 1, 3, 4], 44)
    hidden = torch.randn(7, 5)
    commit = AcceptedCommit(cache, budget=7)
    commit.start_greedy((torch.tensor(tokens), torch.tensor(parents), picks, trees.ancestor_words(parents),
                         torch.tensor([count])), hidden)
    accepted, bonus, features = commit.finish_greedy()
    assert (accepted, bonus) == expected
    assert torch.equal(features, hidden[accepted])
    after = cache.pool.view(3, -1, 8)[:, slots]
    assert torch.equal(after[:, :37], before[:, :37])
    for i, node in enumerate(accepted):
        assert torch.equal(after[:, 37 + i], before[:, 37 + node]), f"path entry {i}"
    with pytest.raises(RuntimeError, match="no greedy walk"):
        AcceptedCommit(cache, budget=7).finish_greedy()


@pytest.mark.gpu
def test_gpu_commit_warm_captures_the_graph_once_and_leaves_the_rows():
    """The decode loop warms the commit before timing: warm() captures its graph (the root copied
    onto itself, so no row moves), and the first real commit replays that graph."""
    from harness.decode.commit_graph import AcceptedCommit

    cache = PagedKVCache.for_tokens(3, 200, 16, 8, dtype=torch.bfloat16, device="cuda")
    cache.reserve(70)
    cache.pool.copy_(torch.randn(cache.pool.shape, device="cuda"))
    cache.set_prefix_len(37)
    slots = cache.slots(torch.arange(70, device="cuda"))
    before = cache.pool.view(3, -1, 8)[:, slots].clone()
    hidden = torch.randn(20, 5, device="cuda")
    commit = AcceptedCommit(cache, budget=20)
    commit.warm(hidden)
    graph = commit._graph
    assert graph is not None
    assert torch.equal(cache.pool.view(3, -1, 8)[:, slots], before)
    accepted = [0, 2, 3, 9]
    features = commit(accepted, hidden)
    assert commit._graph is graph
    after = cache.pool.view(3, -1, 8)[:, slots]
    assert torch.equal(features, hidden[accepted])
    assert torch.equal(after[:, :37], before[:, :37])
    for i, node in enumerate(accepted):
        assert torch.equal(after[:, 37 + i], before[:, 37 + node]), f"path entry {i}"


def test_perfect_oracle_accepts_whole_blocks(tiny_model):
    setup = _setup(tiny_model, context=20, page_size=16)
    greedy = greedy_reference(setup, variant="reference", new_tokens=40)
    drafter = OracleDrafter(setup.history + greedy.tokens, tiny_model.config.vocab, p_first=1.0, decay=1.0, seed=1)
    run = ddtree_decode(TargetRunner(tiny_model, setup.cache, attention="reference"), setup.history, 24, drafter,
                        budget=12, block_size=8)
    assert [s.new_tokens for s in run.steps] == [9, 9, 9]  # 8 drafted + the bonus, every step
    assert compare_tokens(run.tokens, greedy)["identical"]


def test_oracle_ranks_the_true_token_first_at_the_calibrated_rate():
    reference = list(range(1000, 3000))
    drafter = OracleDrafter(reference, vocab=5000, p_first=0.7, decay=0.8, seed=0)
    first = {1: 0, 4: 0}
    trials = 600
    for start in range(trials):
        block = drafter.draft(reference[:start + 1], 4)
        for depth in first:
            first[depth] += int(block.top_tokens[depth - 1, 0]) == reference[start + depth]
        assert torch.all(block.top_logprobs[:, 1:] <= block.top_logprobs[:, :-1])
    assert abs(first[1] / trials - 0.7) < 0.06
    assert abs(first[4] / trials - 0.7 * 0.8 ** 3) < 0.06


def test_ngram_drafter_proposes_what_followed_the_suffix():
    history = [5, 6, 7, 8, 9, 1, 2, 5, 6, 7]
    block = NgramDrafter(max_n=3, top_k=2).draft(history, 4)
    assert block.top_tokens[:, 0].tolist() == [8, 9, 1, 2]
    assert NgramDrafter().draft([1, 2, 3], 4).top_tokens.shape[0] == 0  # no earlier occurrence: no draft


def test_sampling_walk_is_seeded_and_stays_in_vocabulary(tiny_model):
    setup = _setup(tiny_model, context=10, page_size=16)
    drafter = NgramDrafter()
    runs = [ddtree_decode(TargetRunner(tiny_model, setup.cache, attention="reference"), setup.history, 12, drafter,
                          budget=16, temperature=0.8, seed=5) for _ in range(2)]
    assert runs[0].tokens == runs[1].tokens
    assert all(0 <= t < tiny_model.config.vocab for t in runs[0].tokens)


def test_weights_round_trip_through_safetensors(tmp_path, tiny_model):
    from safetensors.torch import save_file

    config = PRESETS["tiny"]
    path = tmp_path / "tiny.safetensors"
    save_file(to_deepseek_tensors(config, tiny_model.weights), str(path))
    loaded = MLAModel(config, load_weights(path, config, dtype=torch.float32, device="cpu"))
    setups = [_setup(model, context=5, page_size=16) for model in (tiny_model, loaded)]
    runs = [greedy_decode(TargetRunner(s.model, s.cache, attention="reference"), s.history, 6) for s in setups]
    assert runs[0].tokens == runs[1].tokens and runs[0].margins == runs[1].margins
    tensors = to_deepseek_tensors(config, random_weights(config, seed=9, dtype=torch.float32, device="cpu"))
    tensors["model.layers.1.self_attn.kv_b_proj.weight"] = tensors["model.layers.1.self_attn.kv_b_proj.weight"][:-1]
    save_file(tensors, str(path))
    with pytest.raises(ValueError, match="kv_b_proj.weight: expected shape"):
        load_weights(path, config, dtype=torch.float32, device="cpu")


def test_page_allocator_and_cache_pages():
    allocator = PageAllocator(4)
    pages = allocator.allocate(3)
    assert pages == [0, 1, 2] and allocator.free_pages == 1
    with pytest.raises(MemoryError, match="2 more pages needed, 1 free of 4"):
        allocator.allocate(2)
    allocator.release(pages[1:])
    assert allocator.free_pages == 3
    cache = PagedKVCache(2, 8, 4, 576, dtype=torch.float32, device="cpu", max_pages=5)
    cache.reserve(10)
    assert cache.pages == [0, 1, 2] and cache.block_table[0, :3].tolist() == [0, 1, 2]
    cache.truncate(5)
    assert cache.pages == [0, 1] and cache.block_table[0].tolist() == [0, 1, 0, 0, 0]
    with pytest.raises(MemoryError, match="block table holds 5"):
        cache.reserve(21)
    assert torch.isnan(cache.pool).all(), "unwritten rows must be NaN"


def _vk_decode_tiny_cpu(out, *arguments: str, timeout: int = 300) -> subprocess.CompletedProcess:
    """``vk decode --preset tiny --device cpu ARGUMENTS --no-progress [--out OUT]`` in a subprocess."""
    command = [sys.executable, "-m", "harness", "decode", "--preset", "tiny", "--device", "cpu", *arguments,
               "--no-progress"] + (["--out", str(out)] if out is not None else [])
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout)


def test_vk_decode_tiny_cpu_check_lossless(tmp_path):
    out = tmp_path / "decode.jsonl"
    completed = _vk_decode_tiny_cpu(out, "--check-lossless", "--context", "50", "--budget", "24", "--new-tokens", "20",
                                    "--page-size", "16")
    assert completed.returncode == 0, completed.stderr[-2000:]
    assert "identical" in completed.stdout
    (record,) = [json.loads(line) for line in out.read_text().splitlines()]
    assert record["kind"] == "decode" and record["lossless"]["identical"] and "decode" in record["command"]
    assert set(record["mean_phase_ms"]) == {"draft", "tree", "mask", "verify", "walk", "commit"}


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
                        block_size=16, temperature=0.0, seed=0, greedy=greedy, sync_phases=sync) for sync in (False, True)]
    assert runs[0]["tokens"] == runs[1]["tokens"]
    assert all(s["wall_ms"] > 0 and s["phases_ms"]["commit"] > 0 for s in runs[0]["steps_detail"])


@pytest.mark.gpu
@pytest.mark.parametrize("variant", ["triton_splitkv", "cuda_coalesced", "triton_ps1", "gluon_wgmma", "gluon_wgmma_ws"])
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


def test_decode_report_table_speedups_and_plots(tmp_path):
    from harness.decode.report import speedups_over_baseline, write_decode_report
    from harness.measure.records import append_records

    out = tmp_path / "decode.jsonl"
    completed = _vk_decode_tiny_cpu(out, "--context", "20,40", "--budget", "8,24", "--new-tokens", "12",
                                    "--page-size", "16")
    assert completed.returncode == 0, completed.stderr[-2000:]
    records = [json.loads(line) for line in out.read_text().splitlines()]
    baseline = {**records[0], "variant": "triton_ps1", "median_step_ms": 2 * records[0]["median_step_ms"]}
    append_records(out, [baseline])
    assert speedups_over_baseline(records + [baseline]) == {0: pytest.approx(2.0)}
    written = write_decode_report([out], tmp_path / "report", "tiny")
    text = written[0].read_text()
    assert "2.0x faster than triton_ps1" in text and "best budget at context 20" in text
    assert all(path.stat().st_size > 1000 for path in written[1:])


def test_vk_decode_times_each_run_both_ways_and_the_report_keeps_the_overlapped_one(tmp_path):
    from harness.decode.report import primary_runs, write_decode_report

    out = tmp_path / "decode.jsonl"
    completed = _vk_decode_tiny_cpu(out, "--context", "20", "--budget", "8,24", "--new-tokens", "12", "--page-size",
                                    "16", "--phase-timing", "overlapped", "synced", "overlapped-blocking")
    assert completed.returncode == 0, completed.stderr[-2000:]
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(r["budget"], r["phase_timing"]) for r in records] == [
        (8, "overlapped"), (8, "synced"), (8, "overlapped-blocking"),
        (24, "overlapped"), (24, "synced"), (24, "overlapped-blocking")]
    assert records[0]["tokens"] == records[1]["tokens"] == records[2]["tokens"]
    assert "reference synced" in completed.stdout and "reference blocking" in completed.stdout
    older = {**records[1], "budget": 40}  # a synced record with no overlapped twin (older than the option)
    del older["phase_timing"]
    assert primary_runs(records + [older]) == [records[0], records[3], older]
    text = write_decode_report([out], tmp_path / "report", "tiny")[0].read_text()
    assert "best budget at context 20" in text


def test_vk_decode_repeats_each_run_and_the_report_gives_their_spread(tmp_path):
    from harness.decode.report import repeated_steps, write_decode_report

    out = tmp_path / "decode.jsonl"
    completed = _vk_decode_tiny_cpu(out, "--context", "20", "--budget", "8", "--new-tokens", "10", "--page-size", "16",
                                    "--repeats", "3")
    assert completed.returncode == 0, completed.stderr[-2000:]
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["repeat"] for r in records] == [0, 1, 2]
    assert records[0]["tokens"] == records[1]["tokens"] == records[2]["tokens"]
    steps = [r["median_step_ms"] for r in records]
    assert repeated_steps(records) == {(20, 8, "reference"): steps}
    text = write_decode_report([out], tmp_path / "report", "tiny")[0].read_text()
    assert f"3 runs, step median of the runs {statistics.median(steps):.2f} ms" in text
    bad = _vk_decode_tiny_cpu(None, "--repeats", "0", timeout=120)
    assert bad.returncode != 0 and "--repeats: expected at least 1, got 0" in bad.stderr


def test_vk_decode_fails_when_cpu_float32_tokens_differ(monkeypatch):
    import harness.decode.run
    from harness.cli import build_parser

    diverged = {"device": "cpu", "dtype": "float32", "context": 0, "variant": "reference", "budget": 8,
                "status": "error", "reason": "-", "lossless": {"identical": False}}
    monkeypatch.setattr(harness.decode.run, "run_matrix", lambda args, command: [{**diverged, "status": "ok"}])
    args = build_parser().parse_args(["decode", "--check-lossless", "--json"])
    assert args.func(args) == 1
    monkeypatch.setattr(harness.decode.run, "run_matrix",
                        lambda args, command: [{**diverged, "status": "ok", "dtype": "bfloat16", "device": "cuda"}])
    assert args.func(args) == 0  # bf16 on the GPU: reported, not failed


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


def test_rope_real_form_matches_the_complex_product():
    """apply_rope (real arithmetic, fusable) equals rotating the pairs (2i, 2i+1) as complex numbers."""
    from harness.decode.model import apply_rope, rope_tables

    generator = torch.Generator().manual_seed(5)
    x = torch.randn(7, 3, 64, generator=generator)
    positions = torch.tensor([0, 1, 5, 100, 4097, 131071, 185000])
    rotations = rope_tables(positions, 64, 10000.0)  # the same float32 angles for both forms
    assert torch.allclose(rotations[1, :, 0], torch.cos(1.0 / 10000.0 ** (torch.arange(32) / 32)))
    as_complex = torch.complex(rotations[..., 0].double(), rotations[..., 1].double())
    expected = torch.view_as_real(torch.view_as_complex(x.double().reshape(7, 3, 32, 2))
                                  * as_complex[:, None, :]).flatten(-2)
    got = apply_rope(x, rotations)
    torch.testing.assert_close(got.double(), expected, rtol=1e-5, atol=1e-5)
    assert not torch.allclose(got, x)


def test_compiled_layer_halves_match_eager(tiny_model):
    """torch.compile of the two halves of a layer (what --compile-layers runs) gives eager's
    numbers in float32, for two token counts (the second compiles with a dynamic T)."""
    from harness.decode.model import attention_inputs, layer_output, rope_tables

    config, layer = tiny_model.config, tiny_model.weights["layers"][1]
    compiled_inputs = torch.compile(attention_inputs, fullgraph=True)
    compiled_output = torch.compile(layer_output, fullgraph=True)
    generator = torch.Generator().manual_seed(6)
    for count in (5, 9):
        hidden = torch.randn(count, config.hidden, generator=generator)
        rotations = rope_tables(torch.arange(count) + 300, config.rope, config.rope_theta)
        latent_out = torch.randn(count, config.heads, config.kv_lora, generator=generator)
        for got, want in zip(compiled_inputs(hidden, layer, rotations, config),
                             attention_inputs(hidden, layer, rotations, config)):
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(compiled_output(hidden, latent_out, layer, config),
                                   layer_output(hidden, latent_out, layer, config), rtol=1e-5, atol=1e-5)


def test_path_noise_script_in_float32(tmp_path):
    """scripts/decode_noise.py: in float32 on the CPU the greedy (T = 1) and chain-verify paths give
    the same argmax everywhere and logits within float32 noise."""
    out = tmp_path / "noise.json"
    completed = subprocess.run([sys.executable, "scripts/decode_noise.py", "--preset", "tiny", "--context", "0,70",
                                "--tokens", "10", "--variant", "reference", "--device", "cpu", "--out", str(out)],
                               capture_output=True, text=True, timeout=300)
    assert completed.returncode == 0, completed.stderr[-2000:]
    rows = json.loads(out.read_text())["rows"]
    assert [r["context"] for r in rows] == [0, 70]
    for row in rows:
        assert len(row["deltas"]) == 10 and row["disagreements"] == [] and all(row["agree"])
        assert row["max_delta"] < 1e-3 * max(1.0, row["median_margin"]), row


def test_best_budget_judges_each_run_against_the_greedy_run_its_drafter_followed():
    """With --batch-invariant-greedy the oracle drafter follows the padded greedy run: a run that
    parts from T = 1 greedy at a near-tie but matches the padded run stays in the best-budget
    choice; a run that parts from the run its drafter followed is left out."""
    from harness.decode.report import _best_budget
    from harness.decode.run import PADDED_GREEDY

    same, parted = {"identical": True}, {"identical": False, "first_divergence": 2}
    records = [
        {"context": 1, "variant": "auto", "budget": 16, "tokens_per_s": 100.0, "lossless": same},
        {"context": 1, "variant": "auto", "budget": 32, "tokens_per_s": 300.0, "lossless": parted,
         "drafter_reference": PADDED_GREEDY, "lossless_batch_invariant": same},
        {"context": 1, "variant": "auto", "budget": 64, "tokens_per_s": 500.0, "lossless": same,
         "drafter_reference": PADDED_GREEDY, "lossless_batch_invariant": parted},
        {"context": 1, "variant": "auto", "budget": 128, "tokens_per_s": 900.0, "lossless": parted,
         "drafter_reference": "greedy"},
    ]
    assert _best_budget(records)[1]["budget"] == 32


def test_oracle_drafter_follows_the_padded_greedy_run_when_given(tmp_path):
    out = tmp_path / "decode.jsonl"
    completed = _vk_decode_tiny_cpu(out, "--context", "20", "--budget", "8", "--new-tokens", "10", "--page-size", "16",
                                    "--batch-invariant-greedy", "--check-lossless")
    assert completed.returncode == 0, completed.stderr[-2000:]
    record = json.loads(out.read_text().splitlines()[-1])
    assert record["drafter_reference"] == "greedy padded to the budget"
    assert record["lossless"]["identical"] and record["lossless_batch_invariant"]["identical"]  # float32 CPU


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


def test_vk_decode_drafts_on_the_host_and_on_the_device_in_one_run(tmp_path):
    out = tmp_path / "decode.jsonl"
    completed = _vk_decode_tiny_cpu(out, "--check-lossless", "--context", "20", "--budget", "16", "--new-tokens", "16",
                                    "--draft-on", "host", "device", "--phase-timing", "overlapped", "synced")
    assert completed.returncode == 0, completed.stderr[-2000:]
    records = [json.loads(line) for line in out.read_text().splitlines()]
    # The device loop is timed overlapped only: three runs, not four.
    assert [(r["draft_on"], r["phase_timing"]) for r in records] == [
        ("host", "overlapped"), ("host", "synced"), ("device", "overlapped")]
    assert all(r["lossless"]["identical"] for r in records)
    assert "device-draft" in completed.stdout


def test_vk_decode_refuses_device_drafting_without_the_oracle():
    completed = _vk_decode_tiny_cpu(None, "--draft-on", "device", "--drafter", "ngram", timeout=120)
    assert completed.returncode != 0 and "--draft-on device" in completed.stderr


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
