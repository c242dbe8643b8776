"""VirtualTimeLoop: virtual time that jumps, deadlocks that raise, runs that replay exactly."""

from __future__ import annotations

import asyncio
import gc
import heapq
import operator
import os
import random
import time
from collections.abc import Callable, Coroutine
from typing import Any

import pytest

from kafkasim.sim.loop import (
    SimulationDeadlock,
    SimulationError,
    SimulationTimeLimitError,
    VirtualClock,
    VirtualTimeLoop,
    run_simulation,
)


def test_time_starts_at_the_start_time_and_jumps_to_each_timer() -> None:
    async def main() -> list[float]:
        loop = asyncio.get_running_loop()
        seen = [loop.time()]
        await asyncio.sleep(30.0)
        seen.append(loop.time())
        await asyncio.sleep(86_400 * 3)  # longer than asyncio's one-day select cap
        seen.append(loop.time())
        return seen

    wall_started = time.monotonic()
    assert run_simulation(main(), start_time=100.0) == [100.0, 130.0, 130.0 + 86_400 * 3]
    # 30 s slept for real would break the bound, which a loaded machine never nears (the unit
    # suites also run niced beside the rest of ./dev test).
    assert time.monotonic() - wall_started < 20.0, "virtual time must not be slept through"


def test_callbacks_take_no_virtual_time() -> None:
    async def main() -> float:
        loop = asyncio.get_running_loop()
        started = loop.time()
        for _ in range(1_000):
            await asyncio.sleep(0)
        sum(range(100_000))
        return loop.time() - started

    assert run_simulation(main()) == 0.0


def test_timeouts_fire_on_virtual_time() -> None:
    async def main() -> float:
        loop = asyncio.get_running_loop()
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(asyncio.Event().wait(), 5.0)
        return loop.time()

    assert run_simulation(main()) == 5.0


def test_a_deadlock_raises_and_names_the_pending_tasks() -> None:
    """Nothing ready, no timer, main not done: nothing can ever happen, so say so."""
    cleaned_up: list[str] = []

    async def stuck_worker() -> None:
        try:
            await asyncio.Event().wait()
        finally:
            cleaned_up.append("worker")

    async def main() -> None:
        asyncio.get_running_loop().create_task(stuck_worker(), name="replica-fetcher-7")
        await asyncio.sleep(2.5)
        await asyncio.get_running_loop().create_future()

    with pytest.raises(SimulationDeadlock) as raised:
        run_simulation(main())
    message = str(raised.value)
    assert "virtual time 2.500000" in message
    assert "2 task(s) wait forever" in message
    assert "replica-fetcher-7" in message
    assert "stuck_worker" in message
    assert cleaned_up == ["worker"], "teardown cancels what is left"


def test_a_livelock_hits_the_time_limit() -> None:
    async def main() -> None:
        while True:
            await asyncio.sleep(1.0)

    with pytest.raises(SimulationTimeLimitError, match="past the limit of 60"):
        run_simulation(main(), time_limit_s=60.0)


def test_the_simulation_refuses_real_io_and_threads() -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        read_fd, write_fd = os.pipe()
        try:
            with pytest.raises(SimulationError, match="real IO"):
                loop.add_reader(read_fd, lambda: None)
        finally:
            os.close(read_fd)
            os.close(write_fd)
        with pytest.raises(SimulationError, match="threads"):
            await asyncio.to_thread(time.sleep, 0)

    run_simulation(main())


def test_virtual_clock_reads_whole_milliseconds_of_loop_time() -> None:
    async def main() -> list[tuple[int, int]]:
        clock = VirtualClock(asyncio.get_running_loop(), epoch_ms=1_000_000)
        readings = [(clock.time_ms(), clock.monotonic_ms())]
        await asyncio.sleep(1.001)  # 1.001 * 1000 is 1000.9999999999999 in binary floats
        readings.append((clock.time_ms(), clock.monotonic_ms()))
        await asyncio.sleep(0.0004)
        readings.append((clock.time_ms(), clock.monotonic_ms()))
        return readings

    assert run_simulation(main()) == [(1_000_000, 0), (1_001_001, 1001), (1_001_001, 1001)]


def test_virtual_clock_reads_any_loops_time() -> None:
    # On its own loop the clock reads the loop's time attribute; on another through time().
    class FixedTimeLoop(asyncio.SelectorEventLoop):
        def time(self) -> float:
            return 2.5

    loop = FixedTimeLoop()
    try:
        clock = VirtualClock(loop, epoch_ms=1_000)
        assert (clock.monotonic_ms(), clock.time_ms()) == (2_500, 3_500)
    finally:
        loop.close()


def test_virtual_clock_default_epoch() -> None:
    loop = VirtualTimeLoop(start_time=2.0)
    try:
        assert VirtualClock(loop).time_ms() == 1_700_000_002_000
    finally:
        loop.close()


def test_start_time_and_limit_are_checked() -> None:
    with pytest.raises(ValueError, match="finite"):
        VirtualTimeLoop(start_time=float("nan"))
    with pytest.raises(ValueError, match="time_limit_s >= start_time"):
        VirtualTimeLoop(start_time=10.0, time_limit_s=5.0)


