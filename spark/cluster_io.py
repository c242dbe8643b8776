"""Talking to the cluster from Spark's synchronous callbacks.

Spark calls the data source from plain Python functions, on the driver (planning, offsets)
and in executors' Python workers (``read``/``write``). kafkasim's clients are asyncio, so each
of those calls opens a :class:`ClusterConnection`: its own event loop (``asyncio.Runner``),
a gRPC transport made as the CLI makes one (``common.rpc_grpc_client.GrpcTransport``, the wall
``SystemClock``), and a :class:`~client.network.NetworkClient` for metadata, ListOffsets and
fetches (its raw-batch fetch: the reader needs the batch headers). Nothing here is pickled:
connections are opened where they are used; those of reads (planning and read tasks) are
kept open for the next read in the same process (:class:`IdleConnections`), the others
closed there.

Reading one offset range (:func:`read_range`) fetches from the partition's leader, straight
as a consumer (``replica_id=-1``, so never at or above the high watermark), one fetch of up to
``FETCH_MAX_BYTES`` at a time, decoding whole entries (v2 batches, or v0/v1 messages of a log
written before Kafka 0.11) and keeping the records inside the range that a consumer returns
(``client.completed_fetch.entries_to_read``: never control records). With
``kafka.isolation.level=read_committed`` ListOffsets LATEST answers the last stable offset, so
planned ranges end at or below it; fetches are read_committed (never past the LSO, with the
aborted transactions of the answer) and the batches of aborted transactions are dropped.
Failures and what they do:

==============================  ===============================================================
broker down, NOT_LEADER, ...    forget the leader, refresh metadata, fetch again (tenacity,
                                up to ``delivery.timeout.ms`` of the client) — failover
OFFSET_OUT_OF_RANGE below the   records were deleted (retention, delete_records): DataLossError
log start offset                with failOnDataLoss, else a warning and a skip to the log start
range end above the HW          the leader's HW is behind (just after a failover): wait and
                                fetch again; past the deadline it is data loss, as above
==============================  ===============================================================
"""

from __future__ import annotations

import asyncio
import atexit
import logging
import re
from collections.abc import (
    AsyncIterator,
    Callable,
    Coroutine,
    Iterable,
    Iterator,
    Mapping,
    Sequence,
    Sized,
)
from contextlib import AbstractContextManager, contextmanager
from types import TracebackType
from typing import Any, Final, NamedTuple, TypeVar

from kafkasim.client.consumer_config import ISOLATION_LEVELS
from kafkasim.client.network import INVALID_METADATA_CODES, NetworkClient
from kafkasim.client.record_columns import RecordColumns, consumed_columns
from kafkasim.common.clock import Clock, SystemClock
from kafkasim.common.errors import KafkaError, KafkasimError, OffsetOutOfRangeError
from kafkasim.common.rpc import RpcError
from kafkasim.common.rpc_grpc_client import GrpcTransport
from kafkasim.common.types import TopicPartition
from kafkasim.proto import kafkasim_pb2 as pb
from kafkasim.spark.options import (
    EARLIEST,
    LATEST,
    Assign,
    OffsetSpec,
    ReadSettings,
    Subscribe,
    Subscription,
    TimestampSpec,
)
from kafkasim.spark.planning import OffsetRange
from kafkasim.storage.records.entry import iter_entries

logger = logging.getLogger(__name__)

T = TypeVar("T")
C = TypeVar("C", bound=Sized)
# How a read decodes one fetch answer: (data, position, until, aborted transactions) to the
# chunk of records in [position, until) and the position after them.
Decode = Callable[[bytes, int, int, Sequence[tuple[int, int]] | None], tuple[C, int]]

FETCH_MAX_BYTES: Final = 4 * 1024 * 1024
_OFFSET_OUT_OF_RANGE: Final = OffsetOutOfRangeError.code
_SEND_STEPS: Final = 3  # event loop turns a gRPC call takes to be sent
_BOUND: Final = ("high watermark", "last stable offset")  # a consumer's end, by isolation


class DataLossError(KafkasimError):
    """Records a query should read are gone (deleted, or the partition vanished) and
    ``failOnDataLoss`` is true."""


class UnknownPartitionsError(KafkasimError):
    """``assign`` names partitions the cluster does not have."""


class _NotYetReadableError(KafkasimError):
    """The leader's HW is still below the range being read (retried until the deadline)."""


