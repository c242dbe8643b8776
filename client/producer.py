"""The producer: Kafka's ``KafkaProducer`` over kafkasim's Rpc port.

Theory of operation
-------------------
``send`` is synchronous and cheap: it picks a partition (:mod:`client.partitioner`), appends
the record to that partition's open batch in the *accumulator* and returns an
``asyncio.Future`` of the record's :class:`RecordMetadata`. ``send_many`` does the same for
many records at once with one future for all (a :class:`SendManyResult`: every record's
metadata or error), the batches holding one entry per run of its records instead of a future
per record (callbacks, when given, still per record). Everything else happens in one
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

Where it lives
--------------

=================================  =========================================================
:mod:`client.producer` (here)      ``Producer``: its life (start, flush, close) and ``send``
:mod:`client.producer_config`      the settings (``PRODUCER_KEYS``), ``ProducerConfig``
:mod:`client.accumulator`          rule 1: partition queues, ``ProducerBatch``, records
                                   waiting for metadata
:mod:`client.producer_types`       ``RecordMetadata``, ``SendCallback``, ``Headers``
:mod:`client.producer_bulk`        rule 1 for ``send_many``: many records per call, one
                                   future, one entry per batch (:mod:`client.bulk`)
:mod:`client.sender`               rules 2-5: the sender loop, retries, expiry, producer id
                                   and sequences
:mod:`client.producer_connection`  rule 2: one broker's pipelined ProduceStream
:mod:`client.producer_metadata`    rule 6: the leaders' view and its refresh
:mod:`client.producer_errors`      the error tree (re-exported here)
:mod:`client.transaction_manager`  rule 7: the transactional state machine and its queue
:mod:`client.transaction_sender`   rule 7: its requests over the gRPC contract
=================================  =========================================================

Misuse raises at once from ``send`` (ValueError, TypeError, ProducerClosedError); every
other outcome arrives through the record's future (and its callback): Kafka's errors from
``common/errors.py``, :class:`DeliveryTimeoutError`, :class:`ProducerClosedError`.

7. **Transactions** (``transactional.id``; idempotence implied). ``init_transactions``,
   ``begin_transaction``, ``send_offsets_to_transaction``, ``commit_transaction`` and
   ``abort_transaction`` drive :mod:`client.transaction_manager` (Kafka's state machine and
   errors); :mod:`client.transaction_sender` sends its requests to the coordinators. A call
   that times out keeps going and is finished by calling it again (KAFKA-13412). A record
   whose topic is not in the metadata yet belongs to the transaction it was sent in: the
   commit waits until it is appended; an abort fails it with TransactionAbortedError.

Deviations from Kafka: no buffer.memory limit (``send`` never blocks); a
batch that the broker refuses as MESSAGE_TOO_LARGE is failed, not split; a compressed batch is
filled up to ``batch.size`` *uncompressed* bytes (Kafka estimates the compression ratio); the
partitioner is 2.4-3.2's sticky one (KIP-480), not 3.3's adaptive one (KIP-794).

Not thread-safe: one event loop owns a producer.

(One module, ~660 lines: ``send`` and ``send_many`` share the life of the producer and its
checks, the transactional calls its sender; what splits off already lives in the modules of
the table above.)
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import Callable, Mapping, Sequence
from types import TracebackType
from typing import Any

from kafkasim.client.accumulator import (
    Headers,
    PartitionState,
    PendingRecord,
    RecordAccumulator,
    RecordMetadata,
    SendCallback,
)
from kafkasim.client.bulk import SendManyResult
from kafkasim.client.metadata import ClusterMetadata
from kafkasim.client.partitioner import PARTITIONERS, FunctionPartitioner, PartitionFunction
from kafkasim.client.producer_bulk import BulkQueue, arrow_columns
from kafkasim.client.producer_config import PRODUCER_CONFIG, PRODUCER_KEYS, ProducerConfig
from kafkasim.client.producer_connection import BrokerConnection
from kafkasim.client.producer_errors import (
    DeliveryTimeoutError,
    IllegalTransactionStateError,
    ProducerClosedError,
    TransactionAbortedError,
    logger,
)
from kafkasim.client.sender import Sender
from kafkasim.client.serde import split_serde
from kafkasim.client.transaction_manager import TransactionManager, TxnState
from kafkasim.client.transaction_types import (
    ConsumerGroupMetadata,
    OffsetAndMetadata,
    TransactionalResult,
)
from kafkasim.common.clock import Clock, SystemClock
from kafkasim.common.errors import KafkaError, RecordTooLargeError
from kafkasim.common.rpc import ClientTransport
from kafkasim.common.rpc_grpc_client import client_transport
from kafkasim.common.types import TopicPartition
from kafkasim.common.waits import Wakeup
from kafkasim.storage.records.batch import (
    MAX_RECORD_OVERHEAD,
    RECORD_BATCH_OVERHEAD,
    record_size_upper_bound,
)

__all__ = [
    "PRODUCER_CONFIG",
    "PRODUCER_KEYS",
    "DeliveryTimeoutError",
    "Producer",
    "ProducerClosedError",
    "ProducerConfig",
    "RecordMetadata",
    "SendCallback",
    "SendManyResult",
]


class Producer:
    """Kafka's producer; see the module doc for how records travel and what is guaranteed.

    ``config`` takes Kafka's key names (:data:`PRODUCER_KEYS`; ``key.serializer`` and
    ``value.serializer`` a name or a callable, :mod:`client.serde`); ``transport`` is the Rpc
    port (gRPC or the simulation's network; default: a ``GrpcTransport`` of its own, closed
    with the producer, while one given stays the caller's to close), ``clock`` the time every
    timeout is measured on (default the system clock), ``rng`` the randomness of the sticky
    partitioner, ``partitioner`` a function choosing the partition instead of the
    ``partitioner`` key. Use as ``async with Producer(...) as p``, or call :meth:`close`.
    """

    def __init__(
        self,
        config: Mapping[str, object],
        *,
        transport: ClientTransport | None = None,
        clock: Clock | None = None,
        rng: random.Random | None = None,
        partitioner: PartitionFunction | None = None,
    ) -> None:
        props, self._key_serializer, self._value_serializer = split_serde(config, "serializer")
        self.config = ProducerConfig.from_props(props)
        cfg = self.config
        self._owns_transport = transport is None
        if transport is None:  # TLS and SASL credentials as the config's security keys say
            transport = client_transport(props)
        if clock is None:
            clock = SystemClock()
        self.transport = transport
        self.clock = clock
        self.client_id = cfg.client_id
        self.request_timeout_ms = cfg.request_timeout_ms
        chooser = (
            FunctionPartitioner(partitioner)
            if partitioner is not None
            else PARTITIONERS[cfg.partitioner](rng if rng is not None else random.Random())
        )
        # The sender sleeps on it; whoever may have made work for the sender sets it.
        self._wakeup = Wakeup()
        self._metadata = ClusterMetadata()
        self._accumulator = RecordAccumulator(
            cfg, partitioner=chooser, clock=clock, metadata=self._metadata, wake=self._wakeup.set
        )
        self._txn: TransactionManager | None = None
        if cfg.transactional_id is not None:
            self._txn = TransactionManager(
                cfg.transactional_id,
                transaction_timeout_ms=cfg.transaction_timeout_ms,
                retry_backoff_ms=cfg.retry_backoff_ms,
            )
            self._accumulator.add_partition = self._txn.maybe_add_partition
        self._sender = Sender(
            cfg,
            transport=transport,
            clock=clock,
            accumulator=self._accumulator,
            metadata=self._metadata,
            wakeup=self._wakeup,
            transaction_manager=self._txn,
        )
        self._bulk = BulkQueue(
            cfg,
            serializers=(self._key_serializer, self._value_serializer),
            accumulator=self._accumulator,
            sender=self._sender,
            topics=self._metadata.topics,
            clock=clock,
            transaction_manager=self._txn,
        )
        # The same dicts and method as the collaborators', bound once for the hot path.
        self._topics = self._metadata.topics
        self._waiting = self._accumulator.waiting
        self._append = self._accumulator.append
        self._max_request_size = cfg.max_request_size
        self._create_future: Callable[[], asyncio.Future[Any]] = _no_loop
        self._sender_task: asyncio.Task[None] | None = None
        self._closing = False
        self._closed = False
        logger.info(
            "%s: %s producer (acks=%s, linger.ms=%d, batch.size=%d)",
            self.client_id,
            "transactional"
            if self._txn is not None
            else ("idempotent" if cfg.idempotence else "non-idempotent"),
            "all" if cfg.acks == -1 else cfg.acks,
            cfg.linger_ms,
            cfg.batch_size,
        )

    # -- what the sender knows (tests and benchmarks read it) --------------------------------------

    @property
    def producer_id(self) -> int:
        if self._txn is not None:
            return self._txn.producer_id_and_epoch.producer_id
        return self._sender.producer_id

    @property
    def producer_epoch(self) -> int:
        if self._txn is not None:
            return self._txn.producer_id_and_epoch.epoch
        return self._sender.producer_epoch

    @property
    def requests_sent(self) -> int:
        return self._sender.requests_sent

    @property
    def batches_sent(self) -> int:
        return self._sender.batches_sent

    @property
    def records_sent(self) -> int:
        return self._sender.records_sent

    @property
    def retries(self) -> int:
        """Batches sent again after a retriable error."""
        return self._sender.retries

    @property
    def producer_id_resets(self) -> int:
        return self._sender.producer_id_resets

    @property
    def _connections(self) -> Mapping[int, BrokerConnection]:
        """The sender's connection per broker (the simulation tests look inside)."""
        return self._sender.connections

    @property
    def _partitions(self) -> Mapping[TopicPartition, PartitionState]:
        """The accumulator's state per partition (the simulation tests look inside)."""
        return self._accumulator.partitions

    # -- lifecycle ---------------------------------------------------------------------------------

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
        loop = asyncio.get_running_loop()
        self._create_future = loop.create_future
        self._accumulator.loop = loop
        self._sender_task = loop.create_task(self._sender.run(), name=f"{self.client_id}-sender")

    async def flush(self) -> None:
        """Make every buffered record sendable now and wait until all records sent before
        this call are acknowledged or failed (their futures carry the outcome)."""
        if self._sender_task is None:
            return
        accumulator = self._accumulator
        accumulator.flushes_in_progress += 1
        self._wakeup.set()
        try:
            waiting = [p.waiter for queue in accumulator.waiting.values() for p in queue]
            if waiting:
                await asyncio.wait(waiting)
            batches = [batch.done for batch in accumulator.incomplete]
            if batches:
                await asyncio.wait(batches)
        finally:
            accumulator.flushes_in_progress -= 1

    async def close(self, timeout_s: float | None = None) -> None:
        """Send what is buffered, wait for the answers, stop. After ``timeout_s`` (seconds of
        loop time; None waits as long as delivery.timeout.ms lets records live), what is left
        fails with :class:`ProducerClosedError`. Idempotent."""
        if self._closed:
            return
        self._closing = True
        self._sender.initiate_close()
        if self._sender_task is not None:
            self._wakeup.set()
            try:
                async with asyncio.timeout(timeout_s):
                    await asyncio.shield(self._sender_task)
            except TimeoutError:
                logger.warning("%s: closing forcefully after %s s", self.client_id, timeout_s)
            except Exception:
                pass  # the sender logged it and failed every record
            if self._accumulator.incomplete or self._accumulator.waiting:
                self._sender.force_close(ProducerClosedError("Producer is closed forcefully."))
            elif self._sender.connections:
                # acks=0 requests: let the brokers take what was written before hanging up.
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self.request_timeout_ms / 1000):
                        await self._sender.wait_idle()
            await self._stop_tasks()
        self._closed = True
        if self._owns_transport:
            await self.transport.close()
        logger.info("%s: closed", self.client_id)

    async def _stop_tasks(self) -> None:
        tasks = [self._sender_task, *self._sender.background_tasks()]
        for task in tasks:
            if task is not None:
                task.cancel()
        for task in tasks:
            if task is not None:
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        await self._sender.close_connections()

    # -- transactions (KafkaProducer's transactional calls) ----------------------------------------

    async def init_transactions(self, timeout_s: float | None = None) -> None:
        """Get this transactional id's producer id and epoch from its coordinator, fencing
        older producers with the same id and ending their open transaction. ``timeout_s``
        (default max.block.ms) passed: DeliveryTimeoutError, and the call may be repeated
        (KAFKA-13412). Fatal errors (ProducerFencedError, INVALID_TRANSACTION_TIMEOUT as a
        TransactionError, ...) leave the producer good only for close()."""
        tm = self._transaction_manager("init_transactions")
        await self._await_transactional(tm.init_transactions(), timeout_s)

    def begin_transaction(self) -> None:
        """Start a transaction: ``send`` may be called until commit or abort."""
        self._transaction_manager("begin_transaction").begin_transaction()

    async def send_offsets_to_transaction(
        self,
        offsets: Mapping[TopicPartition, OffsetAndMetadata | int],
        group_metadata: ConsumerGroupMetadata,
        timeout_s: float | None = None,
    ) -> None:
        """Commit the consumer group's ``offsets`` (the next offset to read, per partition)
        with the transaction: they count only if it commits (``Consumer.group_metadata()``
        names the group and the member, so a rebalanced-away member is refused)."""
        tm = self._transaction_manager("send_offsets_to_transaction")
        converted = {
            tp: o if isinstance(o, OffsetAndMetadata) else OffsetAndMetadata(o)
            for tp, o in offsets.items()
        }
        result = tm.send_offsets_to_transaction(converted, group_metadata)
        await self._await_transactional(result, timeout_s)

    async def commit_transaction(self, timeout_s: float | None = None) -> None:
        """Send every record of the transaction, then commit it (EndTxn). After an abortable
        error this raises it: only abort_transaction is allowed then. A timeout leaves the
        commit going on; call commit_transaction again to wait for it (KAFKA-13412)."""
        tm = self._transaction_manager("commit_transaction")
        deadline = self._transactional_deadline(timeout_s)
        if tm.state is TxnState.IN_TRANSACTION:
            # Records waiting for their topic's metadata belong to the transaction too (Kafka's
            # send blocks until it is known, so they are appended before any commit).
            try:
                async with asyncio.timeout_at(deadline):
                    while self._waiting:
                        self._accumulator.none_waiting.clear()
                        await self._accumulator.none_waiting.wait()
            except TimeoutError:
                # The commit has not begun (no EndTxn is pending), so abort_transaction is
                # still allowed; the message says what was awaited, not EndTxn.
                topics = ", ".join(sorted(self._waiting))
                raise self._transactional_timeout(
                    timeout_s, f"the metadata of topic(s) {topics} before EndTxn(true)"
                ) from None
        await self._await_transactional(tm.commit_transaction(), timeout_s, deadline)

    async def abort_transaction(self, timeout_s: float | None = None) -> None:
        """Abort the transaction: records not sent yet fail with TransactionAbortedError,
        those sent are written but never seen by read_committed consumers."""
        tm = self._transaction_manager("abort_transaction")
        result = tm.abort_transaction()
        self._accumulator.fail_waiting(TransactionAbortedError())
        await self._await_transactional(result, timeout_s)

    def _transaction_manager(self, operation: str) -> TransactionManager:
        if self._txn is None:
            raise IllegalTransactionStateError(
                operation,
                "NON_TRANSACTIONAL",
                "Transactional method invoked on a non-transactional producer.",
            )
        self._ensure_started()
        return self._txn

    @staticmethod
    def _loop_time() -> float:
        return asyncio.get_running_loop().time()

    def _transactional_deadline(self, timeout_s: float | None) -> float:
        timeout = self.config.max_block_ms / 1000 if timeout_s is None else timeout_s
        return self._loop_time() + timeout

    def _transactional_timeout(self, timeout_s: float | None, operation: str) -> KafkaError:
        timeout_ms = self.config.max_block_ms if timeout_s is None else round(timeout_s * 1000)
        return DeliveryTimeoutError(
            f"Timeout expired after {timeout_ms}ms while awaiting {operation}"
        )

    async def _await_transactional(
        self, result: TransactionalResult, timeout_s: float | None, deadline: float | None = None
    ) -> None:
        """Kafka's TransactionalRequestResult.await: the outcome is seen (acknowledged) only
        when the call returns or raises its error, never on a timeout."""
        transactions = self._sender.transactions
        assert transactions is not None
        self._wakeup.set()
        if deadline is None:
            deadline = self._transactional_deadline(timeout_s)
        try:
            async with asyncio.timeout_at(deadline):
                while not result.is_completed:
                    transactions.progress.clear()
                    await transactions.progress.wait()
        except TimeoutError:
            raise self._transactional_timeout(timeout_s, result.operation) from None
        result.ack()
        if result.error is not None:
            raise result.error

    # -- send (the hot path) -----------------------------------------------------------------------

    def send(  # noqa: PLR0917 -- Kafka's ProducerRecord fields, in its order
        self,
        topic: str,
        value: Any,
        key: Any = None,
        headers: Headers | None = None,
        partition: int | None = None,
        timestamp: int | None = None,
        callback: SendCallback | None = None,
    ) -> asyncio.Future[RecordMetadata]:
        """Queue one record; the future resolves to its :class:`RecordMetadata` or fails.

        Synchronous: the record is appended to its partition's batch before this returns, so
        records sent in a row keep their order within a partition. Raises (rather than
        failing the future) for misuse: a closed producer, a negative timestamp, a partition
        outside the topic, bytes that are not bytes (after ``key.serializer`` and
        ``value.serializer``, which send calls).
        """
        if self._sender_task is None or self._closing:
            self._ensure_started()
        if self._value_serializer is not None and value is not None:
            value = self._value_serializer(value)
        if self._key_serializer is not None and key is not None:
            key = self._key_serializer(key)
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
        fatal = self._sender.fatal
        if fatal is not None:
            future.set_exception(fatal)
            return future
        if self._txn is not None:
            try:  # IllegalTransactionStateError and TransactionError raise, as Kafka's
                self._txn.fail_if_not_ready_for_send(topic)
            except KafkaError as e:  # PRODUCER_FENCED, ...: the record's future fails
                future.set_exception(e)
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
        if (
            topic_metadata is None
            or topic in self._waiting
            or (partition is not None and partition >= topic_metadata.num_partitions)
        ):
            self._accumulator.add_waiting(
                topic,
                PendingRecord(
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
            self._sender.request_metadata()
            return future
        self._append(topic_metadata, key, value, hdrs, partition, timestamp, upper, future)
        return future

    def send_many(
        self,
        topic: str,
        values: Sequence[Any],
        *,
        keys: Sequence[Any] | None = None,
        headers: Sequence[Headers] | None = None,
        partition: int | None = None,
        timestamps: Sequence[int] | int | None = None,
        callback: SendCallback | None = None,
    ) -> asyncio.Future[SendManyResult]:
        """Queue ``len(values)`` records of ``topic`` at once, in order; one future for all.

        Records go where ``send`` in a loop would put them, into the same batches, with one
        entry per run of records in a batch (:mod:`client.producer_bulk`). The future
        resolves to a :class:`SendManyResult` (every record's metadata, or its error where
        ``send`` would fail its future); it never fails. ``callback``: per record, if given.

        ``keys`` and ``headers`` (one per value) and ``timestamps`` (one per value, or one
        int for all; default: now) are optional. Misuse raises before anything is queued:
        ValueError for columns of different lengths, a negative timestamp or a partition
        outside the topic; TypeError for a key or value that is not bytes after
        ``key.serializer``/``value.serializer``; ProducerClosedError after close.
        """
        if self._sender_task is None or self._closing:
            self._ensure_started()
        return self._bulk.send(
            self._create_future(), topic, values, keys, headers, timestamps, partition, callback
        )

    def send_arrow(
        self,
        topic: str,
        data: Any,
        value: str = "value",
        key: str | None = None,
        timestamp: str | None = None,
        *,
        partition: int | None = None,
        callback: SendCallback | None = None,
    ) -> asyncio.Future[SendManyResult]:
        """:meth:`send_many` of the rows of a ``pyarrow.Table`` or ``RecordBatch``: the
        ``value`` column (binary or string), optionally ``key`` and ``timestamp`` (integer ms
        or an Arrow timestamp) columns, as bytes (no serializer applies); a bad column raises
        before anything is queued."""
        values, keys, stamps = arrow_columns(data, value=value, key=key, timestamp=timestamp)
        if self._sender_task is None or self._closing:
            self._ensure_started()
        return self._bulk.send(
            self._create_future(), topic, values, keys, None, stamps, partition, callback,
            serialize=False,
        )  # fmt: skip


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
