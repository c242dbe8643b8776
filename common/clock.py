"""The Clock port. Storage, broker and controller read time only through it.

``SystemClock`` is the adapter to the real wall clock; ``ManualClock`` is the twin for tests
and the simulation (time moves only when told to).
"""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    """Milliseconds since the epoch (wall) and a monotonic reading for durations."""

    def time_ms(self) -> int: ...

    def monotonic_ms(self) -> int: ...


class SystemClock:
    """The real clock: the one place outside the adapters that may read wall time."""

    def time_ms(self) -> int:
        return time.time_ns() // 1_000_000

    def monotonic_ms(self) -> int:
        return time.monotonic_ns() // 1_000_000


def monotonic_ns() -> int:
    """The system's monotonic clock in nanoseconds: for measuring spans shorter than a
    millisecond (the event loop's idle time, ``node.loop_idle``), where ``monotonic_ms`` is
    too coarse."""
    return time.monotonic_ns()


class ManualClock:
    """A clock that only moves when ``advance`` or ``set`` is called."""

    def __init__(self, now_ms: int = 1_700_000_000_000) -> None:
        self._now_ms = now_ms
        self._monotonic_ms = 0

    def time_ms(self) -> int:
        return self._now_ms

    def monotonic_ms(self) -> int:
        return self._monotonic_ms

    def advance(self, delta_ms: int) -> None:
        if delta_ms < 0:
            raise ValueError(f"a clock does not go back: advance({delta_ms})")
        self._now_ms += delta_ms
        self._monotonic_ms += delta_ms

    def set(self, now_ms: int) -> None:
        """Jump the wall clock (it may go back, as a real one can); monotonic time does not."""
        self._now_ms = now_ms
