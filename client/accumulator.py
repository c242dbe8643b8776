"""The record accumulator: where ``send`` leaves a record (rule 1 of :mod:`client.producer`).

Each partition has a queue of :class:`ProducerBatch` (a :class:`PartitionState`); a record goes
into the newest batch of the partition the partitioner picks, encoded at once by a
``RecordBatchBuilder``, so the per-record cost is that append and nothing else; header, CRC
and compression are per batch. Records of a topic not in the metadata yet wait here too, in
order, as :class:`Pending` entries (up to ``max.block.ms``): a :class:`PendingRecord` per
``send``, one entry per ``send_many`` call (``client.producer_bulk.PendingRun``). What
leaves the queues, when, and how each batch ends is the sender's business
(:mod:`client.sender`); the accumulator only records which partitions have queued batches
and which batches are unfinished.

Not thread-safe: the producer's event loop owns it.
"""

from __future__ import annotations

import asyncio
import struct
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final, Protocol

from kafkasim.client.bulk import BulkSlice
from kafkasim.client.metadata import ClusterMetadata, TopicMetadata
from kafkasim.client.partitioner import Partitioner
from kafkasim.client.producer_config import NEVER_MS, ProducerConfig
from kafkasim.client.producer_errors import DeliveryTimeoutError
from kafkasim.client.producer_types import Headers, RecordMetadata, SendCallback
from kafkasim.common.clock import Clock
from kafkasim.common.errors import KafkasimError, error_for_code, error_for_name
from kafkasim.common.types import TopicPartition
from kafkasim.storage.records.batch import (
    ATTRIBUTES_OFFSET,
    CRC_OFFSET,
    PRODUCER_ID_OFFSET,
    RECORD_BATCH_OVERHEAD,
    TRANSACTIONAL_FLAG_MASK,
    RecordBatchBuilder,
    compute_crc,
)
from kafkasim.storage.records.compression import CompressionType

__all__ = [
    "NO_PRODUCER_EPOCH",
    "NO_PRODUCER_ID",
    "Headers",
    "PartitionState",
    "Pending",
    "PendingRecord",
    "ProducerBatch",
    "RecordAccumulator",
    "RecordMetadata",
    "SendCallback",
]

SEQUENCE_MODULUS: Final = 2**31  # sequences wrap from 2**31 - 1 to 0
NO_PRODUCER_ID: Final = -1
NO_PRODUCER_EPOCH: Final = -1

_UNKNOWN_TOPIC = error_for_name("UNKNOWN_TOPIC_OR_PARTITION").code
_LEADER_NOT_AVAILABLE = error_for_name("LEADER_NOT_AVAILABLE").code

_PRODUCER_STATE = struct.Struct(">qhi")  # producerId, producerEpoch, baseSequence (offset 43)
_CRC = struct.Struct(">I")
_ATTRIBUTES = struct.Struct(">h")


Completion = asyncio.Future[RecordMetadata] | BulkSlice
"""What a batch resolves per entry: one record's future (``send``), or a run of records of a
``send_many`` (:class:`~client.bulk.BulkSlice`)."""


