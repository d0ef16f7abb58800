"""Roofline arithmetic and JSONL records."""

import json

import pytest

from harness.measure import records, roofline


def test_roofline_arithmetic_matches_design_formulas():
    work = roofline.verify_work([131072], 64, 8)
    keys = 131072 + 64
    assert work.flops == 2 * 512 * keys * 1088
    assert work.bytes_moved == keys * 576 * 2 + 512 * (576 + 512) * 2
    ceilings = roofline.Ceilings("test", copy_tbps=4.25, matmul_tflops=700.0, mma_sync_tflops=500.0)
    # R = 512 > ~110: compute-bound on the H200.
    assert ceilings.floor_ms(work) == pytest.approx(work.flops / 700e12 * 1e3)
    result = roofline.metrics(work, median_ms=2 * ceilings.floor_ms(work), ceilings=ceilings)
    assert result["pct_roofline"] == pytest.approx(50.0)
    mma_floor_ms = work.flops / 500e12 * 1e3
    assert result["pct_roofline_mma_sync"] == pytest.approx(100 * mma_floor_ms / (2 * ceilings.floor_ms(work)))
    small = roofline.verify_work([131072], 16, 1)  # R = 16: memory-bound
    assert ceilings.floor_ms(small) == pytest.approx(small.bytes_moved / 4.25e12 * 1e3)
    # DESIGN.md: ~0.21 ms floor at L = 131072, T = 64, H = 8 on an H200.
    assert 0.1 < ceilings.floor_ms(work) < 0.3


def test_records_round_trip_with_schema_and_command(tmp_path):
    path = tmp_path / "r.jsonl"
    record = records.make_record("bench", {"variant": "x", "median_ms": 1.5}, command="vk bench --prefix 4096")
    records.append_records(path, [record])
    records.append_records(path, [record])
    loaded = records.read_records(path)
    assert len(loaded) == 2 and loaded[0]["schema_version"] == records.SCHEMA_VERSION
    assert loaded[0]["command"] == "vk bench --prefix 4096"
    assert loaded[0]["environment"]["source_hash"]
    with pytest.raises(ValueError, match=r"keys \['kind'\] are reserved"):
        records.make_record("bench", {"kind": "peer"})
    path.write_text(json.dumps({"schema_version": 99}) + "\n")
    with pytest.raises(ValueError, match="schema_version 99"):
        records.read_records(path)


def test_a_named_commit_is_checked_against_the_tree_where_the_checkout_holds_it(monkeypatch):
    """VK_GIT_COMMIT names the commit a record was measured at (a GPU host's copy has a stale .git). Where the
    checkout's .git holds it, the tree is compared with it: the stale HEAD named by mistake says dirty (and
    warns); a commit the .git lacks says nothing either way (dirty None)."""
    import subprocess
    import warnings

    from harness.measure import environment

    def git(*args):
        done = subprocess.run(["git", "-C", str(environment.LIBRARY_DIR.parent), *args], capture_output=True,
                              text=True)
        return done.stdout.strip() if done.returncode == 0 else None

    if git("rev-parse", "--show-toplevel") != str(environment.LIBRARY_DIR.parent):
        pytest.skip("not a git checkout (an installed package)")
    oldest = git("rev-list", "--max-parents=0", "HEAD").splitlines()[0]  # the tree differs from the first commit
    head = git("rev-parse", "HEAD")
    cases = [("f" * 40, None), (head, bool(git("diff", "--name-only", head, "--")))]
    if oldest != head:  # not a clone of depth 1
        cases.append((oldest, True))
    for named, dirty in cases:
        monkeypatch.setenv("VK_GIT_COMMIT", named)
        environment.git_commit.cache_clear()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            assert environment.git_commit() == {"commit": named, "dirty": dirty}
        assert any("differs from that commit" in str(w.message) for w in caught) == bool(dirty)
    environment.git_commit.cache_clear()
