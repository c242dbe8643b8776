"""A transaction manager driven to each of its states the way a producer and its sender would,
and the sender's half of a request (send it, answer it), shared by the transaction manager
tests."""

from __future__ import annotations

from kafkasim.client.transaction_manager import TransactionManager, TxnState
from kafkasim.client.transaction_types import (
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
    ConsumerGroupMetadata,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    InitProducerIdRequest,
    InitProducerIdResponse,
    TxnRequest,
    TxnRequestBody,
    TxnResponseBody,
)
from kafkasim.common.errors import (
    OutOfOrderSequenceNumberError,
    ProducerFencedError,
    error_for_name,
)
from kafkasim.common.types import TopicPartition

TID = "tx-1"
PID = 4000
BACKOFF_MS = 100
TP_A = TopicPartition("a", 0)
TP_B = TopicPartition("b", 1)
GROUP = ConsumerGroupMetadata("g", generation_id=3, member_id="m-1")
COORDINATOR = FindCoordinatorResponse(node_id=1, host="b1", port=9092)


def code(name: str) -> int:
    return error_for_name(name).code


def manager() -> TransactionManager:
    return TransactionManager(TID, transaction_timeout_ms=60_000, retry_backoff_ms=BACKOFF_MS)


def next_of(
    tm: TransactionManager, kind: type[TxnRequestBody], *, busy: bool = False
) -> TxnRequest:
    """The next request, which must be a ``kind``; marked sent."""
    request = tm.next_request(has_incomplete_batches=busy)
    assert request is not None, f"expected {kind.__name__}, the queue is empty"
    assert isinstance(request.body, kind), f"expected {kind.__name__}, got {request.body}"
    tm.request_sent(request)
    return request


def answer(
    tm: TransactionManager, kind: type[TxnRequestBody], response: TxnResponseBody
) -> TxnRequest:
    request = next_of(tm, kind)
    tm.handle_response(request, response)
    return request


def ready(*, epoch_bump: bool = True) -> TransactionManager:
    """init_transactions answered: the InitProducerId finds no coordinator, so the sender
    looks it up (key_type 1) and retries; the caller saw the result."""
    tm = manager()
    result = tm.init_transactions()
    first = tm.next_request(has_incomplete_batches=False)
    assert first is not None and isinstance(first.body, InitProducerIdRequest)
    assert first.coordinator_type is not None and tm.coordinator(first.coordinator_type) is None
    tm.retry_after_coordinator_lookup(first)
    answer(tm, FindCoordinatorRequest, COORDINATOR)
    tm.coordinator_ready(4 if epoch_bump else 2)
    answer(tm, InitProducerIdRequest, InitProducerIdResponse(producer_id=PID, producer_epoch=0))
    assert result.is_successful
    result.ack()
    return tm


def in_transaction(*partitions: TopicPartition, epoch_bump: bool = True) -> TransactionManager:
    tm = ready(epoch_bump=epoch_bump)
    tm.begin_transaction()
    for tp in partitions:
        tm.maybe_add_partition(tp)
    if partitions:
        answer(
            tm,
            AddPartitionsToTxnRequest,
            AddPartitionsToTxnResponse(dict.fromkeys(partitions, 0)),
        )
    return tm


def at_state(state: TxnState) -> TransactionManager:
    """A manager in ``state``, reached as a producer reaches it (with the call that got there
    still waiting when the state is one that waits)."""
    if state is TxnState.UNINITIALIZED:
        return manager()
    if state is TxnState.INITIALIZING:
        tm = manager()
        tm.init_transactions()
        return tm
    if state is TxnState.READY:
        return ready()
    tm = in_transaction(TP_A)
    if state is TxnState.COMMITTING_TRANSACTION:
        tm.commit_transaction()
    elif state is TxnState.ABORTING_TRANSACTION:
        tm.abort_transaction()
    elif state is TxnState.ABORTABLE_ERROR:
        tm.handle_failed_batch(TP_A, OutOfOrderSequenceNumberError("batch 3"))
    elif state is TxnState.FATAL_ERROR:
        tm.handle_failed_batch(TP_A, ProducerFencedError())
    assert tm.state is state
    return tm
