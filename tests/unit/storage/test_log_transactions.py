"""Transactions through the partition log: transactional appends and markers (leader and
follower), the LSO, read_committed reads with their aborted transactions, the ``.txnindex``
files per segment, truncation, and recovery rebuilding them."""

from __future__ import annotations

from pathlib import Path

import crc32c
import pytest

from kafkasim.common.errors import (
    InvalidRecordError,
    InvalidTxnStateError,
    TransactionCoordinatorFencedError,
)
from kafkasim.storage.log import AppendOrigin, FetchIsolation, Log
from kafkasim.storage.records.batch import (
    decode_batch,
    encode_control_batch,
    iter_batches,
    parse_end_transaction_marker,
)
from kafkasim.storage.txn_index import AbortedTxn
from tests.txn_records import ABORT, COMMIT, Producer
from tests.unit.storage.logtools import T0, open_log, reopen


def _append(log: Log, data: bytes) -> int:
    origin = AppendOrigin.COORDINATOR if data[22] & 0x20 else AppendOrigin.CLIENT
    info = log.append_as_leader(data, leader_epoch=0, origin=origin)
    log.update_high_watermark(log.log_end_offset)
    return info.first_offset


def test_end_txn_marker_batch_bytes_are_kafkas(tmp_path: Path) -> None:
    """MemoryRecords.withEndTransactionMarker(50, 1234, -1, pid 9, epoch 2, COMMIT epoch 7),
    byte by byte; the CRC is CRC-32C of everything from the attributes on."""
    record = bytes([0x20, 0x00, 0x00, 0x00, 0x08]) + b"\x00\x00\x00\x01"  # len 16, key 4 B
    record += bytes([0x0C]) + b"\x00\x00\x00\x00\x00\x07" + b"\x00"  # value 6 B, no headers
    after_crc = (
        b"\x00\x30"  # attributes: transactional | control
        + b"\x00\x00\x00\x00"  # lastOffsetDelta
        + (1234).to_bytes(8, "big") * 2  # first and max timestamp
        + (9).to_bytes(8, "big")
        + b"\x00\x02"
        + b"\xff\xff\xff\xff"  # no base sequence
        + b"\x00\x00\x00\x01"  # one record
        + record
    )
    expected = (
        (50).to_bytes(8, "big")
        + (66).to_bytes(4, "big")  # 78 bytes - 12
        + b"\xff\xff\xff\xff"
        + b"\x02"
        + crc32c.crc32c(after_crc).to_bytes(4, "big")
        + after_crc
    )
    data = encode_control_batch(
        COMMIT, producer_id=9, producer_epoch=2, timestamp=1234, coordinator_epoch=7, base_offset=50
    )
    assert data == expected
    header, (rec,) = decode_batch(expected)
    marker = parse_end_transaction_marker(rec.key, rec.value)
    assert (header.is_control, marker.control_type, marker.coordinator_epoch) == (True, COMMIT, 7)


def test_a_client_batch_with_the_control_bit_is_invalid_record(tmp_path: Path) -> None:
    log, _ = open_log(tmp_path)
    with pytest.raises(InvalidRecordError, match="not allowed to write control records"):
        log.append_as_leader(Producer(1).marker(COMMIT), leader_epoch=0)
    assert log.log_end_offset == 0


def test_lso_follows_transactions_and_the_high_watermark(tmp_path: Path) -> None:
    log, _ = open_log(tmp_path)
    a, b = Producer(1), Producer(2)
    _append(log, a.batch(2))  # 0-1
    _append(log, b.batch())  # 2
    assert (log.high_watermark, log.last_stable_offset) == (3, 0)
    _append(log, a.marker(COMMIT))  # 3
    assert log.last_stable_offset == 2
    log.append_as_leader(b.marker(ABORT), leader_epoch=0, origin=AppendOrigin.COORDINATOR)  # 4
    assert log.last_stable_offset == 2  # the marker at 4 is above the HW (4)
    log.update_high_watermark(5)
    assert log.last_stable_offset == 5
    assert log.active_segment.txn_index.all_aborted_txns() == [AbortedTxn(2, 2, 4, 5)]


