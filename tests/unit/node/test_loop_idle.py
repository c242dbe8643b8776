"""The event loop's idle fraction (node/loop_idle.py), kafkasim's RequestHandlerAvgIdlePercent:
time in ``select`` against time elapsed, over a one-minute window, on an injected clock and a
fake selector (no wall-clock reading in any assertion)."""

from __future__ import annotations

import asyncio
import selectors
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.metrics_core import Metric

from kafkasim.node.loop_idle import (
    CHECKPOINT_NS,
    WINDOW_NS,
    IdleMeter,
    IdleTimingSelector,
    idle_timing_loop,
    meter_of_running_loop,
)
from kafkasim.node.metrics import idle_families
from tests.unit.node.test_metrics import samples

S = 1_000_000_000  # ns per second
IDLE = "kafka_server_kafkarequesthandlerpool_requesthandleravgidlepercent"


class FakeClock:
    def __init__(self) -> None:
        self.now = 0

    def __call__(self) -> int:
        return self.now


class FakeSelector(selectors.BaseSelector):
    """Waits (on the fake clock) ``waits`` ns per select, in turn; registers nothing."""

    def __init__(self, clock: FakeClock, waits: list[int]) -> None:
        self.clock = clock
        self.waits = waits

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        self.clock.now += self.waits.pop(0)
        return []

    def register(self, fileobj: Any, events: int, data: Any = None) -> selectors.SelectorKey:
        raise NotImplementedError

    def unregister(self, fileobj: Any) -> selectors.SelectorKey:
        raise NotImplementedError

    def get_map(self) -> dict[Any, selectors.SelectorKey]:
        return {}


def busy(clock: FakeClock, ns: int) -> None:
    clock.now += ns


def test_the_ratio_is_time_in_select_over_time_elapsed() -> None:
    clock = FakeClock()
    meter = IdleMeter(clock)
    selector = IdleTimingSelector(FakeSelector(clock, [3 * S, 1 * S, 2 * S]), meter)
    assert meter.ratio() == 1.0  # no time has passed yet
    selector.select(5)  # idle 3 s
    busy(clock, 1 * S)
    selector.select(5)  # idle 1 s
    busy(clock, 3 * S)
    assert (meter.idle_ns, meter.selects) == (4 * S, 2)
    assert meter.ratio() == pytest.approx(4 / 8)
    selector.select(0)  # idle 2 s
    assert meter.ratio() == pytest.approx(6 / 10)


def test_the_window_forgets_what_is_older_than_a_minute() -> None:
    clock = FakeClock()
    meter = IdleMeter(clock)
    # Two idle minutes, then a minute and a half of 90 % busy (0.9 s work, 0.1 s select).
    for _ in range(120):
        meter.waited(clock.now, clock.now + S)
        busy(clock, S)
    assert meter.ratio() == pytest.approx(1.0)
    tenth = S // 10
    for _ in range(90):
        busy(clock, 9 * tenth)
        meter.waited(clock.now, clock.now + tenth)
        busy(clock, tenth)
    # The window starts at most CHECKPOINT_NS before a minute ago: all of it is busy time.
    assert meter.ratio() == pytest.approx(0.1, abs=CHECKPOINT_NS / WINDOW_NS)


def test_a_broker_on_a_timed_loop_exports_the_idle_ratio() -> None:
    """``kafkasim broker``'s loop factory: the running loop's meter is found and the metrics
    expose its ratio; a loop made otherwise exports none."""
    clock = FakeClock()
    inner = selectors.DefaultSelector()

    class Stepping(FakeSelector):
        """The loop's real selector, never blocking; each select "waits" 3 s of fake time."""

        def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
            clock.now += 3 * S
            return inner.select(0)

        def register(self, fileobj: Any, events: int, data: Any = None) -> selectors.SelectorKey:
            return inner.register(fileobj, events, data)

        def unregister(self, fileobj: Any) -> selectors.SelectorKey:
            return inner.unregister(fileobj)

        def get_map(self) -> Any:
            return inner.get_map()

        def close(self) -> None:
            inner.close()

    async def scrape() -> str:
        await asyncio.sleep(0)  # a pass through select: 3 s idle
        clock.now += S  # 1 s of work
        return "".join(generate_latest_of(idle_families()))

    loop = idle_timing_loop(now_ns=clock, selector=Stepping(clock, []))
    try:
        body = loop.run_until_complete(scrape())
    finally:
        loop.close()
    meter_ratio = samples(body)[IDLE, frozenset()]
    assert 0.5 < meter_ratio < 1.0  # at least 3 s idle of every 4 s elapsed, never all
    assert asyncio.run(_families_elsewhere()) == []


async def _families_elsewhere() -> list[Metric]:
    assert meter_of_running_loop() is None
    return idle_families()


def generate_latest_of(families: list[Metric]) -> list[str]:
    """The text exposition of ``families`` (as a scrape renders them)."""
    registry = CollectorRegistry()

    class Fixed:
        def collect(self) -> list[Metric]:
            return families

    registry.register(Fixed())  # type: ignore[arg-type]
    return [generate_latest(registry).decode()]
