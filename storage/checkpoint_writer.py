"""Where a log manager's periodic checkpoint files are written: inline, or on a thread of their
own.

A checkpoint write is a small file written, fsync'd, renamed and its directory fsync'd
(``OffsetCheckpointFile.write``). On this machine's disk that takes 0.5 ms when it is quiet and
6 ms at the median, up to 65 ms, when it is busy, and a broker's event loop serves no request
while it waits. Kafka writes its
checkpoints (``highwatermark-checkpoint``, ``kafka-recovery-point-checkpoint``,
``kafka-log-start-offset-checkpoint``) from its scheduler threads, never from a request
handler; :class:`BackgroundCheckpointWriter` does the same for a broker process.

What is written is decided where the write is asked for (the offsets are read on the event
loop, as one snapshot); only the file I/O moves. One thread writes, in the order the writes
were asked for, so a file never goes back to an older snapshot. :meth:`drain` waits for every
write asked for so far: the clean shutdown drains before it writes the final checkpoints and
the clean-shutdown marker, so those are the last words on disk.

The same writer fsyncs a log's rolled segments (``storage.roll_flush``), as Kafka's scheduler
does both.

The simulation keeps :class:`InlineCheckpointWriter` (the default): a thread would run outside
virtual time, and a run must replay byte for byte from its seed.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Protocol

__all__ = ["BackgroundCheckpointWriter", "CheckpointWriter", "InlineCheckpointWriter"]

logger = logging.getLogger(__name__)


class CheckpointWriter(Protocol):
    in_background: bool
    """Whether a submitted write runs on another thread (and returns before it is done)."""

    def submit(self, what: str, write: Callable[[], None]) -> None:
        """Run ``write`` (one checkpoint file's I/O; ``what`` names it for a failure's log)."""

    def drain(self) -> None:
        """Return once every write submitted so far has finished."""

    def close(self) -> None:
        """Drain, then release what the writer holds; submitting afterwards writes inline."""


class InlineCheckpointWriter:
    """Writes at once, on the caller's thread; an error propagates to the caller."""

    in_background = False

    def submit(self, what: str, write: Callable[[], None]) -> None:
        del what
        write()

    def drain(self) -> None:
        pass

    def close(self) -> None:
        pass


class BackgroundCheckpointWriter:
    """Writes on one thread of its own, in submission order. A failed write is logged
    (as an inline one fails its periodic task); the next period writes the file again."""

    in_background = True

    def __init__(self, name: str = "checkpoint-writer") -> None:
        self._name = name
        self._lock = threading.Lock()
        self._executor: ThreadPoolExecutor | None = None
        self._last: Future[None] | None = None
        self._closed = False
        self.failures = 0

    def submit(self, what: str, write: Callable[[], None]) -> None:
        with self._lock:
            if self._closed:
                write()
                return
            if self._executor is None:
                self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=self._name)
            future = self._executor.submit(write)
            self._last = future
        future.add_done_callback(lambda f: self._done(what, f))

    def _done(self, what: str, future: Future[None]) -> None:
        error = future.exception()
        if error is not None:
            self.failures += 1
            logger.error("writing the %s checkpoint failed: %s", what, error)

    def drain(self) -> None:
        with self._lock:
            last = self._last
        if last is not None:
            # One worker runs the writes in order: the last one done means all are.
            last.exception()

    def close(self) -> None:
        self.drain()
        with self._lock:
            executor, self._executor = self._executor, None
            self._closed = True
        if executor is not None:
            executor.shutdown(wait=True)
