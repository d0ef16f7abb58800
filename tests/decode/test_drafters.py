"""The drafters: the calibrated oracle and the n-gram drafter."""

import json

import torch

from harness.decode.drafters import NgramDrafter, OracleDrafter

from decode_setup import _vk_decode_tiny_cpu


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


def test_oracle_drafter_follows_the_padded_greedy_run_when_given(tmp_path):
    out = tmp_path / "decode.jsonl"
    completed = _vk_decode_tiny_cpu(out, "--context", "20", "--budget", "8", "--new-tokens", "10", "--page-size", "16",
                                    "--batch-invariant-greedy", "--check-lossless")
    assert completed.returncode == 0, completed.stderr[-2000:]
    record = json.loads(out.read_text().splitlines()[-1])
    assert record["drafter_reference"] == "greedy padded to the budget"
    assert record["lossless"]["identical"] and record["lossless_batch_invariant"]["identical"]  # float32 CPU
