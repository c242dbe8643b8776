"""The transactional producer's state machine (client/transaction_manager.py) against Kafka
3.7's TransactionManager: every call in every state, the request sequence of a transaction,
each response error sorted as Kafka's handlers sort it, fencing, KIP-360 epoch bumps."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from kafkasim.client.consumer_types import CommitFailedError
from kafkasim.client.producer_config import ProducerConfig
from kafkasim.client.producer_errors import (
    IllegalTransactionStateError,
    TransactionAbortedError,
    TransactionError,
)
from kafkasim.client.transaction_manager import TransactionManager, TxnState
from kafkasim.client.transaction_state import is_transition_valid, valid_sources
from kafkasim.client.transaction_types import (
    AddOffsetsToTxnRequest,
    AddOffsetsToTxnResponse,
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
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
    TxnOffsetCommitRequest,
    TxnOffsetCommitResponse,
    TxnRequestBody,
    TxnResponseBody,
)
from kafkasim.common.errors import (
    InvalidConfigError,
    InvalidProducerEpochError,
    KafkaError,
    ProducerFencedError,
    RecordTooLargeError,
    error_for_name,
)
from tests.unit.client.txn_harness import (
    BACKOFF_MS,
    COORDINATOR,
    GROUP,
    PID,
    TID,
    TP_A,
    TP_B,
    answer,
    at_state,
    code,
    in_transaction,
    manager,
    next_of,
    ready,
)

S = TxnState
OFFSETS = {TP_A: OffsetAndMetadata(42, "m")}

# -- the transition table --------------------------------------------------------------------

# Kafka 3.7 State.isTransitionValid, written out pair by pair.
KAFKA_TRANSITIONS = {
    (S.READY, S.UNINITIALIZED),
    (S.ABORTABLE_ERROR, S.UNINITIALIZED),
    (S.UNINITIALIZED, S.INITIALIZING),
    (S.ABORTING_TRANSACTION, S.INITIALIZING),
    (S.INITIALIZING, S.READY),
    (S.COMMITTING_TRANSACTION, S.READY),
    (S.ABORTING_TRANSACTION, S.READY),
    (S.READY, S.IN_TRANSACTION),
    (S.IN_TRANSACTION, S.COMMITTING_TRANSACTION),
    (S.IN_TRANSACTION, S.ABORTING_TRANSACTION),
    (S.ABORTABLE_ERROR, S.ABORTING_TRANSACTION),
    (S.IN_TRANSACTION, S.ABORTABLE_ERROR),
    (S.COMMITTING_TRANSACTION, S.ABORTABLE_ERROR),
    (S.ABORTABLE_ERROR, S.ABORTABLE_ERROR),
    (S.INITIALIZING, S.ABORTABLE_ERROR),
    *((source, S.FATAL_ERROR) for source in S),
}


@pytest.mark.parametrize("source", list(S), ids=lambda s: s.value)
@pytest.mark.parametrize("target", list(S), ids=lambda s: s.value)
def test_transition_table_is_kafkas(source: TxnState, target: TxnState) -> None:
    assert is_transition_valid(source, target) == ((source, target) in KAFKA_TRANSITIONS)
    assert (source in valid_sources(target)) == ((source, target) in KAFKA_TRANSITIONS)


# -- every call in every state ------------------------------------------------------------------

OPERATIONS: dict[str, Callable[[TransactionManager], object]] = {
    "init_transactions": lambda tm: tm.init_transactions(),
    "begin_transaction": lambda tm: tm.begin_transaction(),
    "send": lambda tm: tm.maybe_add_partition(TP_B),
    "send_offsets_to_transaction": lambda tm: tm.send_offsets_to_transaction(OFFSETS, GROUP),
    "commit_transaction": lambda tm: tm.commit_transaction(),
    "abort_transaction": lambda tm: tm.abort_transaction(),
}
ILLEGAL = IllegalTransactionStateError
# state -> operation -> the state after it (legal), or the error it raises. A state that waits
# (INITIALIZING, COMMITTING, ABORTING) has its call's result pending: only that call may be
# made again (KAFKA-13412). In an error state the error itself is raised again.
EXPECTED: dict[TxnState, dict[str, TxnState | type[Exception]]] = {
    S.UNINITIALIZED: {
        "init_transactions": S.INITIALIZING,
        "begin_transaction": ILLEGAL,
        "send": ILLEGAL,
        "send_offsets_to_transaction": ILLEGAL,
        "commit_transaction": ILLEGAL,
        "abort_transaction": ILLEGAL,
    },
    S.INITIALIZING: {
        "init_transactions": S.INITIALIZING,
        "begin_transaction": ILLEGAL,
        "send": ILLEGAL,
        "send_offsets_to_transaction": ILLEGAL,
        "commit_transaction": ILLEGAL,
        "abort_transaction": ILLEGAL,
    },
    S.READY: {
        "init_transactions": ILLEGAL,
        "begin_transaction": S.IN_TRANSACTION,
        "send": ILLEGAL,
        "send_offsets_to_transaction": ILLEGAL,
        "commit_transaction": ILLEGAL,
        "abort_transaction": ILLEGAL,
    },
    S.IN_TRANSACTION: {
        "init_transactions": ILLEGAL,
        "begin_transaction": ILLEGAL,
        "send": S.IN_TRANSACTION,
        "send_offsets_to_transaction": S.IN_TRANSACTION,
        "commit_transaction": S.COMMITTING_TRANSACTION,
        "abort_transaction": S.ABORTING_TRANSACTION,
    },
    S.COMMITTING_TRANSACTION: {
        "init_transactions": ILLEGAL,
        "begin_transaction": ILLEGAL,
        "send": ILLEGAL,
        "send_offsets_to_transaction": ILLEGAL,
        "commit_transaction": S.COMMITTING_TRANSACTION,
        "abort_transaction": ILLEGAL,
    },
    S.ABORTING_TRANSACTION: {
        "init_transactions": ILLEGAL,
        "begin_transaction": ILLEGAL,
        "send": ILLEGAL,
        "send_offsets_to_transaction": ILLEGAL,
        "commit_transaction": ILLEGAL,
        "abort_transaction": S.ABORTING_TRANSACTION,
    },
    S.ABORTABLE_ERROR: {
        "init_transactions": TransactionError,
        "begin_transaction": TransactionError,
        "send": TransactionError,
        "send_offsets_to_transaction": TransactionError,
        "commit_transaction": TransactionError,
        "abort_transaction": S.ABORTING_TRANSACTION,
    },
    S.FATAL_ERROR: dict.fromkeys(OPERATIONS, ProducerFencedError),
}


@pytest.mark.parametrize("state", list(S), ids=lambda s: s.value)
@pytest.mark.parametrize("operation", list(OPERATIONS))
def test_every_call_in_every_state(state: TxnState, operation: str) -> None:
    """A legal call moves to Kafka's next state; an illegal one raises, names the call and the
    state, and changes nothing."""
    tm = at_state(state)
    expected = EXPECTED[state][operation]
    if isinstance(expected, TxnState):
        OPERATIONS[operation](tm)
        assert tm.state is expected
        return
    with pytest.raises(expected) as raised:
        OPERATIONS[operation](tm)
    assert tm.state is state
    if expected is ILLEGAL:
        error = raised.value
        assert isinstance(error, IllegalTransactionStateError)
        assert (error.operation, error.state) == (operation, state.value)
        assert str(error).startswith(f"Cannot call {operation} in state {state.value}: ")


def test_an_illegal_transition_quotes_kafkas_reason() -> None:
    with pytest.raises(IllegalTransactionStateError) as raised:
        ready().commit_transaction()
    assert str(raised.value) == (
        "Cannot call commit_transaction in state READY: TransactionalId tx-1: Invalid "
        "transition attempted from state READY to state COMMITTING_TRANSACTION"
    )


def test_another_call_while_a_commit_waits_must_retry_the_commit() -> None:
    """KAFKA-13412: a commit whose wait timed out may only be retried (same result back)."""
    tm = in_transaction(TP_A)
    commit = tm.commit_transaction()
    with pytest.raises(IllegalTransactionStateError, match="previous call to `commit_transaction`"):
        tm.abort_transaction()
    assert tm.commit_transaction() is commit
    answer(tm, EndTxnRequest, EndTxnResponse())
    assert tm.state is S.READY and commit.is_successful
    assert tm.commit_transaction() is commit  # the retry sees the outcome it missed
    commit.ack()
    tm.begin_transaction()
    assert tm.state is S.IN_TRANSACTION


# -- the request sequence --------------------------------------------------------------------------


def test_happy_path_two_partitions_offsets_commit() -> None:
    tm = manager()
    init = tm.init_transactions()
    first = tm.next_request(has_incomplete_batches=False)
    assert first is not None
    assert first.body == InitProducerIdRequest(TID, 60_000, -1, -1)
    assert first.priority is Priority.INIT_PRODUCER_ID
    tm.retry_after_coordinator_lookup(first)  # no transaction coordinator known yet
    find = next_of(tm, FindCoordinatorRequest)
    assert find.body == FindCoordinatorRequest(CoordinatorType.TRANSACTION, TID)
    assert find.coordinator_type is None  # any broker answers FindCoordinator
    tm.handle_response(find, COORDINATOR)
    assert tm.coordinator(CoordinatorType.TRANSACTION) is not None
    retried = next_of(tm, InitProducerIdRequest)
    assert retried is first and retried.send_delay_ms == BACKOFF_MS
    tm.handle_response(retried, InitProducerIdResponse(producer_id=PID, producer_epoch=0))
    assert tm.state is S.READY and init.is_successful
    assert tm.producer_id_and_epoch == ProducerIdAndEpoch(PID, 0)
    init.ack()

    tm.begin_transaction()
    assert [tm.maybe_add_partition(tp) for tp in (TP_A, TP_A, TP_B, TP_B)] == [
        True,
        False,
        True,
        False,
    ]
    assert not tm.is_send_to_partition_allowed(TP_A)  # its batches wait for AddPartitions
    add = next_of(tm, AddPartitionsToTxnRequest, busy=True)
    assert add.body == AddPartitionsToTxnRequest(TID, PID, 0, (TP_A, TP_B))
    assert tm.maybe_add_partition(TP_A) is False  # pending: not asked for twice
    tm.handle_response(add, AddPartitionsToTxnResponse({TP_A: 0, TP_B: 0}))
    assert tm.is_send_to_partition_allowed(TP_A) and tm.is_send_to_partition_allowed(TP_B)
    assert tm.maybe_add_partition(TP_B) is False
    assert tm.next_request(has_incomplete_batches=True) is None  # once per partition

    offsets = tm.send_offsets_to_transaction(OFFSETS, GROUP)
    add_offsets = next_of(tm, AddOffsetsToTxnRequest, busy=True)
    assert add_offsets.body == AddOffsetsToTxnRequest(TID, PID, 0, "g")
    assert add_offsets.coordinator_type is CoordinatorType.TRANSACTION
    tm.handle_response(add_offsets, AddOffsetsToTxnResponse())
    assert not offsets.is_completed  # completes with the TxnOffsetCommit
    commit_offsets = tm.next_request(has_incomplete_batches=True)
    assert commit_offsets is not None and commit_offsets.coordinator_type is CoordinatorType.GROUP
    assert tm.coordinator(CoordinatorType.GROUP) is None
    tm.retry_after_coordinator_lookup(commit_offsets)
    answer(tm, FindCoordinatorRequest, FindCoordinatorResponse(node_id=2, host="b2", port=9092))
    txn_commit = next_of(tm, TxnOffsetCommitRequest, busy=True)
    assert txn_commit.body == TxnOffsetCommitRequest(
        TID, "g", PID, 0, 3, "m-1", None, ((TP_A, OffsetAndMetadata(42, "m")),)
    )
    tm.handle_response(txn_commit, TxnOffsetCommitResponse({TP_A: 0}))
    assert offsets.is_successful

    commit = tm.commit_transaction()
    assert tm.next_request(has_incomplete_batches=True) is None  # EndTxn waits for batches
    end = next_of(tm, EndTxnRequest)
    assert end.body == EndTxnRequest(TID, PID, 0, committed=True)
    tm.handle_response(end, EndTxnResponse())
    assert tm.state is S.READY and commit.is_successful
    assert tm.partitions_in_transaction == frozenset()
    commit.ack()

    tm.begin_transaction()  # a new transaction adds its partitions again
    assert tm.maybe_add_partition(TP_A) is True


def test_abort_sends_end_txn_abort() -> None:
    tm = in_transaction(TP_A)
    abort = tm.abort_transaction()
    end = answer(tm, EndTxnRequest, EndTxnResponse())
    assert end.body == EndTxnRequest(TID, PID, 0, committed=False)
    assert tm.state is S.READY and abort.is_successful


@pytest.mark.parametrize("finish", ["commit_transaction", "abort_transaction"])
def test_an_empty_transaction_ends_without_end_txn(finish: str) -> None:
    tm = ready()
    tm.begin_transaction()
    result = OPERATIONS[finish](tm)
    assert tm.next_request(has_incomplete_batches=False) is None
    assert tm.state is S.READY
    assert getattr(result, "is_successful", False)


def test_partitions_sent_while_completing_are_added_before_end_txn() -> None:
    tm = in_transaction(TP_A)
    tm.maybe_add_partition(TP_B)
    tm.commit_transaction()
    add = answer(tm, AddPartitionsToTxnRequest, AddPartitionsToTxnResponse({TP_B: 0}))
    assert add.body.partitions == (TP_B,)  # type: ignore[union-attr]
    answer(tm, EndTxnRequest, EndTxnResponse())
    assert tm.state is S.READY


# -- retriable errors ------------------------------------------------------------------------------

REQUESTS: dict[str, tuple[type[TxnRequestBody], Callable[[int], TxnResponseBody]]] = {
    "InitProducerId": (InitProducerIdRequest, lambda c: InitProducerIdResponse(error_code=c)),
    "AddPartitionsToTxn": (
        AddPartitionsToTxnRequest,
        lambda c: AddPartitionsToTxnResponse({TP_A: c}),
    ),
    "AddOffsetsToTxn": (AddOffsetsToTxnRequest, AddOffsetsToTxnResponse),
    "EndTxn": (EndTxnRequest, EndTxnResponse),
}


def _with_request_queued(name: str) -> TransactionManager:
    """A manager whose next request is ``name``."""
    if name == "InitProducerId":
        tm = manager()
        tm.init_transactions()
        first = tm.next_request(has_incomplete_batches=False)
        assert first is not None
        tm.retry_after_coordinator_lookup(first)
        answer(tm, FindCoordinatorRequest, COORDINATOR)
        tm.coordinator_ready(4)
        return tm
    tm = in_transaction()
    if name == "AddPartitionsToTxn":
        tm.maybe_add_partition(TP_A)
    elif name == "AddOffsetsToTxn":
        tm.send_offsets_to_transaction(OFFSETS, GROUP)
    else:
        tm.maybe_add_partition(TP_A)
        answer(tm, AddPartitionsToTxnRequest, AddPartitionsToTxnResponse({TP_A: 0}))
        tm.commit_transaction()
    return tm


@pytest.mark.parametrize("name", list(REQUESTS))
@pytest.mark.parametrize("error", ["NOT_COORDINATOR", "COORDINATOR_NOT_AVAILABLE"])
def test_coordinator_moved_finds_it_again_then_retries(name: str, error: str) -> None:
    tm = _with_request_queued(name)
    kind, response = REQUESTS[name]
    sent = answer(tm, kind, response(code(error)))
    assert tm.coordinator(CoordinatorType.TRANSACTION) is None
    find = answer(tm, FindCoordinatorRequest, COORDINATOR)
    assert find.body == FindCoordinatorRequest(CoordinatorType.TRANSACTION, TID)
    again = next_of(tm, kind)
    assert again is sent and again.is_retry
    assert tm.state not in (S.ABORTABLE_ERROR, S.FATAL_ERROR)


@pytest.mark.parametrize("name", list(REQUESTS))
@pytest.mark.parametrize(
    "error", ["COORDINATOR_LOAD_IN_PROGRESS", "CONCURRENT_TRANSACTIONS", "REQUEST_TIMED_OUT"]
)
def test_retriable_errors_retry_after_the_backoff(name: str, error: str) -> None:
    tm = _with_request_queued(name)
    kind, response = REQUESTS[name]
    sent = answer(tm, kind, response(code(error)))
    again = next_of(tm, kind)
    assert again is sent and again.is_retry and not sent.result.is_completed
    assert tm.coordinator(CoordinatorType.TRANSACTION) is not None  # no lookup
    if not (name == "AddPartitionsToTxn" and error == "CONCURRENT_TRANSACTIONS"):
        assert again.send_delay_ms == BACKOFF_MS


def test_concurrent_transactions_on_the_first_add_partitions_retries_in_20_ms() -> None:
    """KAFKA-5477: the previous transaction is completing; retry the first add soon."""
    tm = in_transaction()
    tm.maybe_add_partition(TP_A)
    answer(
        tm,
        AddPartitionsToTxnRequest,
        AddPartitionsToTxnResponse({TP_A: code("CONCURRENT_TRANSACTIONS")}),
    )
    assert next_of(tm, AddPartitionsToTxnRequest).send_delay_ms == 20

    tm = in_transaction(TP_A)  # later adds of the same transaction back off fully
    tm.maybe_add_partition(TP_B)
    answer(
        tm,
        AddPartitionsToTxnRequest,
        AddPartitionsToTxnResponse({TP_B: code("CONCURRENT_TRANSACTIONS")}),
    )
    assert next_of(tm, AddPartitionsToTxnRequest).send_delay_ms == BACKOFF_MS


def test_a_disconnect_finds_the_coordinator_again() -> None:
    tm = _with_request_queued("EndTxn")
    end = next_of(tm, EndTxnRequest)
    tm.handle_disconnect(end)
    answer(tm, FindCoordinatorRequest, COORDINATOR)
    assert next_of(tm, EndTxnRequest) is end


# -- abortable errors ------------------------------------------------------------------------------


def test_topic_authorization_failed_in_add_partitions_is_abortable() -> None:
    tm = in_transaction()
    tm.maybe_add_partition(TP_A)
    tm.maybe_add_partition(TP_B)
    add = answer(
        tm,
        AddPartitionsToTxnRequest,
        AddPartitionsToTxnResponse(
            {TP_A: code("TOPIC_AUTHORIZATION_FAILED"), TP_B: code("OPERATION_NOT_ATTEMPTED")}
        ),
    )
    assert tm.state is S.ABORTABLE_ERROR
    assert isinstance(add.result.error, error_for_name("TOPIC_AUTHORIZATION_FAILED"))
    assert "Not authorized to access topics: [a]" in str(add.result.error)
    assert not tm.has_partitions_to_add  # answered partitions are no longer pending
    assert isinstance(tm.undrained_batch_error(), error_for_name("TOPIC_AUTHORIZATION_FAILED"))


def test_commit_after_an_abortable_error_is_refused_with_kafkas_message() -> None:
    tm = in_transaction(TP_A, epoch_bump=False)
    cause = RecordTooLargeError("batch of 2 MB")
    tm.handle_failed_batch(TP_A, cause)
    assert tm.state is S.ABORTABLE_ERROR and tm.last_error is cause
    with pytest.raises(TransactionError) as raised:
        tm.commit_transaction()
    assert str(raised.value) == (
        "Cannot execute transactional method because we are in an error state"
    )
    assert raised.value.__cause__ is cause
    abort = tm.abort_transaction()  # the way out
    answer(tm, EndTxnRequest, EndTxnResponse())
    assert tm.state is S.READY and abort.is_successful and tm.last_error is None


def test_a_failed_partition_in_add_partitions_is_abortable() -> None:
    tm = in_transaction()
    tm.maybe_add_partition(TP_A)
    add = answer(
        tm, AddPartitionsToTxnRequest, AddPartitionsToTxnResponse({TP_A: code("INVALID_REQUEST")})
    )
    assert tm.state is S.ABORTABLE_ERROR
    assert "Could not add partitions to transaction due to errors" in str(add.result.error)


def test_group_authorization_failed_is_abortable() -> None:
    tm = _with_request_queued("AddOffsetsToTxn")
    add = answer(
        tm, AddOffsetsToTxnRequest, AddOffsetsToTxnResponse(code("GROUP_AUTHORIZATION_FAILED"))
    )
    assert tm.state is S.ABORTABLE_ERROR
    assert str(add.result.error).endswith("Not authorized to access group: g")


@pytest.mark.parametrize(
    ("error", "raised"),
    [
        ("UNKNOWN_MEMBER_ID", CommitFailedError),
        ("ILLEGAL_GENERATION", CommitFailedError),
        ("FENCED_INSTANCE_ID", error_for_name("FENCED_INSTANCE_ID")),
        ("GROUP_AUTHORIZATION_FAILED", error_for_name("GROUP_AUTHORIZATION_FAILED")),
    ],
)
def test_txn_offset_commit_from_a_fenced_member_is_abortable(
    error: str, raised: type[Exception]
) -> None:
    tm = _with_request_queued("AddOffsetsToTxn")
    answer(tm, AddOffsetsToTxnRequest, AddOffsetsToTxnResponse())
    commit = tm.next_request(has_incomplete_batches=False)
    assert commit is not None
    tm.retry_after_coordinator_lookup(commit)
    answer(tm, FindCoordinatorRequest, COORDINATOR)
    sent = answer(tm, TxnOffsetCommitRequest, TxnOffsetCommitResponse({TP_A: code(error)}))
    assert tm.state is S.ABORTABLE_ERROR
    assert isinstance(sent.result.error, raised)


def test_txn_offset_commit_retries_what_failed_retriably() -> None:
    tm = _with_request_queued("AddOffsetsToTxn")
    answer(tm, AddOffsetsToTxnRequest, AddOffsetsToTxnResponse())
    commit = tm.next_request(has_incomplete_batches=False)
    assert commit is not None
    tm.retry_after_coordinator_lookup(commit)
    answer(tm, FindCoordinatorRequest, COORDINATOR)
    sent = answer(
        tm, TxnOffsetCommitRequest, TxnOffsetCommitResponse({TP_A: code("NOT_COORDINATOR")})
    )
    find = answer(tm, FindCoordinatorRequest, COORDINATOR)
    assert find.body == FindCoordinatorRequest(CoordinatorType.GROUP, "g")
    again = answer(tm, TxnOffsetCommitRequest, TxnOffsetCommitResponse({TP_A: 0}))
    assert again is sent and sent.result.is_successful


def test_a_produce_error_in_a_transaction_is_abortable_and_aborts_unsent_batches() -> None:
    tm = in_transaction(TP_A)
    tm.handle_failed_batch(TP_A, error_for_name("NOT_ENOUGH_REPLICAS")("after retries"))
    assert tm.state is S.ABORTABLE_ERROR and tm.epoch_bump_required
    # Until the abort, batches not yet sent fail with the error that makes it necessary; once
    # aborting (which clears the error, as Kafka's transition does), as aborted.
    assert isinstance(tm.undrained_batch_error(), error_for_name("NOT_ENOUGH_REPLICAS"))
    tm.abort_transaction()
    assert isinstance(tm.undrained_batch_error(), TransactionAbortedError)


def test_batches_of_a_plain_abort_fail_as_transaction_aborted() -> None:
    tm = in_transaction(TP_A)
    assert tm.undrained_batch_error() is None
    tm.abort_transaction()
    assert isinstance(tm.undrained_batch_error(), TransactionAbortedError)


def test_invalid_producer_epoch_on_produce_is_abortable_kip_588() -> None:
    tm = in_transaction(TP_A)
    tm.handle_failed_batch(TP_A, InvalidProducerEpochError())
    assert tm.state is S.ABORTABLE_ERROR
    with pytest.raises(InvalidProducerEpochError, match="attempted to produce with an old epoch"):
        tm.begin_transaction()


def test_a_transaction_aborted_by_its_timeout_ends_the_producer_fenced() -> None:
    """The coordinator aborted the transaction at a bumped epoch: the late batch is refused
    INVALID_PRODUCER_EPOCH (abortable, an epoch bump asked for), the abort's EndTxn with the
    old epoch is fenced, which is fatal (Kafka's EndTxnHandler), and the bump is never sent."""
    tm = in_transaction(TP_A)
    tm.handle_failed_batch(TP_A, InvalidProducerEpochError())
    assert tm.state is S.ABORTABLE_ERROR and tm.epoch_bump_required
    abort = tm.abort_transaction()
    end = answer(tm, EndTxnRequest, EndTxnResponse(code("PRODUCER_FENCED")))
    assert end.body == EndTxnRequest(TID, PID, 0, committed=False)
    assert tm.state is S.FATAL_ERROR and isinstance(abort.error, ProducerFencedError)
    assert tm.next_request(has_incomplete_batches=False) is None, "no InitProducerId"
    abort.ack()
    with pytest.raises(ProducerFencedError):
        tm.abort_transaction()


# -- fatal errors ----------------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(REQUESTS))
@pytest.mark.parametrize("error", ["PRODUCER_FENCED", "INVALID_PRODUCER_EPOCH"])
def test_fencing_is_fatal_and_refuses_every_later_call(name: str, error: str) -> None:
    tm = _with_request_queued(name)
    kind, response = REQUESTS[name]
    sent = answer(tm, kind, response(code(error)))
    assert tm.state is S.FATAL_ERROR
    assert isinstance(sent.result.error, ProducerFencedError)
    sent.result.ack()  # the waiting call raised it
    for operation, call in OPERATIONS.items():
        with pytest.raises(ProducerFencedError) as raised:
            call(tm)
        assert f"transactionalId '{TID}'" in str(raised.value), operation
        assert "has been fenced by another producer" in str(raised.value)
    assert tm.state is S.FATAL_ERROR


@pytest.mark.parametrize(
    ("name", "error"),
    [
        ("AddPartitionsToTxn", "TRANSACTIONAL_ID_AUTHORIZATION_FAILED"),
        ("AddPartitionsToTxn", "INVALID_TXN_STATE"),
        ("AddOffsetsToTxn", "TRANSACTIONAL_ID_AUTHORIZATION_FAILED"),
        ("AddOffsetsToTxn", "INVALID_TXN_STATE"),
        ("EndTxn", "TRANSACTIONAL_ID_AUTHORIZATION_FAILED"),
        ("EndTxn", "INVALID_TXN_STATE"),
    ],
)
def test_authorization_and_txn_state_errors_are_fatal(name: str, error: str) -> None:
    tm = _with_request_queued(name)
    kind, response = REQUESTS[name]
    sent = answer(tm, kind, response(code(error)))
    assert tm.state is S.FATAL_ERROR
    assert isinstance(sent.result.error, error_for_name(error))
    sent.result.ack()
    with pytest.raises(TransactionError) as raised:
        tm.abort_transaction()
    assert isinstance(raised.value.__cause__, error_for_name(error))


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("InitProducerId", "Unexpected error in InitProducerIdResponse; INVALID_REQUEST"),
        ("AddOffsetsToTxn", "Unexpected error in AddOffsetsToTxnResponse: INVALID_REQUEST"),
        ("EndTxn", "Unhandled error in EndTxnResponse: INVALID_REQUEST"),
    ],
)
def test_an_unexpected_error_is_fatal(name: str, message: str) -> None:
    tm = _with_request_queued(name)
    kind, response = REQUESTS[name]
    sent = answer(tm, kind, response(code("INVALID_REQUEST")))
    assert tm.state is S.FATAL_ERROR
    assert isinstance(sent.result.error, TransactionError) and str(sent.result.error) == message


