"""The transaction coordinator's decisions as Kafka's TransactionCoordinator makes them:
InitProducerId (new ids, epoch bumps, KIP-360 retries, exhaustion, fencing an open
transaction), AddPartitionsToTxn / AddOffsetsToTxn, EndTxn with its retries, the markers after
a prepare, failed writes, timeouts and transactional id expiration."""

from __future__ import annotations

import pytest

from kafkasim.common.errors import IllegalTxnTransitionError, error_for_name
from kafkasim.common.types import TopicPartition
from kafkasim.node.group_records import partition_for as group_partition_for
from kafkasim.node.txn_decisions import (
    abort_timed_out,
    add_offsets_to_txn,
    add_partitions_to_txn,
    end_txn,
    expire_transactional_ids,
    finish_expiration,
    init_producer_id,
    markers_after_prepare,
    new_transaction_metadata,
    on_append_failed,
    timed_out_transactions,
)
from kafkasim.node.txn_metadata import TransactionMetadata, TransactionState
from kafkasim.node.txn_types import (
    AddOffsetsToTxnParams,
    AddPartitionsToTxnParams,
    EndTxnParams,
    InitProducerIdParams,
    TimedOutTransaction,
    TransactionResult,
    TxnAbortThenRetry,
    TxnAppend,
    TxnNeedsProducerId,
    TxnReply,
    TxnSendMarkers,
)

S = TransactionState
COMMIT = TransactionResult.COMMIT
ABORT = TransactionResult.ABORT
MAX_TIMEOUT = 900_000
TIMEOUT = 60_000
TXN = "txn"
PID = 1000
TP0 = TopicPartition("orders", 0)
TP1 = TopicPartition("orders", 1)


def err(name: str) -> TxnReply:
    return TxnReply(error_for_name(name))


def written(m: TransactionMetadata, decision: object) -> TransactionMetadata:
    """Carry out a TxnAppend as the runtime does after a successful write."""
    assert isinstance(decision, TxnAppend), decision
    m.complete_transition_to(decision.transit)
    return m


def init(
    m: TransactionMetadata | None,
    *,
    now: int = 1,
    producer_id: int = -1,
    producer_epoch: int = -1,
    fresh: int | None = None,
    timeout: int = TIMEOUT,
) -> object:
    params = InitProducerIdParams(TXN, timeout, producer_id, producer_epoch)
    return init_producer_id(m, params, MAX_TIMEOUT, now, fresh)


def new_id(now: int = 1) -> TransactionMetadata:
    """A transactional id after its first InitProducerId: epoch 0, Empty."""
    assert init(None) == TxnNeedsProducerId()
    m = new_transaction_metadata(TXN, PID, TIMEOUT, now)
    return written(m, init(m, now=now))


def add(m: TransactionMetadata, *tps: TopicPartition, epoch: int | None = None) -> object:
    e = m.producer_epoch if epoch is None else epoch
    return add_partitions_to_txn(m, AddPartitionsToTxnParams(TXN, PID, e, frozenset(tps)), 10)


def end(m: TransactionMetadata | None, result: TransactionResult, epoch: int = 0) -> object:
    return end_txn(m, EndTxnParams(TXN, PID, epoch, result), 20)


def ongoing() -> TransactionMetadata:
    m = new_id()
    return written(m, add(m, TP0, TP1))


def in_state(state: TransactionState) -> TransactionMetadata:
    """A real history that ends in ``state`` (epoch 0)."""
    if state is S.EMPTY:
        return new_id()
    m = ongoing()
    if state is S.ONGOING:
        return m
    prepare = end(m, COMMIT if state.name.endswith("COMMIT") else ABORT)
    assert isinstance(prepare, TxnAppend)
    written(m, prepare)
    if state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
        return m
    markers = markers_after_prepare(m, prepare.transit, 30)
    assert isinstance(markers, TxnSendMarkers)
    m.complete_transition_to(markers.complete)
    return m


# -- InitProducerId ----------------------------------------------------------------------------


def test_a_new_id_needs_a_producer_id_then_gets_epoch_0() -> None:
    m = new_id(now=5)
    assert (m.producer_id, m.producer_epoch, m.state) == (PID, 0, S.EMPTY)
    assert (m.txn_timeout_ms, m.txn_last_update_timestamp) == (TIMEOUT, 5)


