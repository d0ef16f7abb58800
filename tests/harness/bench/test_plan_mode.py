"""``vk bench --plan``: "call" times calls that each make their plan, "once" calls that share one
(``verify_kernels.plan_once``), and the record says which (CPU: the timer replaced by three calls)."""

import pytest

from harness.bench import sweep
from harness.measure import timing
from verify_kernels import make_problem, reference_attention

from conftest import HAS_CUDA


@pytest.mark.skipif(HAS_CUDA, reason="the CPU path: the timer is replaced")
@pytest.mark.parametrize("plan, launches", [("call", 3), ("once", 1)])
def test_plan_once_shares_one_plan_between_the_timed_calls(monkeypatch, plan_launches, plan, launches):
    def three_calls(fn, **kwargs):
        for _ in range(3):
            fn()
        return timing.Timing(1.0, 0.0, [1.0], 0, "events")

    monkeypatch.setattr(timing, "time_events", three_calls)
    problem = make_problem([70, 30], 9, 2, page_size=16, seed=2)
    point = sweep.BenchPoint("triton_splitkv", 70, 9, 2, 16, config=(("BLOCK_N", 16),))
    reference = reference_attention(*problem.arguments(), **problem.kwargs())
    row = sweep.bench_point(point, problem, reference, None, mode="events", rep_ms=10.0, plan=plan)
    assert row["status"] == "ok" and row["plan"] == plan and row["timing_mode"] == "events"
    assert len(plan_launches) == 2 + launches  # the first call and the checked one plan, then the timed calls