def test_unsupported_version_is_fatal() -> None:
    tm = _with_request_queued("EndTxn")
    end = next_of(tm, EndTxnRequest)
    tm.handle_version_mismatch(end, "EndTxn v5")
    assert tm.state is S.FATAL_ERROR
    assert isinstance(tm.last_error, error_for_name("UNSUPPORTED_VERSION"))


@pytest.mark.parametrize(
    "error", ["CLUSTER_AUTHORIZATION_FAILED", "TRANSACTIONAL_ID_AUTHORIZATION_FAILED"]
)
def test_produce_authorization_errors_are_fatal(error: str) -> None:
    tm = in_transaction(TP_A)
    tm.handle_failed_batch(TP_A, error_for_name(error)())
    assert tm.state is S.FATAL_ERROR and not tm.is_send_to_partition_allowed(TP_A)


def test_find_coordinator_errors() -> None:
    tm = manager()
    tm.init_transactions()
    first = tm.next_request(has_incomplete_batches=False)
    assert first is not None
    tm.retry_after_coordinator_lookup(first)
    find = answer(
        tm, FindCoordinatorRequest, FindCoordinatorResponse(code("COORDINATOR_NOT_AVAILABLE"))
    )
    assert next_of(tm, FindCoordinatorRequest) is find  # retriable
    tm.handle_response(find, FindCoordinatorResponse(code("TRANSACTIONAL_ID_AUTHORIZATION_FAILED")))
    assert tm.state is S.FATAL_ERROR


