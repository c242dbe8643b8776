"""A simulated broker's disk, slowed (the ``slow_disk`` fault): one queue per broker.

Every log write and every fsync a broker asks for (``node.disk_delay``) waits its turn on the
broker's disk, then its latency in virtual time: one request at a time, first come first
served, as a single device serves them. A leader's produce and its followers' fetches to it
queue behind each other; so do a follower's appends of every partition it copies.
"""

from __future__ import annotations

import asyncio

__all__ = ["SimDisk"]


class SimDisk:
    """``node.disk_delay.DiskDelay`` for one simulated broker: ``write_ms`` per write,
    ``fsync_ms`` per fsync, one at a time."""

    def __init__(self, write_ms: float, fsync_ms: float) -> None:
        if write_ms < 0 or fsync_ms < 0:
            raise ValueError(f"disk latencies are >= 0 ms, not {write_ms!r} / {fsync_ms!r}")
        self.write_ms = write_ms
        self.fsync_ms = fsync_ms
        self._busy = asyncio.Lock()  # FIFO: waiters are served in the order they came
        self.writes = 0
        self.fsyncs = 0

    async def write(self) -> None:
        self.writes += 1
        await self._serve(self.write_ms)

    async def fsync(self, count: int) -> None:
        self.fsyncs += count
        await self._serve(self.fsync_ms * count)

    async def _serve(self, ms: float) -> None:
        if ms <= 0:
            return
        async with self._busy:
            await asyncio.sleep(ms / 1000)
