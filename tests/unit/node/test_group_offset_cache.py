"""A group's offset cache (Kafka's ``GroupMetadata`` offsets, pending plain commits and pending
transactional commits), pure: what OffsetFetch sees while commits are pending, what a
transaction's end does to them, and the log-order rule between plain and transactional
commits."""

from __future__ import annotations

import pytest

from kafkasim.common.types import TopicPartition
from kafkasim.node.group_offset_cache import CommitRecord, OffsetCache
from kafkasim.node.group_records import OffsetValue

TP = TopicPartition("t", 0)
OTHER = TopicPartition("t", 1)
PID = 7


def value(offset: int) -> OffsetValue:
    return OffsetValue(offset, -1, "", 1000)


def plain(cache: OffsetCache, tp: TopicPartition, offset: int, log_offset: int) -> None:
    cache.prepare_commit({tp: value(offset)})
    cache.on_commit_append(tp, value(offset), log_offset)


def txn(
    cache: OffsetCache, tp: TopicPartition, offset: int, log_offset: int, pid: int = PID
) -> None:
    cache.prepare_txn_commit(pid, {tp: value(offset)})
    cache.on_txn_commit_append(pid, tp, value(offset), log_offset)


def test_a_transactional_commit_is_pending_until_its_transaction_commits() -> None:
    cache = OffsetCache()
    plain(cache, TP, 5, log_offset=0)
    txn(cache, TP, 9, log_offset=1)
    assert cache[TP].offset == 5 and cache.has_pending(TP) and cache.has_pending_from(PID)
    assert not cache.has_pending(OTHER)
    cache.complete_txn(PID, is_commit=True)
    assert cache[TP].offset == 9 and cache.record(TP) == CommitRecord(value(9), 1)
    assert not cache.has_pending(TP) and cache.producers == frozenset()


def test_an_aborted_transaction_leaves_the_committed_offsets_as_they_were() -> None:
    cache = OffsetCache()
    plain(cache, TP, 5, log_offset=0)
    txn(cache, TP, 9, log_offset=1)
    txn(cache, OTHER, 3, log_offset=1)
    cache.complete_txn(PID, is_commit=False)
    assert dict(cache) == {TP: value(5)} and not cache.has_pending(TP)


def test_a_plain_commit_written_after_the_transactional_one_wins_when_the_transaction_commits() -> (
    None
):
    cache = OffsetCache()
    txn(cache, TP, 9, log_offset=3)
    plain(cache, TP, 20, log_offset=4)  # later in the log than the transaction's record
    cache.complete_txn(PID, is_commit=True)
    assert cache[TP].offset == 20


def test_a_transactional_commit_written_after_a_plain_one_wins_when_it_commits() -> None:
    cache = OffsetCache()
    plain(cache, TP, 20, log_offset=2)
    txn(cache, TP, 9, log_offset=3)
    cache.complete_txn(PID, is_commit=True)
    assert cache[TP].offset == 9


def test_a_plain_commit_in_flight_is_pending_and_a_failed_one_is_forgotten() -> None:
    cache = OffsetCache()
    cache.prepare_commit({TP: value(1)})
    assert cache.has_pending(TP) and TP not in cache
    cache.fail_commit(TP, value(1))
    assert not cache.has_pending(TP) and TP not in cache


def test_a_failed_transactional_append_leaves_nothing_pending() -> None:
    cache = OffsetCache()
    cache.prepare_txn_commit(PID, {TP: value(1)})
    cache.fail_txn_commit(PID, TP)
    assert not cache.has_pending(TP) and not cache.has_pending_from(PID)


def test_committing_a_transaction_whose_record_was_never_appended_is_refused() -> None:
    cache = OffsetCache()
    cache.prepare_txn_commit(PID, {TP: value(1)})
    with pytest.raises(RuntimeError, match="never appended"):
        cache.complete_txn(PID, is_commit=True)
    assert cache.has_pending(TP) and TP not in cache


def test_removing_partitions_drops_their_committed_and_pending_offsets() -> None:
    cache = OffsetCache()
    plain(cache, TP, 5, log_offset=0)
    txn(cache, TP, 6, log_offset=1)
    txn(cache, OTHER, 7, log_offset=1, pid=8)
    cache.remove([TP])
    assert TP not in cache and not cache.has_pending(TP)
    assert cache.producers == frozenset({8})


def test_a_committed_offset_must_know_where_its_record_is() -> None:
    with pytest.raises(ValueError, match="log offset"):
        OffsetCache({TP: CommitRecord(value(1), None)})
