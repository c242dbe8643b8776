"""Item 7 of issue 20: what verify-log finds (and does not invent) in a damaged or live dir."""

from __future__ import annotations

import struct
from collections.abc import Callable
from pathlib import Path

import pytest

from kafkasim.storage.records.batch import ATTRIBUTES_OFFSET, RECORDS_COUNT_OFFSET, compute_crc
from kafkasim.storage.verify import verify
from tests.unit.storage.logtools import make_batch, open_log


def recompute_crc(data: bytearray, position: int) -> None:
    size = 12 + struct.unpack_from(">i", data, position + 8)[0]
    struct.pack_into(">I", data, position + 17, compute_crc(data, position, size))


def _closed_log(tmp_path: Path) -> Path:
    log, _ = open_log(tmp_path, **{"segment.bytes": 700, "index.interval.bytes": 100})
    for i in range(20):
        log.append_as_leader(make_batch([b"a%03d" % i, b"b%03d" % i, b"c%03d" % i]), leader_epoch=1)
    log.close()
    return log.dir


def _set_count(data: bytearray, position: int) -> None:
    struct.pack_into(">i", data, position + RECORDS_COUNT_OFFSET, 5)


def _garbage(data: bytearray, position: int) -> None:
    data[position + 61 : position + 70] = b"\xff" * 9


def _codec_5(data: bytearray, position: int) -> None:
    struct.pack_into(">h", data, position + ATTRIBUTES_OFFSET, 5)


def _gzip_flag(data: bytearray, position: int) -> None:
    struct.pack_into(">h", data, position + ATTRIBUTES_OFFSET, 1)


@pytest.mark.parametrize("corrupt", [_set_count, _garbage, _codec_5, _gzip_flag])
def test_record_level_corruption_with_a_recomputed_crc_is_found(
    tmp_path: Path, corrupt: Callable[[bytearray, int], None]
) -> None:
    dir_ = _closed_log(tmp_path)
    seg = sorted(dir_.glob("*.log"))[1]
    data = bytearray(seg.read_bytes())
    second = 12 + struct.unpack_from(">i", data, 8)[0]
    corrupt(data, second)
    recompute_crc(data, second)
    seg.write_bytes(bytes(data))
    problems = [str(p) for p in verify(dir_)]
    assert any(f"batch at position {second}" in p and "invalid records" in p for p in problems)


def test_a_running_brokers_log_dir_verifies_clean(tmp_path: Path) -> None:
    log, _ = open_log(tmp_path, **{"segment.bytes": 2000, "index.interval.bytes": 100})
    for _ in range(40):
        log.append_as_leader(make_batch([b"x" * 50, b"y" * 30]), leader_epoch=0)
    log.flush()  # still open: the active segment's indexes are preallocated
    try:
        assert [str(p) for p in verify(log.dir)] == []
    finally:
        log.close()


def test_a_malformed_meta_properties_is_reported(tmp_path: Path) -> None:
    _closed_log(tmp_path)
    (tmp_path / "meta.properties").write_text("version=7\nbroker.id=x\n")
    problems = [str(p) for p in verify(tmp_path)]
    assert any("meta.properties" in p and "version" in p for p in problems)
    (tmp_path / "meta.properties").write_text("version=0\nbroker.id=3\n")
    assert [str(p) for p in verify(tmp_path)] == []


def test_a_corrupt_or_stale_snapshot_is_reported(tmp_path: Path) -> None:
    dir_ = _closed_log(tmp_path)
    snapshots = sorted(dir_.glob("*.snapshot"))
    assert snapshots, "a clean close writes a producer snapshot"
    data = bytearray(snapshots[-1].read_bytes())
    data[-1] ^= 1
    snapshots[-1].write_bytes(bytes(data))
    (dir_ / f"{10**6:020d}.snapshot").write_bytes(snapshots[0].read_bytes())
    problems = [str(p) for p in verify(dir_)]
    assert any("snapshot" in p and "CRC" in p for p in problems)
    assert any("beyond the log end" in p for p in problems)


def test_a_leader_epoch_going_back_is_reported(tmp_path: Path) -> None:
    dir_ = _closed_log(tmp_path)
    seg = sorted(dir_.glob("*.log"))[0]
    data = bytearray(seg.read_bytes())
    second = 12 + struct.unpack_from(">i", data, 8)[0]
    struct.pack_into(">i", data, 12, 9)  # the first batch claims epoch 9 (not CRC-covered)
    seg.write_bytes(bytes(data))
    problems = [str(p) for p in verify(dir_)]
    assert any(f"position {second} has leader epoch 1 after epoch 9" in p for p in problems)


def _idempotent_log(tmp_path: Path) -> Path:
    log, _ = open_log(tmp_path, **{"segment.bytes": 700})
    for i in range(20):
        batch = make_batch(
            [b"a%03d" % i, b"b%03d" % i], producer_id=3, producer_epoch=0, base_sequence=2 * i
        )
        log.append_as_leader(batch, leader_epoch=1)
    log.close()
    return log.dir


def test_an_idempotent_producers_rolled_log_verifies_clean(tmp_path: Path) -> None:
    """Every snapshot taken at a roll holds the producer's batches below its offset only."""
    dir_ = _idempotent_log(tmp_path)
    assert len(list(dir_.glob("*.snapshot"))) > 2
    assert [str(p) for p in verify(dir_)] == []


def test_a_snapshot_holding_a_batch_at_or_above_its_offset_is_reported(tmp_path: Path) -> None:
    dir_ = _idempotent_log(tmp_path)
    first, last = sorted(dir_.glob("*.snapshot"))[0], sorted(dir_.glob("*.snapshot"))[-1]
    offset = int(first.name.split(".")[0])
    first.write_bytes(last.read_bytes())  # the newest state under an older, lower name
    problems = [str(p) for p in verify(dir_)]
    assert any(
        first.name in p and f"snapshot at offset {offset} holds producer 3's batch ending at" in p
        for p in problems
    )
