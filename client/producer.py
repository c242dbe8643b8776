"""The producer: Kafka's ``KafkaProducer`` over kafkasim's Rpc port.

Theory of operation
-------------------
``send`` is synchronous and cheap: it picks a partition (:mod:`client.partitioner`), appends
the record to that partition's open batch in the *accumulator* and returns an
``asyncio.Future`` of the record's :class:`RecordMetadata`. Everything else happens in one
*sender* task and one connection per broker, all on the caller's event loop:

1. **Batching.** Each partition has a queue of batches; records go into the newest one, encoded
   at once by a ``RecordBatchBuilder`` (the per-record cost is that append and nothing else).
   A batch holds at most ``batch.size`` bytes (a larger record gets a batch of its own). A
   batch becomes *sendable* when it is full, when ``linger.ms`` has passed since it was
   created, or while ``flush``/``close`` run. Header, CRC and compression are per batch.
2. **Draining.** When a partition's leader has a sendable batch, the sender drains that
   broker: the oldest batch of every partition it leads (one per partition, up to
   ``max.request.size`` per request, partitions taken round-robin), as one ProduceRequest on
   the broker's ``ProduceStream``. The broker handles a stream's requests one at a time and
   answers in order, as Kafka handles a connection; up to
   ``max.in.flight.requests.per.connection`` requests are pipelined per broker.
3. **Ordering.** Within a partition, batches are sent in the order they were created. A batch
   that failed with a retriable error goes back to its place in the queue (never behind a
   younger batch) and waits ``retry.backoff.ms``. With idempotence, a retried batch is only
   sent again once it is the partition's oldest unresolved batch, so retries cannot overtake
   each other; without idempotence, ``max.in.flight.requests.per.connection=1`` keeps order by
   muting the partition while its batch is in flight, and larger values may reorder on retry
   (as in Kafka).
4. **Idempotence.** The producer asks any broker for a producer id (InitProducerId) before
   its first batch is sent. A batch gets its partition's next sequence number when it is first
   drained, and keeps it on every retry (its bytes are sent unchanged), so the broker
   recognises a retry of an appended batch and answers with the original offsets instead of
   appending it twice. An answer for sequence ``s`` means every lower sequence of that
   partition was appended too (the broker appends a producer's sequences strictly in order),
   so a lower batch still unresolved after that is completed as written (offset -1, as for
   Kafka's DUPLICATE_SEQUENCE_NUMBER). OUT_OF_ORDER_SEQUENCE_NUMBER is retried while an
   earlier batch of the partition is unresolved (it overtook that one); for the partition's
   oldest unresolved batch it is final and fails that batch.
5. **Failure and time.** Every batch has a deadline, ``delivery.timeout.ms`` after it was
   created, read on the injected clock: past it the batch fails with
   :class:`DeliveryTimeoutError` whether queued or in flight. Retries stop at the deadline or
   after ``retries`` of them, whichever comes first; the batch then fails with the broker's
   last error. When a batch that had a sequence fails, its partition's sequences have a gap the
   broker will never accept: the producer waits until nothing is in flight, takes a new
   producer id and restarts every partition's sequences at 0 (batches waiting for a retry are
   renumbered in order).
6. **Metadata.** Leaders come from Metadata requests to any broker. The producer refreshes on
   NOT_LEADER_OR_FOLLOWER, UNKNOWN_TOPIC_OR_PARTITION, LEADER_NOT_AVAILABLE and the other
   invalid-metadata errors, after a broken connection, when a partition has no leader, for a
   topic it does not know yet, and every ``metadata.max.age.ms`` (new partitions). A partition's
   leader is never replaced by one with an older leader epoch. Records for a topic not yet in
   the metadata wait (in order) up to ``max.block.ms``.

Error tree::

    KafkasimError
    ├── KafkaError                  an error with Kafka's code (common/errors.py), e.g.
    │   ├── NotLeaderOrFollowerError    the broker's answer, after the last allowed retry
    │   ├── NetworkError                NETWORK_EXCEPTION: "Disconnected from node N" (the
    │   │                               transport's RpcError is its __cause__)
    │   ├── RecordTooLargeError         MESSAGE_TOO_LARGE: bigger than max.request.size
    │   ├── OutOfOrderSequenceNumberError
    │   ├── InvalidConfigError          a bad or unknown config key (named)
    │   └── DeliveryTimeoutError        REQUEST_TIMED_OUT: delivery.timeout.ms or max.block.ms
    │                                   passed (the last attempt's error is its __cause__)
    └── ProducerClosedError         send after close, or records dropped by a forced close

Misuse raises at once from ``send`` (ValueError, TypeError, ProducerClosedError); every
other outcome arrives through the record's future (and its callback).

Deviations from Kafka: no transactions; no buffer.memory limit (``send`` never blocks); a
batch that the broker refuses as MESSAGE_TOO_LARGE is failed, not split; a compressed batch is
filled up to ``batch.size`` *uncompressed* bytes (Kafka estimates the compression ratio); the
partitioner is 2.4-3.2's sticky one (KIP-480), not 3.3's adaptive one (KIP-794).

Not thread-safe: one event loop owns a producer.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import random
import struct
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Final

from google.protobuf.message import Message
from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception,
    stop_after_attempt,
    stop_any,
    wait_exponential,
    wait_fixed,
)
from tenacity.stop import stop_base

import proto
from client.minimal import INVALID_METADATA_CODES, RETRY_BACKOFF_MAX_MS
from client.partitioner import (
    PARTITIONERS,
    FunctionPartitioner,
    Partitioner,
    PartitionFunction,
)
from common.clock import Clock
from common.config import Config, ConfigDef, ConfigKey, ConfigType
from common.errors import (
    InvalidConfigError,
    KafkaError,
    KafkasimError,
    OutOfOrderSequenceNumberError,
    RecordTooLargeError,
    error_for_code,
    error_for_name,
)
from common.rpc import BidiStream, RpcError, RpcStatus, Transport
from common.types import TopicPartition
from proto import kafkasim_pb2 as pb
from storage.records.batch import (
    CRC_OFFSET,
    MAX_RECORD_OVERHEAD,
    PRODUCER_ID_OFFSET,
    RECORD_BATCH_OVERHEAD,
    RecordBatchBuilder,
    compute_crc,
    record_size_upper_bound,
)
from storage.records.compression import CompressionType

logger = logging.getLogger(__name__)

__all__ = [
    "PRODUCER_CONFIG",
    "DeliveryTimeoutError",
    "Producer",
    "ProducerClosedError",
    "ProducerConfig",
    "RecordMetadata",
    "SendCallback",
]

INT32_MAX: Final = 2**31 - 1
SEQUENCE_MODULUS: Final = 2**31  # sequences wrap from 2**31 - 1 to 0
NO_PRODUCER_ID: Final = -1
NO_PRODUCER_EPOCH: Final = -1
# The idempotent producer's limit: the broker remembers the last 5 batches of each producer
# and partition, so at most 5 may be unanswered for a retry to be recognised as a duplicate.
MAX_IN_FLIGHT_FOR_IDEMPOTENCE: Final = 5

_UNKNOWN_TOPIC = error_for_name("UNKNOWN_TOPIC_OR_PARTITION").code
_LEADER_NOT_AVAILABLE = error_for_name("LEADER_NOT_AVAILABLE").code
_OUT_OF_ORDER_SEQUENCE = OutOfOrderSequenceNumberError.code
_DUPLICATE_SEQUENCE = error_for_name("DUPLICATE_SEQUENCE_NUMBER").code
_NETWORK_EXCEPTION = error_for_name("NETWORK_EXCEPTION")

_PRODUCER_STATE = struct.Struct(">qhi")  # producerId, producerEpoch, baseSequence (offset 43)
_CRC = struct.Struct(">I")
_client_ids = itertools.count(1)


# ---------------------------------------------------------------------------------------------
# Errors
# ---------------------------------------------------------------------------------------------


class DeliveryTimeoutError(KafkaError):
    """A record was not acknowledged within ``delivery.timeout.ms`` (or its topic did not
    appear in the metadata within ``max.block.ms``): Kafka's TimeoutException."""

    code = error_for_name("REQUEST_TIMED_OUT").code
    error_name = "REQUEST_TIMED_OUT"
    retriable = True