class ProducerBatch:
    """Records of one partition that travel together; encoded as they are appended.

    Life: *open* (the newest batch of its partition takes appends) → *closed* (full, or
    drained: its bytes are built and, with idempotence, stamped with producer id, epoch and
    base sequence — never changed again except by a producer id reset) → sent, possibly
    several times → *finished* (every future resolved, exactly once).
    """

    __slots__ = (
        "attempts",
        "base_sequence",
        "builder",
        "created_ms",
        "data",
        "deadline_ms",
        "done",
        "finished",
        "futures",
        "index",
        "last_error",
        "limit",
        "producer_epoch",
        "producer_id",
        "record_count",
        "retry_at_ms",
        "sequence_index",
        "size",
        "timestamps",
        "tp",
    )

    def __init__(
        self,
        *,
        tp: TopicPartition,
        index: int,
        now_ms: int,
        deadline_ms: int,
        limit: int,
        compression: CompressionType,
        done: asyncio.Future[None],
    ) -> None:
        self.tp = tp
        self.index = index  # creation order within the partition
        self.builder: RecordBatchBuilder | None = RecordBatchBuilder(compression=compression)
        self.created_ms = now_ms
        self.deadline_ms = deadline_ms
        self.limit = limit
        self.size = RECORD_BATCH_OVERHEAD
        self.record_count = 0
        # One entry per send() record (its future) or per run of send_many records (a
        # BulkSlice); timestamps[i] is futures[i]'s record's timestamp (unused for a slice).
        self.futures: list[Completion] = []
        self.timestamps: list[int] = []
        self.data: bytes | None = None
        self.attempts = 0  # sends so far
        self.retry_at_ms = 0
        self.producer_id = NO_PRODUCER_ID
        self.producer_epoch = NO_PRODUCER_EPOCH
        self.base_sequence = -1
        self.sequence_index = -1  # unwrapped sequence of the first record; -1: none yet
        self.finished = False
        self.last_error: BaseException | None = None  # of the last failed attempt
        self.done = done  # resolved (never with an error) when the batch finishes: flush()

    def try_append(  # noqa: PLR0917 -- the hot path: positional calls are cheaper
        self,
        timestamp: int,
        key: bytes | None,
        value: bytes | None,
        headers: Headers,
        size_upper_bound: int,
        future: Completion,
    ) -> bool:
        """Append unless closed or the record might not fit (the first record always fits)."""
        builder = self.builder
        if builder is None or self.data is not None:
            return False
        if self.record_count and self.size + size_upper_bound > self.limit:
            self.builder_close()
            return False
        builder.append(timestamp, key, value, headers)
        self.size = builder.estimated_size_in_bytes()
        self.record_count += 1
        self.futures.append(future)
        self.timestamps.append(timestamp)
        return True

    def builder_close(self) -> None:
        """No more appends (the next record opens a new batch)."""
        self.limit = 0

    @property
    def is_full(self) -> bool:
        return self.size >= self.limit

    @property
    def last_sequence_index(self) -> int:
        return self.sequence_index + self.record_count - 1

    def build(self) -> bytes:
        """Close the batch and encode it once (idempotent)."""
        if self.data is None:
            assert self.builder is not None
            self.data = self.builder.build()
            self.builder = None
            self.limit = 0
        return self.data

    def stamp(
        self,
        producer_id: int,
        producer_epoch: int,
        sequence_index: int,
        *,
        transactional: bool = False,
    ) -> None:
        """Write the producer state (and the transactional bit of a transactional producer's
        batch) into the batch header and recompute the CRC."""
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self.sequence_index = sequence_index
        self.base_sequence = sequence_index % SEQUENCE_MODULUS
        buf = bytearray(self.build())
        _PRODUCER_STATE.pack_into(
            buf, PRODUCER_ID_OFFSET, producer_id, producer_epoch, self.base_sequence
        )
        if transactional:
            (attributes,) = _ATTRIBUTES.unpack_from(buf, ATTRIBUTES_OFFSET)
            _ATTRIBUTES.pack_into(buf, ATTRIBUTES_OFFSET, attributes | TRANSACTIONAL_FLAG_MASK)
        _CRC.pack_into(buf, CRC_OFFSET, compute_crc(buf, 0, len(buf)))
        self.data = bytes(buf)

    def complete(self, base_offset: int, log_append_time_ms: int) -> None:
        topic, partition = self.tp
        offset = base_offset
        for i, future in enumerate(self.futures):
            if isinstance(future, BulkSlice):
                future.complete(partition, offset, log_append_time_ms)
                if offset >= 0:
                    offset += future.count
                continue
            if not future.done():
                timestamp = log_append_time_ms if log_append_time_ms >= 0 else self.timestamps[i]
                future.set_result(RecordMetadata(topic, partition, offset, timestamp))
            if offset >= 0:
                offset += 1

    def fail(self, error: BaseException) -> None:
        partition = self.tp.partition
        for future in self.futures:
            if isinstance(future, BulkSlice):
                future.fail(partition, error)
            elif not future.done():
                future.set_exception(error)


