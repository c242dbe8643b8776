"""Random interleavings of a producer's calls and a sender's answers (any error code each
handler may meet) never take the transaction manager to a state Kafka's table does not
allow, never raise anything but the producer's own errors, and keep its invariants."""

from __future__ import annotations

import contextlib

from hypothesis import given, settings
from hypothesis import strategies as st

from kafkasim.client.transaction_manager import TransactionManager, TxnState
from kafkasim.client.transaction_state import is_transition_valid
from kafkasim.client.transaction_types import (
    AddOffsetsToTxnRequest,
    AddOffsetsToTxnResponse,
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
    EndTxnRequest,
    EndTxnResponse,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    InitProducerIdRequest,
    InitProducerIdResponse,
    OffsetAndMetadata,
    TxnOffsetCommitRequest,
    TxnOffsetCommitResponse,
    TxnRequest,
    TxnResponseBody,
)
from kafkasim.common.errors import KafkasimError, error_for_name
from tests.unit.client.txn_harness import GROUP, TP_A, TP_B, code, manager

ERRORS = [
    "NOT_COORDINATOR",
    "COORDINATOR_NOT_AVAILABLE",
    "COORDINATOR_LOAD_IN_PROGRESS",
    "CONCURRENT_TRANSACTIONS",
    "REQUEST_TIMED_OUT",
    "PRODUCER_FENCED",
    "INVALID_PRODUCER_EPOCH",
    "TRANSACTIONAL_ID_AUTHORIZATION_FAILED",
    "CLUSTER_AUTHORIZATION_FAILED",
    "GROUP_AUTHORIZATION_FAILED",
    "TOPIC_AUTHORIZATION_FAILED",
    "INVALID_TXN_STATE",
    "UNKNOWN_PRODUCER_ID",
    "INVALID_PRODUCER_ID_MAPPING",
    "OPERATION_NOT_ATTEMPTED",
    "UNKNOWN_MEMBER_ID",
    "INVALID_REQUEST",
]
# Mostly success, so that runs get far; any of the errors otherwise.
CODES = st.one_of(st.just(0), st.just(0), st.sampled_from([code(e) for e in ERRORS]))
PRODUCE_ERRORS = st.sampled_from(
    [
        error_for_name(e)
        for e in (
            "UNKNOWN_PRODUCER_ID",
            "OUT_OF_ORDER_SEQUENCE_NUMBER",
            "INVALID_PRODUCER_EPOCH",
            "PRODUCER_FENCED",
            "MESSAGE_TOO_LARGE",
            "CLUSTER_AUTHORIZATION_FAILED",
        )
    ]
)


def _response(request: TxnRequest, data: st.DataObject) -> TxnResponseBody:
    body = request.body
    c = data.draw(CODES)
    if isinstance(body, FindCoordinatorRequest):
        return FindCoordinatorResponse(c, node_id=1, host="b1", port=9092)
    if isinstance(body, InitProducerIdRequest):
        epoch = body.producer_epoch + 1 if body.producer_id >= 0 else 0
        return InitProducerIdResponse(c, producer_id=7, producer_epoch=epoch)
    if isinstance(body, AddPartitionsToTxnRequest):
        return AddPartitionsToTxnResponse({tp: data.draw(CODES) for tp in body.partitions})
    if isinstance(body, AddOffsetsToTxnRequest):
        return AddOffsetsToTxnResponse(c)
    if isinstance(body, TxnOffsetCommitRequest):
        return TxnOffsetCommitResponse({tp: data.draw(CODES) for tp, _ in body.offsets})
    assert isinstance(body, EndTxnRequest)
    return EndTxnResponse(c)


def _sender_step(tm: TransactionManager, data: st.DataObject) -> None:
    request = tm.next_request(has_incomplete_batches=data.draw(st.booleans()))
    if request is None:
        return
    if request.coordinator_type is not None and tm.coordinator(request.coordinator_type) is None:
        tm.retry_after_coordinator_lookup(request)
        return
    if request.coordinator_type is not None:
        tm.coordinator_ready(data.draw(st.sampled_from([2, 4])))
    tm.request_sent(request)
    if data.draw(st.integers(0, 9)) == 0:
        tm.handle_disconnect(request)
    else:
        tm.handle_response(request, _response(request, data))


ACTIONS = [
    "init",
    "begin",
    "send",
    "offsets",
    "commit",
    "abort",
    "sender",
    "sender",
    "sender",
    "batch_failed",
    "ack",
    "recover",
]


def _act(tm: TransactionManager, action: str, data: st.DataObject) -> None:
    if action == "init":
        tm.init_transactions()
    elif action == "begin":
        tm.begin_transaction()
    elif action == "send":
        tm.maybe_add_partition(data.draw(st.sampled_from([TP_A, TP_B])))
    elif action == "offsets":
        tm.send_offsets_to_transaction({TP_A: OffsetAndMetadata(5)}, GROUP)
    elif action == "commit":
        tm.commit_transaction()
    elif action == "abort":
        tm.abort_transaction()
    elif action == "sender":
        _sender_step(tm, data)
    elif action == "batch_failed":
        if tm.state is TxnState.IN_TRANSACTION or tm.is_completing:
            tm.handle_failed_batch(TP_A, data.draw(PRODUCE_ERRORS)())
    elif action == "ack":
        pending = tm._pending_transition
        if pending is not None and pending.result.is_completed:
            pending.result.ack()  # the waiting call saw its outcome
    elif action == "recover":
        tm.maybe_recover_from_authorization_error()


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_random_calls_and_answers_stay_within_kafkas_states(data: st.DataObject) -> None:
    tm = manager()
    for _ in range(data.draw(st.integers(1, 60))):
        before = tm.state
        action = data.draw(st.sampled_from(ACTIONS))
        with contextlib.suppress(KafkasimError):  # refused by name: the per-call tests check
            _act(tm, action, data)
        after = tm.state
        assert isinstance(after, TxnState)
        assert after is before or is_transition_valid(before, after), (action, before, after)
        if before is TxnState.FATAL_ERROR:
            assert after is TxnState.FATAL_ERROR  # never left
        assert (tm.last_error is not None) == tm.has_error, (action, after, tm.last_error)
        if after in (TxnState.READY, TxnState.UNINITIALIZED):
            assert not tm.partitions_in_transaction and not tm.has_partitions_to_add
        if tm.partitions_in_transaction or tm.has_partitions_to_add:
            assert tm.producer_id_and_epoch.is_valid  # no partition is added before init