def data_loss(message: str, fail_on_data_loss: bool) -> None:
    """Raise DataLossError or log a warning, per ``failOnDataLoss``."""
    hint = (
        "Some records were deleted (retention or delete_records) or a partition vanished "
        "before the query read them. Set the source option 'failOnDataLoss' to 'false' to "
        "skip such records with a warning instead of failing."
    )
    if fail_on_data_loss:
        raise DataLossError(f"{message}. {hint}")
    logger.warning("%s; skipped (failOnDataLoss=false)", message)


class ClusterConnection:
    """A synchronous handle on the cluster for one Spark callback (see the module doc).

    Use as ``with ClusterConnection(servers) as c: c.run(coro_using(c.client))``. Not
    thread-safe; never pickled. ``api_timeout_ms`` bounds each lookup and each fetch with its
    retries: how long a read waits for a leader, or for a lagging leader's HW after a
    failover (``kafka.default.api.timeout.ms``, 60 s as Kafka's consumer).
    """

    def __init__(
        self,
        bootstrap_servers: Sequence[str],
        *,
        request_timeout_ms: int = 30_000,
        api_timeout_ms: int = 60_000,
    ) -> None:
        self.closed = False
        self._runner = asyncio.Runner()
        self.transport = GrpcTransport()
        self.client = NetworkClient(
            self.transport,
            list(bootstrap_servers),
            SystemClock(),
            request_timeout_ms=request_timeout_ms,
            delivery_timeout_ms=api_timeout_ms,
        )

    @classmethod
    def for_reading(cls, settings: ReadSettings) -> ClusterConnection:
        return cls(
            settings.bootstrap_servers,
            request_timeout_ms=settings.request_timeout_ms,
            api_timeout_ms=settings.api_timeout_ms,
        )

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        return self._runner.run(coro)

    def close(self) -> None:
        self.closed = True
        try:
            self._runner.run(self.transport.close())
        finally:
            self._runner.close()

    def __enter__(self) -> ClusterConnection:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


_Key = tuple[tuple[str, ...], int, int]


class IdleConnections:
    """The read connections of this process that no callback is using, by settings.

    A Spark Python worker runs task after task (``spark.python.worker.reuse``), and a read
    connection's event loop, gRPC channels and learnt metadata (who leads what) are worth
    keeping between them, as Spark's Kafka source keeps its consumers in a per-executor
    pool: a callback takes an idle connection for its settings or opens one; one that
    succeeded gives it back, one that failed closes it (its state may be what failed). At
    most ``per_key`` idle ones are kept for each settings; one idle for ``timeout_ms``
    (5 minutes, Spark's ``spark.kafka.consumer.cache.timeout``) is closed instead of used.
    """

    def __init__(
        self, *, per_key: int = 1, timeout_ms: int = 300_000, clock: Clock | None = None
    ) -> None:
        self.per_key = per_key
        self.timeout_ms = timeout_ms
        self.clock = clock or SystemClock()
        self._idle: dict[_Key, list[tuple[int, ClusterConnection]]] = {}

    @contextmanager
    def connection(self, settings: ReadSettings) -> Iterator[ClusterConnection]:
        key = (settings.bootstrap_servers, settings.request_timeout_ms, settings.api_timeout_ms)
        conn = self._take(key) or ClusterConnection.for_reading(settings)
        try:
            yield conn
        except BaseException:
            conn.close()
            raise
        idle = self._idle.setdefault(key, [])
        if len(idle) < self.per_key:
            idle.append((self.clock.monotonic_ms(), conn))
        else:
            conn.close()

    def _take(self, key: _Key) -> ClusterConnection | None:
        idle = self._idle.get(key, [])
        now = self.clock.monotonic_ms()
        while idle:
            since, conn = idle.pop()
            if now - since < self.timeout_ms:
                return conn
            conn.close()
        return None

    def close(self) -> None:
        """Close every idle connection (at exit, and in tests)."""
        while self._idle:
            _, idle = self._idle.popitem()
            for _, conn in idle:
                conn.close()


IDLE_CONNECTIONS: Final = IdleConnections()
atexit.register(IDLE_CONNECTIONS.close)


def reading_connection(settings: ReadSettings) -> AbstractContextManager[ClusterConnection]:
    """A connection for one read callback, from this process's idle ones when it has one
    (:class:`IdleConnections`)."""
    return IDLE_CONNECTIONS.connection(settings)


# -- partitions and offsets ----------------------------------------------------------------