def _trace(seed: int) -> list[tuple[float, str]]:
    """Many tasks waking at colliding times; records who ran when."""
    trace: list[tuple[float, str]] = []

    async def worker(name: str, delays: list[float]) -> None:
        loop = asyncio.get_running_loop()
        for delay in delays:
            await asyncio.sleep(delay)
            trace.append((loop.time(), name))
            asyncio.get_running_loop().call_soon(trace.append, (loop.time(), f"{name}:soon"))

    async def main() -> None:
        rng = random.Random(seed)
        await asyncio.gather(
            *(
                worker(f"w{i}", [rng.choice([0.0, 0.001, 0.002, 0.5]) for _ in range(20)])
                for i in range(20)
            )
        )

    run_simulation(main())
    return trace


def test_the_same_program_gives_the_same_callbacks_at_the_same_times() -> None:
    first = _trace(seed=3)
    assert len(first) == 800
    assert _trace(seed=3) == first
    assert _trace(seed=4) != first


def test_a_timer_runs_at_exactly_its_time() -> None:
    # 7.319 + (15.981 - 7.319) is 15.980999999999998 in floats: the loop jumps to the timer's
    # own time, not to "now plus the wait", so callbacks read the time they were set for.
    async def main() -> float:
        loop = asyncio.get_running_loop()
        seen = loop.create_future()
        loop.call_at(15.981, lambda: seen.set_result(loop.time()))
        return await seen

    assert run_simulation(main(), start_time=7.319) == 15.981


def test_cancelled_timers_are_swept_and_never_run() -> None:
    async def main() -> tuple[list[int], int]:
        loop = asyncio.get_running_loop()
        ran: list[int] = []
        timers = [loop.call_later(1 + i / 1000, ran.append, i) for i in range(300)]
        for timer in timers[:250]:  # most of the heap cancelled: swept out in one go
            timer.cancel()
        await asyncio.sleep(0)
        left = len(loop._scheduled)  # type: ignore[attr-defined]
        await asyncio.sleep(2)
        return ran, left

    ran, left = run_simulation(main())
    assert ran == list(range(250, 300))
    assert left == 50


def test_same_instant_timers_and_ready_callbacks_keep_their_order() -> None:
    async def main() -> list[str]:
        loop = asyncio.get_running_loop()
        order: list[str] = []
        loop.call_later(0.5, order.append, "timer")
        loop.call_soon(order.append, "soon")
        await asyncio.sleep(0.5)
        order.append("sleeper")
        return order

    assert run_simulation(main()) == ["soon", "timer", "sleeper"]


def test_timers_run_in_the_order_asyncios_heap_of_timer_handles_gives() -> None:
    """Equal times on asyncio's heap have no fixed order, only the one its comparisons (by time
    alone) give: the loop's own heap entries must give exactly that order, or replays of runs
    recorded before would change. Many timers on few instants, some cancelled, checked against
    a heap of the TimerHandles themselves (with the main coroutine's sleep, pushed last)."""
    rng = random.Random(5)
    plan = [(rng.choice((0.25, 0.5, 0.75, 1.0)), rng.random() < 0.2) for _ in range(400)]
    reference: list[asyncio.TimerHandle] = []
    throwaway = asyncio.new_event_loop()
    for i, (when, _) in enumerate(plan):
        heapq.heappush(reference, asyncio.TimerHandle(when, print, (i,), throwaway))
    heapq.heappush(reference, asyncio.TimerHandle(2.0, print, (-1,), throwaway))
    throwaway.close()
    expected = []
    while reference:
        index = heapq.heappop(reference)._args[0]  # type: ignore[attr-defined]
        if index >= 0 and not plan[index][1]:
            expected.append(index)

    async def main() -> list[int]:
        loop = asyncio.get_running_loop()
        ran: list[int] = []
        timers = [loop.call_at(when, ran.append, i) for i, (when, _) in enumerate(plan)]
        for timer, (_, cancel) in zip(timers, plan, strict=True):
            if cancel:
                timer.cancel()
        await asyncio.sleep(2)
        return ran

    assert run_simulation(main()) == expected


def test_the_loop_lists_its_timers_and_refuses_callbacks_once_closed() -> None:
    loop = VirtualTimeLoop()
    first = loop.call_later(2, print)
    second = loop.call_at(1, print)
    second.cancel()
    assert sorted(loop.scheduled_timers(), key=lambda t: t.when()) == [second, first]
    assert first.when() == 2 and not first.cancelled() and second.cancelled()
    heap = loop._scheduled  # type: ignore[attr-defined]
    assert [float(due) for due in sorted(heap)] == [1.0, 2.0]
    assert not any(hasattr(due, "__dict__") for due in heap)  # the timer in a slot
    loop.close()
    for schedule in (
        lambda: loop.call_soon(print),
        lambda: loop.call_later(1, print),
        lambda: loop.call_at(1, print),
    ):
        with pytest.raises(RuntimeError, match="closed"):
            schedule()


