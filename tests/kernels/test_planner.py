"""The work planner (verify_kernels/planner.py): the device plan equals its Python statement, stays
inside the bounds the launch was sized for, balances a ragged batch, and a CUDA graph captured once
stays right when the prefix lengths change under it (the decode loop's case)."""

import pytest
import torch

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from verify_kernels import make_problem, planner, reference_attention, variants, verify_attention  # noqa: E402

from conftest import DEVICE, HAS_CUDA, capture_graph  # noqa: E402


@settings(max_examples=25, deadline=None, derandomize=True)
@given(lengths=st.lists(st.integers(0, 300_000), min_size=1, max_size=40), tree_nodes=st.integers(1, 256),
       row_blocks=st.integers(1, 64), block_n=st.sampled_from([16, 32, 64]), sms=st.sampled_from([132, 188]),
       ctas_per_sm=st.sampled_from([1, 2]), kv_splits=st.sampled_from([0, 0, 1, 3, 64]),
       waves=st.sampled_from([planner.SPANS, 1, 2]), segment_cost=st.sampled_from([0, 0, 1, 320, 5000]))
def test_the_device_plan_is_the_reference_plan_within_its_bounds(lengths, tree_nodes, row_blocks, block_n, sms,
                                                                 ctas_per_sm, kv_splits, waves, segment_cost):
    capacity = max(lengths) + tree_nodes + 97  # a table a little larger than the longest request
    spans = kv_splits == 0 and waves == planner.SPANS
    bounds = planner.plan_bounds(batch=len(lengths), row_blocks=row_blocks, capacity=capacity, block_n=block_n,
                                 sms=sms, kv_splits=kv_splits, ctas_per_sm=ctas_per_sm, waves=waves,
                                 segment_cost=segment_cost if spans else 0)
    plan = planner.make_plan(torch.tensor(lengths, dtype=torch.int32, device=DEVICE), tree_nodes, bounds).tolist()
    starts, chunk = planner.reference_plan(lengths, tree_nodes, bounds)
    assert bounds.gap_tiles == (-(-segment_cost // block_n) if spans else 0)
    assert plan == [*starts, chunk, *planner.reference_tile_starts(lengths, tree_nodes, block_n, bounds.gap_tiles),
                    bounds.gap_tiles]
    assert starts[-1] <= bounds.max_units, (starts[-1], bounds)
    assert max(b - a for a, b in zip(starts, starts[1:])) <= bounds.max_splits, (starts, bounds)
    assert chunk % block_n == 0
    for length, first, last in zip(lengths, starts, starts[1:]):
        assert (last - first) * chunk >= length + tree_nodes or kv_splits or bounds.spans, "splits miss a tail"
        assert last - first >= 1
    if bounds.spans:
        assert bounds.grid == bounds.spans <= max(1, sms * ctas_per_sm // row_blocks)
        _check_segments(lengths, tree_nodes, bounds)


def _check_segments(lengths, tree_nodes, bounds):
    """The spans rule's segments: every tile of every request in exactly one segment, in order; a
    CTA's segments add up to at most one span; each request's units are its segments, contiguous. With
    gaps a span's last segment may hold no tile (its part of a gap), never without."""
    starts, chunk = planner.reference_plan(lengths, tree_nodes, bounds)
    span = chunk // bounds.block_n
    covered = {request: [] for request in range(len(lengths))}
    for segments in planner.reference_segments(lengths, tree_nodes, bounds):
        assert sum(tiles for _, _, tiles, _ in segments) <= span
        assert all(tiles for _, _, tiles, _ in segments[:-1]), "only a span's last segment may lie in a gap"
        for request, first, tiles, unit in segments:
            assert (tiles >= 0 if bounds.gap_tiles else tiles >= 1) and starts[request] <= unit < starts[request + 1]
            covered[request].append((first, tiles))
    for request, length in enumerate(lengths):
        runs = covered[request]
        assert len(runs) == starts[request + 1] - starts[request]
        assert [first for first, _ in runs] == [sum(t for _, t in runs[:i]) for i in range(len(runs))]
        assert sum(t for _, t in runs) == -(-(length + tree_nodes) // bounds.block_n)


def test_a_ragged_batch_is_cut_into_near_equal_units():
    """One 185k request beside short ones: every unit is at most one chunk, and the chunks fill the
    SMs (the units' count near the target), not one CTA per request."""
    lengths, tree_nodes, block_n = [185_000, 4096, 32_768, 131_072, 64, 900], 64, 64
    bounds = planner.plan_bounds(batch=len(lengths), row_blocks=8, capacity=190_000, block_n=block_n, sms=132,
                                 kv_splits=0, ctas_per_sm=1)
    starts, chunk = planner.reference_plan(lengths, tree_nodes, bounds)
    units = starts[-1]
    assert bounds.target_units <= units <= bounds.target_units + len(lengths)
    total = sum(length + tree_nodes for length in lengths)
    assert chunk <= 2 * total / bounds.target_units + block_n  # no unit holds much more than its share


@pytest.mark.parametrize("waves", [1, 2])
def test_a_long_request_among_many_short_ones_is_not_left_in_one_unit(waves):
    """Sixteen requests, one of 262144 positions, on 11 units a wave (sm_120's 188 SMs, 16 row blocks): with
    as many requests as the target each would get one unit and the long one take the whole call in one CTA.
    The plan allows a unit per request but the first and a wave more, so the long request is cut into about a
    wave's units; on the device as in Python."""
    lengths, tree_nodes, block_n = [262_144] + [2048] * 15, 128, 16
    bounds = planner.plan_bounds(batch=len(lengths), row_blocks=16, capacity=262_400, block_n=block_n, sms=188,
                                 kv_splits=0, ctas_per_sm=1, waves=waves)
    assert bounds.wave_units == 11 and bounds.crowded_units == 15 + 11 and bounds.max_units >= 26
    starts, chunk = planner.reference_plan(lengths, tree_nodes, bounds)
    long_units = starts[1] - starts[0]
    assert 8 <= long_units <= 11 and starts[-1] <= bounds.crowded_units, starts
    assert chunk <= (262_144 + tree_nodes) / 8 + block_n
    plan = planner.make_plan(torch.tensor(lengths, dtype=torch.int32, device=DEVICE), tree_nodes, bounds)
    assert plan.tolist()[:len(lengths) + 2] == [*starts, chunk]


def test_equal_requests_keep_their_units_in_one_wave():
    """Eight equal requests on 23 units a wave: two units each fill one wave; the crowded allowance (30
    units) would cut them into three each, 24 units, a second wave for one of them: the plan keeps two."""
    lengths, tree_nodes, block_n = [65_536] * 8, 64, 16
    bounds = planner.plan_bounds(batch=len(lengths), row_blocks=8, capacity=65_700, block_n=block_n, sms=188,
                                 kv_splits=0, ctas_per_sm=1, waves=1)
    assert bounds.crowded_units == 7 + 23
    starts, chunk = planner.reference_plan(lengths, tree_nodes, bounds)
    assert [b - a for a, b in zip(starts, starts[1:])] == [2] * 8
    plan = planner.make_plan(torch.tensor(lengths, dtype=torch.int32, device=DEVICE), tree_nodes, bounds)
    assert plan.tolist()[:len(lengths) + 2] == [*starts, chunk]


def test_spans_give_every_cta_of_a_ragged_batch_the_same_work():
    """FlashMLA's schedule: the batch's tiles in equal spans, one per CTA, crossing requests; a CTA
    that takes the end of one request and the start of the next writes a unit for each."""
    lengths, tree_nodes, block_n = [185_000, 4096, 32_768, 131_072], 64, 64
    bounds = planner.plan_bounds(batch=len(lengths), row_blocks=8, capacity=190_000, block_n=block_n, sms=132,
                                 kv_splits=0, ctas_per_sm=1, waves=planner.SPANS)
    assert bounds.spans == 16 and bounds.max_units == 16 + 3
    per_cta = planner.reference_segments(lengths, tree_nodes, bounds)
    work = [sum(tiles for _, _, tiles, _ in segments) for segments in per_cta]
    assert max(work) - min(work) <= 1, work
    assert max(len(segments) for segments in per_cta) == 3  # 4096's whole request inside one span
    starts, _ = planner.reference_plan(lengths, tree_nodes, bounds)
    assert starts[2] - starts[1] == 1  # ... so it is written straight to out, with no combine


def test_a_segment_cost_evens_out_the_spans_that_meet_many_requests():
    """FlashMLA's fixed cost per split: with a set-up worth ``segment_cost`` positions per segment, the
    spans that meet many short requests get fewer tiles, so every CTA's tiles plus set-ups are equal
    (within a tile); without it those CTAs carry seven set-ups more than the others."""
    lengths = [262144, 0, 100, 1000, 3000, 5000, 9000, 20000, 40000, 700, 64, 2048, 4096, 12000, 30000, 60000]
    tree_nodes, block_n, set_up = 128, 64, 5  # tiles a segment's set-up is worth

    def cost_per_cta(segment_cost):
        bounds = planner.plan_bounds(batch=len(lengths), row_blocks=16, capacity=262400, block_n=block_n, sms=132,
                                     kv_splits=0, ctas_per_sm=1, waves=planner.SPANS, segment_cost=segment_cost)
        _check_segments(lengths, tree_nodes, bounds)
        return [sum(tiles for _, _, tiles, _ in segments) + set_up * len(segments)
                for segments in planner.reference_segments(lengths, tree_nodes, bounds)]

    flat, even = cost_per_cta(0), cost_per_cta(set_up * block_n)
    assert max(flat) - min(flat[:-1]) == 7 * set_up  # two spans meet 8 requests each
    assert max(even) - min(even[:-1]) <= 1 and max(even) < max(flat), (flat, even)


def test_a_segment_cost_needs_the_spans_rule():
    with pytest.raises(ValueError, match="segment_cost 320 needs the spans rule .*got kv_splits 0, waves 2"):
        planner.plan_bounds(batch=2, row_blocks=1, capacity=4096, block_n=64, sms=132, kv_splits=0, waves=2,
                            segment_cost=320)


@pytest.mark.parametrize("variant", ["gluon_wgmma_ws", "cuda_ws", "cuda_qreg"])
def test_every_segment_walking_variant_checks_segment_cost_in_one_place(variant):
    """The planner's check_plan_config, which each variant's complete_config ends with: an int >= 0, with the
    spans rule only; the variant lists it among its optional keys (0 when absent)."""
    module = variants.load_variant(variant)
    assert module.OPTIONAL_CONFIG["segment_cost"] == 0
    spans = {"kv_splits": 0, "waves": planner.SPANS}
    assert planner.check_plan_config({**spans, "segment_cost": 320}, spans=True)["segment_cost"] == 320
    for config, message in (({"kv_splits": 0, "waves": 2, "segment_cost": 320}, "needs the spans rule .*waves 2"),
                            ({"kv_splits": 4, "waves": 0, "segment_cost": 64}, "needs the spans rule .*kv_splits 4"),
                            ({**spans, "segment_cost": -1}, "must be an int >= 0 .*got -1"),
                            ({**spans, "segment_cost": True}, "must be an int >= 0 .*got True"),
                            ({**spans, "segment_cost": 32.0}, "must be an int >= 0 .*got 32.0")):
        with pytest.raises(ValueError, match=f"config: segment_cost .*{message}"):
            planner.check_plan_config(config, spans=True)


def test_the_spans_rule_needs_a_kernel_that_walks_segments():
    planner.check_plan_config({"kv_splits": 0, "waves": planner.SPANS}, spans=True)
    with pytest.raises(ValueError, match="waves must be 1..16 .*gluon_wgmma_ws, cuda_ws.*got 0"):
        planner.check_plan_config({"kv_splits": 0, "waves": planner.SPANS})


def _every_slot_finite(problem):
    """The problem's arguments with every pool slot random instead of NaN: the new lengths put
    other slots inside the sequences (a kernel that reads past a sequence still reads wrong rows)."""
    q, kv, table, lens, mask = problem.arguments()
    kv.copy_(torch.where(kv.isnan(), torch.randn_like(kv), kv))
    return q, kv, table, lens, mask


@pytest.mark.parametrize("variant, config", [("triton_splitkv", None), ("gluon_wgmma_ws", None),
                                             ("gluon_wgmma_ws", {"segment_cost": 320}), ("cuda_ws", None),
                                             ("cuda_ws", {"waves": planner.SPANS}),
                                             ("cuda_ws", {"waves": planner.SPANS, "segment_cost": 320}),
                                             ("cuda_qreg", None), ("cuda_qreg", {"waves": planner.SPANS}),
                                             ("cuda_qreg", {"waves": planner.SPANS, "segment_cost": 320})],
                         ids=["triton_splitkv", "gluon_wgmma_ws", "gluon_wgmma_ws-segment_cost320", "cuda_ws",
                              "cuda_ws-spans", "cuda_ws-segment_cost320", "cuda_qreg", "cuda_qreg-spans",
                              "cuda_qreg-segment_cost320"])
@pytest.mark.gpu
def test_a_graph_replayed_with_new_prefix_lengths_stays_right(variant, config):
    """Capture once at one set of lengths, then write longer and shorter ones into the same tensor
    (the table holds them all) and replay: every replay matches the oracle at its lengths."""
    module = variants.load_variant(variant)
    problem = make_problem([3000, 17, 900], 24, 4, page_size=64, device="cuda", seed=4)
    shape_check = module.unsupported_reason
    from verify_kernels.contract import check_arguments

    reason = shape_check(check_arguments(*problem.arguments(), **problem.kwargs()))
    if reason:
        pytest.skip(reason)
    q, kv, table, lens, mask = _every_slot_finite(problem)
    out = torch.empty(*q.shape[:3], 512, dtype=q.dtype, device="cuda")
    graph = capture_graph(lambda: verify_attention(q, kv, table, lens, mask, **problem.kwargs(), variant=variant,
                                                   config=config, out=out, validate=False))
    capacity = table.shape[1] * kv.shape[1] - q.shape[1]
    for new in ([3000, 17, 900], [capacity, 0, 5], [1, 2, 3], [100, capacity, capacity // 2]):
        lens.copy_(torch.tensor(new, dtype=torch.int32))
        out.fill_(float("nan"))
        graph.replay()
        expected = reference_attention(q, kv, table, lens, mask, **problem.kwargs())
        error = float((out.double() - expected.double()).norm() / expected.double().norm())
        assert error < 1e-2, (variant, new, error)


@pytest.mark.skipif(HAS_CUDA, reason="the CPU path of the same check")
def test_triton_splitkv_follows_new_prefix_lengths_on_the_cpu():
    problem = make_problem([300, 17, 90], 12, 2, page_size=16, device="cpu", seed=4)
    q, kv, table, lens, mask = _every_slot_finite(problem)
    capacity = table.shape[1] * kv.shape[1] - q.shape[1]
    for new in ([300, 17, 90], [capacity, 0, 5], [1, 2, 3]):
        lens.copy_(torch.tensor(new, dtype=torch.int32))
        out = verify_attention(q, kv, table, lens, mask, **problem.kwargs(), variant="triton_splitkv",
                               config={"BLOCK_N": 16})
        expected = reference_attention(q, kv, table, lens, mask, **problem.kwargs())
        assert float((out.double() - expected.double()).norm() / expected.double().norm()) < 1e-2, new