async def topic_partitions(
    client: NetworkClient, subscription: Subscription
) -> list[TopicPartition]:
    """The partitions a subscription names now. Topics that do not exist (yet) have none;
    assigned partitions that do not exist are an error naming them."""
    if isinstance(subscription, Subscribe):
        response = await client.refresh_metadata(list(subscription.topics))
        wanted = set(subscription.topics)
        return sorted(
            TopicPartition(t.name, p.partition)
            for t in response.topics
            if t.name in wanted and not t.error_code
            for p in t.partitions
        )
    if isinstance(subscription, Assign):
        topics = sorted({tp.topic for tp in subscription.partitions})
        response = await client.refresh_metadata(topics)
        known = {TopicPartition(t.name, p.partition) for t in response.topics for p in t.partitions}
        missing = sorted(set(subscription.partitions) - known)
        if missing:
            raise UnknownPartitionsError(
                "option 'assign' names partitions that do not exist: "
                + ", ".join(str(tp) for tp in missing)
            )
        return sorted(subscription.partitions)
    pattern = re.compile(subscription.pattern)
    response = await client.refresh_metadata()
    return sorted(
        TopicPartition(t.name, p.partition)
        for t in response.topics
        if not t.is_internal and pattern.fullmatch(t.name)
        for p in t.partitions
    )


def isolation_level(settings: ReadSettings) -> int:
    """The wire code of the read's ``isolation.level``."""
    return ISOLATION_LEVELS["read_committed" if settings.read_committed else "read_uncommitted"]


async def list_offsets(
    client: NetworkClient, timestamps: Mapping[TopicPartition, int], isolation: int = 0
) -> dict[TopicPartition, int]:
    """Offsets for EARLIEST (-2: the log start offset), LATEST (-1: the HW, or under
    read_committed, ``isolation`` 1, the last stable offset) or a timestamp (-1 when no
    record is that recent), from each partition's leader."""
    if not timestamps:
        return {}
    found = await client.list_offsets(timestamps, isolation_level=isolation)
    return {tp: offset for tp, (offset, _) in found.items()}


async def resolve_offsets(
    client: NetworkClient,
    partitions: Iterable[TopicPartition],
    spec: OffsetSpec,
    isolation: int = 0,
) -> dict[TopicPartition, int]:
    """Absolute offsets per partition for an OffsetSpec (EARLIEST/LATEST looked up)."""
    wanted = {tp: spec.offsets.get(tp, spec.default) for tp in partitions}
    lookups = {tp: o for tp, o in wanted.items() if o in (EARLIEST, LATEST)}
    resolved = await list_offsets(client, lookups, isolation)
    return {tp: resolved.get(tp, o) for tp, o in wanted.items()}


async def resolve_timestamps(
    client: NetworkClient,
    partitions: Iterable[TopicPartition],
    spec: TimestampSpec,
    isolation: int = 0,
) -> dict[TopicPartition, int]:
    """Per partition, the first offset at or after its start timestamp. A partition with
    no such record starts at its HW with strategy ``latest``; else it is an error. With
    ``startingOffsetsByTimestamp``, partitions it does not name start at the latest offset,
    as in Spark."""
    tps = list(partitions)
    if spec.timestamp_ms is not None:
        targets = dict.fromkeys(tps, spec.timestamp_ms)
    else:
        targets = {tp: spec.per_partition.get(tp, LATEST) for tp in tps}
    found = await list_offsets(client, targets, isolation)
    missing = sorted(tp for tp, offset in found.items() if offset < 0 and targets[tp] != LATEST)
    if missing and not spec.strategy_latest:
        raise DataLossError(
            "No record at or after the starting timestamp in "
            + ", ".join(f"{tp} (timestamp {targets[tp]})" for tp in missing)
            + "; set 'startingOffsetsByTimestampStrategy' to 'latest' to start those "
            "partitions at their latest offset instead"
        )
    if missing:
        latest = await list_offsets(client, dict.fromkeys(missing, LATEST), isolation)
        found.update(latest)
    return found


# -- reading one range ---------------------------------------------------------------------


def _retriable_read(e: BaseException) -> bool:
    if isinstance(e, _NotYetReadableError):
        return True
    if isinstance(e, RpcError):
        return e.retriable
    return isinstance(e, KafkaError) and (e.retriable or e.code in INVALID_METADATA_CODES)