class PartitionState:
    """The accumulator's queue of one partition, and its idempotence bookkeeping.

    Invariants: ``batches`` is in creation order (retries go back to their place); only
    ``batches[-1]`` takes appends; ``unresolved`` (stamped, unfinished batches) is in sequence
    order and its sequences are contiguous; ``next_sequence_index`` follows the last stamped
    batch; ``last_acked_index`` is the highest sequence the broker acknowledged (-1: none).
    """

    __slots__ = (
        "batches",
        "in_flight",
        "last_acked_index",
        "next_batch_index",
        "next_sequence_index",
        "tp",
        "unresolved",
    )

    def __init__(self, tp: TopicPartition) -> None:
        self.tp = tp
        self.batches: deque[ProducerBatch] = deque()
        self.in_flight = 0  # batches of this partition sent and not yet answered
        self.next_batch_index = 0
        self.next_sequence_index = 0
        self.last_acked_index = -1
        self.unresolved: deque[ProducerBatch] = deque()

    def reenqueue(self, batch: ProducerBatch) -> None:
        """Put a batch back at its place (creation order), ahead of every younger batch."""
        position = next(
            (i for i, queued in enumerate(self.batches) if queued.index > batch.index),
            len(self.batches),
        )
        self.batches.insert(position, batch)
        self.sanity_check()

    def sanity_check(self) -> None:
        """Raise AssertionError naming the broken invariant (called on the rare paths:
        a retry, a producer id reset)."""
        indexes = [b.index for b in self.batches]
        if indexes != sorted(indexes):
            raise AssertionError(f"{self.tp}: batches out of creation order: {indexes}")
        expected = self.unresolved[0].sequence_index if self.unresolved else -1
        for batch in self.unresolved:
            if batch.sequence_index != expected:
                raise AssertionError(f"{self.tp}: unresolved sequences are not contiguous")
            expected = batch.last_sequence_index + 1


class Pending(Protocol):
    """What waits for its topic's metadata: one record of ``send`` or the records of one
    ``send_many`` call, in the order they were sent."""

    @property
    def partition(self) -> int | None: ...

    @property
    def future(self) -> Completion:
        """What fails when it waits too long (all its records)."""
        ...

    @property
    def deadline_ms(self) -> int: ...

    @property
    def waiter(self) -> asyncio.Future[Any]: ...

    def release(self, accumulator: RecordAccumulator, topic: TopicMetadata) -> None:
        """Go to the batches of ``topic``, now in the metadata; a record that cannot (a
        transaction that may not take it) fails, and nothing raises."""
        ...


@dataclass(slots=True)
class PendingRecord:
    """A record whose topic is not in the metadata yet (waits up to max.block.ms)."""

    key: bytes | None
    value: bytes | None
    headers: Headers
    partition: int | None
    timestamp: int
    size_upper_bound: int
    future: Completion  # a send_many record's is a BulkSlice of one record
    deadline_ms: int

    @property
    def waiter(self) -> asyncio.Future[Any]:
        """What ``flush`` waits on for this record."""
        future = self.future
        return future.waiter if isinstance(future, BulkSlice) else future

    def release(self, accumulator: RecordAccumulator, topic: TopicMetadata) -> None:
        try:
            accumulator.append(
                topic,
                self.key,
                self.value,
                self.headers,
                self.partition,
                self.timestamp,
                self.size_upper_bound,
                self.future,
            )
        except (ValueError, KafkasimError) as e:  # a transaction that may not take it
            _fail_future(self.future, e)


