"""verify-log's ``.txnindex`` check (``storage.verify_txn``): every index matches the aborted
transactions rebuilt from the batches; a missing, an extra and a wrong entry are each reported
by name; a corrupt index is reported, never a crash; compaction's and retention's logs verify
clean."""

from __future__ import annotations

import struct
from pathlib import Path

from kafkasim.storage import file_names
from kafkasim.storage.cleaner import LogCleaner, cleanable_range
from kafkasim.storage.log import AppendOrigin, Log
from kafkasim.storage.txn_index import AbortedTxn
from kafkasim.storage.verify import verify, verify_partition_dir
from tests.txn_records import ABORT, COMMIT, Producer
from tests.unit.storage.logtools import make_batch, open_log


def _put(log: Log, data: bytes) -> None:
    origin = AppendOrigin.COORDINATOR if data[22] & 0x20 else AppendOrigin.CLIENT
    log.append_as_leader(data, leader_epoch=0, origin=origin)
    log.update_high_watermark(log.log_end_offset)


def _transactions(log: Log) -> None:
    """Two producers interleaved across segments: 1 aborts (opened in segment 0, marker in
    segment 1, while 2 is open: LSO 1), 2 commits, 1 aborts again alone."""
    a, b = Producer(1), Producer(2)
    _put(log, a.batch(2))  # 0-1
    _put(log, b.batch())  # 2
    log.roll()
    _put(log, a.marker(ABORT))  # 3: LSO = 2 (producer 2 open)
    _put(log, b.marker(COMMIT))  # 4
    _put(log, a.batch())  # 5
    _put(log, a.marker(ABORT))  # 6: LSO 7
    _put(log, make_batch([b"plain"], keys=[b"p"]))  # 7


def _txn_problems(dir_: Path, **kwargs: bool) -> list[str]:
    problems = verify_partition_dir(dir_, **kwargs)
    return [str(p) for p in problems if p.path.name.endswith(file_names.TXN_INDEX_SUFFIX)]


def _index(dir_: Path, base: int) -> Path:
    return file_names.txn_index_file(dir_, base)


def _closed(tmp_path: Path) -> Path:
    log, _ = open_log(tmp_path)
    _transactions(log)
    log.close()
    assert _index(log.dir, 3).read_bytes() == (
        AbortedTxn(1, 0, 3, 2).encode() + AbortedTxn(1, 5, 6, 7).encode()
    )
    return log.dir


def test_a_log_with_transactions_verifies_clean(tmp_path: Path) -> None:
    dir_ = _closed(tmp_path)
    assert verify(dir_) == []


def test_a_missing_entry_is_reported(tmp_path: Path) -> None:
    dir_ = _closed(tmp_path)
    _index(dir_, 3).write_bytes(AbortedTxn(1, 5, 6, 7).encode())
    assert _txn_problems(dir_) == [
        f"{_index(dir_, 3)}: missing aborted transaction: producerId 1 firstOffset 0 "
        "lastOffset 3 lastStableOffset 2"
    ]


def test_an_extra_entry_is_reported(tmp_path: Path) -> None:
    dir_ = _closed(tmp_path)
    with _index(dir_, 3).open("ab") as f:
        f.write(AbortedTxn(2, 2, 7, 8).encode())
    (problem,) = _txn_problems(dir_)
    assert "extra aborted transaction entry: producerId 2 firstOffset 2 lastOffset 7" in problem


def test_a_wrong_entry_is_reported(tmp_path: Path) -> None:
    dir_ = _closed(tmp_path)
    _index(dir_, 3).write_bytes(AbortedTxn(1, 0, 3, 4).encode() + AbortedTxn(1, 5, 6, 7).encode())
    (problem,) = _txn_problems(dir_)
    assert "wrong aborted transaction entry: producerId 1 firstOffset 0 lastOffset 3 " in problem
    assert problem.endswith(
        "lastStableOffset 4; the log says producerId 1 firstOffset 0 lastOffset 3 "
        "lastStableOffset 2"
    )


def test_a_torn_index_is_reported_as_corrupt(tmp_path: Path) -> None:
    dir_ = _closed(tmp_path)
    with _index(dir_, 3).open("ab") as f:
        f.write(b"\x00\x00\x00\x00\x00")
    (problem,) = _txn_problems(dir_)
    assert "corrupt transaction index" in problem
    assert "not a whole number of 34-byte entries" in problem


def test_an_unknown_version_is_reported_as_corrupt(tmp_path: Path) -> None:
    dir_ = _closed(tmp_path)
    data = bytearray(_index(dir_, 3).read_bytes())
    struct.pack_into(">h", data, 0, 7)
    _index(dir_, 3).write_bytes(bytes(data))
    (problem,) = _txn_problems(dir_)
    assert "corrupt transaction index" in problem
    assert "unexpected aborted transaction version 7" in problem


def test_an_entry_in_the_wrong_segment_is_missing_there_and_extra_here(tmp_path: Path) -> None:
    dir_ = _closed(tmp_path)
    entries = _index(dir_, 3).read_bytes()
    _index(dir_, 3).unlink()
    _index(dir_, 0).write_bytes(entries)
    problems = _txn_problems(dir_)
    assert sum("missing aborted transaction" in p for p in problems) == 2
    # Offsets 3 and 6 are above segment 0's base, so the index is sane, but names no marker.
    assert sum("extra aborted transaction entry" in p for p in problems) == 2


def test_compacted_logs_verify_clean_after_each_pass(tmp_path: Path) -> None:
    log, clock = open_log(tmp_path, **{"cleanup.policy": "compact", "delete.retention.ms": 0})
    _transactions(log)
    log.roll()
    _put(log, make_batch([b"x"], keys=[b"x"]))
    first_dirty: int | None = None
    for _ in range(3):
        rng = cleanable_range(log, first_dirty, clock.time_ms())
        first_dirty = LogCleaner().clean(log, rng).first_dirty_offset
        log.flush()
        assert _txn_problems(log.dir, compacted=True) == []
        clock.advance(1)
        _put(log, make_batch([b"y"], keys=[b"y"]))
        log.roll()
    log.close()


def test_a_log_whose_first_segments_were_deleted_judges_only_what_it_can(
    tmp_path: Path,
) -> None:
    """Retention removed segment 0: producer 1's transaction began there. With the snapshot
    at the new first segment the check is exact; without it, that marker is not judged."""
    dir_ = _closed(tmp_path)
    for path in dir_.glob(f"{file_names.filename_prefix(0)}.*"):
        path.unlink()
    snapshot = dir_ / f"{file_names.filename_prefix(3)}{file_names.SNAPSHOT_SUFFIX}"
    assert snapshot.exists()
    assert _txn_problems(dir_) == []
    _index(dir_, 3).write_bytes(AbortedTxn(1, 0, 3, 9).encode() + AbortedTxn(1, 5, 6, 7).encode())
    assert len(_txn_problems(dir_)) == 1  # the snapshot seeds the open transactions: exact
    snapshot.unlink()
    _index(dir_, 3).write_bytes(AbortedTxn(1, 5, 6, 7).encode())
    assert _txn_problems(dir_) == []
