"""Waiting on futures with a timeout, for the hot paths (fetch long-polls, purgatory waits).

``asyncio.wait(fs, timeout=..., return_when=FIRST_COMPLETED)`` builds sets, wraps every
awaitable, counts completions and sorts the futures into two sets that the callers here throw
away; ``wait_any`` keeps only what they use: one future to sleep on, one done-callback on each
awaited future and one timer. The order of events is asyncio.wait's: a future that completes
(or is complete already) wakes the waiter one loop step later, so the waiter always yields.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

__all__ = ["wait_any"]


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
