"""The timer: counts sized by time, median and IQR, clamps, GPU-state flags."""

import pytest

from harness.measure import timing


class FakeClock:
    """Virtual milliseconds: each call of the timed function advances time by its duration."""

    def __init__(self):
        self.now_ms = 0.0
        self.flushes = 0

    def event(self):
        clock = self

        class Event:
            def record(self):
                self.at = clock.now_ms

            def elapsed_time(self, other):
                return other.at - self.at

            def synchronize(self):
                pass

        return Event()

    def flush(self):
        self.flushes += 1
        self.now_ms += 100.0  # never counted: outside the events

    def synchronize(self):
        pass


def test_timer_sizes_counts_by_time_and_reports_median_and_iqr():
    clock = FakeClock()
    durations = iter([9.0] + [5.0] * 5 + [2.0] * 10_000)  # first call, 5 estimate calls, then 2 ms
    calls = []

    def fn():
        duration = next(durations)
        calls.append(duration)
        clock.now_ms += duration

    result = timing.time_events(fn, warmup_ms=20, rep_ms=100, min_reps=10, max_reps=1000, clock=clock,
                                read_state=False)
    # The first call is not counted; the estimate is 5 ms -> 20 / 5 = 4 warm-up calls, 100 / 5 = 20 timed.
    assert result.warmup_calls == 4
    assert result.reps == 20
    assert result.median_ms == pytest.approx(2.0)
    assert result.iqr_ms == pytest.approx(0.0)
    assert clock.flushes == 1 + result.reps  # one before the estimate, one before every timed call
    assert len(calls) == 1 + 5 + 4 + 20


def test_timer_clamps_repetitions():
    clock = FakeClock()

    def fn():
        clock.now_ms += 1000.0

    result = timing.time_events(fn, rep_ms=10, min_reps=7, clock=clock, read_state=False)
    assert result.reps == 7 and result.warmup_calls == 1


def test_summarize_median_and_iqr():
    median, iqr = timing.summarize([1.0, 2.0, 3.0, 4.0, 100.0])
    assert median == 3.0 and iqr == pytest.approx(2.0)


def test_state_flags():
    before = {"sm_clock_mhz": 1980, "throttle_reasons": 0}
    assert timing.state_flags(before, {"sm_clock_mhz": 1970, "throttle_reasons": 0}) == []
    flags = timing.state_flags(before, {"sm_clock_mhz": 1500, "throttle_reasons": 0x20})
    assert any("moved" in f for f in flags) and any("throttled after" in f for f in flags)