class ProducerClosedError(KafkasimError):
    """The producer is closed (``send`` after ``close``), or a forced close dropped records."""


# ---------------------------------------------------------------------------------------------
# Configuration
# ---------------------------------------------------------------------------------------------

_I, _L, _B, _S, _LST = (
    ConfigType.INT,
    ConfigType.LONG,
    ConfigType.BOOLEAN,
    ConfigType.STRING,
    ConfigType.LIST,
)

PRODUCER_KEYS: tuple[ConfigKey, ...] = (
    ConfigKey("bootstrap.servers", _LST, None, "host:port of brokers to ask for metadata."),
    ConfigKey("client.id", _S, "", "A name for logs; default producer-N."),
    ConfigKey(
        "acks",
        _S,
        "all",
        "Acknowledgements the leader waits for: 0 (none), 1 (its own log), all/-1 (the ISR).",
        choices=("all", "-1", "0", "1"),
    ),
    ConfigKey(
        "enable.idempotence",
        _B,
        True,
        "Producer id + sequence numbers: retries are never appended twice. Needs acks=all, "
        "retries > 0, max.in.flight.requests.per.connection <= 5; left at its default it is "
        "turned off (not an error) when those are set otherwise, as in Kafka 3.x.",
    ),
    ConfigKey("batch.size", _I, 16_384, "Largest batch per partition, in bytes.", low=0),
    ConfigKey(
        "linger.ms",
        _L,
        0,
        "How long a batch waits for more records before it is sendable. 0 (Kafka 3.x's "
        "default; 4.0 made it 5) still batches whatever arrives while a request is in flight.",
        low=0,
    ),
    ConfigKey(
        "compression.type",
        _S,
        "none",
        "Codec of the batches.",
        choices=tuple(c.kafka_name for c in CompressionType),
    ),
    ConfigKey(
        "max.in.flight.requests.per.connection",
        _I,
        5,
        "Unanswered requests per broker; 1 keeps order on retries without idempotence.",
        low=1,
    ),
    ConfigKey("retries", _I, INT32_MAX, "Retries of a failed batch (within the timeout).", low=0),
    ConfigKey("retry.backoff.ms", _L, 100, "Wait before a batch is retried.", low=0),
    ConfigKey(
        "delivery.timeout.ms",
        _I,
        120_000,
        "Upper bound from send() to success or failure, retries included; at least "
        "linger.ms + request.timeout.ms.",
        low=0,
    ),
    ConfigKey("request.timeout.ms", _I, 30_000, "How long to wait for an answer.", low=0),
    ConfigKey("max.request.size", _I, 1_048_576, "Largest request (and record).", low=0),
    ConfigKey(
        "max.block.ms", _L, 60_000, "How long a record waits for its topic's metadata.", low=0
    ),
    ConfigKey("metadata.max.age.ms", _L, 300_000, "Refresh metadata at least this often.", low=0),
    ConfigKey(
        "partitioner",
        _S,
        "murmur2",
        "murmur2: keys by Kafka's murmur2, keyless records sticky (KIP-480); "
        "uniform_sticky: every record sticky. A callable can be passed to Producer instead.",
        choices=tuple(PARTITIONERS),
    ),
)


def _check_required(config: Config) -> None:
    if not config["bootstrap.servers"]:
        raise InvalidConfigError(
            'Missing required configuration "bootstrap.servers" which has no default value.'
        )


def _check_idempotence(config: Config) -> None:
    """Kafka 3.x's rules: an explicit enable.idempotence=true must not conflict (the default
    true is dropped silently instead, see :func:`_idempotence_enabled`)."""
    if not (config["enable.idempotence"] and config.is_set("enable.idempotence")):
        return
    if config["retries"] == 0:
        raise InvalidConfigError("Must set retries to non-zero when using the idempotent producer.")
    if config["acks"] not in ("all", "-1"):
        raise InvalidConfigError(
            "Must set acks to all in order to use the idempotent producer. "
            "Otherwise we cannot guarantee idempotence."
        )
    if config["max.in.flight.requests.per.connection"] > MAX_IN_FLIGHT_FOR_IDEMPOTENCE:
        raise InvalidConfigError(
            "Must set max.in.flight.requests.per.connection to at most 5 to use the "
            "idempotent producer."
        )


def _check_delivery_timeout(config: Config) -> None:
    if not config.is_set("delivery.timeout.ms"):
        return  # the default is raised to the minimum instead (as Kafka does)
    minimum = config["linger.ms"] + config["request.timeout.ms"]
    if config["delivery.timeout.ms"] < minimum:
        raise InvalidConfigError(
            "delivery.timeout.ms should be equal to or larger than linger.ms + "
            f"request.timeout.ms ({config['delivery.timeout.ms']} < {minimum})"
        )


PRODUCER_CONFIG = ConfigDef(
    PRODUCER_KEYS,
    rules=(_check_required, _check_idempotence, _check_delivery_timeout),
    kind="producer configuration",
)
"""The producer's keys, one declaration each; unknown keys are an error naming them."""


def _idempotence_enabled(config: Config) -> bool:
    if not config["enable.idempotence"]:
        return False
    return (
        config["retries"] > 0
        and config["acks"] in ("all", "-1")
        and config["max.in.flight.requests.per.connection"] <= MAX_IN_FLIGHT_FOR_IDEMPOTENCE
    )


@dataclass(frozen=True, slots=True)
class ProducerConfig:
    """The parsed settings, cross-field rules applied (see :data:`PRODUCER_CONFIG`)."""

    bootstrap_servers: tuple[str, ...]
    client_id: str
    acks: int
    idempotence: bool
    batch_size: int
    linger_ms: int
    compression: CompressionType
    max_in_flight: int
    retries: int
    retry_backoff_ms: int
    delivery_timeout_ms: int
    request_timeout_ms: int
    max_request_size: int
    max_block_ms: int
    metadata_max_age_ms: int
    partitioner: str

    @classmethod
    def from_props(cls, props: Mapping[str, object]) -> ProducerConfig:
        raw = dict(props)
        acks = raw.get("acks")
        if isinstance(acks, int) and not isinstance(acks, bool):
            raw["acks"] = str(acks)  # acks=1 as a number is what users write
        config = PRODUCER_CONFIG.parse(raw)
        linger_ms = int(config["linger.ms"])
        request_timeout_ms = int(config["request.timeout.ms"])
        delivery_timeout_ms = int(config["delivery.timeout.ms"])
        # Only a default can be below the minimum here (_check_delivery_timeout): raise it.
        delivery_timeout_ms = max(delivery_timeout_ms, linger_ms + request_timeout_ms)
        return cls(
            bootstrap_servers=tuple(config["bootstrap.servers"]),
            client_id=config["client.id"] or f"producer-{next(_client_ids)}",
            acks=-1 if config["acks"] == "all" else int(config["acks"]),
            idempotence=_idempotence_enabled(config),
            batch_size=int(config["batch.size"]),
            linger_ms=linger_ms,
            compression=CompressionType.from_name(config["compression.type"]),
            max_in_flight=int(config["max.in.flight.requests.per.connection"]),
            retries=int(config["retries"]),
            retry_backoff_ms=int(config["retry.backoff.ms"]),
            delivery_timeout_ms=delivery_timeout_ms,
            request_timeout_ms=request_timeout_ms,
            max_request_size=int(config["max.request.size"]),
            max_block_ms=int(config["max.block.ms"]),
            metadata_max_age_ms=int(config["metadata.max.age.ms"]),
            partitioner=config["partitioner"],
        )