def test_queued_requests_fail_in_a_fatal_state() -> None:
    tm = in_transaction(TP_A)
    offsets = tm.send_offsets_to_transaction(OFFSETS, GROUP)
    tm.handle_failed_batch(TP_A, ProducerFencedError())
    assert tm.next_request(has_incomplete_batches=False) is None
    assert isinstance(offsets.error, ProducerFencedError)


def test_a_second_in_flight_request_is_fatal() -> None:
    tm = _with_request_queued("AddOffsetsToTxn")
    request = tm.next_request(has_incomplete_batches=False)
    assert request is not None  # never marked sent
    tm.handle_response(request, AddOffsetsToTxnResponse())
    assert tm.state is S.FATAL_ERROR
    assert "more than one in-flight" in str(request.result.error)


def test_a_response_of_the_wrong_kind_is_refused() -> None:
    tm = _with_request_queued("EndTxn")
    end = next_of(tm, EndTxnRequest)
    with pytest.raises(TypeError, match="AddOffsetsToTxnResponse does not answer EndTxnRequest"):
        tm.handle_response(end, AddOffsetsToTxnResponse())


def test_a_response_the_state_cannot_take_poisons_it() -> None:
    """KAFKA-14831: an illegal transition from the sender's side is fatal; later calls say so."""
    tm = ready()
    with pytest.raises(IllegalTransactionStateError):
        tm.handle_failed_batch(TP_A, RecordTooLargeError())
    assert tm.state is S.FATAL_ERROR
    with pytest.raises(IllegalTransactionStateError, match="previous invalid state transition"):
        tm.begin_transaction()


