"""Per-broker clocks for the simulation: each broker reads the cluster's virtual clock through
a ``DriftingClock`` of its own, so that one broker's clock can run fast or slow (a bad crystal,
an NTP daemon that gave up) while the others keep time.

Drift applies to the broker's wall clock (``time_ms``), which is what Kafka reads for time
(``Time.milliseconds``): segment.ms rolls, time-based retention, the timestamps the broker
assigns with LogAppendTime, the replica lag it measures against replica.lag.time.max.ms,
deadlines read from the clock. ``monotonic_ms`` stays the host's (the simulation's) monotonic
clock, which every process of one machine shares; the failure runs' replica sampler stamps
its samples with it. Timers that wait on the event loop (``asyncio.sleep``: fetch backoffs,
the simulated ZooKeeper's session timer) keep the loop's time. Without drift (rate 1) a broker
reads exactly the cluster's clock.
"""

from __future__ import annotations

from kafkasim.common.clock import Clock

__all__ = ["DriftingClock"]


class DriftingClock:
    """``common.clock.Clock`` over ``base`` whose wall clock advances ``rate`` times as fast as
    the base's from the moment the rate is set. The skew gained so far stays when the rate
    changes (back to 1 too: a clock that ran fast is ahead until stepped). Readings never go
    back."""

    def __init__(self, base: Clock) -> None:
        self._base = base
        # The base's readings as bound methods: a broker reads its clock a few times in each
        # request (two attribute lookups fewer per reading).
        self._base_monotonic_ms = base.monotonic_ms
        self._base_time_ms = base.time_ms
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
        return self._base_monotonic_ms()  # the host's: see the module doc

    def time_ms(self) -> int:
        if self._rate == 1.0:  # skew_ms without its call (no drift: the usual case)
            return self._base_time_ms() + int(self._skew_at_anchor_ms)
        return self._base_time_ms() + self.skew_ms()
