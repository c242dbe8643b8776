"""SenderSleep: the sender's sleep, ended early by an alarm that ``wake_by`` arms or moves
earlier, never later, on the virtual clock."""

from __future__ import annotations

import asyncio

from kafkasim.client.sender_sleep import SenderSleep
from kafkasim.common.waits import Wakeup
from kafkasim.sim.loop import run_simulation


async def _sleeping(sleep: SenderSleep, timeout_s: float | None) -> asyncio.Task[float]:
    """A task sleeping on ``sleep``, returning the loop time it woke; started before this
    returns."""
    loop = asyncio.get_running_loop()

    async def sleeper() -> float:
        await sleep.sleep(timeout_s)
        return loop.time()

    task = loop.create_task(sleeper())
    await asyncio.sleep(0)
    return task


def test_an_alarm_ends_a_sleep_without_limit() -> None:
    async def main() -> tuple[float, int]:
        sleep = SenderSleep(Wakeup())
        task = await _sleeping(sleep, None)
        await asyncio.sleep(1.0)
        sleep.wake_by(0.005)
        woke = await task
        return woke, len(asyncio.get_running_loop()._scheduled)  # type: ignore[attr-defined]

    assert run_simulation(main()) == (1.005, 0)


def test_a_sleep_ending_sooner_needs_no_alarm() -> None:
    async def main() -> tuple[float, int]:
        sleep = SenderSleep(Wakeup())
        task = await _sleeping(sleep, 0.002)
        sleep.wake_by(0.005)
        scheduled = len(asyncio.get_running_loop()._scheduled)  # type: ignore[attr-defined]
        return await task, scheduled

    assert run_simulation(main()) == (0.002, 1)  # the sleep's own timer only


def test_the_alarm_moves_earlier_never_later_and_goes_with_the_sleep() -> None:
    async def main() -> tuple[float, int]:
        sleep = SenderSleep(Wakeup())
        task = await _sleeping(sleep, 10.0)
        sleep.wake_by(0.5)
        sleep.wake_by(0.9)  # later than the alarm: no change
        sleep.wake_by(0.2)  # earlier: the alarm moves
        woke = await task
        return woke, len(asyncio.get_running_loop()._scheduled)  # type: ignore[attr-defined]

    assert run_simulation(main()) == (0.2, 0)


def test_without_a_sleep_it_wakes_at_once() -> None:
    async def main() -> tuple[bool, bool]:
        wakeup = Wakeup()
        sleep = SenderSleep(wakeup)
        sleep.wake_by(5.0)  # nobody sleeps yet: the flag is set, the first round looks
        first = wakeup.is_set()
        wakeup.clear()
        task = await _sleeping(sleep, None)
        wakeup.set()
        await task
        sleep.wake_by(5.0)  # awake again (between rounds): the same
        return first, wakeup.is_set()

    assert run_simulation(main()) == (True, True)