@pytest.mark.parametrize(
    ("transactional_id", "timeout", "producer_id", "producer_epoch", "error"),
    [
        ("", TIMEOUT, -1, -1, "INVALID_REQUEST"),
        (TXN, 0, -1, -1, "INVALID_TRANSACTION_TIMEOUT"),
        (TXN, MAX_TIMEOUT + 1, -1, -1, "INVALID_TRANSACTION_TIMEOUT"),
        (TXN, TIMEOUT, PID, -1, "INVALID_REQUEST"),
        (TXN, TIMEOUT, -1, 0, "INVALID_REQUEST"),
        (TXN, 0, PID, -1, "INVALID_REQUEST"),  # KafkaApis checks the pair first
    ],
)
def test_init_producer_id_refuses_bad_requests(
    transactional_id: str, timeout: int, producer_id: int, producer_epoch: int, error: str
) -> None:
    params = InitProducerIdParams(transactional_id, timeout, producer_id, producer_epoch)
    assert init_producer_id(None, params, MAX_TIMEOUT, 1) == err(error)


def test_the_longest_allowed_timeout_is_accepted() -> None:
    assert init(None, timeout=MAX_TIMEOUT) == TxnNeedsProducerId()


@pytest.mark.parametrize("state", [S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT])
def test_init_on_an_idle_id_bumps_the_epoch(state: TransactionState) -> None:
    m = in_state(state)
    decision = init(m, now=50, timeout=30_000)
    assert isinstance(decision, TxnAppend)
    assert (decision.transit.txn_state, decision.transit.producer_epoch) == (S.EMPTY, 1)
    written(m, decision)
    assert (m.producer_epoch, m.last_producer_epoch, m.txn_timeout_ms) == (1, -1, 30_000)


@pytest.mark.parametrize("state", [S.PREPARE_COMMIT, S.PREPARE_ABORT])
def test_init_while_markers_are_written_is_concurrent_transactions(state: TransactionState) -> None:
    assert init(in_state(state)) == err("CONCURRENT_TRANSACTIONS")


def test_init_while_a_write_is_pending_is_concurrent_transactions() -> None:
    m = ongoing()
    end(m, COMMIT)  # prepared, not yet written
    assert init(m) == err("CONCURRENT_TRANSACTIONS")


def test_init_on_an_open_transaction_fences_it_and_aborts_first() -> None:
    m = ongoing()
    decision = init(m, now=40)
    assert isinstance(decision, TxnAbortThenRetry)
    transit = decision.append.transit
    assert decision.append.epoch_fence
    assert (transit.txn_state, transit.producer_epoch) == (S.PREPARE_ABORT, 1)
    assert transit.topic_partitions == {TP0, TP1}
    # The fenced epoch is taken before the write: the old producer is refused at once.
    assert m.producer_epoch == 1
    assert end(m, COMMIT, epoch=0) == err("PRODUCER_FENCED")
    written(m, decision.append)
    markers = markers_after_prepare(m, transit, 41)
    assert isinstance(markers, TxnSendMarkers)
    assert (markers.result, markers.partitions) == (ABORT, frozenset({TP0, TP1}))
    m.complete_transition_to(markers.complete)
    assert m.state is S.COMPLETE_ABORT
    # The client's retry bumps once more.
    written(m, init(m, now=42))
    assert m.producer_epoch == 2
    assert end(m, COMMIT, epoch=0) == err("PRODUCER_FENCED")


@pytest.mark.parametrize(
    ("producer_id", "producer_epoch", "outcome"),
    [
        (PID, 5, (6, 5)),  # the current producer after an error: bump, remember
        (PID, 4, (5, 4)),  # retry of the bump 4 -> 5 whose answer was lost: same answer
        (PID, 3, "PRODUCER_FENCED"),  # an older producer
        (2000, 5, "PRODUCER_FENCED"),  # another producer id
    ],
)
def test_kip_360_init_with_the_clients_producer(
    producer_id: int, producer_epoch: int, outcome: tuple[int, int] | str
) -> None:
    m = new_id()
    m.producer_epoch, m.last_producer_epoch = 5, 4
    decision = init(m, producer_id=producer_id, producer_epoch=producer_epoch)
    if isinstance(outcome, str):
        assert decision == err(outcome)
        assert m.pending_state is None
    else:
        written(m, decision)
        assert (m.producer_epoch, m.last_producer_epoch) == outcome


