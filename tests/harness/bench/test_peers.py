"""Peers beside our variants: the SDPA peer against the oracle, a missing peer's reason."""

import pytest

from conftest import DEVICE


def test_sdpa_peer_matches_oracle():
    from harness.bench.peers import PEERS
    from verify_kernels import make_problem, reference_attention

    problem = make_problem([70, 5], 9, 2, page_size=16, seed=1, device=DEVICE)
    out = PEERS["sdpa_gathered"](problem)()
    reference = reference_attention(*problem.arguments(), **problem.kwargs())
    assert float((out.double() - reference.double()).norm() / reference.double().norm()) < 1e-2


def test_flashinfer_peer_says_why_it_is_unavailable():
    from harness.bench.peers import PEERS, PeerUnavailable
    from verify_kernels import make_problem

    with pytest.raises(PeerUnavailable, match="flashinfer"):
        PEERS["flashinfer"](make_problem([5], 3, 1, page_size=16))
