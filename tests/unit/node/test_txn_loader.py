"""Loading a ``__transaction_state`` partition: the last record of an id wins, tombstones
delete, unknown key versions and control batches are skipped, bad records fail by name, and
transactions caught between their prepare state and their markers are completed."""

from __future__ import annotations

import struct

import pytest

from kafkasim.common.errors import CorruptRecordError
from kafkasim.common.types import TopicPartition
from kafkasim.node.txn_loader import (
    load_transactions,
    load_transactions_from_batches,
    pending_completions,
)
from kafkasim.node.txn_log import TxnLogValue, encode_key, encode_value, tombstone
from kafkasim.node.txn_metadata import TransactionState
from kafkasim.node.txn_types import TransactionResult
from kafkasim.storage.records.batch import ControlRecordType, encode_batch, encode_control_batch
from kafkasim.storage.records.entry import decode_entries

S = TransactionState
TP0 = TopicPartition("orders", 0)
OFFSETS = TopicPartition("__consumer_offsets", 12)


def record(transactional_id: str, value: TxnLogValue) -> tuple[bytes, bytes]:
    return encode_key(transactional_id), encode_value(value)


def empty(pid: int, epoch: int, at: int) -> TxnLogValue:
    return TxnLogValue(pid, epoch, 60_000, S.EMPTY, frozenset(), at, -1)


def with_txn(pid: int, state: TransactionState, at: int) -> TxnLogValue:
    partitions = frozenset({TP0, OFFSETS}) if state is not S.COMPLETE_COMMIT else frozenset()
    return TxnLogValue(pid, 0, 60_000, state, partitions, at, 100)


def test_the_last_record_of_each_id_wins_and_tombstones_delete() -> None:
    loaded = load_transactions(
        [
            record("b", empty(2, 0, 1)),
            record("a", empty(1, 0, 2)),
            record("a", with_txn(1, S.ONGOING, 3)),
            record("gone", empty(3, 0, 4)),
            tombstone("gone"),
            tombstone("never-there"),
            record("b", with_txn(2, S.PREPARE_COMMIT, 5)),
            record("b", with_txn(2, S.COMPLETE_COMMIT, 6)),
        ]
    )
    assert list(loaded) == ["a", "b"]
    a, b = loaded["a"], loaded["b"]
    assert (a.state, a.topic_partitions, a.txn_start_timestamp) == (S.ONGOING, {TP0, OFFSETS}, 100)
    assert (b.state, b.topic_partitions, b.txn_last_update_timestamp) == (
        S.COMPLETE_COMMIT,
        set(),
        6,
    )
    # Not in the record: a loaded id forgets its last producer and epoch (as Kafka 3.x).
    assert (a.last_producer_id, a.last_producer_epoch, a.pending_state) == (-1, -1, None)


def test_an_id_can_come_back_after_its_tombstone() -> None:
    loaded = load_transactions(
        [record("a", empty(1, 0, 1)), tombstone("a"), record("a", empty(9, 0, 2))]
    )
    assert loaded["a"].producer_id == 9


def test_transactions_between_prepare_and_markers_are_completed() -> None:
    loaded = load_transactions(
        [
            record("committing", with_txn(1, S.PREPARE_COMMIT, 5)),
            record("aborting", with_txn(2, S.PREPARE_ABORT, 5)),
            record("open", with_txn(3, S.ONGOING, 5)),
            record("done", with_txn(4, S.COMPLETE_COMMIT, 5)),
        ]
    )
    completions = pending_completions(loaded, now_ms=50)
    assert [(c.result, c.partitions) for c in completions] == [
        (TransactionResult.ABORT, frozenset({TP0, OFFSETS})),  # "aborting" sorts first
        (TransactionResult.COMMIT, frozenset({TP0, OFFSETS})),
    ]
    commit = completions[1].complete
    assert (commit.txn_state, commit.producer_id, commit.txn_last_update_timestamp) == (
        S.COMPLETE_COMMIT,
        1,
        50,
    )
    committing = loaded["committing"]
    assert committing.pending_state is S.COMPLETE_COMMIT
    # The markers are written; the completion then goes through like any other.
    committing.complete_transition_to(commit)
    assert (committing.state, committing.topic_partitions) == (S.COMPLETE_COMMIT, set())
    assert loaded["open"].pending_state is None, "an open transaction waits for its timeout"


def test_unknown_key_versions_are_skipped() -> None:
    unknown = struct.pack(">h", 5) + b"whatever"
    loaded = load_transactions([(unknown, b"\x00"), record("a", empty(1, 0, 1))])
    assert list(loaded) == ["a"]


def test_a_record_without_a_key_is_corrupt() -> None:
    with pytest.raises(CorruptRecordError, match="record 1 has a null key"):
        load_transactions([record("a", empty(1, 0, 1)), (None, b"x")])


def test_a_value_that_does_not_decode_is_corrupt() -> None:
    with pytest.raises(CorruptRecordError, match="__transaction_state value: truncated"):
        load_transactions([(encode_key("a"), encode_value(empty(1, 0, 1))[:-3])])


def test_loading_from_batches_skips_control_batches() -> None:
    key, value = record("a", with_txn(1, S.ONGOING, 1))
    key2, value2 = tombstone("b")[0], None
    data = b"".join(
        [
            encode_batch([(1, *record("b", empty(2, 0, 1)))], base_offset=0),
            encode_control_batch(
                ControlRecordType.ABORT, producer_id=7, producer_epoch=0, timestamp=1, base_offset=1
            ),
            encode_batch([(2, key, value), (3, key2, value2)], base_offset=2),
        ]
    )
    loaded = load_transactions_from_batches(decode_entries(data))
    assert list(loaded) == ["a"]
    assert loaded["a"].state is S.ONGOING