# ---------------------------------------------------------------------------------------------
# Records and batches
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RecordMetadata:
    """Where an acknowledged record landed.

    ``offset`` is -1 with acks=0 and for a batch known to be written only because a later one
    of the same producer was acknowledged (rule 4); ``timestamp`` is the broker's append time
    for LogAppendTime topics, else the record's own.
    """

    topic: str
    partition: int
    offset: int
    timestamp: int


SendCallback = Callable[[RecordMetadata | None, BaseException | None], None]
"""Kafka's ``Callback.onCompletion(metadata, exception)``: exactly one of them is set."""

Headers = Sequence[tuple[str, bytes | None]]


class _ProducerBatch:
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
        self.futures: list[asyncio.Future[RecordMetadata]] = []
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
        future: asyncio.Future[RecordMetadata],
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

    def stamp(self, producer_id: int, producer_epoch: int, sequence_index: int) -> None:
        """Write the producer state into the batch header and recompute the CRC."""
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self.sequence_index = sequence_index
        self.base_sequence = sequence_index % SEQUENCE_MODULUS
        buf = bytearray(self.build())
        _PRODUCER_STATE.pack_into(
            buf, PRODUCER_ID_OFFSET, producer_id, producer_epoch, self.base_sequence
        )
        _CRC.pack_into(buf, CRC_OFFSET, compute_crc(buf, 0, len(buf)))
        self.data = bytes(buf)

    def complete(self, base_offset: int, log_append_time_ms: int) -> None:
        topic, partition = self.tp
        for i, future in enumerate(self.futures):
            if not future.done():
                offset = base_offset + i if base_offset >= 0 else -1
                timestamp = log_append_time_ms if log_append_time_ms >= 0 else self.timestamps[i]
                future.set_result(RecordMetadata(topic, partition, offset, timestamp))

    def fail(self, error: BaseException) -> None:
        for future in self.futures:
            if not future.done():
                future.set_exception(error)


class _PartitionState:
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
        self.batches: deque[_ProducerBatch] = deque()
        self.in_flight = 0  # batches of this partition sent and not yet answered
        self.next_batch_index = 0
        self.next_sequence_index = 0
        self.last_acked_index = -1
        self.unresolved: deque[_ProducerBatch] = deque()

    def reenqueue(self, batch: _ProducerBatch) -> None:
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


@dataclass(slots=True)
class _PendingRecord:
    """A record whose topic is not in the metadata yet (waits up to max.block.ms)."""

    key: bytes | None
    value: bytes | None
    headers: Headers
    partition: int | None
    timestamp: int
    size_upper_bound: int
    future: asyncio.Future[RecordMetadata]
    deadline_ms: int


# ---------------------------------------------------------------------------------------------
# Metadata
# ---------------------------------------------------------------------------------------------


@dataclass(slots=True)
class _TopicMetadata:
    name: str
    leaders: list[int]
    leader_epochs: list[int]
    available: list[int]  # partitions with a live leader, ascending
    num_partitions: int = 0

    def __post_init__(self) -> None:
        self.num_partitions = len(self.leaders)


class _ClusterMetadata:
    """The producer's view of brokers and leaders, from Metadata responses."""

    def __init__(self) -> None:
        self.brokers: dict[int, str] = {}
        self.topics: dict[str, _TopicMetadata] = {}
        self.last_refresh_ms = -1
        self.refreshes = 0

    def leader(self, tp: TopicPartition) -> int:
        topic = self.topics.get(tp.topic)
        if topic is None or tp.partition >= topic.num_partitions:
            return -1
        leader = topic.leaders[tp.partition]
        return leader if leader in self.brokers else -1

    def update(self, response: pb.MetadataResponse, now_ms: int) -> dict[str, int]:
        """Apply a response; returns topic-level errors (topic -> code)."""
        self.brokers = {b.node_id: f"{b.host}:{b.port}" for b in response.brokers}
        errors: dict[str, int] = {}
        for topic in response.topics:
            if topic.error_code:
                errors[topic.name] = topic.error_code
                continue
            old = self.topics.get(topic.name)
            count = max((p.partition for p in topic.partitions), default=-1) + 1
            leaders = [-1] * count
            epochs = [-1] * count
            for p in topic.partitions:
                leader, epoch = p.leader, p.leader_epoch
                # KIP-320: never go back to an older leader epoch (a stale broker's answer).
                if (
                    old is not None
                    and p.partition < old.num_partitions
                    and epoch < old.leader_epochs[p.partition]
                ):
                    leader, epoch = old.leaders[p.partition], old.leader_epochs[p.partition]
                leaders[p.partition] = leader
                epochs[p.partition] = epoch
            available = [p for p, leader in enumerate(leaders) if leader in self.brokers]
            self.topics[topic.name] = _TopicMetadata(topic.name, leaders, epochs, available)
        self.last_refresh_ms = now_ms
        self.refreshes += 1
        return errors


# ---------------------------------------------------------------------------------------------
# Connections
# ---------------------------------------------------------------------------------------------


@dataclass(slots=True)
class _InFlightRequest:
    correlation_id: int
    request: pb.ProduceRequest
    batches: list[_ProducerBatch]
    deadline_ms: int = 0  # answer expected by then (set when written)
    written: bool = False  # on the stream; with acks=0 its records are then done


