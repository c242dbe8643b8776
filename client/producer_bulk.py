"""How ``Producer.send_many`` queues many records at once (the bulk half of rule 1 of
:mod:`client.producer`).

:func:`build_send` checks and converts the caller's columns once (serializers, bytes, lengths,
timestamps, each record's size upper bound) into a :class:`~client.bulk.BulkSend`;
:class:`BulkQueue` then does what ``send`` does per record, per call: the fatal-error and
transaction checks, max.request.size, and records of a topic not in the metadata yet (which
wait, one :class:`PendingRun` per call: the first sends to a topic); :func:`append_many`
fills the batches. It puts
each record exactly where ``send`` in a loop would (the partitioner is asked once per record
without an explicit partition, KIP-480's move on a new batch included) and into the same
batches, but each batch gets one :class:`~client.bulk.BulkSlice` per run of records instead
of a future per record. Encoding stays per record (``RecordBatchBuilder.append``), as in
Kafka's producer; futures, callbacks and wake-ups are per call and per batch.

Not thread-safe: the producer's event loop owns it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kafkasim.client.accumulator import (
    Headers,
    PartitionState,
    ProducerBatch,
    RecordAccumulator,
    SendCallback,
)
from kafkasim.client.bulk import BulkSend, BulkSlice, SendManyResult
from kafkasim.client.metadata import TopicMetadata
from kafkasim.client.partitioner import DefaultPartitioner, UniformStickyPartitioner
from kafkasim.client.producer_config import ProducerConfig
from kafkasim.common.clock import Clock
from kafkasim.common.errors import KafkaError, KafkasimError, RecordTooLargeError
from kafkasim.storage.records.batch import (
    MAX_RECORD_OVERHEAD,
    RECORD_BATCH_OVERHEAD,
    record_size_upper_bound,
)

if TYPE_CHECKING:
    from kafkasim.client.sender import Sender
    from kafkasim.client.transaction_manager import TransactionManager

__all__ = ["BulkQueue", "PendingRun", "append_many", "arrow_columns", "build_send"]


def _check_lengths(
    values: Sequence[object],
    keys: Sequence[object] | None,
    headers: Sequence[object] | None,
    timestamps: Sequence[int] | None,
) -> None:
    count = len(values)
    for name, column in (("keys", keys), ("headers", headers), ("timestamps", timestamps)):
        if column is not None and len(column) != count:
            raise ValueError(
                f"send_many: {name} has {len(column)} entries for {count} values "
                "(one per record expected)"
            )


def _bytes_column(
    name: str, column: Sequence[object], convert: Callable[[Any], Any] | None
) -> list[bytes | None]:
    """``column`` serialized (when ``convert`` is given) and checked to be bytes or None (a
    bytearray or memoryview is copied to bytes); TypeError naming the first bad record."""
    if convert is not None:
        column = [None if item is None else convert(item) for item in column]
    out: list[Any] = column if isinstance(column, list) else list(column)
    if not all(type(item) is bytes or item is None for item in out):
        out = list(out)  # never change the caller's list
        for i, item in enumerate(out):
            if type(item) is bytes or item is None:
                continue
            if isinstance(item, (bytearray, memoryview)):
                out[i] = bytes(item)
                continue
            raise TypeError(
                f"send_many: {name}[{i}] must be bytes or None, not {type(item).__name__}"
            )
    return out


def build_send(
    topic: str,
    values: Sequence[Any],
    *,
    keys: Sequence[Any] | None,
    headers: Sequence[Headers] | None,
    timestamps: Sequence[int] | int | None,
    key_serializer: Callable[[Any], Any] | None,
    value_serializer: Callable[[Any], Any] | None,
    now_ms: int,
    future: asyncio.Future[SendManyResult],
    callback: SendCallback | None,
) -> BulkSend:
    """The call's columns checked and converted; ValueError/TypeError naming what is wrong
    (nothing is queued then)."""
    count = len(values)
    stamps: Sequence[int] | None = None if isinstance(timestamps, int) else timestamps
    _check_lengths(values, keys, headers, stamps)
    value_column = _bytes_column("values", values, value_serializer)
    key_column = None if keys is None else _bytes_column("keys", keys, key_serializer)
    if timestamps is None:
        stamp_column = [now_ms] * count
    elif isinstance(timestamps, int):
        stamp_column = [timestamps] * count
    else:
        stamp_column = list(timestamps)
        if not all(type(t) is int for t in stamp_column):
            bad = next(i for i, t in enumerate(stamp_column) if type(t) is not int)
            raise TypeError(f"send_many: timestamps[{bad}] must be an int")
    if stamp_column and min(stamp_column) < 0:
        bad = next(i for i, t in enumerate(stamp_column) if t < 0)
        raise ValueError(
            f"Invalid timestamp: {stamp_column[bad]} (record {bad}). Timestamp should always "
            "be non-negative or null."
        )
    header_column = headers if headers is not None and any(headers) else None
    overhead = MAX_RECORD_OVERHEAD + 10
    uppers = [overhead if v is None else overhead + len(v) for v in value_column]
    if key_column is not None:
        uppers = [u if k is None else u + len(k) for u, k in zip(uppers, key_column, strict=True)]
    if header_column is not None:
        key_list: Sequence[bytes | None] = key_column if key_column is not None else [None] * count
        uppers = [
            record_size_upper_bound(k, v, h) if h else u
            for u, k, v, h in zip(uppers, key_list, value_column, header_column, strict=True)
        ]
    return BulkSend(
        topic, key_column, value_column, header_column, stamp_column, uppers, future, callback
    )


def arrow_columns(
    data: Any, *, value: str, key: str | None, timestamp: str | None
) -> tuple[list[Any], list[Any] | None, list[int] | None]:
    """The value, key and timestamp columns of a ``pyarrow.Table`` or ``RecordBatch`` as
    lists for ``send_many``: binary or string columns (strings as UTF-8), nulls as None; the
    timestamp column integer milliseconds or an Arrow timestamp (converted to ms). KeyError
    naming a missing column, TypeError naming one of another type, ImportError without
    pyarrow. Converted by Arrow, column by column."""
    try:
        import pyarrow as pa  # noqa: PLC0415 -- optional: only this path needs it
    except ImportError as e:  # pragma: no cover -- pyarrow is in the dev environment
        raise ImportError("send_arrow needs pyarrow (pip install pyarrow)") from e
    if not isinstance(data, (pa.Table, pa.RecordBatch)):
        raise TypeError(f"send_arrow takes a pyarrow Table or RecordBatch, not {type(data)}")

    def column(name: str) -> Any:
        if name not in data.column_names:
            raise KeyError(f"send_arrow: no column {name!r} (columns: {data.column_names})")
        return data.column(name)

    def as_bytes(name: str) -> list[Any]:
        array = column(name)
        kind = array.type
        if pa.types.is_string(kind) or pa.types.is_large_string(kind):
            array = array.cast(pa.large_binary() if pa.types.is_large_string(kind) else pa.binary())
        elif not (
            pa.types.is_binary(kind)
            or pa.types.is_large_binary(kind)
            or pa.types.is_fixed_size_binary(kind)
        ):
            raise TypeError(f"send_arrow: column {name!r} is {kind}, not binary or string")
        return list(array.to_pylist())

    stamps: list[int] | None = None
    if timestamp is not None:
        array = column(timestamp)
        kind = array.type
        if pa.types.is_timestamp(kind):
            array = array.cast(pa.timestamp("ms", tz=kind.tz), safe=False).cast(pa.int64())
        elif not pa.types.is_integer(kind):
            raise TypeError(f"send_arrow: column {timestamp!r} is {kind}, not a timestamp")
        if array.null_count:
            raise ValueError(f"send_arrow: column {timestamp!r} has nulls")
        stamps = list(array.to_pylist())
    return as_bytes(value), None if key is None else as_bytes(key), stamps


class BulkQueue:
    """The producer's checks of ``send``, once per ``send_many``, then the accumulator."""

    def __init__(
        self,
        config: ProducerConfig,
        *,
        serializers: tuple[Callable[[Any], Any] | None, Callable[[Any], Any] | None],
        accumulator: RecordAccumulator,
        sender: Sender,
        topics: Mapping[str, TopicMetadata],
        clock: Clock,
        transaction_manager: TransactionManager | None,
    ) -> None:
        self._config = config
        self._key_serializer, self._value_serializer = serializers
        self._accumulator = accumulator
        self._sender = sender
        self._topics = topics
        self._clock = clock
        self._txn = transaction_manager

    def send(  # noqa: PLR0917 -- send_many's arguments
        self,
        future: asyncio.Future[SendManyResult],
        topic: str,
        values: Sequence[Any],
        keys: Sequence[Any] | None,
        headers: Sequence[Headers] | None,
        timestamps: Sequence[int] | int | None,
        partition: int | None,
        callback: SendCallback | None,
        *,
        serialize: bool = True,
    ) -> asyncio.Future[SendManyResult]:
        """``send_many``: the columns checked (:func:`build_send`, with the serializers
        unless ``serialize`` is false), then queued; ``future`` resolves at the end."""
        send = build_send(
            topic,
            values,
            keys=keys,
            headers=headers,
            timestamps=timestamps,
            key_serializer=self._key_serializer if serialize else None,
            value_serializer=self._value_serializer if serialize else None,
            now_ms=self._clock.time_ms(),
            future=future,
            callback=callback,
        )
        self.queue(send, partition)
        return future

    def queue(self, send: BulkSend, partition: int | None) -> None:
        """Append ``send``'s records, or fail those ``send`` would fail: all of them after a
        fatal sender error or when the transaction may not send; a record over
        max.request.size alone. ValueError (nothing queued) for a partition outside a known
        topic; IllegalTransactionStateError raises as ``send``'s does."""
        count = len(send.values)
        if not count:
            return
        fatal = self._sender.fatal
        if fatal is not None:
            BulkSlice(send, 0, count).set_exception(fatal)
            return
        if self._txn is not None:
            try:  # IllegalTransactionStateError and TransactionError raise, as send's
                self._txn.fail_if_not_ready_for_send(send.topic)
            except KafkaError as e:  # PRODUCER_FENCED, ...: the records fail
                BulkSlice(send, 0, count).set_exception(e)
                return
        limit = self._config.max_request_size - RECORD_BATCH_OVERHEAD
        known = self._known(send.topic, partition)
        if max(send.uppers) > limit:
            self._one_by_one(send, partition, limit, known)
        elif known is None:
            self._wait(send, 0, count, partition)
        else:
            append_many(self._accumulator, known, send, partition)

    def _known(self, topic: str, partition: int | None) -> TopicMetadata | None:
        """The topic's metadata when records may go to their batches now (None: they wait)."""
        metadata = self._topics.get(topic)
        if (
            metadata is None
            or topic in self._accumulator.waiting
            or (partition is not None and partition >= metadata.num_partitions)
        ):
            return None
        return metadata

    def _one_by_one(
        self, send: BulkSend, partition: int | None, limit: int, known: TopicMetadata | None
    ) -> None:
        """The rare case of records over max.request.size: they fail (as ``send`` fails
        them); the others go one record at a time, in order."""
        keys, values, headers = send.keys, send.values, send.headers
        for i, upper in enumerate(send.uppers):
            if upper > limit:
                BulkSlice(send, i, 1).set_exception(
                    RecordTooLargeError(
                        f"The message is {upper + RECORD_BATCH_OVERHEAD} bytes when serialized "
                        f"which is larger than {self._config.max_request_size}, which is the "
                        "value of the max.request.size configuration."
                    )
                )
            elif known is None:
                self._wait(send, i, i + 1, partition)
            else:
                self._accumulator.append(
                    known,
                    None if keys is None else keys[i],
                    values[i],
                    () if headers is None else headers[i],
                    partition,
                    send.timestamps[i],
                    upper,
                    BulkSlice(send, i, 1),
                )

    def _wait(self, send: BulkSend, start: int, stop: int, partition: int | None) -> None:
        """Records ``start`` .. ``stop - 1`` of a topic (or partition) not in the metadata
        yet wait as one entry, after those waiting before them, up to max.block.ms."""
        deadline_ms = self._clock.monotonic_ms() + self._config.max_block_ms
        self._accumulator.add_waiting(
            send.topic,
            PendingRun(
                send, start, stop, partition, deadline_ms, BulkSlice(send, start, stop - start)
            ),
        )
        self._sender.request_metadata()