def test_read_committed_stops_at_the_lso_and_returns_the_aborted_transactions(
    tmp_path: Path,
) -> None:
    log, _ = open_log(tmp_path)
    a, b = Producer(1), Producer(2)
    _append(log, a.batch())  # 0
    _append(log, b.batch())  # 1
    _append(log, a.marker(ABORT))  # 2: LSO recorded 1 (B open)
    uncommitted = log.read(0, 1 << 20, isolation=FetchIsolation.HIGH_WATERMARK)
    assert uncommitted.aborted_transactions is None
    assert [h.base_offset for _, h in iter_batches(uncommitted.records)] == [0, 1, 2]
    committed = log.read(0, 1 << 20, isolation=FetchIsolation.TXN_COMMITTED)
    assert log.last_stable_offset == 1
    assert [h.base_offset for _, h in iter_batches(committed.records)] == [0]
    assert committed.aborted_transactions == (AbortedTxn(1, 0, 2, 1),)
    _append(log, b.marker(COMMIT))  # 3
    committed = log.read(0, 1 << 20, isolation=FetchIsolation.TXN_COMMITTED)
    assert [h.base_offset for _, h in iter_batches(committed.records)] == [0, 1, 2, 3]
    assert committed.aborted_transactions == (AbortedTxn(1, 0, 2, 1),)
    later = log.read(3, 1 << 20, isolation=FetchIsolation.TXN_COMMITTED)
    assert later.aborted_transactions == ()  # the abort at 2 ended before offset 3
    with pytest.raises(ValueError, match="not both"):
        log.read(0, 100, max_offset=1, isolation=FetchIsolation.LOG_END)


def test_collect_aborted_txns_across_segments(tmp_path: Path) -> None:
    """A transaction begun in one segment and aborted in a later one is found from a fetch
    offset in the first: the index entry lives with the marker."""
    log, _ = open_log(tmp_path)
    a, b, c = Producer(1), Producer(2), Producer(3)
    _append(log, a.batch())  # 0
    _append(log, b.batch())  # 1
    log.roll()
    _append(log, b.marker(ABORT))  # 2 (segment 2), LSO 0: A still open
    _append(log, c.batch())  # 3
    log.roll()
    _append(log, a.marker(ABORT))  # 4 (segment 4), LSO 3: C open
    _append(log, c.marker(ABORT))  # 5, LSO 6
    assert [s.base_offset for s in log.segments] == [0, 2, 4]
    assert not log.segments.get(0).txn_index.path.exists()  # type: ignore[union-attr]
    assert log.collect_aborted_txns(0, 6) == [
        AbortedTxn(2, 1, 2, 0),
        AbortedTxn(1, 0, 4, 3),
        AbortedTxn(3, 3, 5, 6),
    ]
    assert log.collect_aborted_txns(3, 4) == [AbortedTxn(1, 0, 4, 3), AbortedTxn(3, 3, 5, 6)]
    assert log.collect_aborted_txns(0, 1) == [AbortedTxn(1, 0, 4, 3)]  # B began at 1
    assert log.collect_aborted_txns(6, 7) == []


def test_follower_append_updates_producer_state_and_txn_index(tmp_path: Path) -> None:
    leader, _ = open_log(tmp_path / "leader")
    follower, _ = open_log(tmp_path / "follower")
    a, b = Producer(1), Producer(2)
    for data in (a.batch(), b.batch(), a.marker(ABORT), b.marker(COMMIT)):
        _append(leader, data)
    follower.append_as_follower(leader.read(0, 1 << 20).records)
    follower.update_high_watermark(follower.log_end_offset)
    assert follower.last_stable_offset == 4
    assert follower.active_segment.txn_index.all_aborted_txns() == [AbortedTxn(1, 0, 2, 1)]
    assert follower.active_segment.txn_index.path.read_bytes() == (
        leader.active_segment.txn_index.path.read_bytes()
    )


def test_a_fenced_coordinator_marker_is_refused_and_nothing_is_written(tmp_path: Path) -> None:
    log, _ = open_log(tmp_path)
    a = Producer(1)
    _append(log, a.batch())
    _append(log, a.marker(COMMIT, coordinator_epoch=3))
    _append(log, a.batch())
    with pytest.raises(TransactionCoordinatorFencedError):
        _append(log, a.marker(ABORT, coordinator_epoch=2))
    assert log.log_end_offset == 3
    assert [t.first_offset for t in log.producer_state.ongoing_txns] == [2]


