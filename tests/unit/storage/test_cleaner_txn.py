"""Compaction of transactions (``storage.cleaner_txn`` through ``storage.cleaner``), Kafka's
rules: aborted data go and never enter the key map; a marker goes once no data of its
transaction remain and its segment is past the delete horizon; a live producer's last batch
stays as an empty header; the cleaned ``.txnindex`` keeps only aborted transactions with data
left; a read_committed read returns the same committed records before and after cleaning."""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path

import pytest

from kafkasim.common.clock import ManualClock
from kafkasim.storage.cleaner import LogCleaner, cleanable_range
from kafkasim.storage.log import AppendOrigin, FetchIsolation, Log
from kafkasim.storage.records.batch import (
    BatchHeader,
    ControlRecordType,
    RecordBatchBuilder,
    decode_batch,
    encode_control_batch,
    iter_batches,
)
from kafkasim.storage.txn_index import AbortedTxn
from tests.unit.storage.logtools import T0, open_log

COMMIT, ABORT = ControlRecordType.COMMIT, ControlRecordType.ABORT
DAY_MS = 86_400_000


class TxnProducer:
    """A producer writing keyed records (transactional unless told) with its own sequence."""

    def __init__(self, pid: int, epoch: int = 0) -> None:
        self.pid, self.epoch, self.seq = pid, epoch, 0

    def data(self, *kvs: tuple[bytes, bytes], transactional: bool = True) -> bytes:
        builder = RecordBatchBuilder(
            producer_id=self.pid,
            producer_epoch=self.epoch,
            base_sequence=self.seq,
            is_transactional=transactional,
        )
        for key, value in kvs:
            builder.append(T0, key, value)
        self.seq += len(kvs)
        return builder.build()

    def marker(self, kind: ControlRecordType, *, epoch: int | None = None) -> bytes:
        return encode_control_batch(
            kind,
            producer_id=self.pid,
            producer_epoch=self.epoch if epoch is None else epoch,
            timestamp=T0,
            coordinator_epoch=0,
        )


def plain(*kvs: tuple[bytes, bytes]) -> bytes:
    builder = RecordBatchBuilder()
    for key, value in kvs:
        builder.append(T0, key, value)
    return builder.build()


def put(log: Log, data: bytes) -> int:
    origin = AppendOrigin.COORDINATOR if data[22] & 0x20 else AppendOrigin.CLIENT
    info = log.append_as_leader(data, leader_epoch=0, origin=origin)
    log.update_high_watermark(log.log_end_offset)
    return info.first_offset


def clean(log: Log, clock: ManualClock, first_dirty: int | None = None) -> int:
    rng = cleanable_range(log, first_dirty, clock.time_ms())
    return LogCleaner().clean(log, rng).first_dirty_offset


def batches(log: Log) -> list[tuple[int, int, bool, int]]:
    """(base offset, last offset, control?, record count) of every stored batch."""
    out = []
    for segment in log.segments:
        for _, header in segment.log.batch_headers(0):
            h = header
            assert isinstance(h, BatchHeader)
            out.append((h.base_offset, h.last_offset, h.is_control, h.records_count))
    return out


def index_entries(log: Log) -> list[AbortedTxn]:
    return [t for s in log.segments for t in s.txn_index.all_aborted_txns()]


@pytest.fixture
def compacted(tmp_path: Path) -> Iterator[tuple[Log, ManualClock]]:
    log, clock = open_log(tmp_path, **{"cleanup.policy": "compact", "delete.retention.ms": 0})
    yield log, clock
    log.close()