@dataclass(slots=True)
class PendingRun:
    """Records ``start`` .. ``stop - 1`` of one ``send_many`` call waiting for their topic's
    metadata (an ``accumulator.Pending``): one entry for all of them, not one per record.
    ``future`` fails them all (max.block.ms, a topic that cannot exist); released, they go
    to their batches as :func:`append_many` puts them."""

    send: BulkSend
    start: int
    stop: int
    partition: int | None
    deadline_ms: int
    future: BulkSlice

    @property
    def waiter(self) -> asyncio.Future[SendManyResult]:
        return self.send.future

    def release(self, accumulator: RecordAccumulator, topic: TopicMetadata) -> None:
        append_many(
            accumulator, topic, self.send, self.partition, self.start, self.stop, fail_rest=True
        )


def append_many(  # noqa: PLR0917 -- internal, positional
    accumulator: RecordAccumulator,
    topic: TopicMetadata,
    send: BulkSend,
    partition: int | None,
    start: int = 0,
    stop: int | None = None,
    *,
    fail_rest: bool = False,
) -> None:
    """Append records ``start`` .. ``stop - 1`` (default: all) of ``send`` (a topic in the
    metadata) in order, as ``RecordAccumulator.append`` would one by one, with one BulkSlice
    per run of records in a batch. ValueError for a partition outside the topic (nothing
    appended). With ``fail_rest`` (records released after waiting for metadata) nothing
    raises: that ValueError, or a transaction refusing a new batch's partition, fails the
    records not appended yet, as ``append`` fails each of them."""
    total = len(send.values) if stop is None else stop
    try:
        _append_range(accumulator, topic, send, partition, start, total)
    except _NotAppendedError as e:
        if e.index > start:
            accumulator.wake()  # for the batches that took the records before
        if not fail_rest:
            raise e.error from None
        BulkSlice(send, e.index, total - e.index).set_exception(e.error)