def test_a_client_with_any_producer_is_accepted_by_a_just_created_id() -> None:
    """UNKNOWN_PRODUCER_ID recovery: the id was recreated, the client gets the new one."""
    m = new_transaction_metadata(TXN, PID, TIMEOUT, 1)
    written(m, init(m, producer_id=77, producer_epoch=9))
    assert (m.producer_id, m.producer_epoch) == (PID, 0)


def test_an_exhausted_epoch_rotates_the_producer_id() -> None:
    m = new_id()
    m.producer_epoch = 32765
    written(m, init(m))
    assert m.producer_epoch == 32766
    assert init(m) == TxnNeedsProducerId()
    written(m, init(m, fresh=2000))
    assert (m.producer_id, m.producer_epoch, m.last_producer_id) == (2000, 0, PID)
    assert m.last_producer_epoch == -1


def test_a_rotation_retried_by_the_client_gets_the_same_answer() -> None:
    m = new_id()
    m.producer_epoch = 32766
    assert init(m, producer_id=PID, producer_epoch=32766) == TxnNeedsProducerId()
    written(m, init(m, producer_id=PID, producer_epoch=32766, fresh=2000))
    assert (m.producer_id, m.producer_epoch, m.last_producer_epoch) == (2000, 0, 32766)
    # The answer was lost; the client retries with its old producer id and epoch.
    written(m, init(m, producer_id=PID, producer_epoch=32766))
    assert (m.producer_id, m.producer_epoch) == (2000, 0)


def test_fencing_an_open_transaction_may_use_the_last_epoch_then_rotates() -> None:
    m = ongoing()
    m.producer_epoch = 32766
    decision = init(m)
    assert isinstance(decision, TxnAbortThenRetry)
    assert decision.append.transit.producer_epoch == 32767
    written(m, decision.append)
    markers = markers_after_prepare(m, decision.append.transit, 2)
    assert isinstance(markers, TxnSendMarkers)
    m.complete_transition_to(markers.complete)
    assert init(m) == TxnNeedsProducerId()
    written(m, init(m, fresh=3000))
    assert (m.producer_id, m.producer_epoch) == (3000, 0)


@pytest.mark.parametrize("state", [S.DEAD, S.PREPARE_EPOCH_FENCE])
def test_a_state_never_settled_in_is_a_broken_invariant(state: TransactionState) -> None:
    m = new_id()
    m.state = state
    with pytest.raises(IllegalTxnTransitionError, match=f"in state {state.value}"):
        init(m)
    with pytest.raises(IllegalTxnTransitionError, match=f"in state {state.value}"):
        end(m, COMMIT)


# -- AddPartitionsToTxn, AddOffsetsToTxn -------------------------------------------------------


def test_adding_partitions_opens_the_transaction() -> None:
    m = new_id()
    decision = add(m, TP0)
    assert isinstance(decision, TxnAppend)
    assert decision.transit.txn_start_timestamp == 10
    written(m, decision)
    assert (m.state, m.topic_partitions) == (S.ONGOING, {TP0})


def test_adding_partitions_already_in_answers_at_once() -> None:
    m = ongoing()
    assert add(m, TP0) == TxnReply()
    assert m.pending_state is None
    assert isinstance(add(m, TP0, TopicPartition("new", 0)), TxnAppend)


@pytest.mark.parametrize(
    ("case", "error"),
    [
        ("empty id", "INVALID_REQUEST"),
        ("unknown id", "INVALID_PRODUCER_ID_MAPPING"),
        ("other producer id", "INVALID_PRODUCER_ID_MAPPING"),
        ("old epoch", "PRODUCER_FENCED"),
        ("pending", "CONCURRENT_TRANSACTIONS"),
        ("PrepareCommit", "CONCURRENT_TRANSACTIONS"),
        ("PrepareAbort", "CONCURRENT_TRANSACTIONS"),
    ],
)
def test_add_partitions_refusals(case: str, error: str) -> None:
    m: TransactionMetadata | None = ongoing()
    assert m is not None
    params = AddPartitionsToTxnParams(TXN, PID, 0, frozenset({TP1}))
    if case == "empty id":
        params = AddPartitionsToTxnParams("", PID, 0, frozenset({TP1}))
    elif case == "unknown id":
        m = None
    elif case == "other producer id":
        params = AddPartitionsToTxnParams(TXN, PID + 1, 0, frozenset({TP1}))
    elif case == "old epoch":
        m.producer_epoch = 1
    elif case == "pending":
        end(m, ABORT)
    else:
        m = in_state(S(case))
    assert add_partitions_to_txn(m, params, 10) == err(error)


