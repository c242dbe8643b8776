"""How idle a broker's event loop is: kafkasim's ``RequestHandlerAvgIdlePercent``.

Kafka handles requests on a pool of ``num.io.threads`` handler threads and measures, per
thread, the time it waits for the next request against the time it runs one; the average
over the pool is ``kafka.server:type=KafkaRequestHandlerPool,name=RequestHandlerAvgIdlePercent``
(a meter; operators alert when its rate falls under about 0.3, a broker out of request
capacity). A kafkasim broker handles every request, replication included, on one asyncio
event loop, so the equivalent is the loop's idle fraction: the time it waits in the selector
for I/O or a timer, against the time it runs callbacks and tasks.

:class:`IdleTimingSelector` wraps the loop's selector and times each ``select`` on an
injected nanosecond clock (``common.clock.monotonic_ns`` in a broker process); the
:class:`IdleMeter` keeps the idle time and a checkpoint every ``CHECKPOINT_NS``, so
:meth:`IdleMeter.ratio` is the idle fraction over the last ``WINDOW_NS`` (one minute, as the
meter's ``OneMinuteRate`` Kafka dashboards read). :func:`idle_timing_loop` is the loop
factory of ``kafkasim broker``; a loop made otherwise (the simulation's virtual-time loop, a
test's) has no meter, and the broker then exports no such series.
"""

from __future__ import annotations

import asyncio
import selectors
import weakref
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any

from kafkasim.common.clock import monotonic_ns

__all__ = [
    "CHECKPOINT_NS",
    "WINDOW_NS",
    "IdleMeter",
    "IdleTimingSelector",
    "idle_timing_loop",
    "meter_of_running_loop",
]

WINDOW_NS = 60 * 1_000_000_000
CHECKPOINT_NS = 1_000_000_000

_METERS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, IdleMeter] = (
    weakref.WeakKeyDictionary()
)


class IdleMeter:
    """Idle time of one event loop, and its fraction of the elapsed time over a window."""

    def __init__(self, now_ns: Callable[[], int]) -> None:
        self._now_ns = now_ns
        self.idle_ns = 0  # every select's duration, summed
        self.selects = 0
        # (time, idle_ns then), oldest first: at the start, then at most one per CHECKPOINT_NS.
        self._checkpoints: deque[tuple[int, int]] = deque([(now_ns(), 0)])

    def waited(self, start_ns: int, end_ns: int) -> None:
        """The loop waited in its selector from ``start_ns`` to ``end_ns``."""
        self.idle_ns += max(0, end_ns - start_ns)
        self.selects += 1
        if end_ns - self._checkpoints[-1][0] >= CHECKPOINT_NS:
            self._checkpoints.append((end_ns, self.idle_ns))
            # Keep the newest checkpoint at or before the window's start: it bounds the window.
            while len(self._checkpoints) > 1 and self._checkpoints[1][0] <= end_ns - WINDOW_NS:
                self._checkpoints.popleft()

    def ratio(self) -> float:
        """The idle fraction (0 to 1) since the oldest checkpoint kept (about one minute ago,
        or the loop's start); 1.0 before any time has passed. Read it on the loop (not while
        it waits in select)."""
        now = self._now_ns()
        since, idle_then = self._checkpoints[0]
        elapsed = now - since
        if elapsed <= 0:
            return 1.0
        return min(1.0, max(0.0, (self.idle_ns - idle_then) / elapsed))


class IdleTimingSelector(selectors.BaseSelector):
    """A selector that tells ``meter`` how long each ``select`` waited (the rest delegated)."""

    def __init__(self, selector: selectors.BaseSelector, meter: IdleMeter) -> None:
        self._selector = selector
        self._meter = meter
        self._now_ns = meter._now_ns
        # Bound once: select runs several times per request a broker serves.
        self._select = selector.select
        self._waited = meter.waited

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        now_ns = self._now_ns
        start = now_ns()
        try:
            return self._select(timeout)
        finally:
            self._waited(start, now_ns())

    def register(self, fileobj: Any, events: int, data: Any = None) -> selectors.SelectorKey:
        return self._selector.register(fileobj, events, data)

    def unregister(self, fileobj: Any) -> selectors.SelectorKey:
        return self._selector.unregister(fileobj)

    def modify(self, fileobj: Any, events: int, data: Any = None) -> selectors.SelectorKey:
        return self._selector.modify(fileobj, events, data)

    def get_map(self) -> Mapping[Any, selectors.SelectorKey]:
        return self._selector.get_map()

    def close(self) -> None:
        self._selector.close()


def idle_timing_loop(
    now_ns: Callable[[], int] = monotonic_ns,
    selector: selectors.BaseSelector | None = None,
) -> asyncio.AbstractEventLoop:
    """A new event loop whose selector is timed (``selector``: the one to wrap, default the
    platform's), its meter found by :func:`meter_of_running_loop` while it runs."""
    meter = IdleMeter(now_ns)
    inner = selector if selector is not None else selectors.DefaultSelector()
    loop = asyncio.SelectorEventLoop(IdleTimingSelector(inner, meter))
    _METERS[loop] = meter
    return loop


def meter_of_running_loop() -> IdleMeter | None:
    """The meter of the running loop, if it was made by :func:`idle_timing_loop`."""
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        return None
    return _METERS.get(loop)