class _BrokerConnection:
    """One broker's pipelined ProduceStream: requests written in order, answers read in order.

    A writer task sends queued requests; a reader task matches answers to requests by
    correlation id. An acks=0 request's records are done once it is written, but its answer
    (the broker answers every request of a stream) is still read, so that :meth:`wait_idle`
    knows when the broker has taken everything. A transport error or ``request.timeout.ms``
    without an answer breaks the stream: every request written or queued on it fails at once
    (the caller retries) and the next request opens a new stream.
    """

    def __init__(self, owner: Producer, broker_id: int, address: str) -> None:
        self.owner = owner
        self.broker_id = broker_id
        self.address = address
        self._stream: BidiStream | None = None
        self._outbox: deque[_InFlightRequest] = deque()
        self.in_flight: deque[_InFlightRequest] = deque()
        self._writer_wakeup = asyncio.Event()
        self._reader_wakeup = asyncio.Event()
        self._idle = asyncio.Event()
        name = f"{owner.client_id}-broker-{broker_id}"
        self._tasks = [
            asyncio.get_running_loop().create_task(self._write(), name=f"{name}-writer"),
            asyncio.get_running_loop().create_task(self._read(), name=f"{name}-reader"),
        ]
        for task in self._tasks:
            task.add_done_callback(_log_task_error)

    @property
    def pending(self) -> int:
        """Requests queued or unanswered: what max.in.flight.requests.per.connection bounds."""
        return len(self._outbox) + len(self.in_flight)

    def submit(self, request: _InFlightRequest) -> None:
        self._outbox.append(request)
        self._writer_wakeup.set()

    async def wait_idle(self) -> None:
        """Until no request is queued or unanswered."""
        while self.pending:
            self._idle.clear()
            await self._idle.wait()

    def _maybe_idle(self) -> None:
        if not self.pending:
            self._idle.set()

    def requests(self) -> list[_InFlightRequest]:
        return [*self.in_flight, *self._outbox]

    def take_requests(self) -> list[_InFlightRequest]:
        """Every request written or queued, oldest first; the connection forgets them (an
        answer that still arrives for one is skipped)."""
        taken = self.requests()
        self.in_flight.clear()
        self._outbox.clear()
        return taken

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        stream, self._stream = self._stream, None
        if stream is not None:
            with contextlib.suppress(RpcError):
                await stream.close()

    def _open(self) -> BidiStream:
        if self._stream is None:
            self._stream = self.owner.transport.open_stream(
                self.address, proto.METHOD_PRODUCE_STREAM
            )
        return self._stream

    async def _write(self) -> None:
        while True:
            while not self._outbox:
                self._writer_wakeup.clear()
                await self._writer_wakeup.wait()
            request = self._outbox.popleft()
            stream = self._stream
            try:
                stream = self._open()
                await stream.send(request.request)
            except RpcError as e:
                await self._broken(stream, e, [request])
                continue
            request.written = True
            request.deadline_ms = self.owner.clock.monotonic_ms() + self.owner.request_timeout_ms
            self.in_flight.append(request)
            self._reader_wakeup.set()
            if request.request.acks == 0:
                self.owner._on_sent_without_ack(request)

    async def _read(self) -> None:
        clock = self.owner.clock
        while True:
            while not self.in_flight:
                self._reader_wakeup.clear()
                await self._reader_wakeup.wait()
            stream = self._stream
            assert stream is not None  # requests are in flight only on an open stream
            remaining_ms = self.in_flight[0].deadline_ms - clock.monotonic_ms()
            try:
                response = await stream.recv(timeout_s=max(remaining_ms, 0) / 1000)
            except RpcError as e:
                if stream is self._stream and e.status is RpcStatus.DEADLINE_EXCEEDED:
                    e = RpcError(
                        RpcStatus.DEADLINE_EXCEEDED,
                        f"no answer from broker {self.broker_id} within "
                        f"request.timeout.ms={self.owner.request_timeout_ms}",
                    )
                await self._broken(stream, e, [])
                continue
            assert isinstance(response, pb.ProduceResponse)
            if stream is not self._stream:
                continue  # a late answer on a replaced stream: its requests were failed
            if self.in_flight and response.correlation_id == self.in_flight[0].correlation_id:
                request = self.in_flight.popleft()
                if request.request.acks != 0:
                    self.owner._on_response(request, response)
                self._maybe_idle()

    async def _broken(
        self, stream: BidiStream | None, error: RpcError, unsent: list[_InFlightRequest]
    ) -> None:
        """Fail every request of ``stream`` (oldest first) and forget the stream (None: it
        could not even be opened)."""
        if stream is not self._stream:
            failed = unsent  # the stream was already replaced; only this request is ours
        else:
            failed = [*self.in_flight, *unsent, *self._outbox]
            self.in_flight.clear()
            self._outbox.clear()
            self._stream = None
            logger.info(
                "%s: produce stream to broker %d (%s) broke: %s",
                self.owner.client_id,
                self.broker_id,
                self.address,
                error,
            )
        for request in failed:
            if not (request.written and request.request.acks == 0):  # those are done
                self.owner._on_request_failed(request, self.broker_id, error)
        self._maybe_idle()
        if stream is not None:
            with contextlib.suppress(RpcError):
                await stream.close()


# ---------------------------------------------------------------------------------------------
# Retry policy
# ---------------------------------------------------------------------------------------------


class _BatchRetryPolicy:
    """When a failed batch may be sent again, and after how long: tenacity's stop and wait
    strategies, asked by the sender for one batch (the sender is event-driven, so it consults
    the policy instead of running a retry loop). Stops after ``retries`` retries or at the
    batch's deadline on the producer's clock; waits ``retry.backoff.ms`` (fixed, as Kafka
    before 3.7)."""

    def __init__(self, retries: int, retry_backoff_ms: int, clock: Clock) -> None:
        self._retrying = AsyncRetrying(
            stop=stop_any(stop_after_attempt(retries + 1), _StopAtDeadline(clock)),
            wait=wait_fixed(retry_backoff_ms / 1000),
        )

    def backoff_ms(self, batch: _ProducerBatch) -> int | None:
        """The wait before the next attempt, or None when the batch must not be retried."""
        state = RetryCallState(self._retrying, None, (), {"deadline_ms": batch.deadline_ms})
        state.attempt_number = batch.attempts
        if self._retrying.stop(state):
            return None
        return round(self._retrying.wait(state) * 1000)


class _StopAtDeadline(stop_base):
    """Stop once the clock reaches the ``deadline_ms`` the attempt state carries."""

    def __init__(self, clock: Clock) -> None:
        self._clock = clock

    def __call__(self, retry_state: RetryCallState) -> bool:
        deadline_ms: int = retry_state.kwargs["deadline_ms"]
        return self._clock.monotonic_ms() >= deadline_ms


def _stop_when(predicate: Callable[[], bool]) -> Callable[[RetryCallState], bool]:
    def stop(_state: RetryCallState) -> bool:
        return predicate()

    return stop


def _retriable(e: BaseException) -> bool:
    return isinstance(e, (RpcError, KafkaError)) and e.retriable


# ---------------------------------------------------------------------------------------------
# The producer
# ---------------------------------------------------------------------------------------------


