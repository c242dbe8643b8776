"""wait_any: the first of some futures, or a timeout, without asyncio.wait's sets."""

from __future__ import annotations

import asyncio

import pytest

from kafkasim.common.waits import Wakeup, wait_any
from kafkasim.sim.loop import run_simulation


def test_returns_true_when_a_future_completes_and_leaves_the_others() -> None:
    async def main() -> tuple[bool, float, bool]:
        loop = asyncio.get_running_loop()
        first, second = loop.create_future(), loop.create_future()
        loop.call_later(0.2, second.set_result, None)
        woken = await wait_any((first, second), 5.0)
        return woken, loop.time(), first.done()

    assert run_simulation(main()) == (True, 0.2, False)


def test_returns_false_at_the_timeout_without_cancelling_the_futures() -> None:
    async def main() -> tuple[bool, float, bool, int]:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()
        woken = await wait_any((future,), 0.5)
        future.set_result(None)  # later completion reaches no stale callback of the wait
        await asyncio.sleep(0)
        return woken, loop.time(), future.cancelled(), len(loop._scheduled)  # type: ignore[attr-defined]

    assert run_simulation(main()) == (False, 0.5, False, 0)


def test_yields_to_the_loop_even_when_a_future_is_done_already() -> None:
    async def main() -> list[str]:
        loop = asyncio.get_running_loop()
        order: list[str] = []
        done: asyncio.Future[None] = loop.create_future()
        done.set_result(None)
        loop.call_soon(order.append, "scheduled before")
        assert await wait_any((done,), None)
        order.append("waiter")
        return order

    assert run_simulation(main()) == ["scheduled before", "waiter"]


def test_cancelling_the_waiter_cancels_only_the_wait() -> None:
    async def main() -> tuple[bool, bool]:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()
        task = loop.create_task(wait_any((future,), 10.0))
        await asyncio.sleep(1)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return future.cancelled(), bool(loop._scheduled)  # type: ignore[attr-defined]

    assert run_simulation(main()) == (False, False)


def test_wakeup_wakes_its_sleeper_or_times_out() -> None:
    async def main() -> list[tuple[bool, float]]:
        loop = asyncio.get_running_loop()
        wakeup = Wakeup()
        seen = [(await wakeup.wait(0.5), loop.time())]  # nobody sets it: the timeout
        loop.call_later(0.25, wakeup.set)
        seen.append((await wakeup.wait(10.0), loop.time()))  # set before the timeout
        seen.append((await wakeup.wait(10.0), loop.time()))  # still set: at once
        wakeup.clear()
        loop.call_later(3.0, wakeup.set)
        seen.append((await wakeup.wait(None), loop.time()))  # no limit
        return seen

    assert run_simulation(main()) == [(False, 0.5), (True, 0.75), (True, 0.75), (True, 3.75)]


def test_wakeup_when_set_returns_without_yielding_and_leaves_no_timer() -> None:
    async def main() -> tuple[list[str], int]:
        loop = asyncio.get_running_loop()
        order: list[str] = []
        wakeup = Wakeup()
        wakeup.set()
        loop.call_soon(order.append, "scheduled before")
        await wakeup.wait(1.0)
        order.append("waiter")
        await asyncio.sleep(0)
        return order, len(loop._scheduled)  # type: ignore[attr-defined]

    assert run_simulation(main()) == (["waiter", "scheduled before"], 0)


def test_wakeup_refuses_a_second_sleeper() -> None:
    async def main() -> str:
        wakeup = Wakeup()
        first = asyncio.get_running_loop().create_task(wakeup.wait(None))
        await asyncio.sleep(0)
        with pytest.raises(RuntimeError, match="one waiter"):
            await wakeup.wait(None)
        wakeup.set()
        assert await first
        return "ok"

    assert run_simulation(main()) == "ok"