def test_aborted_data_go_and_the_marker_follows_once_past_the_horizon(
    compacted: tuple[Log, ManualClock],
) -> None:
    log, clock = compacted
    p = TxnProducer(1)
    put(log, p.data((b"a", b"1"), (b"b", b"1")))  # 0-1: aborted
    put(log, p.marker(ABORT))  # 2
    put(log, p.data((b"c", b"1")))  # 3: committed
    put(log, p.marker(COMMIT))  # 4
    log.roll()
    put(log, plain((b"d", b"1")))  # 5, active

    first_dirty = clean(log, clock)  # first pass: no clean segment, horizon 0

    assert first_dirty == 5
    assert batches(log) == [(2, 2, True, 1), (3, 3, False, 1), (4, 4, True, 1), (5, 5, False, 1)]
    # The aborted data were seen in this pass: the marker and its index entry stay.
    assert index_entries(log) == [AbortedTxn(1, 0, 2, 3)]

    clock.advance(1)
    log.roll()
    put(log, plain((b"e", b"1")))
    clean(log, clock, first_dirty)  # the marker's segment is now past the horizon

    assert batches(log) == [(3, 3, False, 1), (4, 4, True, 1), (5, 5, False, 1), (6, 6, False, 1)]
    assert index_entries(log) == []


def test_a_marker_without_data_stays_within_delete_retention_ms(tmp_path: Path) -> None:
    log, clock = open_log(tmp_path, **{"cleanup.policy": "compact", "delete.retention.ms": DAY_MS})
    p = TxnProducer(1)
    put(log, p.data((b"a", b"1")))  # 0: aborted
    put(log, p.marker(ABORT))  # 1
    put(log, p.data((b"c", b"1")))  # 2
    put(log, p.marker(COMMIT))  # 3
    log.roll()
    first_dirty = clean(log, clock)
    clock.advance(DAY_MS - 1)
    put(log, plain((b"e", b"1")))
    log.roll()
    clean(log, clock, first_dirty)

    # No data of the aborted transaction left: its index entry goes, the marker waits.
    assert batches(log)[:3] == [(1, 1, True, 1), (2, 2, False, 1), (3, 3, True, 1)]
    assert index_entries(log) == []
    log.close()


def test_a_commit_marker_goes_once_its_transactions_data_were_compacted_away(
    compacted: tuple[Log, ManualClock],
) -> None:
    log, clock = compacted
    p = TxnProducer(1)
    put(log, p.data((b"a", b"1")))  # 0
    put(log, p.marker(COMMIT))  # 1
    put(log, p.data((b"z", b"1")))  # 2: the producer's last data batch
    put(log, p.marker(COMMIT))  # 3
    put(log, plain((b"a", b"2")))  # 4: supersedes offset 0
    log.roll()

    first_dirty = clean(log, clock)
    # Batch 0 is gone, but it was read in this pass: its COMMIT marker stays.
    assert batches(log) == [(1, 1, True, 1), (2, 2, False, 1), (3, 3, True, 1), (4, 4, False, 1)]

    clock.advance(1)
    put(log, plain((b"q", b"1")))
    log.roll()
    clean(log, clock, first_dirty)
    assert batches(log) == [(2, 2, False, 1), (3, 3, True, 1), (4, 4, False, 1), (5, 5, False, 1)]


def test_aborted_records_never_shadow_committed_ones_in_the_key_map(
    compacted: tuple[Log, ManualClock],
) -> None:
    log, clock = compacted
    p, q = TxnProducer(1), TxnProducer(2)
    put(log, q.data((b"a", b"committed")))  # 0
    put(log, q.marker(COMMIT))  # 1
    put(log, p.data((b"a", b"aborted")))  # 2
    put(log, p.marker(ABORT))  # 3
    put(log, p.data((b"x", b"1")))  # 4
    put(log, p.marker(COMMIT))  # 5
    log.roll()
    clean(log, clock)
    assert _committed_view(log) == [(0, b"a", b"committed"), (4, b"x", b"1")]
    assert [b[0] for b in batches(log) if not b[2]] == [0, 4]