class Producer:
    """Kafka's producer; see the module doc for how records travel and what is guaranteed.

    ``config`` takes Kafka's key names (:data:`PRODUCER_KEYS`); ``transport`` is the Rpc
    port (gRPC or the simulation's network), ``clock`` the time every timeout is measured on,
    ``rng`` the randomness of the sticky partitioner, ``partitioner`` a function choosing the
    partition instead of the ``partitioner`` key. Use as ``async with Producer(...) as p``, or
    call :meth:`close`.
    """

    def __init__(
        self,
        config: Mapping[str, object],
        *,
        transport: Transport,
        clock: Clock,
        rng: random.Random | None = None,
        partitioner: PartitionFunction | None = None,
    ) -> None:
        self.config = ProducerConfig.from_props(config)
        cfg = self.config
        self.transport = transport
        self.clock = clock
        self.client_id = cfg.client_id
        self.request_timeout_ms = cfg.request_timeout_ms
        self._rng = rng if rng is not None else random.Random()
        self._partitioner: Partitioner = (
            FunctionPartitioner(partitioner)
            if partitioner is not None
            else PARTITIONERS[cfg.partitioner](self._rng)
        )
        self._acks = cfg.acks
        self._idempotent = cfg.idempotence
        self._guarantee_order = not cfg.idempotence and cfg.max_in_flight == 1
        self._retry_policy = _BatchRetryPolicy(cfg.retries, cfg.retry_backoff_ms, clock)
        self._metadata = _ClusterMetadata()
        self._topics = self._metadata.topics  # the same dict, for the hot path
        self._max_request_size = cfg.max_request_size
        self._create_future: Callable[[], asyncio.Future[Any]] = _no_loop
        self._partitions: dict[TopicPartition, _PartitionState] = {}
        # Per topic, its partitions' states by partition number (the hot path's lookup).
        self._topic_states: dict[str, dict[int, _PartitionState]] = {}
        self._queued: dict[TopicPartition, _PartitionState] = {}  # those with queued batches
        self._waiting: dict[str, deque[_PendingRecord]] = {}
        self._incomplete: dict[_ProducerBatch, None] = {}
        self._connections: dict[int, _BrokerConnection] = {}
        self._drain_start: dict[int, int] = {}
        self._correlation_ids = itertools.count(1)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wakeup: asyncio.Event | None = None
        self._sender_task: asyncio.Task[None] | None = None
        self._metadata_task: asyncio.Task[None] | None = None
        self._metadata_wanted = False
        self._producer_id_task: asyncio.Task[None] | None = None
        self.producer_id = NO_PRODUCER_ID
        self.producer_epoch = NO_PRODUCER_EPOCH
        self._reset_pending = False
        self._fatal: BaseException | None = None
        self._flushes = 0
        self._closing = False
        self._closed = False
        self._forced = False
        # Counters (tests and benchmarks read them).
        self.requests_sent = 0
        self.batches_sent = 0
        self.records_sent = 0
        self.retries = 0
        self.producer_id_resets = 0
        logger.info(
            "%s: %s producer (acks=%s, linger.ms=%d, batch.size=%d)",
            self.client_id,
            "idempotent" if self._idempotent else "non-idempotent",
            "all" if cfg.acks == -1 else cfg.acks,
            cfg.linger_ms,
            cfg.batch_size,
        )

    # -- lifecycle ----------------------------------------------------------------------------

    async def start(self) -> Producer:
        """Start the sender on the running loop (``send`` does it too); returns self."""
        self._ensure_started()
        return self

    async def __aenter__(self) -> Producer:
        return await self.start()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    def _ensure_started(self) -> None:
        if self._closing:
            raise ProducerClosedError("Cannot perform operation after producer has been closed")
        if self._sender_task is not None:
            return
        self._loop = asyncio.get_running_loop()
        self._create_future = self._loop.create_future
        self._wakeup = asyncio.Event()
        self._sender_task = self._loop.create_task(self._run(), name=f"{self.client_id}-sender")

    async def flush(self) -> None:
        """Make every buffered record sendable now and wait until all records sent before
        this call are acknowledged or failed (their futures carry the outcome)."""
        if self._sender_task is None:
            return
        self._flushes += 1
        self._wake()
        try:
            waiting = [p.future for queue in self._waiting.values() for p in queue]
            if waiting:
                await asyncio.wait(waiting)
            batches = [batch.done for batch in self._incomplete]
            if batches:
                await asyncio.wait(batches)
        finally:
            self._flushes -= 1

    async def close(self, timeout_s: float | None = None) -> None:
        """Send what is buffered, wait for the answers, stop. After ``timeout_s`` (seconds of
        loop time; None waits as long as delivery.timeout.ms lets records live), what is left
        fails with :class:`ProducerClosedError`. Idempotent."""
        if self._closed:
            return
        self._closing = True
        if self._sender_task is not None:
            self._wake()
            try:
                async with asyncio.timeout(timeout_s):
                    await asyncio.shield(self._sender_task)
            except TimeoutError:
                logger.warning("%s: closing forcefully after %s s", self.client_id, timeout_s)
            except Exception:
                pass  # the sender logged it and failed every record
            if self._incomplete or self._waiting:
                self._forced = True
                self._fail_everything(ProducerClosedError("Producer is closed forcefully."))
            elif self._connections:
                # acks=0 requests: let the brokers take what was written before hanging up.
                idle = [c.wait_idle() for c in self._connections.values()]
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self.request_timeout_ms / 1000):
                        await asyncio.gather(*idle)
            await self._stop_tasks()
        self._closed = True
        logger.info("%s: closed", self.client_id)

    async def _stop_tasks(self) -> None:
        tasks = [self._sender_task, self._metadata_task, self._producer_id_task]
        for task in tasks:
            if task is not None:
                task.cancel()
        for task in tasks:
            if task is not None:
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        connections, self._connections = self._connections, {}
        for connection in connections.values():
            await connection.close()

    def _wake(self) -> None:
        if self._wakeup is not None:
            self._wakeup.set()

    # -- send (the hot path) -------------------------------------------------------------------

    def send(  # noqa: PLR0917 -- Kafka's ProducerRecord fields, in its order
        self,
        topic: str,
        value: bytes | None,
        key: bytes | None = None,
        headers: Headers | None = None,
        partition: int | None = None,
        timestamp: int | None = None,
        callback: SendCallback | None = None,
    ) -> asyncio.Future[RecordMetadata]:
        """Queue one record; the future resolves to its :class:`RecordMetadata` or fails.

        Synchronous: the record is appended to its partition's batch before this returns, so
        records sent in a row keep their order within a partition. Raises (rather than
        failing the future) for misuse: a closed producer, a negative timestamp, a partition
        outside the topic, bytes that are not bytes.
        """
        if self._sender_task is None or self._closing:
            self._ensure_started()
        if type(value) is not bytes and value is not None:
            value = _to_bytes("value", value)
        if type(key) is not bytes and key is not None:
            key = _to_bytes("key", key)
        if timestamp is None:
            timestamp = self.clock.time_ms()
        elif timestamp < 0:
            raise ValueError(
                f"Invalid timestamp: {timestamp}. Timestamp should always be non-negative or null."
            )
        future: asyncio.Future[RecordMetadata] = self._create_future()
        if callback is not None:
            _attach(future, callback)
        hdrs: Headers = headers if headers else ()
        if hdrs:
            upper = record_size_upper_bound(key, value, hdrs)
        else:
            upper = (
                MAX_RECORD_OVERHEAD
                + 10
                + (len(key) if key is not None else 0)
                + (len(value) if value is not None else 0)
            )
        if self._fatal is not None:
            future.set_exception(self._fatal)
            return future
        serialized = upper + RECORD_BATCH_OVERHEAD
        if serialized > self._max_request_size:
            future.set_exception(
                RecordTooLargeError(
                    f"The message is {serialized} bytes when serialized which is larger than "
                    f"{self.config.max_request_size}, which is the value of the "
                    "max.request.size configuration."
                )
            )
            return future
        topic_metadata = self._topics.get(topic)
        if topic_metadata is None or topic in self._waiting:
            self._wait_for_metadata(
                topic,
                _PendingRecord(
                    key,
                    value,
                    hdrs,
                    partition,
                    timestamp,
                    upper,
                    future,
                    self.clock.monotonic_ms() + self.config.max_block_ms,
                ),
            )
            return future
        self._append(topic_metadata, key, value, hdrs, partition, timestamp, upper, future)
        return future

    def _append(  # noqa: PLR0917 -- the hot path: positional calls are cheaper
        self,
        topic: _TopicMetadata,
        key: bytes | None,
        value: bytes | None,
        headers: Headers,
        partition: int | None,
        timestamp: int,
        upper: int,
        future: asyncio.Future[RecordMetadata],
    ) -> None:
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
            state = self._partition_state(TopicPartition(topic.name, chosen))
        batches = state.batches
        if batches:
            # _ProducerBatch.try_append inlined: this is the per-record path.
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
                state = self._partition_state(TopicPartition(topic.name, again))
                batches = state.batches
                if batches and batches[-1].try_append(
                    timestamp, key, value, headers, upper, future
                ):
                    if batches[-1].is_full:
                        self._wake()
                    return
        now_ms = self.clock.monotonic_ms()
        assert self._loop is not None
        batch = _ProducerBatch(
            tp=state.tp,
            index=state.next_batch_index,
            now_ms=now_ms,
            deadline_ms=now_ms + self.config.delivery_timeout_ms,
            limit=max(self.config.batch_size, upper + RECORD_BATCH_OVERHEAD),
            compression=self.config.compression,
            done=self._loop.create_future(),
        )
        state.next_batch_index += 1
        appended = batch.try_append(timestamp, key, value, headers, upper, future)
        assert appended, "the first record always fits"
        if batches:
            batches[-1].builder_close()
        batches.append(batch)
        self._queued[state.tp] = state
        self._incomplete[batch] = None
        self._wake()

    def _partition_state(self, tp: TopicPartition) -> _PartitionState:
        state = self._partitions.get(tp)
        if state is None:
            state = self._partitions[tp] = _PartitionState(tp)
            self._topic_states.setdefault(tp.topic, {})[tp.partition] = state
        return state

    def _wait_for_metadata(self, topic: str, record: _PendingRecord) -> None:
        self._waiting.setdefault(topic, deque()).append(record)
        self._request_metadata()

    def _release_waiting(self, errors: Mapping[str, int]) -> None:
        """Records whose topic is now known go to their batches, in the order they were sent;
        those of a topic that cannot exist fail."""
        for topic in list(self._waiting):
            code = errors.get(topic, 0)
            if code and code not in (_UNKNOWN_TOPIC, _LEADER_NOT_AVAILABLE):
                error = error_for_code(code)(f"topic {topic!r}")
                for record in self._waiting.pop(topic):
                    _fail_future(record.future, error)
                continue
            metadata = self._metadata.topics.get(topic)
            if metadata is None:
                continue
            for record in self._waiting.pop(topic):
                if record.future.done():
                    continue
                try:
                    self._append(
                        metadata,
                        record.key,
                        record.value,
                        record.headers,
                        record.partition,
                        record.timestamp,
                        record.size_upper_bound,
                        record.future,
                    )
                except ValueError as e:
                    _fail_future(record.future, e)

    # -- the sender loop -------------------------------------------------------------------------

    async def _run(self) -> None:
        """Expire, drain, send; sleep until woken (a new or full batch, an answer, metadata,
        a producer id) or until the next batch's linger, backoff or deadline is due."""
        assert self._wakeup is not None
        wakeup = self._wakeup
        try:
            while True:
                wakeup.clear()
                now_ms = self.clock.monotonic_ms()
                next_ms = self._expire(now_ms)
                if self._closing and not self._incomplete and not self._waiting:
                    break
                next_ms = min(next_ms, self._send_ready(now_ms), self._maybe_refresh(now_ms))
                # At least 1 ms: a timer due "now" must not spin the loop (on the simulation's
                # virtual clock a spinning task would stop time).
                timeout_s = None if next_ms >= _NEVER else max(next_ms, 1) / 1000
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(timeout_s):
                        await wakeup.wait()
        except asyncio.CancelledError:
            raise
        except Exception as e:  # a bug: fail every record rather than leave futures hanging
            logger.exception("%s: the sender failed", self.client_id)
            self._fatal = e
            self._fail_everything(e)
            raise

    def _send_ready(self, now_ms: int) -> int:
        """Send what is sendable; ms until something may become sendable (_NEVER: no timer)."""
        if self._idempotent and (self.producer_id < 0 or self._reset_pending):
            if self._reset_pending and any(c.pending for c in self._connections.values()):
                return _NEVER  # an answer wakes us
            self._ensure_producer_id()
            return _NEVER
        while True:
            # One request per ready broker per round, then ask again: a batch drained behind
            # a full one must itself be sendable (linger.ms) to go in the next request.
            ready, next_ms, leaderless = self._ready(now_ms)
            if leaderless:
                self._request_metadata()
            sent = False
            for broker_id in ready:
                address = self._metadata.brokers[broker_id]
                connection = self._connection(broker_id, address)
                if connection.pending >= self.config.max_in_flight:
                    continue  # its next answer wakes us
                batches = self._drain(broker_id, now_ms)
                if batches:
                    self._send_batches(connection, batches)
                    sent = True
            if not sent:
                return next_ms

    def _ready(self, now_ms: int) -> tuple[list[int], int, bool]:
        """Brokers leading a partition with a sendable batch (rule 1), the ms until another
        may be, and whether some partition has no known leader."""
        linger_ms = self.config.linger_ms
        hurry = self._flushes > 0 or self._closing
        ready: dict[int, None] = {}
        next_ms = _NEVER
        leaderless = False
        for tp, state in self._queued.items():
            leader = self._metadata.leader(tp)
            if leader < 0:
                leaderless = True
                continue
            if leader in ready or not self._may_drain(state):
                continue
            batch = state.batches[0]
            if batch.attempts:
                wait_ms = batch.retry_at_ms - now_ms
            elif hurry or len(state.batches) > 1 or batch.is_full:
                wait_ms = 0
            else:
                wait_ms = batch.created_ms + linger_ms - now_ms
            if wait_ms <= 0:
                ready[leader] = None
            else:
                next_ms = min(next_ms, wait_ms)
        return list(ready), next_ms, leaderless

    def _may_drain(self, state: _PartitionState) -> bool:
        """Rule 3: may the partition's oldest batch be sent now?"""
        if self._guarantee_order and state.in_flight:
            return False
        batch = state.batches[0]
        # A retried batch goes again only as the oldest unresolved one of its partition.
        return not (
            self._idempotent and batch.sequence_index >= 0 and state.unresolved[0] is not batch
        )

    def _drain(self, broker_id: int, now_ms: int) -> list[_ProducerBatch]:
        """At most one batch per partition led by ``broker_id``, up to max.request.size."""
        candidates = [
            state for tp, state in self._queued.items() if self._metadata.leader(tp) == broker_id
        ]
        if not candidates:
            return []
        start = self._drain_start.get(broker_id, 0) % len(candidates)
        self._drain_start[broker_id] = start + 1
        drained: list[_ProducerBatch] = []
        size = 0
        for state in candidates[start:] + candidates[:start]:
            if not state.batches or not self._may_drain(state):
                continue
            batch = state.batches[0]
            if batch.attempts and batch.retry_at_ms > now_ms:
                continue
            if drained and size + batch.size > self.config.max_request_size:
                break
            state.batches.popleft()
            if not state.batches:
                del self._queued[state.tp]
            if batch.data is None:
                batch.build()
                if self._idempotent:
                    batch.stamp(self.producer_id, self.producer_epoch, state.next_sequence_index)
                    state.next_sequence_index = batch.last_sequence_index + 1
                    state.unresolved.append(batch)
            size += len(batch.data or b"")
            drained.append(batch)
        return drained

    def _send_batches(self, connection: _BrokerConnection, batches: list[_ProducerBatch]) -> None:
        correlation_id = next(self._correlation_ids)
        request = pb.ProduceRequest(
            acks=self._acks, timeout_ms=self.request_timeout_ms, correlation_id=correlation_id
        )
        for batch in batches:
            request.partitions.add(
                topic=batch.tp.topic, partition=batch.tp.partition, records=batch.data
            )
            batch.attempts += 1
            self._partitions[batch.tp].in_flight += 1
            self.records_sent += batch.record_count
        self.batches_sent += len(batches)
        self.requests_sent += 1
        connection.submit(_InFlightRequest(correlation_id, request, batches))

    def _connection(self, broker_id: int, address: str) -> _BrokerConnection:
        connection = self._connections.get(broker_id)
        if connection is not None and connection.address != address:
            # The broker moved: its old stream's requests fail and are retried.
            for request in connection.take_requests():
                moved = RpcError(RpcStatus.UNAVAILABLE, f"broker moved to {address}")
                self._on_request_failed(request, broker_id, moved)
            task = asyncio.get_running_loop().create_task(connection.close())
            task.add_done_callback(_log_task_error)
            connection = None
        if connection is None:
            connection = self._connections[broker_id] = _BrokerConnection(self, broker_id, address)
        return connection

    # -- answers -------------------------------------------------------------------------------

    def _on_sent_without_ack(self, request: _InFlightRequest) -> None:
        """acks=0: a record is done once written to the stream (offset -1, as Kafka)."""
        for batch in request.batches:
            self._partitions[batch.tp].in_flight -= 1
            self._finish(batch, base_offset=-1, log_append_time_ms=-1)
        self._wake()

    def _on_response(self, request: _InFlightRequest, response: pb.ProduceResponse) -> None:
        results = {(p.topic, p.partition): p for p in response.partitions}
        for batch in request.batches:
            state = self._partitions[batch.tp]
            state.in_flight -= 1
            result = results.get((batch.tp.topic, batch.tp.partition))
            if result is None:
                self._on_batch_error(batch, _NETWORK_EXCEPTION("no answer for the partition"))
            elif result.error_code == 0:
                self._on_batch_success(state, batch, result.base_offset, result.log_append_time_ms)
            elif result.error_code == _DUPLICATE_SEQUENCE:
                # Written before, beyond what the broker remembers: success, offset unknown.
                self._on_batch_success(state, batch, -1, -1)
            else:
                error = error_for_code(result.error_code)(result.error_message)
                if result.error_code in INVALID_METADATA_CODES:
                    self._request_metadata()
                self._on_batch_error(batch, error)
        self._wake()

    def _on_request_failed(
        self, request: _InFlightRequest, broker_id: int, cause: RpcError
    ) -> None:
        """The request's stream broke or timed out: every batch may be retried. Users see
        Kafka's NETWORK_EXCEPTION ("Disconnected from node N"), the transport error chained."""
        error = _NETWORK_EXCEPTION(f"Disconnected from node {broker_id}: {cause}")
        error.__cause__ = cause
        for batch in request.batches:
            self._partitions[batch.tp].in_flight -= 1
            self._on_batch_error(batch, error)
        self._request_metadata()
        self._wake()

    def _on_batch_success(
        self, state: _PartitionState, batch: _ProducerBatch, base_offset: int, append_ms: int
    ) -> None:
        if batch.sequence_index >= 0 and batch.producer_id == self.producer_id:
            state.last_acked_index = max(state.last_acked_index, batch.last_sequence_index)
        self._finish(batch, base_offset=base_offset, log_append_time_ms=append_ms)

    def _on_batch_error(self, batch: _ProducerBatch, error: BaseException) -> None:
        """Retry (rules 3-5) or fail a batch whose attempt failed."""
        if batch.finished:
            return  # expired while in flight: already failed
        batch.last_error = error
        state = self._partitions[batch.tp]
        stamped = batch.sequence_index >= 0 and batch.producer_id == self.producer_id
        if stamped and batch.last_sequence_index <= state.last_acked_index:
            # A later batch was acknowledged, so this one was appended (rule 4).
            self._finish(batch, base_offset=-1, log_append_time_ms=-1)
            return
        retriable = _retriable(error)
        if isinstance(error, KafkaError) and error.code == _OUT_OF_ORDER_SEQUENCE:
            # Final for the partition's oldest unresolved batch (the broker should have taken
            # it); a younger one only came before an older one that is still on its way.
            retriable = stamped and state.unresolved[0] is not batch
        backoff_ms = self._retry_policy.backoff_ms(batch) if retriable else None
        if backoff_ms is None or self._forced:
            now_ms = self.clock.monotonic_ms()
            if retriable and now_ms >= batch.deadline_ms:
                error = self._delivery_timeout(batch, now_ms, error)
            self._finish(batch, error=error)
            return
        self.retries += 1
        batch.retry_at_ms = self.clock.monotonic_ms() + backoff_ms
        logger.debug(
            "%s: retrying %s (attempt %d) after %d ms: %s",
            self.client_id,
            batch.tp,
            batch.attempts + 1,
            backoff_ms,
            error,
        )
        state.reenqueue(batch)
        self._queued[batch.tp] = state

    def _finish(
        self,
        batch: _ProducerBatch,
        *,
        base_offset: int = -1,
        log_append_time_ms: int = -1,
        error: BaseException | None = None,
    ) -> None:
        """Resolve a batch's futures, exactly once."""
        if batch.finished:
            return
        batch.finished = True
        state = self._partitions[batch.tp]
        if batch.sequence_index >= 0:
            with contextlib.suppress(ValueError):
                state.unresolved.remove(batch)
        if error is None:
            batch.complete(base_offset, log_append_time_ms)
        else:
            batch.fail(error)
            if self._idempotent and batch.sequence_index >= 0 and not self._forced:
                # Its sequences may never reach the broker: a gap nothing can fill (rule 5).
                logger.warning(
                    "%s: %s failed with sequence %d (%s); the producer id will be reset",
                    self.client_id,
                    batch.tp,
                    batch.base_sequence,
                    error,
                )
                self._reset_pending = True
        self._incomplete.pop(batch, None)
        if not batch.done.done():
            batch.done.set_result(None)

    # -- expiry --------------------------------------------------------------------------------

    def _expire(self, now_ms: int) -> int:
        """Fail batches and waiting records past their deadline; ms until the next deadline."""
        next_ms = _NEVER
        for topic in list(self._waiting):
            queue = self._waiting[topic]
            while queue and (queue[0].future.done() or queue[0].deadline_ms <= now_ms):
                record = queue.popleft()
                _fail_future(
                    record.future,
                    DeliveryTimeoutError(
                        f"Topic {topic} not present in metadata after "
                        f"{self.config.max_block_ms} ms."
                    ),
                )
            if queue:
                next_ms = min(next_ms, queue[0].deadline_ms - now_ms)
            else:
                del self._waiting[topic]
        for tp in list(self._queued):
            state = self._queued[tp]
            while state.batches and state.batches[0].deadline_ms <= now_ms:
                self._expire_batch(state.batches.popleft(), now_ms)
            if state.batches:
                next_ms = min(next_ms, state.batches[0].deadline_ms - now_ms)
            else:
                del self._queued[tp]
        for connection in self._connections.values():
            for request in connection.requests():
                for batch in request.batches:
                    if batch.finished:
                        continue
                    if batch.deadline_ms <= now_ms:
                        self._expire_batch(batch, now_ms)
                    else:
                        next_ms = min(next_ms, batch.deadline_ms - now_ms)
        return max(next_ms, 0)

    def _expire_batch(self, batch: _ProducerBatch, now_ms: int) -> None:
        self._finish(batch, error=self._delivery_timeout(batch, now_ms, batch.last_error))

    @staticmethod
    def _delivery_timeout(
        batch: _ProducerBatch, now_ms: int, last_error: BaseException | None
    ) -> DeliveryTimeoutError:
        """Kafka's message, plus the error of the last attempt when there was one."""
        message = (
            f"Expiring {batch.record_count} record(s) for {batch.tp}:"
            f"{now_ms - batch.created_ms} ms has passed since batch creation"
        )
        if last_error is not None:
            message += f" (last error: {last_error})"
        error = DeliveryTimeoutError(message)
        error.__cause__ = last_error
        return error

    def _fail_everything(self, error: BaseException) -> None:
        for queue in self._waiting.values():
            for record in queue:
                _fail_future(record.future, error)
        self._waiting.clear()
        for batch in list(self._incomplete):
            self._finish(batch, error=error)
        for state in self._queued.values():
            state.batches.clear()
        self._queued.clear()

    # -- metadata ------------------------------------------------------------------------------

    def _request_metadata(self) -> None:
        self._metadata_wanted = True
        self._wake()

    def _maybe_refresh(self, now_ms: int) -> int:
        """Start a metadata refresh when one is wanted or due (at most one per
        retry.backoff.ms); ms until the periodic one is due."""
        last = self._metadata.last_refresh_ms
        if last >= 0 and now_ms - last >= self.config.metadata_max_age_ms:
            self._metadata_wanted = True
        if not (self._metadata_task is None or self._metadata_task.done()):
            return _NEVER  # its end wakes us
        if self._metadata_wanted:
            since_ms = now_ms - last if last >= 0 else self.config.retry_backoff_ms
            if since_ms < self.config.retry_backoff_ms:
                return self.config.retry_backoff_ms - since_ms
            self._metadata_wanted = False
            self._metadata_task = asyncio.get_running_loop().create_task(
                self._refresh_metadata(), name=f"{self.client_id}-metadata"
            )
            self._metadata_task.add_done_callback(_log_task_error)
            return _NEVER
        if last < 0 or not self._metadata.topics:
            return _NEVER
        return max(last + self.config.metadata_max_age_ms - now_ms, 0)

    async def _refresh_metadata(self) -> None:
        topics = sorted(set(self._metadata.topics) | set(self._waiting))
        if not topics:
            return
        request = pb.MetadataRequest(topics=topics)
        errors: dict[str, int] = {}
        try:
            async for attempt in self._retrying():
                with attempt:
                    response = await self._call_any_broker(proto.METHOD_METADATA, request)
                    assert isinstance(response, pb.MetadataResponse)
                    errors = self._metadata.update(response, self.clock.monotonic_ms())
        except (RpcError, KafkaError) as e:
            logger.warning("%s: metadata refresh failed: %s", self.client_id, e)
            self._metadata_wanted = True
            self._wake()
            return
        if errors:
            self._metadata_wanted = True  # topics being created, or not there (yet)
        if any(-1 in t.leaders for t in self._metadata.topics.values()):
            self._metadata_wanted = True
        self._release_waiting(errors)
        self._wake()

    def _retrying(self) -> AsyncRetrying:
        """Metadata and InitProducerId: retry retriable errors with exponential backoff from
        retry.backoff.ms, until they succeed or the producer is closed forcefully."""
        return AsyncRetrying(
            retry=retry_if_exception(_retriable),
            wait=wait_exponential(
                multiplier=self.config.retry_backoff_ms / 1000,
                max=RETRY_BACKOFF_MAX_MS / 1000,
            ),
            stop=_stop_when(lambda: self._forced),
            reraise=True,
        )

    async def _call_any_broker(self, method: str, request: Message) -> Message:
        """The first broker that answers: known brokers (starting at a rotating one, so a dead
        broker is not always asked first), then the bootstrap servers."""
        known = [self._metadata.brokers[b] for b in sorted(self._metadata.brokers)]
        if known:
            shift = self._metadata.refreshes % len(known)
            known = known[shift:] + known[:shift]
        last: RpcError | None = None
        for address in dict.fromkeys([*known, *self.config.bootstrap_servers]):
            try:
                return await self.transport.call(
                    address, method, request, timeout_s=self.request_timeout_ms / 1000
                )
            except RpcError as e:
                last = e
        assert last is not None
        raise last

    # -- producer id ---------------------------------------------------------------------------

    def _ensure_producer_id(self) -> None:
        if self._producer_id_task is None or self._producer_id_task.done():
            self._producer_id_task = asyncio.get_running_loop().create_task(
                self._init_producer_id(), name=f"{self.client_id}-init-producer-id"
            )
            self._producer_id_task.add_done_callback(_log_task_error)

    async def _init_producer_id(self) -> None:
        """Rule 4 (and the reset of rule 5): a new producer id from any broker."""
        request = pb.InitProducerIdRequest()
        response = pb.InitProducerIdResponse()
        try:
            async for attempt in self._retrying():
                with attempt:
                    answer = await self._call_any_broker(proto.METHOD_INIT_PRODUCER_ID, request)
                    assert isinstance(answer, pb.InitProducerIdResponse)
                    if answer.error_code:
                        raise error_for_code(answer.error_code)("InitProducerId")
                    response = answer
        except (RpcError, KafkaError) as e:
            if self._forced:
                return
            logger.error("%s: no producer id: %s", self.client_id, e)
            self._fatal = e
            self._fail_everything(e)
            self._wake()
            return
        was_reset = self._reset_pending
        self.producer_id, self.producer_epoch = response.producer_id, response.producer_epoch
        if was_reset:
            self._restart_sequences()
        logger.info(
            "%s: producer id %d, epoch %d", self.client_id, self.producer_id, self.producer_epoch
        )
        self._wake()

    def _restart_sequences(self) -> None:
        """Rule 5: under the new producer id every partition starts again at sequence 0;
        batches waiting for a retry are renumbered in order (nothing is in flight)."""
        self._reset_pending = False
        self.producer_id_resets += 1
        for state in self._partitions.values():
            state.next_sequence_index = 0
            state.last_acked_index = -1
            for batch in state.unresolved:
                batch.stamp(self.producer_id, self.producer_epoch, state.next_sequence_index)
                state.next_sequence_index = batch.last_sequence_index + 1
            state.sanity_check()


_NEVER: Final = 2**62  # "no timer" in ms computations


def _no_loop() -> asyncio.Future[Any]:
    raise RuntimeError("the producer has not started (no event loop yet)")


def _to_bytes(name: str, data: object) -> bytes:
    if isinstance(data, (bytearray, memoryview)):
        return bytes(data)
    raise TypeError(f"{name} must be bytes or None, not {type(data).__name__}")


def _attach(future: asyncio.Future[RecordMetadata], callback: SendCallback) -> None:
    def on_done(done: asyncio.Future[RecordMetadata]) -> None:
        try:
            if done.cancelled():
                callback(None, asyncio.CancelledError())
            elif done.exception() is not None:
                callback(None, done.exception())
            else:
                callback(done.result(), None)
        except Exception:
            logger.exception("a send callback raised")

    future.add_done_callback(on_done)


def _fail_future(future: asyncio.Future[Any], error: BaseException) -> None:
    if not future.done():
        future.set_exception(error)


def _log_task_error(task: asyncio.Task[None]) -> None:
    """A background task ended by an exception: a bug, logged rather than lost."""
    if not task.cancelled() and task.exception() is not None:
        logger.error("producer task %s failed", task.get_name(), exc_info=task.exception())
