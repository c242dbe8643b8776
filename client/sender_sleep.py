"""The sender loop's sleep (``client.sender``), which the producer can bring forward without
waking the loop.

Kafka's producer wakes its sender thread for every new batch; the sender then only finds the
batch lingering (``linger.ms``) and goes back to sleep until it is due. On an event loop each
such wake-up is a task step per batch for nothing: when a new batch cannot be sendable before
its linger expires, :meth:`SenderSleep.wake_by` arms (or moves earlier) an alarm at that
expiry instead, unless the sender already sleeps until then or earlier. What the sender does
when it wakes is the same either way: it would have computed that very wait.

Not thread-safe: the producer's event loop owns it.
"""

from __future__ import annotations

import asyncio

from kafkasim.client.accumulator import PartitionState, ProducerBatch
from kafkasim.client.metadata import ClusterMetadata
from kafkasim.common.waits import Wakeup

__all__ = ["SenderSleep", "lingers"]


def lingers(
    state: PartitionState, batch: ProducerBatch, linger_ms: int, metadata: ClusterMetadata
) -> bool:
    """Whether new ``batch`` cannot be sendable before its linger.ms ends (the sender need
    not look sooner): it lingers at all, is the only batch queued for its partition (a batch
    behind another makes that one sendable now), is not full, and its leader is known."""
    return (
        linger_ms > 0
        and len(state.batches) == 1
        and not batch.is_full
        and metadata.leader(state.tp) >= 0
    )


class SenderSleep:
    """One sender's sleeps on ``wakeup``: until when, and an alarm that ends one early."""

    def __init__(self, wakeup: Wakeup) -> None:
        self._wakeup = wakeup
        self._loop: asyncio.AbstractEventLoop | None = None
        self._asleep = False
        self._until: float | None = None  # loop time the current sleep ends (None: no limit)
        self._alarm: asyncio.TimerHandle | None = None

    async def sleep(self, timeout_s: float | None) -> None:
        """Until the wakeup is set, ``timeout_s`` seconds pass (None: no limit) or an alarm
        of :meth:`wake_by` rings; the alarm goes with the sleep."""
        loop = self._loop = asyncio.get_running_loop()
        self._until = None if timeout_s is None else loop.time() + timeout_s
        self._asleep = True
        try:
            await self._wakeup.wait(timeout_s)
        finally:
            self._asleep = False
            alarm, self._alarm = self._alarm, None
            if alarm is not None:
                alarm.cancel()

    def wake_by(self, delay_s: float) -> None:
        """Make the sender look again within ``delay_s`` seconds: nothing when its sleep ends
        by then (or it is awake or already woken), else an alarm then; woken at once when it
        does not sleep (it has not started: its first round looks anyway)."""
        wakeup = self._wakeup
        if wakeup.is_set():
            return
        loop = self._loop
        if not self._asleep or loop is None:
            wakeup.set()
            return
        at = loop.time() + delay_s
        if self._until is not None and self._until <= at:
            return
        alarm = self._alarm
        if alarm is not None:
            if alarm.when() <= at:
                return
            alarm.cancel()
        self._alarm = loop.call_at(at, wakeup.set)