def test_add_offsets_adds_the_groups_offsets_partition() -> None:
    m = new_id()
    params = AddOffsetsToTxnParams(TXN, PID, 0, "my-group")
    decision = add_offsets_to_txn(m, params, 50, 10)
    assert isinstance(decision, TxnAppend)
    expected = TopicPartition("__consumer_offsets", group_partition_for("my-group", 50))
    assert expected.partition == 12
    assert decision.transit.topic_partitions == {expected}


def test_add_offsets_is_fenced_like_add_partitions() -> None:
    params = AddOffsetsToTxnParams(TXN, PID, 7, "g")
    assert add_offsets_to_txn(new_id(), params, 50, 10) == err("PRODUCER_FENCED")


# -- EndTxn ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("state", "result", "outcome"),
    [
        (S.ONGOING, COMMIT, S.PREPARE_COMMIT),
        (S.ONGOING, ABORT, S.PREPARE_ABORT),
        (S.COMPLETE_COMMIT, COMMIT, None),  # a retry whose answer was lost
        (S.COMPLETE_COMMIT, ABORT, "INVALID_TXN_STATE"),
        (S.COMPLETE_ABORT, ABORT, None),
        (S.COMPLETE_ABORT, COMMIT, "INVALID_TXN_STATE"),
        (S.PREPARE_COMMIT, COMMIT, "CONCURRENT_TRANSACTIONS"),
        (S.PREPARE_COMMIT, ABORT, "INVALID_TXN_STATE"),
        (S.PREPARE_ABORT, ABORT, "CONCURRENT_TRANSACTIONS"),
        (S.PREPARE_ABORT, COMMIT, "INVALID_TXN_STATE"),
        (S.EMPTY, COMMIT, "INVALID_TXN_STATE"),
        (S.EMPTY, ABORT, "INVALID_TXN_STATE"),
    ],
)
def test_end_txn_by_state_and_result(
    state: TransactionState, result: TransactionResult, outcome: TransactionState | str | None
) -> None:
    m = in_state(state)
    decision = end(m, result)
    if isinstance(outcome, TransactionState):
        assert isinstance(decision, TxnAppend)
        assert decision.transit.txn_state is outcome
        assert not decision.epoch_fence
    elif outcome is None:
        assert decision == TxnReply()
    else:
        assert decision == err(outcome)


@pytest.mark.parametrize(
    ("case", "error"),
    [
        ("empty id", "INVALID_REQUEST"),
        ("unknown id", "INVALID_PRODUCER_ID_MAPPING"),
        ("other producer id", "INVALID_PRODUCER_ID_MAPPING"),
        ("older epoch", "PRODUCER_FENCED"),
        ("newer epoch", "PRODUCER_FENCED"),
        ("pending", "CONCURRENT_TRANSACTIONS"),
    ],
)
def test_end_txn_refusals(case: str, error: str) -> None:
    m: TransactionMetadata | None = ongoing()
    assert m is not None
    params = EndTxnParams(TXN, PID, 0, COMMIT)
    if case == "empty id":
        params = EndTxnParams("", PID, 0, COMMIT)
    elif case == "unknown id":
        m = None
    elif case == "other producer id":
        params = EndTxnParams(TXN, PID + 1, 0, COMMIT)
    elif case == "older epoch":
        m.producer_epoch = 1
    elif case == "newer epoch":
        params = EndTxnParams(TXN, PID, 1, COMMIT)
    else:
        add(m, TopicPartition("x", 0))
    assert end_txn(m, params, 20) == err(error)


