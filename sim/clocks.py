"""Per-broker clocks for the simulation: each broker reads the cluster's virtual clock through
a ``DriftingClock`` of its own, so that one broker's clock can run fast or slow (a bad crystal,
an NTP daemon that gave up) while the others keep time.

Drift applies to both readings a broker takes (``time_ms`` and ``monotonic_ms``): what Kafka
derives from them drifts with it (segment.ms rolls, time-based retention, the timestamps the
broker assigns with LogAppendTime, replica.lag.time.max.ms, delayed-operation deadlines read
from the clock). Timers that wait on the event loop itself (``asyncio.sleep``: fetch backoffs,
the simulated ZooKeeper's session timer) keep the loop's time: they are the simulation's one
time base. Without drift (rate 1) a broker reads exactly the cluster's clock.
"""

from __future__ import annotations

from kafkasim.common.clock import Clock

__all__ = ["DriftingClock"]


class DriftingClock:
    """``common.clock.Clock`` over ``base`` that advances ``rate`` times as fast as it from
    the moment the rate is set. The skew gained so far stays when the rate changes (back to 1
    too: a clock that ran fast is ahead until stepped). Readings never go back."""

    def __init__(self, base: Clock) -> None:
        self._base = base
        self._rate = 1.0
        self._anchor_ms = base.monotonic_ms()
        self._skew_at_anchor_ms = 0.0

    @property
    def rate(self) -> float:
        return self._rate

    def skew_ms(self) -> int:
        """How far ahead of the base clock this one is now (negative: behind)."""
        if self._rate == 1.0:
            return int(self._skew_at_anchor_ms)
        elapsed = self._base.monotonic_ms() - self._anchor_ms
        return int(self._skew_at_anchor_ms + elapsed * (self._rate - 1.0))

    def set_rate(self, rate: float) -> None:
        """Run ``rate`` times as fast as the base clock from now on (> 0)."""
        if not rate > 0:
            raise ValueError(f"a clock's rate must be > 0, got {rate}")
        now = self._base.monotonic_ms()
        self._skew_at_anchor_ms += (now - self._anchor_ms) * (self._rate - 1.0)
        self._anchor_ms = now
        self._rate = rate

    def monotonic_ms(self) -> int:
        return self._base.monotonic_ms() + self.skew_ms()

    def time_ms(self) -> int:
        return self._base.time_ms() + self.skew_ms()