class RecordAccumulator:
    """Every partition's queue of batches, and the records still waiting for their topic.

    ``partitions`` holds a :class:`PartitionState` for every partition ever written to;
    ``queued`` those with at least one batch in their queue (the sender drains them);
    ``incomplete`` every batch not finished yet, queued or in flight (flush waits for them);
    ``waiting`` the records of topics not in the metadata yet, per topic in send order.
    ``wake`` is called when a batch may have become sendable (a new or full batch).
    """

    def __init__(
        self,
        config: ProducerConfig,
        *,
        partitioner: Partitioner,
        clock: Clock,
        metadata: ClusterMetadata,
        wake: Callable[[], None],
    ) -> None:
        self._config = config
        self._partitioner = partitioner
        self.partitioner = partitioner  # read by client.producer_bulk's append_many
        self._clock = clock
        self._metadata = metadata
        self._wake = wake
        self.wake = wake  # client.producer_bulk wakes the sender through it
        self.loop: asyncio.AbstractEventLoop | None = None  # set when the producer starts
        self.partitions: dict[TopicPartition, PartitionState] = {}
        # Per topic, its partitions' states by partition number (the hot path's lookup).
        self._topic_states: dict[str, dict[int, PartitionState]] = {}
        self.queued: dict[TopicPartition, PartitionState] = {}  # those with queued batches
        self.waiting: dict[str, deque[Pending]] = {}
        # Set whenever no record waits any more (a transaction's commit waits for it).
        self.none_waiting = asyncio.Event()
        self.incomplete: dict[ProducerBatch, None] = {}
        self.flushes_in_progress = 0  # flush() calls running: every batch is sendable now
        # A transactional producer's TransactionManager.maybe_add_partition: told of the
        # partition of every new batch (the first batch of a partition in a transaction is
        # always a new one: a transaction ends only once no batch is incomplete). It raises
        # when the producer may not send now.
        self.add_partition: Callable[[TopicPartition], object] | None = None
        # Told of each new batch instead of ``wake`` (the sender: it may wake later, when the
        # batch can first be sendable); None: ``wake``.
        self.new_batch_opened: Callable[[PartitionState, ProducerBatch], None] | None = None

    def append(  # noqa: PLR0917 -- the hot path: positional calls are cheaper
        self,
        topic: TopicMetadata,
        key: bytes | None,
        value: bytes | None,
        headers: Headers,
        partition: int | None,
        timestamp: int,
        upper: int,
        future: Completion,
    ) -> None:
        """Append a record of a known topic to its partition's newest batch, or to a new one;
        ValueError for a partition outside the topic."""
        count = topic.num_partitions
        if partition is None:
            chosen = self._partitioner.partition(topic.name, key, value, count, topic.available)
        elif 0 <= partition < count:
            chosen = partition
        else:
            raise ValueError(
                f"Invalid partition given with record: {partition} is not in the range "
                f"[0...{count}]."
            )
        states = self._topic_states.get(topic.name)
        state = states.get(chosen) if states is not None else None
        if state is None:
            state = self.partition_state(TopicPartition(topic.name, chosen))
        batches = state.batches
        if batches:
            # ProducerBatch.try_append inlined: this is the per-record path.
            batch = batches[-1]
            builder = batch.builder
            if builder is not None and batch.size + upper <= batch.limit:
                builder.append(timestamp, key, value, headers)
                batch.size = size = builder.estimated_size_in_bytes()
                batch.record_count += 1
                batch.futures.append(future)
                batch.timestamps.append(timestamp)
                if size >= batch.limit:
                    self._wake()
                return
            batch.builder_close()
        # A new batch is needed: KIP-480 moves the sticky partition first (Kafka's
        # abortOnNewBatch), then the record goes where the partitioner now says.
        self._partitioner.on_new_batch(topic.name, count, topic.available, chosen)
        if partition is None:
            again = self._partitioner.partition(topic.name, key, value, count, topic.available)
            if again != chosen:
                state = self.partition_state(TopicPartition(topic.name, again))
                batches = state.batches
                if batches and batches[-1].try_append(
                    timestamp, key, value, headers, upper, future
                ):
                    if batches[-1].is_full:
                        self._wake()
                    return
        batch = self.new_batch(state, upper)
        appended = batch.try_append(timestamp, key, value, headers, upper, future)
        assert appended, "the first record always fits"
        if self.new_batch_opened is not None:
            self.new_batch_opened(state, batch)
        else:
            self._wake()

    def new_batch(self, state: PartitionState, upper: int) -> ProducerBatch:
        """Open a new batch at the end of ``state``'s queue, big enough for a record of
        ``upper`` bytes (the newest one before it takes no more appends)."""
        if self.add_partition is not None:
            self.add_partition(state.tp)
        now_ms = self._clock.monotonic_ms()
        assert self.loop is not None
        batch = ProducerBatch(
            tp=state.tp,
            index=state.next_batch_index,
            now_ms=now_ms,
            deadline_ms=now_ms + self._config.delivery_timeout_ms,
            limit=max(self._config.batch_size, upper + RECORD_BATCH_OVERHEAD),
            compression=self._config.compression,
            done=self.loop.create_future(),
        )
        state.next_batch_index += 1
        batches = state.batches
        if batches:
            batches[-1].builder_close()
        batches.append(batch)
        self.queued[state.tp] = state
        self.incomplete[batch] = None
        return batch

    def open_batch(self, state: PartitionState, upper: int) -> ProducerBatch | None:
        """``state``'s newest batch if it takes a record of ``upper`` bytes now (closed
        otherwise: the next record opens a new one)."""
        batches = state.batches
        if not batches:
            return None
        batch = batches[-1]
        if batch.builder is not None and batch.data is None:
            if not batch.record_count or batch.size + upper <= batch.limit:
                return batch
            batch.builder_close()
        return None

    def state_of(self, topic: str, partition: int) -> PartitionState:
        states = self._topic_states.get(topic)
        state = states.get(partition) if states is not None else None
        if state is None:
            state = self.partition_state(TopicPartition(topic, partition))
        return state

    def partition_state(self, tp: TopicPartition) -> PartitionState:
        state = self.partitions.get(tp)
        if state is None:
            state = self.partitions[tp] = PartitionState(tp)
            self._topic_states.setdefault(tp.topic, {})[tp.partition] = state
        return state

    def take_unsequenced(self) -> list[ProducerBatch]:
        """Take every queued batch never sent (no sequence yet) out of its queue (Kafka's
        abortUndrainedBatches of a transaction that aborts); those sent stay queued."""
        taken: list[ProducerBatch] = []
        for tp, state in list(self.queued.items()):
            kept = [batch for batch in state.batches if batch.sequence_index >= 0]
            taken.extend(batch for batch in state.batches if batch.sequence_index < 0)
            state.batches.clear()
            state.batches.extend(kept)
            if not kept:
                del self.queued[tp]
        return taken

    # -- records waiting for their topic's metadata ------------------------------------------------

    def add_waiting(self, topic: str, record: Pending) -> None:
        self.waiting.setdefault(topic, deque()).append(record)

    def release_waiting(self, errors: Mapping[str, int]) -> None:
        """Records whose topic is now known go to their batches, in the order they were sent;
        those of a topic that cannot exist fail."""
        for topic in list(self.waiting):
            code = errors.get(topic, 0)
            if code and code not in (_UNKNOWN_TOPIC, _LEADER_NOT_AVAILABLE):
                error = error_for_code(code)(f"topic {topic!r}")
                for record in self.waiting.pop(topic):
                    _fail_future(record.future, error)
                continue
            metadata = self._metadata.topics.get(topic)
            if metadata is None:
                continue
            queue = self.waiting[topic]
            while queue:
                record = queue[0]
                if record.partition is not None and record.partition >= metadata.num_partitions:
                    # As Kafka's producer: a partition the metadata does not show yet (just
                    # added) is waited for, up to max.block.ms; the records after it wait too,
                    # so that they stay in the order they were sent.
                    break
                queue.popleft()
                if not record.future.done():
                    record.release(self, metadata)
            if not queue:
                del self.waiting[topic]
        if not self.waiting:
            self.none_waiting.set()

    def expire_waiting(self, now_ms: int) -> int:
        """Fail waiting records past max.block.ms; ms until the next one's deadline."""
        next_ms = NEVER_MS
        for topic in list(self.waiting):
            queue = self.waiting[topic]
            while queue and (queue[0].future.done() or queue[0].deadline_ms <= now_ms):
                record = queue.popleft()
                known = self._metadata.topics.get(topic)
                if known is not None and record.partition is not None:
                    message = (
                        f"Partition {record.partition} of topic {topic} with partition count "
                        f"{known.num_partitions} is not present in metadata after "
                        f"{self._config.max_block_ms} ms."
                    )
                else:
                    message = (
                        f"Topic {topic} not present in metadata after "
                        f"{self._config.max_block_ms} ms."
                    )
                _fail_future(record.future, DeliveryTimeoutError(message))
            if queue:
                next_ms = min(next_ms, queue[0].deadline_ms - now_ms)
            else:
                del self.waiting[topic]
        if not self.waiting:
            self.none_waiting.set()
        return next_ms

    def fail_waiting(self, error: BaseException) -> None:
        for queue in self.waiting.values():
            for record in queue:
                _fail_future(record.future, error)
        self.waiting.clear()
        self.none_waiting.set()


def _fail_future(future: Completion, error: BaseException) -> None:
    if not future.done():
        future.set_exception(error)
