"""A broker's drifting clock: its wall clock runs at rate times the base clock's pace from when
the rate is set, the skew kept when it changes, never going back; the monotonic reading stays
the host's."""

from __future__ import annotations

import pytest

from kafkasim.common.clock import ManualClock
from kafkasim.sim.clocks import DriftingClock


def test_without_drift_it_reads_the_base_clock() -> None:
    base = ManualClock(1_000_000)
    clock = DriftingClock(base)
    base.advance(1234)
    assert (clock.time_ms(), clock.monotonic_ms()) == (base.time_ms(), base.monotonic_ms())


def test_a_fast_clock_gains_and_keeps_its_skew_at_the_normal_rate_again() -> None:
    base = ManualClock(1_000_000)
    clock = DriftingClock(base)
    base.advance(500)
    clock.set_rate(4.0)
    base.advance(1000)
    assert clock.skew_ms() == 3000
    assert clock.time_ms() == base.time_ms() + 3000
    assert clock.monotonic_ms() == base.monotonic_ms()
    clock.set_rate(1.0)
    base.advance(1000)
    assert clock.skew_ms() == 3000


def test_a_slow_clock_falls_behind_but_never_goes_back() -> None:
    base = ManualClock(1_000_000)
    clock = DriftingClock(base)
    clock.set_rate(0.5)
    readings = []
    for _ in range(4):
        base.advance(100)
        readings.append(clock.time_ms() - 1_000_000)
    assert readings == [50, 100, 150, 200]
    assert clock.skew_ms() == -200


def test_a_rate_must_be_positive() -> None:
    with pytest.raises(ValueError, match="rate must be > 0"):
        DriftingClock(ManualClock()).set_rate(0.0)
