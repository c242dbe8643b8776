"""The controller's event queue on its own: one event at a time, in order; results and errors
reach the submitter; stopping fails what is queued with NOT_CONTROLLER."""

from __future__ import annotations

import asyncio

import pytest

from kafkasim.controller.api import NotControllerError
from kafkasim.controller.events import ControllerEvent, ControllerEventManager

from .harness import run


def test_events_run_one_at_a_time_in_order() -> None:
    async def scenario() -> list[str]:
        trace: list[str] = []

        async def process(event: ControllerEvent) -> None:
            trace.append(f"start {event.name}")
            await asyncio.sleep(1.0)  # a handler that waits does not let the next one in
            await event.handler()
            trace.append(f"end {event.name}")

        async def noop() -> None:
            return None

        events = ControllerEventManager("test", process)
        events.start()
        for name in ("a", "b", "c"):
            events.put(ControllerEvent(name, noop))
        await events.join()
        await events.stop()
        return trace

    assert run(scenario) == ["start a", "end a", "start b", "end b", "start c", "end c"]


def test_submit_returns_the_result_and_raises_the_error() -> None:
    async def scenario() -> None:
        async def process(event: ControllerEvent) -> None:
            try:
                event.succeed(await event.handler())
            except ValueError as e:
                event.fail(e)

        async def answer() -> int:
            return 42

        async def broken() -> int:
            raise ValueError("bad input")

        events = ControllerEventManager("test", process)
        events.start()
        assert await events.submit("answer", answer) == 42
        with pytest.raises(ValueError, match="bad input"):
            await events.submit("broken", broken)
        await events.stop()

    run(scenario)


def test_stopping_fails_queued_events_and_later_ones() -> None:
    async def scenario() -> None:
        started = asyncio.Event()

        async def process(event: ControllerEvent) -> None:
            started.set()
            await asyncio.sleep(3600)

        async def noop() -> None:
            return None

        events = ControllerEventManager("test", process)
        events.start()
        first = asyncio.ensure_future(events.submit("first", noop))
        queued = asyncio.ensure_future(events.submit("queued", noop))
        await started.wait()
        assert await events.stop()
        assert not await events.stop()  # already stopped
        with pytest.raises(NotControllerError):
            await queued
        first.cancel()
        with pytest.raises(NotControllerError, match="down"):
            await events.submit("late", noop, not_running="down")
        late = ControllerEvent("late", noop, asyncio.get_running_loop().create_future())
        events.put(late)
        assert late.future is not None
        with pytest.raises(NotControllerError):
            await late.future

    run(scenario)


def test_changed_is_set_after_each_event() -> None:
    async def scenario() -> None:
        async def process(event: ControllerEvent) -> None:
            await event.handler()

        async def noop() -> None:
            return None

        events = ControllerEventManager("test", process)
        events.start()
        changed = events.changed
        events.put(ControllerEvent("a", noop))
        await asyncio.wait_for(changed.wait(), 10)
        assert events.changed is not changed  # a fresh event for the next waiters
        await events.stop()

    run(scenario)


def test_starting_twice_is_refused() -> None:
    async def scenario() -> None:
        async def process(event: ControllerEvent) -> None:
            return None

        events = ControllerEventManager("test", process)
        events.start()
        with pytest.raises(RuntimeError, match="already started"):
            events.start()
        await events.stop()

    run(scenario)