def test_close_fails_what_waits() -> None:
    tm = in_transaction(TP_A)
    commit = tm.commit_transaction()
    tm.close()
    assert tm.state is S.FATAL_ERROR
    assert str(commit.error) == "The producer closed forcefully"


def test_init_authorization_failure_lets_init_be_retried_kafka_13668() -> None:
    tm = manager()
    init = tm.init_transactions()
    first = tm.next_request(has_incomplete_batches=False)
    assert first is not None
    tm.retry_after_coordinator_lookup(first)
    answer(tm, FindCoordinatorRequest, COORDINATOR)
    answer(
        tm,
        InitProducerIdRequest,
        InitProducerIdResponse(code("TRANSACTIONAL_ID_AUTHORIZATION_FAILED")),
    )
    assert tm.state is S.ABORTABLE_ERROR
    assert isinstance(init.error, error_for_name("TRANSACTIONAL_ID_AUTHORIZATION_FAILED"))
    error = tm.maybe_recover_from_authorization_error()
    assert isinstance(error, error_for_name("TRANSACTIONAL_ID_AUTHORIZATION_FAILED"))
    assert tm.state is S.UNINITIALIZED and tm.last_error is None
    assert tm.maybe_recover_from_authorization_error() is None
    init.ack()
    tm.init_transactions()
    assert tm.state is S.INITIALIZING


