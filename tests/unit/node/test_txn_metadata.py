"""Kafka's transaction states and TransactionMetadata: the legal previous-state table, every
prepared transition legal or refused by name, the completion checks, epoch exhaustion, and
the error codes the coordinator answers with."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from kafkasim.common.errors import IllegalTxnTransitionError, error_for_code, error_for_name
from kafkasim.common.types import TopicPartition
from kafkasim.node.txn_metadata import (
    VALID_PREVIOUS_STATES,
    TransactionMetadata,
    TransactionState,
    TxnTransitMetadata,
    is_epoch_exhausted,
)

S = TransactionState
ALL = list(TransactionState)
TP0 = TopicPartition("orders", 0)
TP1 = TopicPartition("orders", 1)
NOW = 10_000

# Kafka's TransactionState.validPreviousStates, written out by name (TransactionMetadata.scala).
KAFKA_TABLE: dict[str, set[str]] = {
    "Empty": {"Empty", "CompleteCommit", "CompleteAbort"},
    "Ongoing": {"Ongoing", "Empty", "CompleteCommit", "CompleteAbort"},
    "PrepareCommit": {"Ongoing"},
    "PrepareAbort": {"Ongoing", "PrepareEpochFence"},
    "CompleteCommit": {"PrepareCommit"},
    "CompleteAbort": {"PrepareAbort"},
    "Dead": {"Empty", "CompleteAbort", "CompleteCommit"},
    "PrepareEpochFence": {"Ongoing"},
}
# Kafka's TransactionState ids (the status byte of __transaction_state).
KAFKA_IDS = {
    "Empty": 0,
    "Ongoing": 1,
    "PrepareCommit": 2,
    "PrepareAbort": 3,
    "CompleteCommit": 4,
    "CompleteAbort": 5,
    "Dead": 6,
    "PrepareEpochFence": 7,
}


def metadata(state: TransactionState, epoch: int = 3, **kw: object) -> TransactionMetadata:
    partitions = {TP0} if state not in (S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT) else set()
    values: dict[str, object] = {
        "transactional_id": "txn",
        "producer_id": 1000,
        "producer_epoch": epoch,
        "txn_timeout_ms": 60_000,
        "state": state,
        "topic_partitions": partitions,
        "txn_start_timestamp": 500 if partitions else -1,
        "txn_last_update_timestamp": 600,
    }
    values.update(kw)
    return TransactionMetadata(**values)  # type: ignore[arg-type]


# -- the table ---------------------------------------------------------------------------------


@pytest.mark.parametrize("to_state", ALL, ids=lambda s: s.value)
@pytest.mark.parametrize("from_state", ALL, ids=lambda s: s.value)
def test_the_previous_state_table_is_kafkas(
    from_state: TransactionState, to_state: TransactionState
) -> None:
    legal = from_state.value in KAFKA_TABLE[to_state.value]
    assert (from_state in to_state.valid_previous_states) is legal
    assert (from_state in VALID_PREVIOUS_STATES[to_state]) is legal


@pytest.mark.parametrize("state", ALL, ids=lambda s: s.value)
def test_state_ids_and_names_are_kafkas(state: TransactionState) -> None:
    assert state.id == KAFKA_IDS[state.value]
    assert TransactionState.from_id(state.id) is state
    assert TransactionState.from_name(state.value) is state


def test_unknown_state_ids_and_names_are_none() -> None:
    assert TransactionState.from_id(8) is None
    assert TransactionState.from_id(-1) is None
    assert TransactionState.from_name("ongoing") is None  # exact names, as Kafka's fromName


def test_only_idle_states_may_expire() -> None:
    expirable = {s for s in ALL if s.is_expiration_allowed}
    assert expirable == {S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}


# -- every prepare from every state ------------------------------------------------------------

# Each public prepare and the state it targets from a given current state.
PREPARES: dict[str, tuple[Callable[[TransactionMetadata], object], Callable[..., S]]] = {
    "increment_epoch": (
        lambda m: m.prepare_increment_producer_epoch(60_000, None, NOW),
        lambda _: S.EMPTY,
    ),
    "add_partitions": (
        lambda m: m.prepare_add_partitions(frozenset({TP1}), NOW),
        lambda _: S.ONGOING,
    ),
    "commit": (
        lambda m: m.prepare_abort_or_commit(S.PREPARE_COMMIT, NOW),
        lambda _: S.PREPARE_COMMIT,
    ),
    "abort": (lambda m: m.prepare_abort_or_commit(S.PREPARE_ABORT, NOW), lambda _: S.PREPARE_ABORT),
    "complete": (
        lambda m: m.prepare_complete(NOW),
        lambda s: S.COMPLETE_COMMIT if s is S.PREPARE_COMMIT else S.COMPLETE_ABORT,
    ),
    "dead": (lambda m: m.prepare_dead(), lambda _: S.DEAD),
    "fence": (lambda m: m.prepare_fence_producer_epoch(), lambda _: S.PREPARE_EPOCH_FENCE),
}


@pytest.mark.parametrize("prepare", list(PREPARES))
@pytest.mark.parametrize("from_state", ALL, ids=lambda s: s.value)
def test_each_prepare_is_legal_exactly_from_kafkas_previous_states(
    from_state: TransactionState, prepare: str
) -> None:
    call, target_of = PREPARES[prepare]
    target = target_of(from_state)
    m = metadata(from_state)
    if from_state.value in KAFKA_TABLE[target.value]:
        transit = call(m)
        assert isinstance(transit, TxnTransitMetadata)
        assert transit.txn_state is target
        assert m.pending_state is target
    else:
        with pytest.raises(
            IllegalTxnTransitionError,
            match=f"txn: cannot prepare a transition from {from_state.value} to {target.value}",
        ):
            call(m)
        assert m.pending_state is None, "a refused transition leaves nothing pending"


@pytest.mark.parametrize("from_state", ALL, ids=lambda s: s.value)
def test_a_producer_id_rotation_needs_an_idle_id(from_state: TransactionState) -> None:
    m = metadata(from_state)
    if from_state.value in KAFKA_TABLE["Empty"]:
        transit = m.prepare_producer_id_rotation(2000, 60_000, NOW, record_last_epoch=False)
        assert (transit.producer_id, transit.producer_epoch) == (2000, 0)
    else:
        with pytest.raises(IllegalTxnTransitionError, match=f"from {from_state.value} to Empty"):
            m.prepare_producer_id_rotation(2000, 60_000, NOW, record_last_epoch=False)


def test_nothing_can_be_prepared_while_a_transition_is_pending() -> None:
    m = metadata(S.ONGOING)
    m.prepare_abort_or_commit(S.PREPARE_COMMIT, NOW)
    with pytest.raises(IllegalTxnTransitionError, match="PrepareCommit is already pending"):
        m.prepare_add_partitions(frozenset({TP1}), NOW)


def test_end_txn_prepares_only_prepare_states() -> None:
    with pytest.raises(IllegalTxnTransitionError, match="from Ongoing to CompleteCommit"):
        metadata(S.ONGOING).prepare_abort_or_commit(S.COMPLETE_COMMIT, NOW)


# -- transitions and their values --------------------------------------------------------------


def test_adding_partitions_to_an_idle_id_starts_the_transaction_clock() -> None:
    m = metadata(S.COMPLETE_COMMIT)
    transit = m.prepare_add_partitions(frozenset({TP0}), NOW)
    assert transit.txn_start_timestamp == NOW
    m.complete_transition_to(transit)
    assert (m.state, m.topic_partitions, m.txn_start_timestamp) == (S.ONGOING, {TP0}, NOW)
    transit = m.prepare_add_partitions(frozenset({TP1}), NOW + 5)
    assert transit.txn_start_timestamp == NOW, "more partitions keep the start"
    m.complete_transition_to(transit)
    assert m.topic_partitions == {TP0, TP1}
    assert m.txn_last_update_timestamp == NOW + 5


def test_a_whole_commit_goes_through_its_states() -> None:
    m = metadata(S.ONGOING)
    m.complete_transition_to(m.prepare_abort_or_commit(S.PREPARE_COMMIT, NOW))
    assert (m.state, m.topic_partitions) == (S.PREPARE_COMMIT, {TP0})
    m.remove_partition(TP0)
    m.topic_partitions.add(TP0)
    m.complete_transition_to(m.prepare_complete(NOW + 1))
    assert (m.state, m.topic_partitions, m.pending_state) == (S.COMPLETE_COMMIT, set(), None)
    assert m.txn_start_timestamp == 500


def test_a_partition_leaves_only_a_transaction_being_completed() -> None:
    with pytest.raises(IllegalTxnTransitionError, match="cannot remove partition"):
        metadata(S.ONGOING).remove_partition(TP0)


def test_a_transition_completes_only_the_pending_one() -> None:
    m = metadata(S.ONGOING)
    commit = m.prepare_abort_or_commit(S.PREPARE_COMMIT, NOW)
    other = TxnTransitMetadata(
        1000, 1000, 3, -1, 60_000, S.PREPARE_ABORT, frozenset({TP0}), 500, NOW
    )
    with pytest.raises(IllegalTxnTransitionError, match="the pending state is PrepareCommit"):
        m.complete_transition_to(other)
    m.pending_state = None
    with pytest.raises(IllegalTxnTransitionError, match="no transition is pending"):
        m.complete_transition_to(commit)


def test_a_completion_with_another_producer_epoch_is_refused() -> None:
    m = metadata(S.ONGOING)
    transit = m.prepare_abort_or_commit(S.PREPARE_ABORT, NOW)
    m.producer_epoch += 1
    with pytest.raises(IllegalTxnTransitionError, match="keep the transaction as it is"):
        m.complete_transition_to(transit)


def test_an_ongoing_completion_may_only_add_partitions() -> None:
    m = metadata(S.ONGOING)
    transit = m.prepare_add_partitions(frozenset({TP1}), NOW)
    m.topic_partitions.add(TopicPartition("other", 0))
    with pytest.raises(IllegalTxnTransitionError, match="only add partitions"):
        m.complete_transition_to(transit)


def test_fence_and_dead_are_never_completed() -> None:
    fenced = metadata(S.ONGOING)
    with pytest.raises(IllegalTxnTransitionError, match="completed by its PrepareAbort"):
        fenced.complete_transition_to(fenced.prepare_fence_producer_epoch())
    dead = metadata(S.EMPTY)
    with pytest.raises(IllegalTxnTransitionError, match="removed, not completed"):
        dead.complete_transition_to(dead.prepare_dead())


# -- epochs ------------------------------------------------------------------------------------


def test_epochs_are_exhausted_one_before_short_max() -> None:
    assert not is_epoch_exhausted(32765)
    assert is_epoch_exhausted(32766)
    assert is_epoch_exhausted(32767)


def bump(m: TransactionMetadata) -> TxnTransitMetadata:
    transit = m.prepare_increment_producer_epoch(60_000, None, NOW)
    assert transit is not None
    return transit


def test_a_new_id_gets_epoch_0() -> None:
    m = metadata(S.EMPTY, epoch=-1)
    transit = bump(m)
    assert (transit.producer_epoch, transit.last_producer_epoch) == (0, -1)
    m.complete_transition_to(transit)
    assert m.producer_epoch == 0
    assert m.last_producer_id == 1000


def test_the_last_epoch_is_given_out_and_then_no_more() -> None:
    m = metadata(S.EMPTY, epoch=32765)
    m.complete_transition_to(bump(m))
    assert m.producer_epoch == 32766 and m.is_producer_epoch_exhausted
    with pytest.raises(
        IllegalTxnTransitionError, match="any more producer epochs for producer id 1000"
    ):
        m.prepare_increment_producer_epoch(60_000, None, NOW)


def test_a_fence_may_use_short_max_but_not_overflow_it() -> None:
    m = metadata(S.ONGOING, epoch=32766)
    assert m.prepare_fence_producer_epoch().producer_epoch == 32767
    with pytest.raises(IllegalTxnTransitionError, match="would overflow"):
        metadata(S.ONGOING, epoch=32767).prepare_fence_producer_epoch()


def test_a_failed_fence_is_not_bumped_again() -> None:
    m = metadata(S.ONGOING, epoch=7, has_failed_epoch_fence=True)
    assert m.prepare_fence_producer_epoch().producer_epoch == 7


@pytest.mark.parametrize(
    ("expected", "result"),
    [
        (None, (4, -1)),  # a new client: bump, forget the last epoch
        (3, (4, 3)),  # the current client after an error: bump, remember its epoch
        (2, (3, 2)),  # a retry of the bump from 2 to 3: the same answer again
        (1, None),  # anything else is fenced
    ],
)
def test_kip_360_epoch_bumps(expected: int | None, result: tuple[int, int] | None) -> None:
    m = metadata(S.COMPLETE_ABORT, epoch=3, last_producer_epoch=2)
    transit = m.prepare_increment_producer_epoch(60_000, expected, NOW)
    if result is None:
        assert transit is None
        assert m.pending_state is None
    else:
        assert transit is not None
        assert (transit.producer_epoch, transit.last_producer_epoch) == result


def test_a_rotation_records_the_last_epoch_when_the_client_gave_one() -> None:
    m = metadata(S.EMPTY, epoch=32766)
    transit = m.prepare_producer_id_rotation(2000, 30_000, NOW, record_last_epoch=True)
    m.complete_transition_to(transit)
    assert (m.producer_id, m.producer_epoch) == (2000, 0)
    assert (m.last_producer_id, m.last_producer_epoch) == (1000, 32766)
    assert m.txn_timeout_ms == 30_000


# -- error codes -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "code", "retriable"),
    [
        ("INVALID_PRODUCER_EPOCH", 47, False),
        ("INVALID_TXN_STATE", 48, False),
        ("INVALID_PRODUCER_ID_MAPPING", 49, False),
        ("INVALID_TRANSACTION_TIMEOUT", 50, False),
        ("CONCURRENT_TRANSACTIONS", 51, True),
        ("TRANSACTION_COORDINATOR_FENCED", 52, False),
        ("PRODUCER_FENCED", 90, False),
        ("TRANSACTIONAL_ID_NOT_FOUND", 105, False),
    ],
)
def test_transaction_errors_have_kafkas_codes(name: str, code: int, retriable: bool) -> None:
    cls = error_for_name(name)
    assert (cls.code, cls.retriable) == (code, retriable)
    assert error_for_code(code) is cls