def test_truncation_removes_index_entries_and_reopens_the_transaction(tmp_path: Path) -> None:
    log, _ = open_log(tmp_path)
    a, b = Producer(1), Producer(2)
    _append(log, a.batch())  # 0
    _append(log, b.batch())  # 1
    _append(log, b.marker(ABORT))  # 2
    _append(log, a.marker(ABORT))  # 3
    assert len(log.active_segment.txn_index.all_aborted_txns()) == 2
    log.truncate_to(3)
    assert log.active_segment.txn_index.all_aborted_txns() == [AbortedTxn(2, 1, 2, 0)]
    assert [t.producer_id for t in log.producer_state.ongoing_txns] == [1]
    assert log.last_stable_offset == 0


@pytest.mark.parametrize("delete_snapshots", [False, True])
def test_recovery_rebuilds_the_txn_index(tmp_path: Path, delete_snapshots: bool) -> None:
    """After an unclean shutdown with the ``.txnindex`` files (and the snapshots) gone,
    recovery writes the same entries again, including a transaction begun in an earlier
    segment, and the producer state reopens what is still open."""
    log, clock = open_log(tmp_path)
    a, b, c = Producer(1), Producer(2), Producer(3)
    _append(log, a.batch())  # 0
    _append(log, b.batch())  # 1
    log.roll()  # snapshot at 2: A and B open
    _append(log, b.marker(ABORT))  # 2
    _append(log, c.batch())  # 3
    log.roll()
    _append(log, a.marker(ABORT))  # 4
    log.flush()
    before = {s.base_offset: s.txn_index.all_aborted_txns() for s in log.segments}
    assert before == {0: [], 2: [AbortedTxn(2, 1, 2, 0)], 4: [AbortedTxn(1, 0, 4, 3)]}
    log.close_handlers()
    for path in log.dir.glob("*.txnindex"):
        path.unlink()
    if delete_snapshots:
        for path in log.dir.glob("*.snapshot"):
            path.unlink()
    recovered = Log.open(log.dir, log.config, clock, recovery_point=0)
    after = {s.base_offset: s.txn_index.all_aborted_txns() for s in recovered.segments}
    assert after == before
    assert [(t.producer_id, t.first_offset) for t in recovered.producer_state.ongoing_txns] == [
        (3, 3)
    ]
    recovered.update_high_watermark(recovered.log_end_offset)
    assert recovered.last_stable_offset == 3


def test_a_torn_txn_index_is_rebuilt_on_a_clean_start(tmp_path: Path) -> None:
    log, clock = open_log(tmp_path)
    a = Producer(1)
    _append(log, a.batch())
    _append(log, a.marker(ABORT))
    log.roll()
    log = reopen(log, clock, clean=True)
    path = log.segments.get(0).txn_index.path  # type: ignore[union-attr]
    log.close()
    path.write_bytes(path.read_bytes() + b"\x00" * 5)
    reopened = Log.open(log.dir, log.config, clock, had_clean_shutdown=True)
    assert reopened.segments.get(0).txn_index.all_aborted_txns() == [  # type: ignore[union-attr]
        AbortedTxn(1, 0, 1, 2)
    ]
    assert path.stat().st_size == 34


def test_snapshot_round_trip_keeps_an_ongoing_transaction_across_a_clean_restart(
    tmp_path: Path,
) -> None:
    log, clock = open_log(tmp_path)
    a = Producer(1)
    _append(log, a.batch(2, transactional=False))
    _append(log, a.batch())  # 2: opens
    log = reopen(log, clock, clean=True)
    assert [(t.producer_id, t.first_offset) for t in log.producer_state.ongoing_txns] == [(1, 2)]
    log.update_high_watermark(log.log_end_offset)
    assert log.last_stable_offset == 2
    _append(log, a.marker(COMMIT))
    assert log.last_stable_offset == 4


def test_retention_deletes_the_txn_index_with_its_segment(tmp_path: Path) -> None:
    log, _ = open_log(tmp_path, **{"file.delete.delay.ms": 0})
    a = Producer(1)
    _append(log, a.batch())
    _append(log, a.marker(ABORT))
    log.roll()
    _append(log, Producer(2).batch(transactional=False))
    index_path = log.segments.get(0).txn_index.path  # type: ignore[union-attr]
    assert index_path.exists()
    log.maybe_increment_log_start_offset(2)
    assert log.delete_old_segments() == 1
    assert index_path.with_name(index_path.name + ".deleted").exists()
    log.run_pending_deletions()
    assert not list(log.dir.glob("*.txnindex*"))


