"""The transactional producer's state and request queue, below the calls
(:class:`TransactionCore`, the base of :class:`~client.transaction_manager.TransactionManager`):
Kafka 3.7 ``TransactionManager``'s transitions, error state, pending calls, how requests are
built and queued, and what a failed request does to the state. The theory of operation is in
:mod:`client.transaction_manager`.

Pure: no IO, no clock. Not thread-safe: the producer's event loop owns it.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable

from kafkasim.client.producer_errors import (
    IllegalTransactionStateError,
    TransactionError,
)
from kafkasim.client.transaction_state import (
    COORDINATOR_MOVED_CODES,
    TxnState,
    is_retriable,
    is_transition_valid,
)
from kafkasim.client.transaction_types import (
    NO_PRODUCER_ID_AND_EPOCH,
    AddPartitionsToTxnRequest,
    ConsumerGroupMetadata,
    CoordinatorNode,
    CoordinatorType,
    EndTxnRequest,
    FindCoordinatorRequest,
    InitProducerIdRequest,
    OffsetAndMetadata,
    Priority,
    ProducerIdAndEpoch,
    TransactionalResult,
    TxnRequest,
    TxnRequestBody,
)
from kafkasim.common.errors import InvalidProducerEpochError, ProducerFencedError
from kafkasim.common.types import TopicPartition

__all__ = ["TransactionCore"]

_S = TxnState


class _PendingTransition:
    """A call whose result the caller has not acknowledged yet (Kafka's
    ``PendingStateTransition``)."""

    __slots__ = ("operation", "result", "state")

    def __init__(self, result: TransactionalResult, state: TxnState, operation: str) -> None:
        self.result = result
        self.state = state
        self.operation = operation


class TransactionCore:
    """The state every transactional call and response reads and changes."""

    def __init__(
        self,
        transactional_id: str,
        *,
        transaction_timeout_ms: int,
        retry_backoff_ms: int,
    ) -> None:
        if not transactional_id:
            raise ValueError("a transactional producer needs a non-empty transactional.id")
        self.transactional_id = transactional_id
        self.transaction_timeout_ms = transaction_timeout_ms
        self.retry_backoff_ms = retry_backoff_ms
        self.state = _S.UNINITIALIZED
        self.last_error: BaseException | None = None
        self.producer_id_and_epoch = NO_PRODUCER_ID_AND_EPOCH
        self.epoch_bump_required = False
        self.coordinator_supports_epoch_bump = False
        # Set when a bumped epoch arrives: every partition's sequences restart at 0. The
        # sender clears it (acknowledge_sequence_reset) once it has renumbered.
        self.sequences_reset_required = False
        self._transaction_started = False
        self._queue: list[tuple[tuple[int, int], TxnRequest]] = []
        self._in_flight: TxnRequest | None = None
        self._pending_transition: _PendingTransition | None = None
        self._new_partitions: set[TopicPartition] = set()
        self._pending_partitions: set[TopicPartition] = set()
        self._partitions_in_transaction: set[TopicPartition] = set()
        self._pending_offset_commits: dict[TopicPartition, OffsetAndMetadata] = {}
        # AddOffsetsToTxn request id -> the offsets and group its TxnOffsetCommit will carry.
        self._offsets_to_commit: dict[
            int, tuple[dict[TopicPartition, OffsetAndMetadata], ConsumerGroupMetadata]
        ] = {}
        self._coordinators: dict[CoordinatorType, CoordinatorNode | None] = {
            CoordinatorType.TRANSACTION: None,
            CoordinatorType.GROUP: None,
        }

    # -- the state, asked -----------------------------------------------------------------------

    @property
    def has_error(self) -> bool:
        return self.state in (_S.ABORTABLE_ERROR, _S.FATAL_ERROR)

    @property
    def has_fatal_error(self) -> bool:
        return self.state is _S.FATAL_ERROR

    @property
    def has_abortable_error(self) -> bool:
        return self.state is _S.ABORTABLE_ERROR

    @property
    def is_completing(self) -> bool:
        return self.state in (_S.COMMITTING_TRANSACTION, _S.ABORTING_TRANSACTION)

    @property
    def is_aborting(self) -> bool:
        return self.state is _S.ABORTING_TRANSACTION

    # -- transitions ------------------------------------------------------------------------------

    def _transition(
        self,
        target: TxnState,
        error: BaseException | None = None,
        *,
        operation: str,
        from_sender: bool = False,
    ) -> None:
        if not is_transition_valid(self.state, target):
            illegal = IllegalTransactionStateError(
                operation,
                self.state.value,
                f"TransactionalId {self.transactional_id}: Invalid transition attempted from "
                f"state {self.state.value} to state {target.value}",
            )
            if from_sender:  # KAFKA-14831: a response the state cannot take poisons it
                self.state = _S.FATAL_ERROR
                self.last_error = illegal
            raise illegal
        if target in (_S.ABORTABLE_ERROR, _S.FATAL_ERROR):
            assert error is not None, f"{target.value} needs the error that caused it"
            self.last_error = error
        else:
            self.last_error = None
        self.state = target

    def _transition_to_abortable(self, error: BaseException) -> None:
        if self.state is _S.ABORTING_TRANSACTION:
            return  # already aborting: the error changes nothing
        self._transition(_S.ABORTABLE_ERROR, error, operation="abortable error", from_sender=True)

    def _transition_to_fatal(self, error: BaseException) -> None:
        self._transition(_S.FATAL_ERROR, error, operation="fatal error", from_sender=True)
        if self._pending_transition is not None:
            self._pending_transition.result.fail(error)

    def _complete_transaction(self) -> None:
        target = _S.INITIALIZING if self.epoch_bump_required else _S.READY
        self._transition(target, operation="EndTxn", from_sender=True)
        self.last_error = None
        self.epoch_bump_required = False
        self._transaction_started = False
        self._new_partitions.clear()
        self._pending_partitions.clear()
        self._partitions_in_transaction.clear()

    def _maybe_fail_with_error(self, operation: str) -> None:
        """In an error state every call but an abort after an abortable error raises it again."""
        if not self.has_error:
            return
        error, pe, tid = self.last_error, self.producer_id_and_epoch, self.transactional_id
        if isinstance(error, ProducerFencedError):
            raise ProducerFencedError(
                f"Producer with transactionalId '{tid}' and {pe} has been fenced by another "
                "producer with the same transactionalId"
            )
        if isinstance(error, InvalidProducerEpochError):
            raise InvalidProducerEpochError(
                f"Producer with transactionalId '{tid}' and {pe} attempted to produce with an "
                "old epoch"
            )
        if isinstance(error, IllegalTransactionStateError):
            raise IllegalTransactionStateError(
                operation,
                self.state.value,
                f"Producer with transactionalId '{tid}' and {pe} cannot execute transactional "
                "method because of previous invalid state transition attempt",
            ) from error
        raise TransactionError(
            "Cannot execute transactional method because we are in an error state"
        ) from error

    def _throw_if_pending(self, operation: str) -> None:
        pending = self._pending_transition
        if pending is None:
            return
        if pending.result.is_acked:
            self._pending_transition = None
            return
        raise self._pending_error(operation, pending)

    def _pending_error(
        self, operation: str, pending: _PendingTransition
    ) -> IllegalTransactionStateError:
        return IllegalTransactionStateError(
            operation,
            self.state.value,
            f"Cannot attempt operation `{operation}` because the previous call to "
            f"`{pending.operation}` timed out and must be retried",
        )

    def _cached_result(
        self, operation: str, target: TxnState, start: Callable[[], TransactionalResult]
    ) -> TransactionalResult:
        """Kafka's handleCachedTransactionRequestResult: the unacknowledged result of the same
        call is returned again; another call must wait until it is acknowledged."""
        pending = self._pending_transition
        if pending is not None:
            if pending.result.is_acked:
                self._pending_transition = None
            elif pending.state is not target:
                raise self._pending_error(operation, pending)
            else:
                return pending.result
        result = start()
        self._pending_transition = _PendingTransition(result, target, operation)
        return result

    # -- building requests ----------------------------------------------------------------------

    def _enqueue(
        self,
        body: TxnRequestBody,
        priority: Priority,
        operation: str,
        *,
        coordinator_type: CoordinatorType | None = CoordinatorType.TRANSACTION,
        result: TransactionalResult | None = None,
    ) -> TxnRequest:
        request = TxnRequest(
            body=body,
            priority=priority,
            coordinator_type=coordinator_type,
            result=result or TransactionalResult(operation),
            retry_backoff_ms=self.retry_backoff_ms,
        )
        heapq.heappush(self._queue, (request.sort_key(), request))
        return request

    def _reenqueue(self, request: TxnRequest) -> None:
        request.is_retry = True
        heapq.heappush(self._queue, (request.sort_key(), request))

    def _enqueue_init_producer_id(self, current: ProducerIdAndEpoch) -> TransactionalResult:
        bump = current.is_valid
        body = InitProducerIdRequest(
            self.transactional_id, self.transaction_timeout_ms, current.producer_id, current.epoch
        )
        priority = Priority.EPOCH_BUMP if bump else Priority.INIT_PRODUCER_ID
        return self._enqueue(body, priority, "InitProducerId").result

    def _enqueue_add_partitions(self) -> None:
        self._pending_partitions |= self._new_partitions
        self._new_partitions.clear()
        pe = self.producer_id_and_epoch
        partitions = tuple(sorted(self._pending_partitions))
        body = AddPartitionsToTxnRequest(
            self.transactional_id, pe.producer_id, pe.epoch, partitions
        )
        self._enqueue(body, Priority.ADD_PARTITIONS_OR_OFFSETS, "AddPartitionsToTxn")

    def _begin_completing(self, *, committed: bool) -> TransactionalResult:
        if self._new_partitions:
            self._enqueue_add_partitions()
        pe = self.producer_id_and_epoch
        body = EndTxnRequest(self.transactional_id, pe.producer_id, pe.epoch, committed)
        end = self._enqueue(body, Priority.END_TXN, f"EndTxn({str(committed).lower()})")
        if not self.epoch_bump_required:
            return end.result
        # KIP-360: after EndTxn(ABORT), InitProducerId with the current pair bumps the epoch.
        return self._enqueue_init_producer_id(pe)

    def _lookup_coordinator(self, coordinator_type: CoordinatorType, key: str) -> None:
        self._coordinators[coordinator_type] = None
        body = FindCoordinatorRequest(coordinator_type, key)
        self._enqueue(body, Priority.FIND_COORDINATOR, "FindCoordinator", coordinator_type=None)

    def _maybe_terminate_with_error(self, request: TxnRequest) -> bool:
        if not self.has_error:
            return False
        if self.has_abortable_error and isinstance(request.body, FindCoordinatorRequest):
            return False  # no harm in finding the coordinator the abort will need
        request.result.fail(self.last_error or TransactionError("error state"))
        return True

    def _check_in_flight(self, request: TxnRequest) -> bool:
        if request is not self._in_flight:
            error = TransactionError("Detected more than one in-flight transactional request.")
            self._fatal(request, error)
            return False
        self._in_flight = None
        return True

    # -- outcomes of a request ------------------------------------------------------------------

    def _fatal(self, request: TxnRequest, error: BaseException) -> None:
        request.result.fail(error)
        self._transition_to_fatal(error)

    def _abortable(self, request: TxnRequest, error: BaseException) -> None:
        request.result.fail(error)
        self._transition_to_abortable(error)

    def _abortable_if_possible(self, request: TxnRequest, error: BaseException) -> None:
        if self.coordinator_supports_epoch_bump:
            self.epoch_bump_required = True
            self._abortable(request, error)
        else:
            self._fatal(request, error)

    def _retry_common(self, request: TxnRequest, code: int) -> bool:
        """The coordinator errors every transaction-coordinator handler retries alike."""
        if code in COORDINATOR_MOVED_CODES:
            self._lookup_coordinator(CoordinatorType.TRANSACTION, self.transactional_id)
            self._reenqueue(request)
            return True
        if is_retriable(code):
            self._reenqueue(request)
            return True
        return False