# -- KIP-360 epoch bumps ---------------------------------------------------------------------------


def test_unknown_producer_id_in_a_transaction_bumps_the_epoch_on_abort() -> None:
    tm = in_transaction(TP_A)
    tm.handle_failed_batch(TP_A, error_for_name("UNKNOWN_PRODUCER_ID")())
    assert tm.state is S.ABORTABLE_ERROR and tm.epoch_bump_required
    with pytest.raises(TransactionError):
        tm.commit_transaction()
    abort = tm.abort_transaction()
    end = next_of(tm, EndTxnRequest)  # the abort's EndTxn goes before the bump
    assert end.body == EndTxnRequest(TID, PID, 0, committed=False)
    tm.handle_response(end, EndTxnResponse())
    assert tm.state is S.INITIALIZING and not abort.is_completed
    bump = next_of(tm, InitProducerIdRequest)
    assert bump.priority is Priority.EPOCH_BUMP
    assert bump.body == InitProducerIdRequest(TID, 60_000, PID, 0)  # the current pair
    tm.handle_response(bump, InitProducerIdResponse(producer_id=PID, producer_epoch=1))
    assert tm.state is S.READY and abort.is_successful
    assert tm.producer_id_and_epoch == ProducerIdAndEpoch(PID, 1)
    assert tm.sequences_reset_required
    tm.acknowledge_sequence_reset()
    abort.ack()
    tm.begin_transaction()
    tm.maybe_add_partition(TP_A)
    add = next_of(tm, AddPartitionsToTxnRequest)
    assert add.body.producer_epoch == 1  # type: ignore[union-attr]


