"""The transactional producer's core (Kafka 3.7's ``TransactionManager``, transactional part):
the user's calls in, a queue of requests for the sender out, the answers back in. Pure: no IO,
no clock, no threads; the producer and its sender own all of that.

Theory of operation
-------------------
1. **Calls.** :meth:`TransactionManager.init_transactions`, :meth:`begin_transaction`,
   :meth:`maybe_add_partition` (from every ``send``), :meth:`send_offsets_to_transaction`,
   :meth:`commit_transaction` and :meth:`abort_transaction` check the state
   (:mod:`client.transaction_state`) and either raise or move it and queue requests. A call
   that waits returns a :class:`~client.transaction_types.TransactionalResult`; the producer
   waits on it and :meth:`~TransactionalResult.ack`\\ s it. Until then only the same call may
   be made again (it gets the same result back: a commit whose wait timed out is retried, not
   replaced by an abort), as Kafka since KAFKA-13412.
2. **The queue.** The sender drains :meth:`next_request` one request at a time (one
   transactional request in flight, :meth:`request_sent`), sends it to
   :meth:`coordinator` of its ``coordinator_type`` (any broker for FindCoordinator) after its
   ``send_delay_ms``, and hands the answer to :meth:`handle_response` (or
   :meth:`handle_disconnect`). Order by :class:`~client.transaction_types.Priority`:
   FindCoordinator(key_type=1) → InitProducerId(transactional id, transaction.timeout.ms) →
   per transaction AddPartitionsToTxn (before any batch of a new partition is sent:
   :meth:`is_send_to_partition_allowed`) and AddOffsetsToTxn → TxnOffsetCommit (to the
   group's coordinator) → EndTxn, which waits until no batch is incomplete. A coordinator
   that is unknown is looked up first (:meth:`retry_after_coordinator_lookup`).
3. **Empty transactions.** An EndTxn for a transaction that added no partition and no offsets
   is not sent: the transaction completes locally (the coordinator never heard of it).
4. **Errors** (:mod:`client.transaction_state`): retriable ones are retried, abortable ones
   put the producer in ABORTABLE_ERROR (only ``abort_transaction`` is then allowed), fatal
   ones in FATAL_ERROR, and every later call raises them again (PRODUCER_FENCED as a fresh
   ProducerFencedError naming the transactional id and epoch).
5. **Epoch bumps (KIP-360).** An abortable error of a produce request inside a transaction
   (UNKNOWN_PRODUCER_ID, OUT_OF_ORDER_SEQUENCE_NUMBER, ...), or UNKNOWN_PRODUCER_ID /
   INVALID_PRODUCER_ID_MAPPING from the coordinator, marks the epoch for a bump when the
   coordinator supports it (:meth:`coordinator_ready` with InitProducerId v3+). The abort then
   sends EndTxn(ABORT) and after it InitProducerId with the current producer id and epoch;
   the new epoch restarts every partition's sequences (:attr:`sequences_reset_required`).
   Kafka's shortcut that skips EndTxn after INVALID_PRODUCER_ID_MAPPING tests the last error
   after the transition to ABORTING_TRANSACTION has cleared it, so it never fires: EndTxn is
   always sent here too.
6. **Poisoning (KAFKA-14831).** An illegal transition asked for by the user raises
   :class:`IllegalTransactionStateError` and changes nothing; one caused by a response (the
   sender's side) also moves the producer to FATAL_ERROR with that error.

Not here: sequence numbers per partition (the sender's ``PartitionState``), the idempotent
producer's own producer id (``client.sender``), waiting and ``max.block.ms`` (the producer).
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping

from kafkasim.client.consumer_types import CommitFailedError
from kafkasim.client.producer_errors import (
    IllegalTransactionStateError,
    TransactionAbortedError,
    TransactionError,
)
from kafkasim.client.transaction_core import TransactionCore
from kafkasim.client.transaction_state import (
    ABORTABLE_WITH_BUMP_CODES,
    COORDINATOR_MOVED_CODES,
    FATAL_PRODUCE_ERRORS,
    FENCED_CODES,
    NO_ERROR,
    TxnState,
    error_of,
    is_retriable,
)
from kafkasim.client.transaction_types import (
    ADD_PARTITIONS_RETRY_BACKOFF_MS,
    NO_PRODUCER_ID_AND_EPOCH,
    AddOffsetsToTxnRequest,
    AddOffsetsToTxnResponse,
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
    ConsumerGroupMetadata,
    CoordinatorNode,
    CoordinatorType,
    EndTxnRequest,
    EndTxnResponse,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    InitProducerIdRequest,
    InitProducerIdResponse,
    OffsetAndMetadata,
    Priority,
    ProducerIdAndEpoch,
    TransactionalResult,
    TxnOffsetCommitRequest,
    TxnOffsetCommitResponse,
    TxnRequest,
    TxnResponseBody,
)
from kafkasim.common.errors import (
    ProducerFencedError,
    error_for_name,
)
from kafkasim.common.types import TopicPartition

__all__ = ["TransactionManager", "TxnState"]

_S = TxnState
# InitProducerId v3 is the first that carries the producer id and epoch (KIP-360).
_INIT_PRODUCER_ID_BUMP_VERSION = 3
_UNSUPPORTED_VERSION = error_for_name("UNSUPPORTED_VERSION")
_TXN_ID_AUTH = error_for_name("TRANSACTIONAL_ID_AUTHORIZATION_FAILED")
_CLUSTER_AUTH = error_for_name("CLUSTER_AUTHORIZATION_FAILED")
_GROUP_AUTH = error_for_name("GROUP_AUTHORIZATION_FAILED")
_TOPIC_AUTH = error_for_name("TOPIC_AUTHORIZATION_FAILED")
_INVALID_TXN_STATE = error_for_name("INVALID_TXN_STATE").code
_CONCURRENT_TRANSACTIONS = error_for_name("CONCURRENT_TRANSACTIONS").code
# TxnOffsetCommit: errors that send the request to a newly looked-up group coordinator, that
# retry it on the same one, that mean a rebalance fenced the consuming member, that are fatal.
_GROUP_COORDINATOR_RETRY = frozenset(
    {*COORDINATOR_MOVED_CODES, error_for_name("REQUEST_TIMED_OUT").code}
)
_RETRY_SAME_GROUP_COORDINATOR = frozenset(
    error_for_name(n).code for n in ("UNKNOWN_TOPIC_OR_PARTITION", "COORDINATOR_LOAD_IN_PROGRESS")
)
_MEMBER_FENCED = frozenset(
    error_for_name(n).code for n in ("UNKNOWN_MEMBER_ID", "ILLEGAL_GENERATION")
)
_FENCED_INSTANCE_ID = error_for_name("FENCED_INSTANCE_ID").code
_TXN_OFFSET_COMMIT_FATAL = frozenset(
    {_TXN_ID_AUTH.code, error_for_name("UNSUPPORTED_FOR_MESSAGE_FORMAT").code}
)


class TransactionManager(TransactionCore):
    """The transactional state of one producer (``transactional.id``). Not thread-safe: the
    producer's event loop owns it. See the module docstring for the rules."""

    # -- the user's calls -------------------------------------------------------------------------

    def init_transactions(self) -> TransactionalResult:
        """Get the producer id and epoch for the transactional id (fencing older producers
        with the same id and finishing their open transaction on the coordinator)."""
        self._maybe_fail_with_error("init_transactions")

        def start() -> TransactionalResult:
            self._transition(_S.INITIALIZING, operation="init_transactions")
            return self._enqueue_init_producer_id(NO_PRODUCER_ID_AND_EPOCH)

        return self._cached_result("init_transactions", _S.INITIALIZING, start)

    def begin_transaction(self) -> None:
        self._throw_if_pending("begin_transaction")
        self._maybe_fail_with_error("begin_transaction")
        self._transition(_S.IN_TRANSACTION, operation="begin_transaction")

    def maybe_add_partition(self, tp: TopicPartition) -> bool:
        """``send`` of a record to ``tp``: True when ``tp`` is new to the transaction (its
        batches wait until AddPartitionsToTxn has added it), False when it is already added
        or being added."""
        self.fail_if_not_ready_for_send(tp)
        if self.is_partition_added(tp) or self.is_partition_pending_add(tp):
            return False
        self._new_partitions.add(tp)
        return True

    def fail_if_not_ready_for_send(self, tp: TopicPartition | str) -> None:
        """Raise unless a record for ``tp`` (a partition, or a topic whose partition is not
        chosen yet) may be sent now: inside a transaction, with no error to report."""
        self._maybe_fail_with_error("send")
        self._throw_if_pending("send")
        if not self.producer_id_and_epoch.is_valid:
            raise IllegalTransactionStateError(
                "send",
                self.state.value,
                f"Cannot add partition {tp} to transaction before completing a call to "
                "initTransactions",
            )
        if self.state is not _S.IN_TRANSACTION:
            raise IllegalTransactionStateError(
                "send",
                self.state.value,
                f"Cannot add partition {tp} to transaction while in state {self.state.value}",
            )

    def send_offsets_to_transaction(
        self, offsets: Mapping[TopicPartition, OffsetAndMetadata], group: ConsumerGroupMetadata
    ) -> TransactionalResult:
        """Commit ``offsets`` for ``group`` with the transaction: AddOffsetsToTxn to the
        transaction coordinator, then TxnOffsetCommit to the group coordinator (the result
        completes with the latter). No offsets: nothing to do, as KafkaProducer."""
        if group.generation_id > 0 and not group.member_id:
            raise ValueError(
                f"Passed in group metadata {group} has generationId > 0 but member.id "
            )
        if not offsets:
            result = TransactionalResult("send_offsets_to_transaction")
            result.done()
            return result
        self._throw_if_pending("send_offsets_to_transaction")
        self._maybe_fail_with_error("send_offsets_to_transaction")
        if self.state is not _S.IN_TRANSACTION:
            raise IllegalTransactionStateError(
                "send_offsets_to_transaction",
                self.state.value,
                "Cannot send offsets if a transaction is not in progress "
                f"(currentState= {self.state.value})",
            )
        pe = self.producer_id_and_epoch
        body = AddOffsetsToTxnRequest(
            self.transactional_id, pe.producer_id, pe.epoch, group.group_id
        )
        request = self._enqueue(body, Priority.ADD_PARTITIONS_OR_OFFSETS, "AddOffsetsToTxn")
        self._offsets_to_commit[request.request_id] = (dict(offsets), group)
        return request.result

    def commit_transaction(self) -> TransactionalResult:
        def start() -> TransactionalResult:
            self._maybe_fail_with_error("commit_transaction")
            self._transition(_S.COMMITTING_TRANSACTION, operation="commit_transaction")
            return self._begin_completing(committed=True)

        return self._cached_result("commit_transaction", _S.COMMITTING_TRANSACTION, start)

    def abort_transaction(self) -> TransactionalResult:
        def start() -> TransactionalResult:
            if self.state is not _S.ABORTABLE_ERROR:
                self._maybe_fail_with_error("abort_transaction")
            self._transition(_S.ABORTING_TRANSACTION, operation="abort_transaction")
            self._new_partitions.clear()  # nothing more to add to a transaction being aborted
            return self._begin_completing(committed=False)

        return self._cached_result("abort_transaction", _S.ABORTING_TRANSACTION, start)

    def close(self) -> None:
        """A forced close: every queued request and the waiting call fail, fatally."""
        error = TransactionError("The producer closed forcefully")
        for _, request in list(self._queue):
            self._fatal(request, error)
        if self._pending_transition is not None:
            self._pending_transition.result.fail(error)

    # -- what the producer and the sender ask ---------------------------------------------------

    @property
    def has_ongoing_transaction(self) -> bool:
        return self.state is _S.IN_TRANSACTION or self.is_completing or self.has_abortable_error

    @property
    def has_pending_requests(self) -> bool:
        return bool(self._queue)

    @property
    def has_in_flight_request(self) -> bool:
        return self._in_flight is not None

    @property
    def has_partitions_to_add(self) -> bool:
        return bool(self._new_partitions or self._pending_partitions)

    @property
    def partitions_in_transaction(self) -> frozenset[TopicPartition]:
        return frozenset(self._partitions_in_transaction)

    def is_partition_added(self, tp: TopicPartition) -> bool:
        return tp in self._partitions_in_transaction

    def is_partition_pending_add(self, tp: TopicPartition) -> bool:
        return tp in self._new_partitions or tp in self._pending_partitions

    def is_send_to_partition_allowed(self, tp: TopicPartition) -> bool:
        """May a batch for ``tp`` be sent (the coordinator has added ``tp``)?"""
        return not self.has_fatal_error and tp in self._partitions_in_transaction

    def undrained_batch_error(self) -> BaseException | None:
        """While the transaction aborts, the error to fail batches not yet sent with (Kafka's
        Sender: the error that forced the abort, else TransactionAbortedException)."""
        if not (self.has_abortable_error or self.is_aborting):
            return None
        return self.last_error or TransactionAbortedError()

    def coordinator(self, coordinator_type: CoordinatorType) -> CoordinatorNode | None:
        return self._coordinators[coordinator_type]

    def coordinator_ready(self, init_producer_id_max_version: int) -> None:
        """The sender connected to the transaction coordinator, which supports InitProducerId
        up to this version: v3+ can bump the epoch (KIP-360)."""
        self.coordinator_supports_epoch_bump = (
            init_producer_id_max_version >= _INIT_PRODUCER_ID_BUMP_VERSION
        )

    def acknowledge_sequence_reset(self) -> None:
        self.sequences_reset_required = False

    # -- the sender's queue ---------------------------------------------------------------------

    def next_request(self, *, has_incomplete_batches: bool) -> TxnRequest | None:
        """The next request to send, or None. New partitions become one AddPartitionsToTxn
        first; EndTxn waits while batches are incomplete; in an error state queued requests
        fail instead of leaving (except FindCoordinator before an abort)."""
        if self._new_partitions:
            self._enqueue_add_partitions()
        if not self._queue:
            return None
        request = self._queue[0][1]
        if request.is_end_txn and has_incomplete_batches:
            return None
        heapq.heappop(self._queue)
        if self._maybe_terminate_with_error(request):
            return None
        if request.is_end_txn and not self._transaction_started:
            request.result.done()  # nothing was added: the coordinator has nothing to end
            if self.state is not _S.FATAL_ERROR:
                self._complete_transaction()
            return heapq.heappop(self._queue)[1] if self._queue else None
        return request

    def request_sent(self, request: TxnRequest) -> None:
        self._in_flight = request

    def retry_after_coordinator_lookup(self, request: TxnRequest) -> None:
        """The request's coordinator is unknown or unreachable: look it up, then retry (for
        FindCoordinator itself, with no broker to ask: retry after the backoff)."""
        if request.coordinator_type is not None:
            self._lookup_coordinator(request.coordinator_type, request.coordinator_key)
        self._reenqueue(request)

    def handle_disconnect(self, request: TxnRequest) -> None:
        """The connection broke before an answer: look the coordinator up again and retry."""
        if self._check_in_flight(request):
            self.retry_after_coordinator_lookup(request)

    def handle_version_mismatch(self, request: TxnRequest, message: str) -> None:
        if self._check_in_flight(request):
            self._fatal(request, _UNSUPPORTED_VERSION(message))

    def handle_response(self, request: TxnRequest, response: TxnResponseBody) -> None:
        """Feed the answer to ``request`` back; raises TypeError when it does not match."""
        if not self._check_in_flight(request):
            return
        body = request.body
        match body, response:
            case FindCoordinatorRequest(), FindCoordinatorResponse():
                self._on_find_coordinator(request, body, response)
            case InitProducerIdRequest(), InitProducerIdResponse():
                self._on_init_producer_id(request, body, response)
            case AddPartitionsToTxnRequest(), AddPartitionsToTxnResponse():
                self._on_add_partitions(request, response)
            case AddOffsetsToTxnRequest(), AddOffsetsToTxnResponse():
                self._on_add_offsets(request, body, response)
            case TxnOffsetCommitRequest(), TxnOffsetCommitResponse():
                self._on_txn_offset_commit(request, body, response)
            case EndTxnRequest(), EndTxnResponse():
                self._on_end_txn(request, response)
            case _:
                raise TypeError(f"{type(response).__name__} does not answer {type(body).__name__}")

    def handle_failed_batch(self, tp: TopicPartition, error: BaseException) -> None:
        """A produce request of the transaction failed for ``tp`` for good (Kafka's
        ``maybeTransitionToErrorState``): authorization, fencing and version errors are
        fatal; anything else aborts the transaction, bumping the epoch if the coordinator
        can (KIP-360), unless the transaction is already completing."""
        if isinstance(error, FATAL_PRODUCE_ERRORS):
            self._transition_to_fatal(error)
            return
        if self.coordinator_supports_epoch_bump and not self.is_completing:
            self.epoch_bump_required = True
        self._transition_to_abortable(error)

    def maybe_recover_from_authorization_error(self) -> BaseException | None:
        """After InitProducerId failed on an authorization error (abortable since
        KAFKA-13668), the sender's next loop fails what is queued, returns to UNINITIALIZED
        and lets ``init_transactions`` be called again. Returns the error, for the sender to
        fail the batches with, or None when there is nothing to recover from."""
        error = self.last_error
        if not (self.has_abortable_error and isinstance(error, _TXN_ID_AUTH | _CLUSTER_AUTH)):
            return None
        for _, request in list(self._queue):
            self._abortable(request, error)
        self._queue.clear()
        self._transition(_S.UNINITIALIZED, operation="init_transactions", from_sender=True)
        if self._pending_transition is not None:
            self._pending_transition.result.fail(error)
        return error

    # -- one handler per response (Kafka's TxnRequestHandler subclasses) ------------------------

    def _on_find_coordinator(
        self, request: TxnRequest, body: FindCoordinatorRequest, response: FindCoordinatorResponse
    ) -> None:
        code = response.error_code
        if code == NO_ERROR:
            node = CoordinatorNode(response.node_id, response.host, response.port)
            self._coordinators[body.key_type] = node
            request.result.done()
        elif is_retriable(code):
            self._reenqueue(request)
        elif code == _TXN_ID_AUTH.code:
            self._fatal(request, _TXN_ID_AUTH())
        elif code == _GROUP_AUTH.code:
            self._abortable(request, _GROUP_AUTH(f"Not authorized to access group: {body.key}"))
        else:
            self._fatal(
                request,
                TransactionError(
                    f"Could not find a coordinator with type {body.key_type.name} with key "
                    f"{body.key} due to unexpected error: {response.error_message}"
                ),
            )

    def _on_init_producer_id(
        self, request: TxnRequest, body: InitProducerIdRequest, response: InitProducerIdResponse
    ) -> None:
        code = response.error_code
        if code == NO_ERROR:
            self.producer_id_and_epoch = ProducerIdAndEpoch(
                response.producer_id, response.producer_epoch
            )
            self._transition(_S.READY, operation="InitProducerId", from_sender=True)
            if body.producer_id >= 0:  # an epoch bump: sequences restart under the new epoch
                self.sequences_reset_required = True
            request.result.done()
        elif self._retry_common(request, code):
            return
        elif code in (_TXN_ID_AUTH.code, _CLUSTER_AUTH.code):
            # Abortable since KAFKA-13668: maybe_recover_from_authorization_error then lets
            # init_transactions be retried once the ACLs are fixed.
            self._abortable(request, error_of(code))
        elif code in FENCED_CODES:
            self._fatal(request, ProducerFencedError())
        else:
            self._fatal(
                request,
                TransactionError(
                    f"Unexpected error in InitProducerIdResponse; {error_of(code).error_name}"
                ),
            )

    def _on_add_partitions(self, request: TxnRequest, response: AddPartitionsToTxnResponse) -> None:
        request.retry_backoff_ms = self.retry_backoff_ms
        unauthorized_topics: set[str] = set()
        has_partition_errors = False
        for tp, code in response.errors.items():
            if code == NO_ERROR:
                continue
            if code == _CONCURRENT_TRANSACTIONS:
                # The previous transaction is still completing: retry its first AddPartitions
                # soon rather than after a whole backoff (KAFKA-5477).
                if not self._partitions_in_transaction:
                    request.retry_backoff_ms = min(
                        self.retry_backoff_ms, ADD_PARTITIONS_RETRY_BACKOFF_MS
                    )
                self._reenqueue(request)
                return
            if self._retry_common(request, code):
                return
            if code in FENCED_CODES:
                self._fatal(request, ProducerFencedError())
                return
            if code in (_TXN_ID_AUTH.code, _INVALID_TXN_STATE):
                self._fatal(request, error_of(code))
                return
            if code in ABORTABLE_WITH_BUMP_CODES:
                self._abortable_if_possible(request, error_of(code))
                return
            if code == _TOPIC_AUTH.code:
                unauthorized_topics.add(tp.topic)
            else:  # OPERATION_NOT_ATTEMPTED (another partition failed) or unexpected
                has_partition_errors = True
        # Answered partitions leave the pending set whatever the outcome: on an error the
        # transaction aborts anyway, and batches of the added partitions must be able to go.
        self._pending_partitions -= set(response.errors)
        if unauthorized_topics:
            topics = ", ".join(sorted(unauthorized_topics))
            self._abortable(request, _TOPIC_AUTH(f"Not authorized to access topics: [{topics}]"))
        elif has_partition_errors:
            errors = {str(tp): error_of(c).error_name for tp, c in response.errors.items()}
            self._abortable(
                request,
                TransactionError(
                    f"Could not add partitions to transaction due to errors: {errors}"
                ),
            )
        else:
            self._partitions_in_transaction |= set(response.errors)
            self._transaction_started = True
            request.result.done()

    def _on_add_offsets(
        self, request: TxnRequest, body: AddOffsetsToTxnRequest, response: AddOffsetsToTxnResponse
    ) -> None:
        code = response.error_code
        if code == NO_ERROR:
            offsets, group = self._offsets_to_commit.pop(request.request_id)
            self._pending_offset_commits.update(offsets)
            pe = self.producer_id_and_epoch
            commit = TxnOffsetCommitRequest(
                transactional_id=self.transactional_id,
                group_id=group.group_id,
                producer_id=pe.producer_id,
                producer_epoch=pe.epoch,
                generation_id=group.generation_id,
                member_id=group.member_id,
                group_instance_id=group.group_instance_id,
                offsets=tuple(sorted(self._pending_offset_commits.items())),
            )
            # The call's result completes with the TxnOffsetCommit, not here.
            self._enqueue(
                commit,
                Priority.ADD_PARTITIONS_OR_OFFSETS,
                "TxnOffsetCommit",
                coordinator_type=CoordinatorType.GROUP,
                result=request.result,
            )
            self._transaction_started = True
        elif self._retry_common(request, code):
            return
        elif code in ABORTABLE_WITH_BUMP_CODES:
            self._abortable_if_possible(request, error_of(code))
        elif code in FENCED_CODES:
            self._fatal(request, ProducerFencedError())
        elif code in (_TXN_ID_AUTH.code, _INVALID_TXN_STATE):
            self._fatal(request, error_of(code))
        elif code == _GROUP_AUTH.code:
            self._abortable(
                request, _GROUP_AUTH(f"Not authorized to access group: {body.group_id}")
            )
        else:
            self._fatal(
                request,
                TransactionError(
                    f"Unexpected error in AddOffsetsToTxnResponse: {error_of(code).error_name}"
                ),
            )

    def _on_txn_offset_commit(
        self, request: TxnRequest, body: TxnOffsetCommitRequest, response: TxnOffsetCommitResponse
    ) -> None:
        coordinator_reloaded = False
        group = body.group_id
        for tp, code in response.errors.items():
            if code == NO_ERROR:
                self._pending_offset_commits.pop(tp, None)
            elif code in _GROUP_COORDINATOR_RETRY:
                if not coordinator_reloaded:
                    coordinator_reloaded = True
                    self._lookup_coordinator(CoordinatorType.GROUP, group)
            elif code in _RETRY_SAME_GROUP_COORDINATOR:
                continue
            elif code == _GROUP_AUTH.code:
                self._abortable(request, _GROUP_AUTH(f"Not authorized to access group: {group}"))
                break
            elif code == _FENCED_INSTANCE_ID:
                self._abortable(request, error_of(code))
                break
            elif code in _MEMBER_FENCED:
                self._abortable(
                    request,
                    CommitFailedError(
                        "Transaction offset Commit failed due to consumer group metadata "
                        f"mismatch: {error_of(code).error_name}"
                    ),
                )
                break
            elif code in FENCED_CODES:
                self._fatal(request, ProducerFencedError())
                break
            elif code in _TXN_OFFSET_COMMIT_FATAL:
                self._fatal(request, error_of(code))
                break
            else:
                self._fatal(
                    request,
                    TransactionError(
                        f"Unexpected error in TxnOffsetCommitResponse: {error_of(code).error_name}"
                    ),
                )
                break
        if request.result.is_completed:
            self._pending_offset_commits.clear()
        elif not self._pending_offset_commits:
            request.result.done()
        else:
            self._reenqueue(request)  # the partitions that failed with a retriable error

    def _on_end_txn(self, request: TxnRequest, response: EndTxnResponse) -> None:
        code = response.error_code
        if code == NO_ERROR:
            self._complete_transaction()
            request.result.done()
        elif self._retry_common(request, code):
            return
        elif code in FENCED_CODES:
            self._fatal(request, ProducerFencedError())
        elif code in (_TXN_ID_AUTH.code, _INVALID_TXN_STATE):
            self._fatal(request, error_of(code))
        elif code in ABORTABLE_WITH_BUMP_CODES:
            self._abortable_if_possible(request, error_of(code))
        else:
            self._fatal(
                request,
                TransactionError(f"Unhandled error in EndTxnResponse: {error_of(code).error_name}"),
            )