class _NotAppendedError(Exception):
    """Records from ``index`` on were not appended: ``error`` refused the next one."""

    def __init__(self, index: int, error: ValueError | KafkasimError) -> None:
        super().__init__(str(error))
        self.index = index
        self.error = error


def _append_range(  # noqa: PLR0917 -- internal, positional
    accumulator: RecordAccumulator,
    topic: TopicMetadata,
    send: BulkSend,
    partition: int | None,
    start: int,
    total: int,
) -> None:
    name, count, available = topic.name, topic.num_partitions, topic.available
    if partition is not None and not 0 <= partition < count:
        raise _NotAppendedError(
            start,
            ValueError(
                f"Invalid partition given with record: {partition} is not in the range "
                f"[0...{count}]."
            ),
        )
    keys, values, uppers, stamps = send.keys, send.values, send.uppers, send.timestamps
    headers = send.headers
    partitioner = accumulator.partitioner
    choose = partitioner.partition
    # Kafka's sticky partitioners give a keyless record the topic's sticky partition, which
    # moves only on a new batch: within a run there is nothing to ask per record.
    ask_per_record = partition is None and not (
        isinstance(partitioner, UniformStickyPartitioner)
        or (keys is None and isinstance(partitioner, DefaultPartitioner))
    )
    if partition is not None:
        chosen = partition
    else:
        chosen = choose(
            name, None if keys is None else keys[start], values[start], count, available
        )
    i = start
    while i < total:
        state = accumulator.state_of(name, chosen)
        batch = accumulator.open_batch(state, uppers[i])
        if batch is None:
            try:
                batch = _batch_for_new(accumulator, topic, state, send, i, partition)
            except (ValueError, KafkasimError) as e:  # a transaction refusing the partition
                raise _NotAppendedError(i, e) from e
            chosen = batch.tp.partition
        builder = batch.builder
        assert builder is not None
        append = builder.append
        size, limit = batch.size, batch.limit
        j = i
        while True:  # the run of records that share this batch
            append(
                stamps[j],
                None if keys is None else keys[j],
                values[j],
                () if headers is None else headers[j],
            )
            size = builder.estimated_size_in_bytes()
            j += 1
            if j == total:
                break
            if ask_per_record:  # once per record, as append() asks
                following = choose(
                    name, None if keys is None else keys[j], values[j], count, available
                )
                if following != chosen:
                    chosen = following
                    break
            if size + uppers[j] > limit:
                break
        batch.size = size
        batch.record_count += j - i
        batch.futures.append(BulkSlice(send, i, j - i))
        batch.timestamps.append(-1)
        i = j
    accumulator.wake()


def _batch_for_new(  # noqa: PLR0917 -- internal, positional
    accumulator: RecordAccumulator,
    topic: TopicMetadata,
    state: PartitionState,
    send: BulkSend,
    i: int,
    partition: int | None,
) -> ProducerBatch:
    """Record ``i`` of ``send`` needs a new batch of ``state``'s partition: KIP-480 moves
    the sticky partition first and the record goes where the partitioner now says, into that
    partition's open batch when it has room (as ``RecordAccumulator.append`` does)."""
    name, count, available = topic.name, topic.num_partitions, topic.available
    upper = send.uppers[i]
    partitioner = accumulator.partitioner
    partitioner.on_new_batch(name, count, available, state.tp.partition)
    if partition is None:
        key = None if send.keys is None else send.keys[i]
        again = partitioner.partition(name, key, send.values[i], count, available)
        if again != state.tp.partition:
            state = accumulator.state_of(name, again)
            batch = accumulator.open_batch(state, upper)
            if batch is not None:
                return batch
    return accumulator.new_batch(state, upper)
