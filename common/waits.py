"""Waiting with a timeout on the hot paths: fetch long-polls, purgatory waits, the producer's
sender between rounds.

``asyncio.wait(fs, timeout=..., return_when=FIRST_COMPLETED)`` builds sets, wraps every
awaitable, counts completions and sorts the futures into two sets that the callers here throw
away; ``wait_any`` keeps only what they use: one future to sleep on, one done-callback on each
awaited future and one timer. The order of events is asyncio.wait's: a future that completes
(or is complete already) wakes the waiter one loop step later, so the waiter always yields.

``Wakeup`` is an ``asyncio.Event`` for one sleeper whose wait takes a timeout: the timer
resolves the sleeper's future (False) instead of cancelling its task, as ``asyncio.timeout``
must (and then undo), so a timed sleep costs one future and one timer.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

__all__ = ["Wakeup", "wait_any"]


async def wait_any(futures: Sequence[asyncio.Future[Any]], timeout_s: float | None) -> bool:
    """Return once one of ``futures`` is done (True) or after ``timeout_s`` seconds (False;
    None: no limit), whichever comes first. The futures are left as they are (not cancelled);
    cancelling the waiting task cancels only the wait."""
    loop = asyncio.get_running_loop()
    woken: asyncio.Future[bool] = loop.create_future()

    def wake(_: object) -> None:
        if not woken.done():
            woken.set_result(True)

    for future in futures:
        future.add_done_callback(wake)
    timer = None if timeout_s is None else loop.call_later(timeout_s, _expire, woken)
    try:
        return await woken
    finally:
        if timer is not None:
            timer.cancel()
        for future in futures:
            future.remove_done_callback(wake)


def _expire(woken: asyncio.Future[bool]) -> None:
    if not woken.done():
        woken.set_result(False)


class Wakeup:
    """A flag one task sleeps on until another sets it (``asyncio.Event`` with one waiter).

    ``wait`` returns True at once, without yielding, when the flag is set (as ``Event.wait``),
    else True when ``set`` is called, or False after ``timeout_s`` seconds. The flag stays set
    until ``clear``. Two concurrent waiters are a bug (RuntimeError)."""

    __slots__ = ("_set", "_waiter")

    def __init__(self) -> None:
        self._set = False
        self._waiter: asyncio.Future[bool] | None = None

    def is_set(self) -> bool:
        return self._set

    def set(self) -> None:
        self._set = True
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(True)

    def clear(self) -> None:
        self._set = False

    async def wait(self, timeout_s: float | None = None) -> bool:
        if self._set:
            return True
        if self._waiter is not None:
            raise RuntimeError("a Wakeup has one waiter at a time")
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[bool] = loop.create_future()
        self._waiter = waiter
        timer = None if timeout_s is None else loop.call_later(timeout_s, _expire, waiter)
        try:
            return await waiter
        finally:
            self._waiter = None
            if timer is not None:
                timer.cancel()