@pytest.mark.parametrize("error", ["UNKNOWN_PRODUCER_ID", "INVALID_PRODUCER_ID_MAPPING"])
@pytest.mark.parametrize("supported", [True, False])
def test_coordinator_lost_producer_id_is_abortable_only_with_epoch_bumps(
    error: str, supported: bool
) -> None:
    tm = in_transaction(TP_A, epoch_bump=supported)
    tm.commit_transaction()
    answer(tm, EndTxnRequest, EndTxnResponse(code(error)))
    assert tm.state is (S.ABORTABLE_ERROR if supported else S.FATAL_ERROR)
    assert tm.epoch_bump_required is supported


def test_without_epoch_bumps_an_abort_only_ends_the_transaction() -> None:
    tm = in_transaction(TP_A, epoch_bump=False)
    tm.handle_failed_batch(TP_A, error_for_name("OUT_OF_ORDER_SEQUENCE_NUMBER")())
    assert tm.state is S.ABORTABLE_ERROR and not tm.epoch_bump_required
    tm.abort_transaction()
    answer(tm, EndTxnRequest, EndTxnResponse())
    assert tm.state is S.READY and tm.next_request(has_incomplete_batches=False) is None


def test_no_bump_is_asked_for_while_the_transaction_completes() -> None:
    tm = in_transaction(TP_A)
    tm.commit_transaction()
    tm.handle_failed_batch(TP_A, error_for_name("UNKNOWN_PRODUCER_ID")())
    assert tm.state is S.ABORTABLE_ERROR and not tm.epoch_bump_required