def test_compaction_keeps_the_aborted_transactions_of_the_segments_it_rewrites(
    tmp_path: Path,
) -> None:
    from kafkasim.storage.cleaner import LogCleaner, cleanable_range

    log, clock = open_log(tmp_path, **{"cleanup.policy": "compact"})
    a, b = Producer(1), Producer(2)
    _append(log, a.batch())  # 0: key k0
    _append(log, a.marker(ABORT))  # 1
    _append(log, b.batch())  # 2: key k0 again, commits
    _append(log, b.marker(COMMIT))  # 3
    log.roll()
    _append(log, Producer(3).batch(transactional=False))
    LogCleaner().clean(log, cleanable_range(log, 0, clock.time_ms()))
    assert log.segments.get(0).log.path.exists()  # type: ignore[union-attr]
    assert log.segments.get(0).txn_index.all_aborted_txns() == [  # type: ignore[union-attr]
        AbortedTxn(1, 0, 1, 2)
    ]


def test_compaction_stops_at_the_first_unstable_offset(tmp_path: Path) -> None:
    from kafkasim.storage.cleaner import cleanable_range

    log, clock = open_log(tmp_path, **{"cleanup.policy": "compact"})
    a = Producer(1)
    _append(log, Producer(2).batch(transactional=False))  # 0
    _append(log, a.batch())  # 1: open
    log.roll()
    _append(log, Producer(3).batch(transactional=False))
    assert cleanable_range(log, 0, clock.time_ms()).first_uncleanable_offset == 1


# -- followers and recovery: what Kafka raises for AppendOrigin.REPLICATION -------------------


def _not_a_marker(pid: int, base_offset: int) -> bytes:
    from kafkasim.storage.records.batch import RecordBatchBuilder

    builder = RecordBatchBuilder(
        base_offset=base_offset, producer_id=pid, producer_epoch=0, is_control=True
    )
    builder.append(T0, b"\x00", b"\x00\x00\x00\x00\x00\x00")  # a 1-byte key: not a marker
    return builder.build()


def test_a_follower_refuses_a_non_transactional_batch_inside_a_transaction(
    tmp_path: Path,
) -> None:
    """INVALID_TXN_STATE for every origin (Kafka's appendDataBatch); nothing is written."""
    log, _ = open_log(tmp_path)
    a = Producer(1)
    log.append_as_follower(a.batch(base_offset=0))
    with pytest.raises(InvalidTxnStateError, match="Expected transactional write from producer 1"):
        log.append_as_follower(a.batch(transactional=False, base_offset=1))
    assert log.log_end_offset == 1
    assert [t.first_offset for t in log.producer_state.ongoing_txns] == [0]


def test_a_follower_refuses_a_control_batch_that_is_not_a_marker(tmp_path: Path) -> None:
    log, _ = open_log(tmp_path)
    log.append_as_follower(Producer(1).batch(base_offset=0))
    with pytest.raises(InvalidRecordError, match="control record key has 1 bytes"):
        log.append_as_follower(_not_a_marker(1, 1))
    assert log.log_end_offset == 1


def _append_raw(log: Log, data: bytes) -> None:
    path = log.active_segment.log.path
    with path.open("ab") as f:
        f.write(data)


def test_recovery_fails_the_load_on_invalid_txn_state(tmp_path: Path) -> None:
    """Kafka's LogSegment.recover does not catch InvalidTxnStateException: the log's load
    fails (and the broker with it) rather than build a state no leader could have had."""
    log, clock = open_log(tmp_path)
    a = Producer(1)
    _append(log, a.batch())  # 0: opens a transaction
    log.close_handlers()
    _append_raw(log, a.batch(transactional=False, base_offset=1))
    with pytest.raises(InvalidTxnStateError, match="Expected transactional write from producer 1"):
        reopen(log, clock, clean=False)


def test_recovery_truncates_at_a_control_batch_that_is_not_a_marker(tmp_path: Path) -> None:
    """Kafka's recover treats an InvalidRecordException like a corrupt batch: the segment is
    truncated there."""
    log, clock = open_log(tmp_path)
    a = Producer(1)
    _append(log, a.batch())  # 0
    log.close_handlers()
    _append_raw(log, _not_a_marker(1, 1) + a.batch(base_offset=2))
    log = reopen(log, clock, clean=False)
    assert log.log_end_offset == 1
    assert [t.first_offset for t in log.producer_state.ongoing_txns] == [0]
    log.close()
