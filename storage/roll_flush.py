"""A rolled segment's fsync, off the event loop: what Kafka's scheduler thread does on a roll.

Kafka's ``UnifiedLog.roll`` schedules ``flushUptoOffsetExclusive(newSegment.baseOffset)`` on
its scheduler and returns; the old segment's bytes reach the disk while requests go on. Done
at the roll itself, a broker's one event loop stopped for the whole fsync: 0.66 s for the roll
of a default 1 GiB segment on this machine (an append that took <= 13 ms otherwise), in which
it answered no produce, fetch or heartbeat.

Here a roll (with a background writer) opens the files of the segments to flush, read-only,
on the event loop, and hands them to the log manager's background writer
(``storage.checkpoint_writer``, one thread). The writer's thread fsyncs and closes them and
records the outcome. The log applies it on its own thread (``Log.apply_background_flushes``:
each tick of the log manager, each flush, the close), which is when the recovery point moves:
it never claims bytes that are not yet on disk. A file opened at the roll stays valid whatever
the log does meanwhile (a rename, a deletion, a truncation); a truncation in between keeps the
recovery point where the truncation put it (the outcome's generation is stale). A failed fsync
is an I/O error of the log dir, as in Kafka: the log's ``on_io_error`` takes the dir offline.

The simulation keeps the inline writer, and with it the fsync at the roll: a thread would run
outside virtual time.
"""

from __future__ import annotations

import contextlib
import os
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kafkasim.storage.checkpoint_writer import CheckpointWriter
from kafkasim.storage.file_records import FileRecords

if TYPE_CHECKING:
    from kafkasim.storage.segment import LogSegment

__all__ = ["FlushDone", "RollFlushes"]

_fsync = os.fsync  # looked up per call: a test holds or fails the background fsync alone


@dataclass(frozen=True, slots=True)
class FlushDone:
    """The outcome of one background flush, for the log to apply on its own thread."""

    up_to: int  # every offset below it is on disk (when ``error`` is None)
    generation: int  # the log's truncation count when the flush was asked for
    sizes: tuple[tuple[FileRecords, int], ...]  # each segment file and its size then
    error: OSError | None


class RollFlushes:
    """The background flushes of one log: asked for at a roll, applied by the log."""

    def __init__(self, writer: CheckpointWriter, name: str) -> None:
        self._writer = writer
        self._name = name
        self._done: deque[FlushDone] = deque()  # appended by the writer's thread

    def submit(self, segments: Iterable[LogSegment], up_to: int, generation: int) -> None:
        """fsync ``segments`` (every offset below ``up_to``) on the writer's thread."""
        fds: list[int] = []
        sizes: list[tuple[FileRecords, int]] = []
        try:
            for segment in segments:
                sizes.append((segment.log, segment.log.size))
                for path in (
                    segment.log.path,
                    segment.offset_index.path,
                    segment.time_index.path,
                    segment.txn_index.path,  # created at a segment's first aborted transaction
                ):
                    with contextlib.suppress(FileNotFoundError):
                        fds.append(os.open(path, os.O_RDONLY))
        except OSError:
            _close_all(fds)
            raise
        done = self._done

        def flush() -> None:
            error: OSError | None = None
            try:
                for fd in fds:
                    _fsync(fd)
            except OSError as e:
                error = e
            finally:
                _close_all(fds)
            done.append(FlushDone(up_to, generation, tuple(sizes), error))

        self._writer.submit(f"flush of {self._name} below offset {up_to}", flush)

    def take_done(self) -> list[FlushDone]:
        """The flushes finished since the last call, oldest first."""
        done = self._done
        taken = []
        while done:
            taken.append(done.popleft())
        return taken


def _close_all(fds: Iterable[int]) -> None:
    for fd in fds:
        with contextlib.suppress(OSError):
            os.close(fd)