# -- the calls' arguments --------------------------------------------------------------------------


def test_send_offsets_refuses_a_generation_without_member_id() -> None:
    tm = in_transaction()
    bad = type(GROUP)("g", generation_id=2, member_id="")
    with pytest.raises(ValueError, match=r"has generationId > 0 but member\.id"):
        tm.send_offsets_to_transaction(OFFSETS, bad)


def test_send_offsets_with_no_offsets_does_nothing() -> None:
    tm = ready()  # not even in a transaction: KafkaProducer returns before asking
    assert tm.send_offsets_to_transaction({}, GROUP).is_successful
    assert tm.next_request(has_incomplete_batches=False) is None


def test_send_before_init_names_init() -> None:
    with pytest.raises(IllegalTransactionStateError, match="before completing a call to init"):
        manager().maybe_add_partition(TP_A)


def test_a_transactional_id_is_required() -> None:
    with pytest.raises(ValueError, match=r"transactional\.id"):
        TransactionManager("", transaction_timeout_ms=1, retry_backoff_ms=1)


def test_kafka_errors_keep_their_codes() -> None:
    tm = _with_request_queued("AddPartitionsToTxn")
    add = answer(
        tm, AddPartitionsToTxnRequest, AddPartitionsToTxnResponse({TP_A: code("INVALID_TXN_STATE")})
    )
    assert isinstance(add.result.error, KafkaError) and add.result.error.code == 48