def test_a_commit_end_to_end() -> None:
    m = ongoing()
    prepare = end(m, COMMIT)
    assert isinstance(prepare, TxnAppend)
    written(m, prepare)
    markers = markers_after_prepare(m, prepare.transit, 30)
    assert isinstance(markers, TxnSendMarkers)
    assert (markers.result, markers.partitions) == (COMMIT, frozenset({TP0, TP1}))
    assert markers.complete.txn_state is S.COMPLETE_COMMIT
    m.complete_transition_to(markers.complete)
    assert (m.state, m.topic_partitions, m.txn_last_update_timestamp) == (
        S.COMPLETE_COMMIT,
        set(),
        30,
    )
    assert end(m, COMMIT) == TxnReply()


def test_markers_are_not_sent_when_the_id_moved_on() -> None:
    m = ongoing()
    prepare = end(m, COMMIT)
    assert isinstance(prepare, TxnAppend)
    written(m, prepare)
    m.producer_epoch = 4
    assert markers_after_prepare(m, prepare.transit, 30) == err("PRODUCER_FENCED")
    m.producer_epoch, m.producer_id = 0, 5
    assert markers_after_prepare(m, prepare.transit, 30) == err("INVALID_PRODUCER_ID_MAPPING")


# -- failed writes -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("append_error", "answered"),
    [
        ("NOT_LEADER_OR_FOLLOWER", "NOT_COORDINATOR"),
        ("KAFKA_STORAGE_ERROR", "NOT_COORDINATOR"),
        ("NOT_ENOUGH_REPLICAS", "COORDINATOR_NOT_AVAILABLE"),
        ("NOT_ENOUGH_REPLICAS_AFTER_APPEND", "COORDINATOR_NOT_AVAILABLE"),
        ("REQUEST_TIMED_OUT", "COORDINATOR_NOT_AVAILABLE"),
        ("UNKNOWN_TOPIC_OR_PARTITION", "COORDINATOR_NOT_AVAILABLE"),
        ("MESSAGE_TOO_LARGE", "UNKNOWN_SERVER_ERROR"),
        ("RECORD_LIST_TOO_LARGE", "UNKNOWN_SERVER_ERROR"),
        ("INVALID_RECORD", "INVALID_RECORD"),
    ],
)
def test_a_failed_write_clears_the_pending_state(append_error: str, answered: str) -> None:
    m = ongoing()
    decision = end(m, COMMIT)
    assert isinstance(decision, TxnAppend)
    error = on_append_failed(m, decision, error_for_name(append_error))
    assert error is error_for_name(answered)
    assert m.pending_state is None and m.state is S.ONGOING
    assert isinstance(end(m, COMMIT), TxnAppend), "the client may retry"


def test_a_failed_fence_write_is_not_bumped_again() -> None:
    m = ongoing()
    decision = init(m)
    assert isinstance(decision, TxnAbortThenRetry)
    on_append_failed(m, decision.append, error_for_name("NOT_ENOUGH_REPLICAS"))
    assert m.has_failed_epoch_fence and m.producer_epoch == 1
    again = init(m)
    assert isinstance(again, TxnAbortThenRetry)
    assert again.append.transit.producer_epoch == 1
    written(m, again.append)
    markers = markers_after_prepare(m, again.append.transit, 3)
    assert isinstance(markers, TxnSendMarkers)
    assert not m.has_failed_epoch_fence, "the prepare reached the log"


# -- timeouts ----------------------------------------------------------------------------------


def test_a_transaction_times_out_strictly_after_its_timeout() -> None:
    m = ongoing()  # started at 10
    assert timed_out_transactions([m], 10 + TIMEOUT) == []
    assert timed_out_transactions([m, new_id()], 11 + TIMEOUT) == [TimedOutTransaction(TXN, PID, 0)]
    end(m, COMMIT)
    assert timed_out_transactions([m], 11 + TIMEOUT) == [], "a pending transition is left alone"


def test_a_timed_out_transaction_is_aborted_and_its_producer_fenced() -> None:
    m = ongoing()
    now = 11 + TIMEOUT
    [timed_out] = timed_out_transactions([m], now)
    decision = abort_timed_out(m, timed_out, now)
    assert decision is not None and decision.epoch_fence
    assert (decision.transit.txn_state, decision.transit.producer_epoch) == (S.PREPARE_ABORT, 1)
    written(m, decision)
    # The zombie producer, still at epoch 0, is fenced from here on.
    assert end(m, COMMIT, epoch=0) == err("PRODUCER_FENCED")
    assert add(m, TP0, epoch=0) == err("PRODUCER_FENCED")
    markers = markers_after_prepare(m, decision.transit, now)
    assert isinstance(markers, TxnSendMarkers)
    assert markers.result is ABORT
    m.complete_transition_to(markers.complete)
    assert (m.state, m.producer_epoch) == (S.COMPLETE_ABORT, 1)
    assert timed_out_transactions([m], now + 10 * TIMEOUT) == []