def test_cancelling_counts_each_timer_on_the_heap_once() -> None:
    """The loop's own timers keep asyncio's count of cancelled timers on the heap (which decides
    when they are swept): once per timer, not for one that already left the heap."""

    async def main() -> list[int]:
        loop = asyncio.get_running_loop()
        counts: list[int] = []
        count = lambda: loop._timer_cancelled_count  # type: ignore[attr-defined]  # noqa: E731
        ran = loop.call_later(0.1, print)
        waiting = loop.call_later(5, print)
        await asyncio.sleep(0.2)
        counts.append(count())
        ran.cancel()  # ran already: not on the heap
        counts.append(count())
        waiting.cancel()
        waiting.cancel()
        counts.append(count())
        assert waiting.cancelled() and ran.cancelled()
        return counts

    assert run_simulation(main()) == [0, 0, 1]


def test_handles_look_like_asyncios_own() -> None:
    async def main() -> list[str]:
        loop = asyncio.get_running_loop()
        soon = loop.call_soon(print, "x")
        timer = loop.call_later(1, print, "y")
        later = loop.call_later(2, print, "z")
        timer.cancel()
        soon.cancel()
        assert isinstance(soon, asyncio.Handle) and isinstance(timer, asyncio.TimerHandle)
        loop.set_debug(True)
        later.cancel()  # cancelled in debug mode: the handle keeps its repr, as asyncio's
        loop.set_debug(False)
        return [repr(soon), repr(timer), repr(later)]

    soon, timer, later = run_simulation(main())
    assert soon == "<Handle cancelled>"
    assert timer == "<TimerHandle cancelled when=1.0>"
    assert later == "<TimerHandle cancelled when=2.0 print('z')>"


def test_debug_mode_runs_the_same_and_reports_the_failing_handle() -> None:
    reports: list[dict[str, object]] = []

    async def main() -> list[str]:
        loop = asyncio.get_running_loop()
        loop.set_debug(True)
        loop.set_exception_handler(lambda _, context: reports.append(context))
        order: list[str] = []
        loop.call_later(0.5, order.append, "timer")
        loop.call_soon(order.append, "soon")
        loop.call_soon(operator.truediv, 1, 0)
        await asyncio.sleep(0.5)
        order.append("sleeper")
        loop.set_debug(False)
        return order

    assert run_simulation(main()) == ["soon", "timer", "sleeper"]
    assert len(reports) == 1
    assert isinstance(reports[0]["exception"], ZeroDivisionError)
    assert "truediv" in repr(reports[0]["handle"])


def test_a_failing_callback_is_reported_as_asyncios_loop_reports_it() -> None:
    def reports_of(run: Callable[[Coroutine[Any, Any, list[str]]], list[str]]) -> list[object]:
        reports: list[dict[str, Any]] = []

        async def main() -> list[str]:
            loop = asyncio.get_running_loop()
            loop.set_exception_handler(lambda _, context: reports.append(context))
            order: list[str] = []
            loop.call_soon(operator.truediv, 1, 0)
            loop.call_soon(order.append, "after")  # the loop goes on with the next callback
            await asyncio.sleep(0)
            return order

        assert run(main()) == ["after"]
        assert len(reports) == 1
        report = reports[0]
        assert isinstance(report["exception"], ZeroDivisionError)
        return [sorted(report), report["message"], repr(report["handle"])]

    assert reports_of(run_simulation) == reports_of(asyncio.run)
    message = reports_of(run_simulation)[1]
    assert isinstance(message, str) and message.startswith("Exception in callback")
    assert "truediv" in message


def test_a_run_tunes_the_garbage_collector_and_restores_it() -> None:
    gc.unfreeze()  # Python 3.12.1 starts with objects frozen
    before = gc.get_threshold()

    async def main() -> tuple[tuple[int, int, int], int]:
        return gc.get_threshold(), gc.get_freeze_count()

    during, frozen = run_simulation(main())
    assert during[0] >= 10_000 and during[1:] == before[1:]
    assert frozen > 0  # what existed before the run is left out of its collections
    assert gc.get_threshold() == before
    assert gc.get_freeze_count() == 0
    with pytest.raises(ZeroDivisionError):  # restored after a failed run too

        async def failing() -> None:
            raise ZeroDivisionError

        run_simulation(failing())
    assert gc.get_threshold() == before
    assert gc.get_freeze_count() == 0


def test_a_run_leaves_a_freeze_made_before_it_alone() -> None:
    """Frozen already (a program's own freeze, or Python 3.12.1's start): the run neither
    freezes more (unfreezing could not undo only its part) nor unfreezes what it found."""
    gc.freeze()
    try:
        found = gc.get_freeze_count()
        assert found > 0

        async def main() -> int:
            return gc.get_freeze_count()

        # A frozen object freed meanwhile leaves the count (a CI run saw 2 fewer); a run that
        # froze would add what was made since (the loop, the coroutine), and one that unfroze
        # would leave none.
        during = run_simulation(main())
        assert 0 < during <= found
        assert 0 < gc.get_freeze_count() <= during
    finally:
        gc.unfreeze()
