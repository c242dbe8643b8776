"""The transaction coordinator of a broker (Kafka's ``TransactionCoordinator``), over the domain
values of ``node.txn_types``.

Its parts:

* ``node.txn_decisions`` — what each request decides (pure);
* ``node.txn_state_manager`` — which ``__transaction_state`` partition holds an id, the
  partitions this broker leads and has loaded (with their coordinator epochs), the writes;
* ``node.txn_markers`` — the markers of a decided transaction and its Complete state;
* this module — the entry points, the lifecycle (``elect``/``resign``, the timers).

Every entry point follows the same steps: check that this broker coordinates the id now
(NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS; a request malformed in itself is refused
first, as Kafka's checks come in that order); under the id's lock, take its cached metadata
and call the pure decision; if the decision says to, write the transit to the id's partition
(acks=all) outside the lock; then, if this broker still coordinates the id at the same
coordinator epoch with the same metadata, complete the transition (or undo the pending one on
a failed write, ``txn_decisions.on_append_failed``) and answer. A write after which the epoch
changed answers NOT_COORDINATOR and touches nothing: the next coordinator reads the log.

EndTxn (commit or abort) writes PrepareCommit or PrepareAbort, answers the client, and leaves
the markers and the Complete state to a background task (``node.txn_markers``). An
InitProducerId that finds a transaction open fences its producer, aborts it the same way and
answers CONCURRENT_TRANSACTIONS (the client retries). Loading a partition (``elect``) resends
the markers of every transaction its log left in PrepareCommit or PrepareAbort.

Timers (the broker's event loop, times from the injected clock, sleeps through asyncio so
that the simulation's virtual-time loop drives them):
``transaction.abort.timed.out.transaction.cleanup.interval.ms`` — abort every Ongoing
transaction past its timeout, at a bumped epoch (the producer is then fenced);
``transaction.remove.expired.transaction.cleanup.interval.ms`` — write tombstones for ids idle
for ``transactional.id.expiration.ms`` and forget them. Every broker has a coordinator, but
the timers run only while it has loaded at least one ``__transaction_state`` partition (they
start with the first load and stop when the last partition is resigned): with nothing to
abort or expire a timer would only wake the loop, and in the simulation each wake-up is an
event of the virtual-time schedule — a cluster that never uses transactions keeps the exact
schedule (and so the recorded verdicts) it had before brokers got a coordinator. Kafka's
scheduler runs them from startup; the difference shows only in when the first round runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Coroutine, Set
from typing import Any

from kafkasim.common.clock import Clock
from kafkasim.common.coordination import CoordinationError
from kafkasim.common.errors import KafkaError, error_for_name
from kafkasim.node import txn_decisions as decide
from kafkasim.node.config import BrokerConfig
from kafkasim.node.group_types import Error
from kafkasim.node.txn_loader import pending_completions
from kafkasim.node.txn_log import record_for
from kafkasim.node.txn_markers import MarkerSender, PartitionLeaders, TxnMarkerChannel
from kafkasim.node.txn_metadata import TransactionMetadata, TransactionState
from kafkasim.node.txn_state_manager import (
    NOT_COORDINATOR,
    TransactionLogTopic,
    TransactionStateManager,
)
from kafkasim.node.txn_types import (
    AddOffsetsToTxnParams,
    AddPartitionsToTxnParams,
    EndTxnParams,
    InitProducerIdParams,
    InitProducerIdResult,
    ListedTxn,
    TxnAbortThenRetry,
    TxnAppend,
    TxnDecision,
    TxnDescription,
    TxnListing,
    TxnNeedsProducerId,
    TxnReply,
)

logger = logging.getLogger(__name__)

# Between two rounds of markers that could not all be written (Kafka's send thread retries
# on its next poll; the client's retry.backoff.ms default).
MARKER_RETRY_BACKOFF_MS = 100

CONCURRENT_TRANSACTIONS = error_for_name("CONCURRENT_TRANSACTIONS")
COORDINATOR_LOAD_IN_PROGRESS = error_for_name("COORDINATOR_LOAD_IN_PROGRESS")
COORDINATOR_NOT_AVAILABLE = error_for_name("COORDINATOR_NOT_AVAILABLE")
TRANSACTIONAL_ID_NOT_FOUND = error_for_name("TRANSACTIONAL_ID_NOT_FOUND")

ProducerIdSource = Callable[[], Awaitable[int]]
"""A fresh producer id (``node.producer_ids.ProducerIdManager.generate_producer_id``)."""


class TransactionCoordinator:
    """See the module doc. ``offsets_partitions`` gives ``__consumer_offsets``' partition
    count (AddOffsetsToTxn names the group's partition)."""

    def __init__(
        self,
        broker_id: int,
        config: BrokerConfig,
        *,
        log_topic: TransactionLogTopic,
        producer_ids: ProducerIdSource,
        marker_sender: MarkerSender,
        leaders: PartitionLeaders,
        offsets_partitions: Callable[[], int],
        clock: Clock,
        marker_retry_backoff_ms: int = MARKER_RETRY_BACKOFF_MS,
    ) -> None:
        self.broker_id = broker_id
        self._clock = clock
        self._producer_ids = producer_ids
        self._offsets_partitions = offsets_partitions
        self._max_timeout_ms: int = config["transaction.max.timeout.ms"]
        self._expiration_ms: int = config["transactional.id.expiration.ms"]
        self._abort_interval_ms: int = config[
            "transaction.abort.timed.out.transaction.cleanup.interval.ms"
        ]
        self._expire_interval_ms: int = config[
            "transaction.remove.expired.transaction.cleanup.interval.ms"
        ]
        self.manager = TransactionStateManager(broker_id, config, log_topic, clock)
        self.markers = TxnMarkerChannel(
            self.manager, marker_sender, leaders, marker_retry_backoff_ms
        )
        self._timers: list[asyncio.Task[None]] = []
        self._started = False
        self._background: set[asyncio.Task[Any]] = set()

    # -- lifecycle ------------------------------------------------------------------------

    def start(self) -> None:
        """Serve from now on; the timers start with the first loaded partition."""
        self._started = True
        self._maybe_start_timers()

    def _maybe_start_timers(self) -> None:
        if self._timers or not self._started or not self.manager.caches:
            return
        loop = asyncio.get_running_loop()
        self._timers = [
            loop.create_task(
                self._every(self._abort_interval_ms, self.abort_timed_out_transactions),
                name=f"broker-{self.broker_id}-txn-timeouts",
            ),
            loop.create_task(
                self._every(self._expire_interval_ms, self.expire_transactional_ids),
                name=f"broker-{self.broker_id}-txn-expiration",
            ),
        ]

    async def stop(self) -> None:
        """Stop the timers and every load and marker task; forget every partition."""
        self._started = False
        tasks = [*self._timers, *self._background]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._timers = []
        self._background.clear()
        self.manager.resign_all()

    async def _every(self, interval_ms: int, job: Callable[[], Awaitable[None]]) -> None:
        while True:
            await asyncio.sleep(interval_ms / 1000)
            try:
                await job()
            except Exception:
                logger.exception("broker %d: transaction timer %s failed", self.broker_id, job)

    def _spawn(self, coro: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        task = asyncio.get_running_loop().create_task(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        return task

    # -- leadership of __transaction_state ------------------------------------------------

    @property
    def partition_count(self) -> int:
        return self.manager.partition_count

    def set_partition_count(self, count: int) -> None:
        self.manager.set_partition_count(count)

    def partition_for(self, transactional_id: str) -> int:
        """The ``__transaction_state`` partition whose leader coordinates the id."""
        return self.manager.partition_for(transactional_id)

    def elect(self, partition: int, coordinator_epoch: int) -> asyncio.Task[None] | None:
        """This broker now leads ``partition`` at leader epoch ``coordinator_epoch``: load it
        in the background, then finish the transactions its log left decided. None when it
        is already loaded or loading at that epoch."""
        loaded = self.manager.caches.get(partition)
        if self.manager.loading.get(partition) == coordinator_epoch or (
            loaded is not None and loaded.coordinator_epoch == coordinator_epoch
        ):
            return None
        self.manager.begin_load(partition, coordinator_epoch)
        return self._spawn(self._load(partition, coordinator_epoch))

    async def _load(self, partition: int, coordinator_epoch: int) -> None:
        cache = await self.manager.load(partition, coordinator_epoch)
        if cache is None:
            return
        self._maybe_start_timers()
        now = self._clock.time_ms()
        for transactional_id, metadata in list(cache.metadata.items()):
            for send in pending_completions({transactional_id: metadata}, now):
                logger.info(
                    "broker %d: resending %s markers of transactional id %s",
                    self.broker_id,
                    send.result.value,
                    transactional_id,
                )
                self._spawn(
                    self.markers.complete(transactional_id, coordinator_epoch, metadata, send)
                )

    def resign(self, partition: int, coordinator_epoch: int | None = None) -> None:
        """No longer the leader of ``partition``: forget its ids; their marker tasks stop. The
        last partition gone, the timers stop (see the module doc)."""
        self.manager.resign(partition, coordinator_epoch)
        if not self.manager.caches:
            for timer in self._timers:
                timer.cancel()
            self._timers = []

    # -- the requests ---------------------------------------------------------------------

    async def init_producer_id(self, params: InitProducerIdParams) -> InitProducerIdResult:
        tid = params.transactional_id
        now = self._clock.time_ms()
        refused = decide.init_producer_id(None, params, self._max_timeout_ms, now)
        if isinstance(refused, TxnReply):
            return InitProducerIdResult(refused.error)
        error = self.manager.check(tid)
        if error is not None:
            return InitProducerIdResult(error)
        async with self.manager.lock(tid):
            epoch = self.manager.coordinator_epoch(tid)
            if epoch is None:
                return InitProducerIdResult(self.manager.check(tid) or NOT_COORDINATOR)
            metadata = self.manager.metadata(tid)
            decision = decide.init_producer_id(metadata, params, self._max_timeout_ms, now)
            if isinstance(decision, TxnNeedsProducerId):
                try:
                    producer_id = await self._producer_ids()
                except (CoordinationError, KafkaError) as e:
                    # As the idempotent path (node.apis_cluster): a retriable answer.
                    logger.warning("broker %d: no producer id: %s", self.broker_id, e)
                    return InitProducerIdResult(COORDINATOR_LOAD_IN_PROGRESS)
                if self.manager.coordinator_epoch(tid) != epoch:
                    return InitProducerIdResult(self.manager.check(tid) or NOT_COORDINATOR)
                now = self._clock.time_ms()
                if metadata is None:
                    metadata = self.manager.put_if_absent(
                        decide.new_transaction_metadata(
                            tid, producer_id, params.transaction_timeout_ms, now
                        )
                    )
                    decision = decide.init_producer_id(metadata, params, self._max_timeout_ms, now)
                else:
                    decision = decide.init_producer_id(
                        metadata, params, self._max_timeout_ms, now, fresh_producer_id=producer_id
                    )
        if isinstance(decision, TxnReply):
            return InitProducerIdResult(decision.error)
        if isinstance(decision, TxnNeedsProducerId) or metadata is None:
            raise AssertionError(f"transactional id {tid}: no producer id after allocating one")
        if isinstance(decision, TxnAbortThenRetry):
            error = await self._write(tid, epoch, metadata, decision.append)
            if error is None:
                self._send_markers(tid, epoch, metadata, decision.append)
            return InitProducerIdResult(error or CONCURRENT_TRANSACTIONS)
        error = await self._write(tid, epoch, metadata, decision)
        if error is not None:
            return InitProducerIdResult(error)
        transit = decision.transit
        return InitProducerIdResult(None, transit.producer_id, transit.producer_epoch)

    async def add_partitions_to_txn(self, params: AddPartitionsToTxnParams) -> Error:
        """AddPartitionsToTxn: the one error every partition of the request is answered."""
        now = self._clock.time_ms()
        return await self._decide_and_write(
            params.transactional_id,
            lambda metadata: decide.add_partitions_to_txn(metadata, params, now),
        )

    async def add_offsets_to_txn(self, params: AddOffsetsToTxnParams) -> Error:
        now = self._clock.time_ms()
        partitions = self._offsets_partitions()
        return await self._decide_and_write(
            params.transactional_id,
            lambda metadata: decide.add_offsets_to_txn(metadata, params, partitions, now),
        )

    async def end_txn(self, params: EndTxnParams) -> Error:
        """EndTxn: PrepareCommit / PrepareAbort written, then the client is answered while
        the markers go out in the background."""
        now = self._clock.time_ms()
        return await self._decide_and_write(
            params.transactional_id,
            lambda metadata: decide.end_txn(metadata, params, now),
            then_markers=True,
        )

    async def _decide_and_write(
        self,
        tid: str,
        decision_for: Callable[[TransactionMetadata | None], TxnDecision],
        *,
        then_markers: bool = False,
    ) -> Error:
        if not tid:
            return decide.INVALID_REQUEST
        error = self.manager.check(tid)
        if error is not None:
            return error
        async with self.manager.lock(tid):
            epoch = self.manager.coordinator_epoch(tid)
            if epoch is None:
                return self.manager.check(tid) or NOT_COORDINATOR
            metadata = self.manager.metadata(tid)
            decision = decision_for(metadata)
        if isinstance(decision, TxnReply):
            return decision.error
        if metadata is None:
            raise AssertionError(f"transactional id {tid}: a write decided without metadata")
        error = await self._write(tid, epoch, metadata, decision)
        if error is None and then_markers:
            return self._send_markers(tid, epoch, metadata, decision)
        return error

    async def _write(
        self, tid: str, epoch: int, metadata: TransactionMetadata, append: TxnAppend
    ) -> Error:
        """Write ``append``'s transit and complete it; None or the error to answer."""
        partition = self.manager.partition_for(tid)
        error = await self.manager.write(partition, [record_for(tid, append.transit)])
        if self.manager.metadata_at(tid, epoch) is not metadata:
            logger.info(
                "broker %d: transactional id %s changed coordinator during its write of %s",
                self.broker_id,
                tid,
                append.transit.txn_state.value,
            )
            return self.manager.check(tid) or NOT_COORDINATOR
        if error is not None:
            return decide.on_append_failed(metadata, append, error)
        metadata.complete_transition_to(append.transit)
        return None

    def _send_markers(
        self, tid: str, epoch: int, metadata: TransactionMetadata, written: TxnAppend
    ) -> Error:
        """The PrepareCommit / PrepareAbort of ``written`` is in: start its markers; the
        error to answer the client (None: the transaction is decided)."""
        after = decide.markers_after_prepare(metadata, written.transit, self._clock.time_ms())
        if isinstance(after, TxnReply):
            return after.error
        self._spawn(self.markers.complete(tid, epoch, metadata, after))
        return None

    # -- DescribeTransactions, ListTransactions ------------------------------------------

    def describe_transaction(self, tid: str) -> TxnDescription:
        """One id as DescribeTransactions shows it (Kafka's ``handleDescribeTransactions``):
        COORDINATOR_NOT_AVAILABLE before the broker serves, INVALID_REQUEST for an empty id,
        NOT_COORDINATOR / COORDINATOR_LOAD_IN_PROGRESS as every request, and
        TRANSACTIONAL_ID_NOT_FOUND for an id this coordinator does not know (or is expiring:
        Dead)."""
        if not self._started:
            return TxnDescription(tid, COORDINATOR_NOT_AVAILABLE)
        if not tid:
            return TxnDescription(tid, decide.INVALID_REQUEST)
        error = self.manager.check(tid)
        if error is not None:
            return TxnDescription(tid, error)
        metadata = self.manager.metadata(tid)
        if metadata is None or metadata.state is TransactionState.DEAD:
            return TxnDescription(tid, TRANSACTIONAL_ID_NOT_FOUND)
        return TxnDescription(
            tid,
            None,
            metadata.state.value,
            metadata.producer_id,
            metadata.producer_epoch,
            metadata.txn_timeout_ms,
            metadata.txn_start_timestamp,
            tuple(sorted(metadata.topic_partitions)),
        )

    def list_transactions(
        self, producer_ids: Set[int], state_names: Set[str], duration_ms: int = -1
    ) -> TxnListing:
        """The ids of every loaded partition passing the filters (Kafka's
        ``listTransactionStates``): an empty filter passes everything; ``duration_ms`` ≥ 0
        keeps only transactions open longer than it; Dead ids are never listed. Answered
        COORDINATOR_LOAD_IN_PROGRESS while any partition loads (a partial list would miss
        its ids); a broker that loads none answers an empty list."""
        if not self._started:
            return TxnListing(COORDINATOR_NOT_AVAILABLE)
        if self.manager.loading:
            return TxnListing(COORDINATOR_LOAD_IN_PROGRESS)
        states = {name: TransactionState.from_name(name) for name in sorted(state_names)}
        unknown = tuple(name for name, state in states.items() if state is None)
        wanted = {state for state in states.values() if state is not None}
        now = self._clock.time_ms()
        listed = [
            ListedTxn(m.transactional_id, m.producer_id, m.state.value)
            for _, cache in sorted(self.manager.caches.items())
            for m in cache.metadata.values()
            if m.state is not TransactionState.DEAD
            and (not producer_ids or m.producer_id in producer_ids)
            and (not state_names or m.state in wanted)
            and (duration_ms < 0 or now - m.txn_start_timestamp > duration_ms)
        ]
        return TxnListing(None, unknown, tuple(listed))

    # -- timers ---------------------------------------------------------------------------

    async def abort_timed_out_transactions(self) -> None:
        """Abort every open transaction past its timeout (a fenced epoch; Kafka's
        ``abortTimedOutTransactions``)."""
        now = self._clock.time_ms()
        found = [
            (cache.coordinator_epoch, timed_out)
            for _, cache in sorted(self.manager.caches.items())
            for timed_out in decide.timed_out_transactions(cache.metadata.values(), now)
        ]
        for epoch, timed_out in found:
            tid = timed_out.transactional_id
            async with self.manager.lock(tid):
                metadata = self.manager.metadata_at(tid, epoch)
                if metadata is None:
                    continue
                append = decide.abort_timed_out(metadata, timed_out, now)
            if append is None:
                continue
            logger.info(
                "broker %d: aborting transaction of %s (producer id %d): timed out",
                self.broker_id,
                tid,
                timed_out.producer_id,
            )
            error = await self._write(tid, epoch, metadata, append)
            if error is None:
                self._send_markers(tid, epoch, metadata, append)
            else:
                logger.info(
                    "broker %d: could not abort %s's timed-out transaction: %s",
                    self.broker_id,
                    tid,
                    error.error_name,
                )

    async def expire_transactional_ids(self) -> None:
        """Tombstones for ids idle past ``transactional.id.expiration.ms``, one batch per
        partition; written ids leave the cache."""
        now = self._clock.time_ms()
        for partition, cache in sorted(self.manager.caches.items()):
            expired = decide.expire_transactional_ids(
                cache.metadata.values(), now, self._expiration_ms
            )
            if not expired:
                continue
            records = [record_for(m.transactional_id, transit) for m, transit in expired]
            error = await self.manager.write(partition, records)
            mapped = None if error is None else decide.write_error(error)
            for metadata, transit in expired:
                tid = metadata.transactional_id
                if self.manager.metadata_at(tid, cache.coordinator_epoch) is not metadata:
                    continue
                if decide.finish_expiration(metadata, transit, mapped):
                    self.manager.remove(tid, metadata)
            logger.info(
                "broker %d: %d transactional ids expired in partition %d%s",
                self.broker_id,
                len(expired),
                partition,
                "" if mapped is None else f" (not written: {mapped.error_name})",
            )