# -- producer configuration ------------------------------------------------------------------------


def _config(**props: object) -> ProducerConfig:
    return ProducerConfig.from_props({"bootstrap.servers": "b:1", **props})


def test_transactional_config_defaults_are_kafkas() -> None:
    plain = _config()
    assert (plain.transactional_id, plain.transaction_timeout_ms) == (None, 60_000)
    config = _config(**{"transactional.id": "tx-1", "transaction.timeout.ms": "900000"})
    assert (config.transactional_id, config.transaction_timeout_ms) == ("tx-1", 900_000)
    assert config.client_id == "producer-tx-1"  # Kafka names the producer after its id
    assert config.idempotence


@pytest.mark.parametrize(
    "props",
    [
        {"enable.idempotence": False},
        {"acks": "1"},  # the default idempotence gives way to acks=1, then the id is refused
        {"retries": 0},
        {"max.in.flight.requests.per.connection": 6},
    ],
)
def test_a_transactional_id_needs_idempotence(props: dict[str, object]) -> None:
    with pytest.raises(
        InvalidConfigError,
        match=r"^INVALID_CONFIG: Cannot set a transactional\.id without also enabling "
        r"idempotence\.$",
    ):
        _config(**{"transactional.id": "tx-1", **props})


def test_an_empty_transactional_id_is_refused() -> None:
    with pytest.raises(InvalidConfigError, match=r"transactional\.id: String must be non-empty"):
        _config(**{"transactional.id": ""})