def test_after_a_timeout_abort_the_old_producer_is_fenced_and_a_new_one_goes_on() -> None:
    """Each step after ``abortTimedOutTransactions`` fenced epoch 0 to 1, as Kafka decides it."""
    m = ongoing()
    now = 11 + TIMEOUT
    [timed_out] = timed_out_transactions([m], now)
    abort = abort_timed_out(m, timed_out, now)
    written(m, abort)
    assert abort is not None and m.last_producer_epoch == -1, "the fence forgets the old epoch"
    # Markers being written: the old producer's EndTxn is fenced first (its epoch is checked
    # before the pending completion), a new producer's InitProducerId is told to retry.
    markers = markers_after_prepare(m, abort.transit, now)
    assert isinstance(markers, TxnSendMarkers) and m.pending_state is S.COMPLETE_ABORT
    for result in (ABORT, COMMIT):
        assert end(m, result, epoch=0) == err("PRODUCER_FENCED")
    assert init(m, now=now) == err("CONCURRENT_TRANSACTIONS")
    m.complete_transition_to(markers.complete)
    # Complete: the old producer's EndTxn and its KIP-360 bump (its pid and epoch 0) stay
    # fenced; nothing is written for them.
    assert end(m, ABORT, epoch=0) == err("PRODUCER_FENCED")
    assert init(m, now=now, producer_id=PID, producer_epoch=0) == err("PRODUCER_FENCED")
    assert m.pending_state is None and (m.producer_epoch, m.state) == (1, S.COMPLETE_ABORT)
    # A new producer (no pid and epoch) gets the next epoch and commits with it.
    bump = init(m, now=now)
    assert isinstance(bump, TxnAppend)
    assert (bump.transit.producer_id, bump.transit.producer_epoch) == (PID, 2)
    written(m, bump)
    assert m.last_producer_epoch == -1
    written(m, add(m, TP0))
    assert isinstance(end(m, COMMIT, epoch=2), TxnAppend)
    assert init(m, now=now, producer_id=PID, producer_epoch=0) == err("CONCURRENT_TRANSACTIONS")


def test_a_timeout_found_earlier_is_not_acted_on_once_the_id_moved_on() -> None:
    m = ongoing()
    now = 11 + TIMEOUT
    [timed_out] = timed_out_transactions([m], now)
    assert abort_timed_out(m, TimedOutTransaction(TXN, PID + 1, 0), now) is None
    written(m, end(m, COMMIT))
    assert abort_timed_out(m, timed_out, now) is None
    assert m.pending_state is None


# -- transactional id expiration ---------------------------------------------------------------

EXPIRATION = 604_800_000


@pytest.mark.parametrize("state", list(TransactionState)[:6], ids=lambda s: s.value)
def test_only_idle_ids_expire(state: TransactionState) -> None:
    m = in_state(state)
    last = m.txn_last_update_timestamp
    assert expire_transactional_ids([m], last + EXPIRATION - 1, EXPIRATION) == []
    expired = expire_transactional_ids([m], last + EXPIRATION, EXPIRATION)
    if state.is_expiration_allowed:
        [(metadata, transit)] = expired
        assert metadata is m and transit.txn_state is S.DEAD and m.pending_state is S.DEAD
    else:
        assert expired == []


def test_an_expired_id_is_removed_only_after_its_tombstone() -> None:
    m = new_id()
    [(_, transit)] = expire_transactional_ids([m], 1 + EXPIRATION, EXPIRATION)
    assert expire_transactional_ids([m], 2 + EXPIRATION, EXPIRATION) == [], "already pending"
    assert finish_expiration(m, transit, None)
    failed = new_id()
    [(_, transit)] = expire_transactional_ids([failed], 1 + EXPIRATION, EXPIRATION)
    assert not finish_expiration(failed, transit, error_for_name("NOT_ENOUGH_REPLICAS"))
    assert failed.pending_state is None