async def read_range(
    client: NetworkClient, r: OffsetRange, settings: ReadSettings, decode: Decode[C]
) -> AsyncIterator[C]:
    """The records of ``r``, one chunk per fetch decoded by ``decode`` (:func:`decode_columns`,
    or :class:`spark.arrow_decode.ArrowChunkDecoder`), skipping control batches and, under
    read_committed, aborted transactions' batches (see module doc). The next fetch is sent
    before a fetch's records are decoded, so that the leader reads while this task decodes."""
    until = r.until_offset
    position = r.from_offset
    ahead: asyncio.Task[_Fetched | None] | None = None
    try:
        while position < until:
            if ahead is None:
                fetched = await _fetch(client, r, position, settings)
            else:
                fetched, ahead = await ahead, None
            if fetched is None or not fetched.records:
                position = await _after_missing_records(client, r, position, settings)
                continue
            records, part = fetched
            expected = _position_after(records, position, until)
            if expected is not None and expected < until:
                ahead = asyncio.create_task(_fetch(client, r, expected, settings))
                for _ in range(_SEND_STEPS):  # let the call reach the wire
                    await asyncio.sleep(0)
            aborted = (
                [(t.producer_id, t.first_offset) for t in part.aborted_transactions]
                if settings.read_committed
                else None
            )
            chunk, position = decode(records, position, until, aborted)
            if ahead is not None and position != expected:  # cannot be: the same walk
                ahead.cancel()
                ahead = None
            if len(chunk):
                yield chunk
    finally:
        if ahead is not None:
            ahead.cancel()


class _Fetched(NamedTuple):
    """One fetch's answer and its records, read out of the message once: each read of a
    bytes field of a protobuf message (upb) is a fresh copy of the whole field."""

    records: bytes
    part: pb.FetchPartitionResponse


async def _fetch(
    client: NetworkClient, r: OffsetRange, position: int, settings: ReadSettings
) -> _Fetched | None:
    """One fetch of ``r``'s partition at ``position`` from its leader, with failover; None
    when the records there are gone or not readable by the deadline (see the module doc)."""
    tp = r.topic_partition
    isolation = isolation_level(settings)
    fetched: _Fetched | None = None
    try:
        async for attempt in client.retrying(retry_on=_retriable_read):
            with attempt:
                part = await client.fetch_raw(
                    tp, position, max_bytes=FETCH_MAX_BYTES, isolation_level=isolation
                )
                fetched = _Fetched(part.records, part)
                readable = part.last_stable_offset if isolation else part.high_watermark
                if not fetched.records and readable < r.until_offset:
                    raise _NotYetReadableError(
                        f"{tp}: the leader's {_BOUND[isolation]} {readable} is below the "
                        f"end {r.until_offset} of the range being read"
                    )
    except (_NotYetReadableError, OffsetOutOfRangeError):
        return None  # deleted, or still not readable at the deadline
    return fetched


def _position_after(data: bytes, position: int, until: int) -> int | None:
    """Where the fetch after ``data`` starts (the position decoding ``data`` gives), from its
    entries' headers alone; None when a header is damaged (decoding names the error)."""
    after = position
    try:
        for _, header in iter_entries(data):
            after = max(after, min(header.next_offset, until))
            if header.next_offset >= until:
                break
    except KafkaError:
        return None
    return after


async def next_chunk(chunks: AsyncIterator[C]) -> C | None:
    """The next chunk of :func:`read_range`, None at its end (a coroutine, for ``run``)."""
    return await anext(chunks, None)


async def _after_missing_records(
    client: NetworkClient, r: OffsetRange, position: int, settings: ReadSettings
) -> int:
    """Where to go on after ``position`` could not be read: the log start offset when the
    records were deleted, the range end when they are past the HW for good."""
    tp = r.topic_partition
    bounds = await list_offsets(client, {tp: EARLIEST})
    log_start = bounds[tp]
    if position < log_start:
        data_loss(
            f"Cannot read offsets {position} to {min(log_start, r.until_offset)} of {tp}: the "
            f"log now starts at offset {log_start}",
            settings.fail_on_data_loss,
        )
        return min(log_start, r.until_offset)
    data_loss(
        f"Cannot read offsets {position} to {r.until_offset} of {tp}: they are not below "
        f"the {_BOUND[isolation_level(settings)]} of the partition's leader",
        settings.fail_on_data_loss,
    )
    return r.until_offset


def decode_columns(
    tp: TopicPartition,
    data: bytes,
    position: int,
    until: int,
    aborted: Sequence[tuple[int, int]] | None = None,
) -> tuple[RecordColumns, int]:
    """The records in ``[position, until)`` of fetched ``data`` (entries of any message
    format) that a consumer returns, as columns of Python values — the consumer's own walk
    (:func:`client.record_columns.consumed_columns`): no control records, and with
    ``aborted`` (read_committed: the answer's aborted transactions) none of an aborted
    transaction; and the next position."""
    out = RecordColumns(tp.topic, tp.partition)
    next_position = consumed_columns(data, out, fetch_offset=position, aborted=aborted, until=until)
    return out, next_position
