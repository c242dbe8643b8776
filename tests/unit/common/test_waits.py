"""wait_any: the first of some futures, or a timeout, without asyncio.wait's sets."""

from __future__ import annotations

import asyncio

import pytest

from kafkasim.common.waits import wait_any
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
