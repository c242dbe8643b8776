"""The sender: what leaves the accumulator, when, to which broker, and how each batch ends
(rules 2-5 of :mod:`client.producer`).

One :class:`Sender` task per producer loops: expire what is past its deadline, drain every
broker that leads a partition with a sendable batch into one ProduceRequest (one batch per
partition, up to ``max.request.size``) on that broker's :class:`BrokerConnection`, then sleep
until woken (a new or full batch, an answer, metadata, a producer id) or until the next
linger, backoff or deadline is due; a new batch that can only linger does not wake it but
brings its alarm forward (:mod:`client.sender_sleep`). Answers come back through the
:class:`~client.producer_connection.ConnectionListener` methods: a batch succeeds, is retried
at its place in the queue (:class:`BatchRetryPolicy`: ``retries``, ``retry.backoff.ms``, the
batch's deadline) or fails, and every batch is finished exactly once (:meth:`Sender.finish`).

The idempotent producer's state lives here too: the producer id (InitProducerId), each
batch's sequence numbers (given when it is first drained, kept on every retry), what an
answer for a later sequence says about earlier ones, and the producer id reset after a batch
with a sequence failed. A transactional producer's ids come from its
:class:`~client.transaction_manager.TransactionManager` instead: each round first sends the
manager's next request (:mod:`client.transaction_sender`; no produce data leaves while one is
in flight), a batch leaves only for a partition the transaction has added, carries the
transactional bit, and a failed one goes to the manager (the transaction must abort).

Not thread-safe: the producer's event loop owns it.

(One module, ~660 lines: the send loop, the idempotent producer id and the transactional
requests share the in-flight state and the per-partition sequences; the retry policy already
lives in ``client.batch_retry`` and the transactional wire calls in ``client.transaction_sender``.)
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools

from kafkasim import proto
from kafkasim.client.accumulator import (
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    PartitionState,
    ProducerBatch,
    RecordAccumulator,
)
from kafkasim.client.batch_retry import BatchRetryPolicy, delivery_timeout
from kafkasim.client.metadata import ClusterMetadata
from kafkasim.client.network import INVALID_METADATA_CODES
from kafkasim.client.producer_config import NEVER_MS, ProducerConfig
from kafkasim.client.producer_connection import BrokerConnection, InFlightRequest
from kafkasim.client.producer_errors import (
    TransactionError,
    log_task_error,
    logger,
    retriable,
)
from kafkasim.client.producer_metadata import MetadataRefresher
from kafkasim.client.sender_sleep import SenderSleep, lingers
from kafkasim.client.transaction_manager import TransactionManager
from kafkasim.client.transaction_sender import TransactionalSender
from kafkasim.common.clock import Clock
from kafkasim.common.errors import (
    DuplicateSequenceNumberError,
    KafkaError,
    NetworkExceptionError,
    OutOfOrderSequenceNumberError,
    error_for_code,
)
from kafkasim.common.rpc import ClientTransport, RpcError, RpcStatus
from kafkasim.common.types import TopicPartition
from kafkasim.common.waits import Wakeup
from kafkasim.proto import kafkasim_pb2 as pb

__all__ = ["Sender"]

_OUT_OF_ORDER_SEQUENCE = OutOfOrderSequenceNumberError.code
_DUPLICATE_SEQUENCE = DuplicateSequenceNumberError.code


class Sender:
    """The producer's one background loop (:meth:`run`) and everything it owns: the broker
    connections, the metadata refresher, the producer id and sequences, the counters.

    The producer tells it about its life: :meth:`initiate_close` (send what is left, then
    :meth:`run` returns), :meth:`force_close` (fail what is left), :meth:`request_metadata`
    (a record waits for its topic). ``wakeup`` is the flag :meth:`run` sleeps on; the
    accumulator and the producer set it when there may be something to do.
    """

    def __init__(
        self,
        config: ProducerConfig,
        *,
        transport: ClientTransport,
        clock: Clock,
        accumulator: RecordAccumulator,
        metadata: ClusterMetadata,
        wakeup: Wakeup,
        transaction_manager: TransactionManager | None = None,
    ) -> None:
        self._config = config
        self._transport = transport
        self._clock = clock
        self._client_id = config.client_id
        self._request_timeout_ms = config.request_timeout_ms
        self._accumulator = accumulator
        self._metadata = metadata
        self._wakeup = wakeup
        self._sleep = SenderSleep(wakeup)
        accumulator.new_batch_opened = self._new_batch_opened
        self._acks = config.acks
        self._idempotent = config.idempotence
        self._guarantee_order = not config.idempotence and config.max_in_flight == 1
        self._retry_policy = BatchRetryPolicy(config.retries, config.retry_backoff_ms, clock)
        self.refresher = MetadataRefresher(
            metadata,
            config,
            transport=transport,
            clock=clock,
            waiting=accumulator.waiting,
            on_update=accumulator.release_waiting,
            wake=wakeup.set,
            stopped=lambda: self.forced,
        )
        self.connections: dict[int, BrokerConnection] = {}
        self._drain_start: dict[int, int] = {}
        self._correlation_ids = itertools.count(1)
        self._producer_id_task: asyncio.Task[None] | None = None
        self.producer_id = NO_PRODUCER_ID
        self.producer_epoch = NO_PRODUCER_EPOCH
        self._reset_pending = False
        # Partitions whose failed batch was already warned about (one warning per partition
        # until one of its batches succeeds, not one per batch: a rejected topic has many).
        self._failure_warned: set[TopicPartition] = set()
        self.fatal: BaseException | None = None  # every later record fails with it
        self.closing = False
        self.forced = False
        # Counters (tests and benchmarks read them through the producer).
        self.requests_sent = 0
        self.batches_sent = 0
        self.records_sent = 0
        self.rounds = 0  # times run() looked for work (each wake-up of the loop)
        self.retries = 0
        self.producer_id_resets = 0
        # The transactional producer's half (client.transaction_sender), None without one.
        self._txn = transaction_manager
        self.transactions = (
            None
            if transaction_manager is None
            else TransactionalSender(
                transaction_manager,
                transport=transport,
                call_any_broker=self.refresher.call_any_broker,
                request_timeout_ms=config.request_timeout_ms,
                wake=wakeup.set,
                client_id=config.client_id,
            )
        )
        self._transactional_id = config.transactional_id or ""

    # -- the producer's life -----------------------------------------------------------------------

    def initiate_close(self) -> None:
        """Every batch is sendable from now on; :meth:`run` returns once all are finished."""
        self.closing = True

    def force_close(self, error: BaseException) -> None:
        """Fail every record still buffered or in flight with ``error``; no more retries."""
        self.forced = True
        if self._txn is not None:
            self._txn.close()
            assert self.transactions is not None
            self.transactions.progress.set()
        self.fail_everything(error)

    def request_metadata(self) -> None:
        self.refresher.request()

    async def wait_idle(self) -> None:
        """Until no connection has a request queued or unanswered (acks=0 requests: until the
        brokers have taken what was written)."""
        await asyncio.gather(*(c.wait_idle() for c in self.connections.values()))

    def background_tasks(self) -> list[asyncio.Task[None] | None]:
        """The tasks besides :meth:`run` that the producer stops when it closes."""
        transactional = self.transactions.task if self.transactions is not None else None
        return [self.refresher.task, self._producer_id_task, transactional]

    async def close_connections(self) -> None:
        connections, self.connections = self.connections, {}
        for connection in connections.values():
            await connection.close()

    # -- the sender loop ---------------------------------------------------------------------------

    async def run(self) -> None:
        """Expire, drain, send; sleep until woken (a new or full batch, an answer, metadata,
        a producer id) or until the next batch's linger, backoff or deadline is due."""
        wakeup = self._wakeup
        accumulator = self._accumulator
        try:
            while True:
                self.rounds += 1
                wakeup.clear()
                now_ms = self._clock.monotonic_ms()
                next_ms = self._expire(now_ms)
                if (
                    self.closing
                    and not accumulator.incomplete
                    and not accumulator.waiting
                    and (self.transactions is None or self.transactions.may_close(self.forced))
                ):
                    break
                next_ms = min(
                    next_ms, self._send_ready(now_ms), self.refresher.maybe_refresh(now_ms)
                )
                # At least 1 ms: a timer due "now" must not spin the loop (on the simulation's
                # virtual clock a spinning task would stop time).
                timeout_s = None if next_ms >= NEVER_MS else max(next_ms, 1) / 1000
                await self._sleep.sleep(timeout_s)
        except asyncio.CancelledError:
            raise
        except Exception as e:  # a bug: fail every record rather than leave futures hanging
            logger.exception("%s: the sender failed", self._client_id)
            self.fatal = e
            self.fail_everything(e)
            raise

    def _send_ready(self, now_ms: int) -> int:
        """Send what is sendable; ms until something may become sendable (NEVER_MS: no timer)."""
        if self._txn is not None:
            if self._transactional_round():
                return NEVER_MS  # the transactional request's answer wakes us
        elif self._idempotent and (self.producer_id < 0 or self._reset_pending):
            if self._reset_pending and any(c.pending for c in self.connections.values()):
                return NEVER_MS  # an answer wakes us
            self._ensure_producer_id()
            return NEVER_MS
        while True:
            # One request per ready broker per round, then ask again: a batch drained behind
            # a full one must itself be sendable (linger.ms) to go in the next request.
            ready, next_ms, leaderless = self._ready(now_ms)
            if leaderless:
                # No wake-up: this very loop asks maybe_refresh next. Waking ourselves here
                # would make the next wait return at once, forever, without ever yielding to
                # the refresh (a hang found by the simulation: kafkasim sim run leader-crash
                # --random-faults --seed 2).
                self.refresher.wanted = True
            sent = False
            for broker_id in ready:
                address = self._metadata.brokers[broker_id]
                connection = self._connection(broker_id, address)
                if connection.pending >= self._config.max_in_flight:
                    continue  # its next answer wakes us
                batches = self._drain(broker_id, now_ms)
                if batches:
                    self._send_batches(connection, batches)
                    sent = True
            if not sent:
                return next_ms

    # -- transactions (Kafka's Sender.runOnce before the produce data) ----------------------------

    def _transactional_round(self) -> bool:
        """Fail what a fatal error dooms, take the manager's producer id and epoch (their
        change restarts every partition's sequences), fail the batches not yet sent of a
        transaction that aborts, and send the next transactional request. True while one
        is in flight: no produce data leaves then (as Kafka's sender)."""
        tm, transactions = self._txn, self.transactions
        assert tm is not None and transactions is not None
        accumulator = self._accumulator
        if tm.has_fatal_error:
            if accumulator.incomplete or accumulator.waiting:
                error = tm.last_error or TransactionError("the producer is in a fatal error state")
                self.fail_everything(error, aborted=True)
            transactions.progress.set()
            return True
        auth_error = tm.maybe_recover_from_authorization_error()
        if auth_error is not None:
            self.fail_everything(auth_error, aborted=True)
            transactions.progress.set()
            return True
        pe = tm.producer_id_and_epoch
        if pe.producer_id != self.producer_id or pe.epoch != self.producer_epoch:
            had_id = self.producer_id >= 0
            self.producer_id, self.producer_epoch = pe.producer_id, pe.epoch
            if had_id and pe.is_valid:
                self._restart_sequences()  # KIP-360: sequences restart under the new epoch
        if tm.sequences_reset_required:
            tm.acknowledge_sequence_reset()
        if tm.has_in_flight_request:
            return True
        undrained_error = tm.undrained_batch_error()
        if undrained_error is not None:
            for batch in self._accumulator.take_unsequenced():
                self.finish(batch, error=undrained_error, aborted=True)
        has_incomplete = bool(accumulator.incomplete or accumulator.waiting)
        return transactions.maybe_send(has_incomplete_batches=has_incomplete)

    def _ready(self, now_ms: int) -> tuple[list[int], int, bool]:
        """Brokers leading a partition with a sendable batch (rule 1), the ms until another
        may be, and whether some partition has no known leader."""
        linger_ms = self._config.linger_ms
        hurry = (
            self._accumulator.flushes_in_progress > 0
            or self.closing
            or (self._txn is not None and self._txn.is_completing)
        )
        ready: dict[int, None] = {}
        next_ms = NEVER_MS
        leaderless = False
        for tp, state in self._accumulator.queued.items():
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

    def _may_drain(self, state: PartitionState) -> bool:
        """Rule 3: may the partition's oldest batch be sent now?"""
        if self._guarantee_order and state.in_flight:
            return False
        if self._txn is not None and not self._txn.is_send_to_partition_allowed(state.tp):
            return False  # AddPartitionsToTxn has not added it yet
        batch = state.batches[0]
        # A retried batch goes again only as the oldest unresolved one of its partition.
        return not (
            self._idempotent and batch.sequence_index >= 0 and state.unresolved[0] is not batch
        )

    def _drain(self, broker_id: int, now_ms: int) -> list[ProducerBatch]:
        """At most one batch per partition led by ``broker_id``, up to max.request.size."""
        queued = self._accumulator.queued
        candidates = [
            state for tp, state in queued.items() if self._metadata.leader(tp) == broker_id
        ]
        if not candidates:
            return []
        start = self._drain_start.get(broker_id, 0) % len(candidates)
        self._drain_start[broker_id] = start + 1
        drained: list[ProducerBatch] = []
        size = 0
        for state in candidates[start:] + candidates[:start]:
            if not state.batches or not self._may_drain(state):
                continue
            batch = state.batches[0]
            if batch.attempts and batch.retry_at_ms > now_ms:
                continue
            if drained and size + batch.size > self._config.max_request_size:
                break
            state.batches.popleft()
            if not state.batches:
                del queued[state.tp]
            if batch.data is None:
                batch.build()
                if self._idempotent:
                    batch.stamp(
                        self.producer_id,
                        self.producer_epoch,
                        state.next_sequence_index,
                        transactional=self._txn is not None,
                    )
                    state.next_sequence_index = batch.last_sequence_index + 1
                    state.unresolved.append(batch)
            size += len(batch.data or b"")
            drained.append(batch)
        return drained

    def _send_batches(self, connection: BrokerConnection, batches: list[ProducerBatch]) -> None:
        correlation_id = next(self._correlation_ids)
        request = pb.ProduceRequest(
            acks=self._acks,
            timeout_ms=self._request_timeout_ms,
            correlation_id=correlation_id,
            transactional_id=self._transactional_id,
        )
        partitions = self._accumulator.partitions
        for batch in batches:
            request.partitions.add(
                topic=batch.tp.topic, partition=batch.tp.partition, records=batch.data
            )
            batch.attempts += 1
            partitions[batch.tp].in_flight += 1
            self.records_sent += batch.record_count
        self.batches_sent += len(batches)
        self.requests_sent += 1
        connection.submit(InFlightRequest(correlation_id, request, batches))

    def _connection(self, broker_id: int, address: str) -> BrokerConnection:
        connection = self.connections.get(broker_id)
        if connection is not None and connection.address != address:
            # The broker moved: its old stream's requests fail and are retried.
            for request in connection.take_requests():
                moved = RpcError(RpcStatus.UNAVAILABLE, f"broker moved to {address}")
                self.on_request_failed(request, broker_id, moved)
            task = asyncio.get_running_loop().create_task(connection.close())
            task.add_done_callback(log_task_error)
            connection = None
        if connection is None:
            connection = self.connections[broker_id] = BrokerConnection(
                self,
                broker_id,
                address,
                transport=self._transport,
                clock=self._clock,
                client_id=self._client_id,
                request_timeout_ms=self._request_timeout_ms,
            )
        return connection

    # -- answers (ConnectionListener) --------------------------------------------------------------

    def on_sent_without_ack(self, request: InFlightRequest) -> None:
        """acks=0: a record is done once written to the stream (offset -1, as Kafka)."""
        for batch in request.batches:
            self._accumulator.partitions[batch.tp].in_flight -= 1
            self.finish(batch, base_offset=-1, log_append_time_ms=-1)
        self._wakeup.set()

    def _needs_round(self) -> bool:
        """Whether the sender has work besides its timers (a close, a flush, a transaction,
        records waiting for metadata, a producer id to get): then no wake-up is deferred."""
        accumulator = self._accumulator
        return bool(
            self._txn is not None
            or self.closing
            or accumulator.flushes_in_progress
            or accumulator.waiting
            or self._reset_pending
            or (self._idempotent and self.producer_id < 0)
            or self.refresher.wanted
        )

    def _new_batch_opened(self, state: PartitionState, batch: ProducerBatch) -> None:
        linger_ms = self._config.linger_ms
        if self._needs_round() or not lingers(state, batch, linger_ms, self._metadata):
            self._wakeup.set()
        else:
            self._sleep.wake_by(linger_ms / 1000)

    def on_response(self, request: InFlightRequest, response: pb.ProduceResponse) -> None:
        results = {(p.topic, p.partition): p for p in response.partitions}
        for batch in request.batches:
            state = self._accumulator.partitions[batch.tp]
            state.in_flight -= 1
            result = results.get((batch.tp.topic, batch.tp.partition))
            if result is None:
                self._on_batch_error(batch, NetworkExceptionError("no answer for the partition"))
            elif result.error_code == 0:
                self._on_batch_success(state, batch, result.base_offset, result.log_append_time_ms)
            elif result.error_code == _DUPLICATE_SEQUENCE:
                # Written before, beyond what the broker remembers: success, offset unknown.
                self._on_batch_success(state, batch, -1, -1)
            else:
                error = error_for_code(result.error_code)(result.error_message)
                if result.error_code in INVALID_METADATA_CODES:
                    self.refresher.request()
                self._on_batch_error(batch, error)
        self._wakeup.set()

    def on_request_failed(self, request: InFlightRequest, broker_id: int, cause: RpcError) -> None:
        """The request's stream broke or timed out: every batch may be retried. Users see
        Kafka's NETWORK_EXCEPTION ("Disconnected from node N"), the transport error chained."""
        error = NetworkExceptionError(f"Disconnected from node {broker_id}: {cause}")
        error.__cause__ = cause
        for batch in request.batches:
            self._accumulator.partitions[batch.tp].in_flight -= 1
            self._on_batch_error(batch, error)
        self.refresher.request()
        self._wakeup.set()

    def _on_batch_success(
        self, state: PartitionState, batch: ProducerBatch, base_offset: int, append_ms: int
    ) -> None:
        if batch.sequence_index >= 0 and batch.producer_id == self.producer_id:
            state.last_acked_index = max(state.last_acked_index, batch.last_sequence_index)
        self.finish(batch, base_offset=base_offset, log_append_time_ms=append_ms)

    def _on_batch_error(self, batch: ProducerBatch, error: BaseException) -> None:
        """Retry (rules 3-5) or fail a batch whose attempt failed."""
        if batch.finished:
            return  # expired while in flight: already failed
        batch.last_error = error
        state = self._accumulator.partitions[batch.tp]
        stamped = batch.sequence_index >= 0 and batch.producer_id == self.producer_id
        if stamped and batch.last_sequence_index <= state.last_acked_index:
            # A later batch was acknowledged, so this one was appended (rule 4).
            self.finish(batch, base_offset=-1, log_append_time_ms=-1)
            return
        may_retry = retriable(error)
        if isinstance(error, KafkaError) and error.code == _OUT_OF_ORDER_SEQUENCE:
            # Final for the partition's oldest unresolved batch (the broker should have taken
            # it); a younger one only came before an older one that is still on its way.
            may_retry = stamped and state.unresolved[0] is not batch
        backoff_ms = self._retry_policy.backoff_ms(batch) if may_retry else None
        if backoff_ms is None or self.forced:
            now_ms = self._clock.monotonic_ms()
            if may_retry and now_ms >= batch.deadline_ms:
                error = delivery_timeout(batch, now_ms, error)
            self.finish(batch, error=error)
            return
        self.retries += 1
        batch.retry_at_ms = self._clock.monotonic_ms() + backoff_ms
        logger.debug(
            "%s: retrying %s (attempt %d) after %d ms: %s",
            self._client_id,
            batch.tp,
            batch.attempts + 1,
            backoff_ms,
            error,
        )
        state.reenqueue(batch)
        self._accumulator.queued[batch.tp] = state

    def finish(
        self,
        batch: ProducerBatch,
        *,
        base_offset: int = -1,
        log_append_time_ms: int = -1,
        error: BaseException | None = None,
        aborted: bool = False,
    ) -> None:
        """Resolve a batch's futures, exactly once. ``aborted``: failed by its transaction's
        abort or the producer's fatal error, which the transaction manager knows already."""
        if batch.finished:
            return
        batch.finished = True
        state = self._accumulator.partitions[batch.tp]
        if batch.sequence_index >= 0:
            with contextlib.suppress(ValueError):
                state.unresolved.remove(batch)
        if error is None:
            batch.complete(base_offset, log_append_time_ms)
            self._failure_warned.discard(batch.tp)
        else:
            batch.fail(error)
            if self._txn is not None:
                if not (aborted or self.forced):
                    # Kafka's handleFailedBatch: the transaction must abort (or is fenced).
                    self._txn.handle_failed_batch(batch.tp, error)
            elif self._idempotent and batch.sequence_index >= 0 and not self.forced:
                # Its sequences may never reach the broker: a gap nothing can fill (rule 5).
                log = logger.debug if batch.tp in self._failure_warned else logger.warning
                self._failure_warned.add(batch.tp)
                log(
                    "%s: %s failed with sequence %d (%s); the producer id will be reset",
                    self._client_id,
                    batch.tp,
                    batch.base_sequence,
                    error,
                )
                self._reset_pending = True
        self._accumulator.incomplete.pop(batch, None)
        if not batch.done.done():
            batch.done.set_result(None)

    # -- expiry ------------------------------------------------------------------------------------

    def _expire(self, now_ms: int) -> int:
        """Fail batches and waiting records past their deadline; ms until the next deadline."""
        next_ms = self._accumulator.expire_waiting(now_ms)
        queued = self._accumulator.queued
        for tp in list(queued):
            state = queued[tp]
            while state.batches and state.batches[0].deadline_ms <= now_ms:
                self._expire_batch(state.batches.popleft(), now_ms)
            if state.batches:
                next_ms = min(next_ms, state.batches[0].deadline_ms - now_ms)
            else:
                del queued[tp]
        for connection in self.connections.values():
            for request in connection.requests():
                for batch in request.batches:
                    if batch.finished:
                        continue
                    if batch.deadline_ms <= now_ms:
                        self._expire_batch(batch, now_ms)
                    else:
                        next_ms = min(next_ms, batch.deadline_ms - now_ms)
        return max(next_ms, 0)

    def _expire_batch(self, batch: ProducerBatch, now_ms: int) -> None:
        self.finish(batch, error=delivery_timeout(batch, now_ms, batch.last_error))

    def fail_everything(self, error: BaseException, *, aborted: bool = False) -> None:
        accumulator = self._accumulator
        accumulator.fail_waiting(error)
        for batch in list(accumulator.incomplete):
            self.finish(batch, error=error, aborted=aborted)
        for state in accumulator.queued.values():
            state.batches.clear()
        accumulator.queued.clear()

    # -- producer id -------------------------------------------------------------------------------

    def _ensure_producer_id(self) -> None:
        if self._producer_id_task is None or self._producer_id_task.done():
            self._producer_id_task = asyncio.get_running_loop().create_task(
                self._init_producer_id(), name=f"{self._client_id}-init-producer-id"
            )
            self._producer_id_task.add_done_callback(log_task_error)

    async def _init_producer_id(self) -> None:
        """Rule 4 (and the reset of rule 5): a new producer id from any broker."""
        request = pb.InitProducerIdRequest()
        response = pb.InitProducerIdResponse()
        try:
            async for attempt in self.refresher.retrying():
                with attempt:
                    answer = await self.refresher.call_any_broker(
                        proto.METHOD_INIT_PRODUCER_ID, request
                    )
                    assert isinstance(answer, pb.InitProducerIdResponse)
                    if answer.error_code:
                        raise error_for_code(answer.error_code)("InitProducerId")
                    response = answer
        except (RpcError, KafkaError) as e:
            if self.forced:
                return
            logger.error("%s: no producer id: %s", self._client_id, e)
            self.fatal = e
            self.fail_everything(e)
            self._wakeup.set()
            return
        was_reset = self._reset_pending
        self.producer_id, self.producer_epoch = response.producer_id, response.producer_epoch
        if was_reset:
            self._restart_sequences()
        logger.info(
            "%s: producer id %d, epoch %d", self._client_id, self.producer_id, self.producer_epoch
        )
        self._wakeup.set()

    def _restart_sequences(self) -> None:
        """Rule 5: under the new producer id every partition starts again at sequence 0;
        batches waiting for a retry are renumbered in order (nothing is in flight)."""
        self._reset_pending = False
        self.producer_id_resets += 1
        for state in self._accumulator.partitions.values():
            state.next_sequence_index = 0
            state.last_acked_index = -1
            for batch in state.unresolved:
                batch.stamp(self.producer_id, self.producer_epoch, state.next_sequence_index)
                state.next_sequence_index = batch.last_sequence_index + 1
            state.sanity_check()