def test_the_last_batch_of_a_producer_stays_as_an_empty_header(
    compacted: tuple[Log, ManualClock],
) -> None:
    """Kafka's RETAIN_EMPTY: the aborted batch goes, its header (producer id, epoch, sequence
    range, offsets) stays so that the producer's state survives a rebuild from the log."""
    log, clock = compacted
    p = TxnProducer(7, epoch=3)
    put(log, p.data((b"a", b"1"), (b"b", b"1")))  # 0-1, sequences 0-1, aborted
    put(log, p.marker(ABORT))  # 2
    log.roll()
    clean(log, clock)
    first = next(iter(log.segments)).log
    (_, header), _marker = list(first.batch_headers(0))
    assert isinstance(header, BatchHeader)
    assert (header.base_offset, header.last_offset, header.records_count) == (0, 1, 0)
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (7, 3, 0)
    assert header.is_transactional
    assert index_entries(log) == [AbortedTxn(7, 0, 2, 3)]
    assert _committed_view(log) == []


def test_a_producers_last_marker_of_its_epoch_stays_as_an_empty_control_batch(
    compacted: tuple[Log, ManualClock],
) -> None:
    """When the producer's last entry is a marker (the abort bumped its epoch, so no data
    batch of the new epoch exists), that marker keeps the epoch for fencing."""
    log, clock = compacted
    p = TxnProducer(1, epoch=0)
    put(log, p.data((b"a", b"1")))  # 0: aborted
    put(log, p.marker(ABORT, epoch=1))  # 1: the coordinator's fencing abort, epoch 1
    log.roll()
    first_dirty = clean(log, clock)
    assert batches(log) == [(1, 1, True, 1)]
    clock.advance(1)
    put(log, plain((b"q", b"1")))
    log.roll()
    clean(log, clock, first_dirty)
    assert batches(log) == [(1, 1, True, 0), (2, 2, False, 1)]
    assert index_entries(log) == []


def _committed_view(log: Log) -> list[tuple[int, bytes | None, bytes | None]]:
    """What a read_committed consumer keeps: every data record up to the LSO except those of
    the aborted transactions the read returned (Kafka's consumer-side filter)."""
    out: list[tuple[int, bytes | None, bytes | None]] = []
    offset = log.log_start_offset
    while offset < log.last_stable_offset:
        info = log.read(offset, 1 << 24, isolation=FetchIsolation.TXN_COMMITTED)
        for position, header in iter_batches(info.records):
            offset = header.next_offset
            if header.is_control:
                continue
            aborted = any(
                t.producer_id == header.producer_id
                and t.first_offset <= header.base_offset <= t.last_offset
                for t in info.aborted_transactions
            )
            if header.is_transactional and aborted:
                continue
            _, records = decode_batch(info.records, position)
            out.extend((r.offset, r.key, r.value) for r in records)
    return out


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_read_committed_returns_the_same_committed_records_after_cleaning(
    compacted: tuple[Log, ManualClock], seed: int
) -> None:
    """Interleaved transactions of three producers, aborted and committed, and plain
    records; every key unique, so cleaning may drop only what read_committed drops."""
    log, clock = compacted
    rng = random.Random(seed)
    producers = [TxnProducer(pid) for pid in (1, 2, 3)]
    open_txn: set[int] = set()
    n = 0
    for step in range(60):
        p = rng.choice(producers)
        if p.pid in open_txn and rng.random() < 0.35:
            put(log, p.marker(rng.choice([COMMIT, ABORT])))
            open_txn.discard(p.pid)
        elif rng.random() < 0.15:
            put(log, plain((b"plain-%d" % n, b"v")))
            n += 1
        else:
            put(log, p.data(*[(b"k-%d" % (n + i), b"v") for i in range(rng.randint(1, 3))]))
            n += 3
            open_txn.add(p.pid)
        if step % 12 == 11:
            log.roll()
    for pid in sorted(open_txn):
        put(log, producers[pid - 1].marker(ABORT))
    log.roll()
    before = _committed_view(log)

    first_dirty = clean(log, clock)
    assert _committed_view(log) == before
    clock.advance(1)
    put(log, plain((b"last", b"v")))
    log.roll()
    clean(log, clock, first_dirty)
    assert _committed_view(log) == [*before, (log.log_end_offset - 1, b"last", b"v")]
    # Nothing of an aborted transaction is left but the empty headers of producers' last batches.
    stored = [b for b in batches(log) if not b[2]]
    assert sum(b[3] for b in stored) == len(before) + 1
