"""The producer's bulk send (``Producer.send_many``): many records, one future.

A :class:`BulkSend` holds the records of one ``send_many`` call as columns (keys, values,
headers, timestamps, each record's size upper bound) and their outcome as columns too
(partition, offset, timestamp, error per record). The accumulator appends a run of its
records to a batch at once and leaves in that batch one :class:`BulkSlice` (this send,
first record, count) instead of one future per record; when the batch ends, the slice fills
the outcome columns by slice assignment. When the last slice is resolved, the send's one
future resolves to a :class:`SendManyResult` (never to an exception: a record that failed
has its error in ``errors``, as ``send`` would have failed that record's future).

A ``callback`` (Kafka's ``Callback``), when the caller passes one, is still called once per
record, in record order within each batch, with the record's metadata or error.

Not thread-safe: the producer's event loop owns every object here.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from kafkasim.client.producer_errors import logger
from kafkasim.client.producer_types import Headers, RecordMetadata, SendCallback

__all__ = ["BulkSend", "BulkSlice", "SendManyResult"]


class SendManyResult:
    """The outcome of a ``send_many``: per record (by its index in the call) its partition,
    offset and timestamp, and the error of each record that failed.

    ``offsets[i]`` is -1 for a failed record and where ``send`` would report -1 (acks=0; a
    batch known written only through a later one). ``timestamps[i]`` is the broker's append
    time on a LogAppendTime topic, else the record's own.
    """

    __slots__ = ("errors", "offsets", "partitions", "timestamps", "topic")

    def __init__(
        self,
        topic: str,
        partitions: list[int],
        offsets: list[int],
        timestamps: list[int],
        errors: dict[int, BaseException],
    ) -> None:
        self.topic = topic
        self.partitions = partitions
        self.offsets = offsets
        self.timestamps = timestamps
        self.errors = errors

    def __len__(self) -> int:
        return len(self.offsets)

    def __repr__(self) -> str:
        return (
            f"SendManyResult(topic={self.topic!r}, records={len(self)}, errors={len(self.errors)})"
        )

    def metadata(self, index: int) -> RecordMetadata:
        """Record ``index``'s metadata, or its error raised."""
        error = self.errors.get(index)
        if error is not None:
            raise error
        return RecordMetadata(
            self.topic, self.partitions[index], self.offsets[index], self.timestamps[index]
        )

    def raise_first_error(self) -> None:
        """Raise the error of the lowest-numbered failed record, if any failed."""
        if self.errors:
            raise self.errors[min(self.errors)]


class BulkSend:
    """One ``send_many`` call: its records as columns, and their outcome as they arrive."""

    __slots__ = (
        "callback",
        "errors",
        "future",
        "headers",
        "keys",
        "offsets",
        "partitions",
        "remaining",
        "timestamps",
        "topic",
        "uppers",
        "values",
    )

    def __init__(  # noqa: PLR0917 -- the columns of the call
        self,
        topic: str,
        keys: Sequence[bytes | None] | None,
        values: Sequence[bytes | None],
        headers: Sequence[Headers] | None,
        timestamps: list[int],
        uppers: list[int],
        future: asyncio.Future[SendManyResult],
        callback: SendCallback | None,
    ) -> None:
        self.topic = topic
        self.keys = keys
        self.values = values
        self.headers = headers
        self.timestamps = timestamps
        self.uppers = uppers
        self.future = future
        self.callback = callback
        count = len(values)
        self.partitions = [-1] * count
        self.offsets = [-1] * count
        self.errors: dict[int, BaseException] = {}
        self.remaining = count
        if count == 0:
            self._finish()

    def complete(
        self, start: int, count: int, partition: int, base_offset: int, log_append_time_ms: int
    ) -> None:
        """Records ``start`` .. ``start + count - 1`` were appended from ``base_offset`` on
        (-1: offsets unknown) to ``partition``; ``log_append_time_ms`` >= 0 for LogAppendTime."""
        stop = start + count
        self.partitions[start:stop] = [partition] * count
        if base_offset >= 0:
            self.offsets[start:stop] = range(base_offset, base_offset + count)
        if log_append_time_ms >= 0:
            self.timestamps[start:stop] = [log_append_time_ms] * count
        if self.callback is not None:
            self._call_back(start, stop, None)
        self._resolved(count)

    def fail(self, start: int, count: int, partition: int, error: BaseException) -> None:
        stop = start + count
        self.partitions[start:stop] = [partition] * count
        self.errors.update(dict.fromkeys(range(start, stop), error))
        if self.callback is not None:
            self._call_back(start, stop, error)
        self._resolved(count)

    def _call_back(self, start: int, stop: int, error: BaseException | None) -> None:
        callback = self.callback
        assert callback is not None
        topic, partitions, offsets, timestamps = (
            self.topic,
            self.partitions,
            self.offsets,
            self.timestamps,
        )
        for i in range(start, stop):  # Kafka calls each record's callback: per record
            try:
                if error is None:
                    callback(RecordMetadata(topic, partitions[i], offsets[i], timestamps[i]), None)
                else:
                    callback(None, error)
            except Exception:
                logger.exception("a send callback raised")

    def _resolved(self, count: int) -> None:
        self.remaining -= count
        if self.remaining <= 0:
            self._finish()

    def _finish(self) -> None:
        if not self.future.done():
            self.future.set_result(
                SendManyResult(
                    self.topic, self.partitions, self.offsets, self.timestamps, self.errors
                )
            )


class BulkSlice:
    """Records ``start`` .. ``start + count - 1`` of a :class:`BulkSend` in one batch, in
    place of their futures. It resolves once; it answers ``done()`` and ``set_exception``
    as a future does, for the paths that hold one record (a record waiting for metadata)."""

    __slots__ = ("count", "resolved", "send", "start")

    def __init__(self, send: BulkSend, start: int, count: int) -> None:
        self.send = send
        self.start = start
        self.count = count
        self.resolved = False

    def done(self) -> bool:
        return self.resolved

    def complete(self, partition: int, base_offset: int, log_append_time_ms: int) -> None:
        if not self.resolved:
            self.resolved = True
            self.send.complete(self.start, self.count, partition, base_offset, log_append_time_ms)

    def fail(self, partition: int, error: BaseException) -> None:
        if not self.resolved:
            self.resolved = True
            self.send.fail(self.start, self.count, partition, error)

    def set_exception(self, error: BaseException) -> None:
        """Fail before reaching a batch (partition unknown: -1)."""
        self.fail(-1, error)

    @property
    def waiter(self) -> asyncio.Future[SendManyResult]:
        """What ``flush`` waits on for this slice."""
        return self.send.future
