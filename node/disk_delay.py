"""The broker's port for a slow disk: how long its log writes and fsyncs take.

Kafka appends to a log on the thread that asked for it (a request handler for a leader's
produce, the replica fetcher thread for a follower's copy), and that thread is blocked while the
write, and any fsync the append triggers (``flush.messages``, a segment roll), is under way. A
slow disk therefore answers a leader's produce late and makes a follower fall behind (and leave
the ISR after ``replica.lag.time.max.ms``). kafkasim's storage is synchronous, so the wait is
taken at the async callers that append (``ReplicaManager.append_records``, the replica fetcher):
the write's before the append (the records are not in the log until the write is done), the
fsync's after it (Kafka's ``UnifiedLog.append`` moves the log end first, then flushes when
``flush.messages`` is reached, still on the appending thread).

A broker holds one ``DiskSlot``; its ``delay`` is None unless someone slows the disk (the
simulation's ``slow_disk`` fault, ``sim.disk``). None costs nothing: the callers test it and
do not await at all, so a run without a slow disk schedules exactly as before.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

__all__ = ["DiskDelay", "DiskSlot"]


class DiskDelay(Protocol):
    """One broker's disk, slowed: each call returns once the disk has done that work."""

    async def write(self) -> None:
        """One append's write (a produce's partition, a fetched partition's batches)."""

    async def fsync(self, count: int) -> None:
        """``count`` fsyncs an append triggered."""


@dataclass(slots=True)
class DiskSlot:
    """Where a broker's appenders find its disk's delay (None: the disk is not slowed)."""

    delay: DiskDelay | None = None
