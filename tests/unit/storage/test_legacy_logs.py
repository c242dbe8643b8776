"""Logs in message formats v0/v1 (written before Kafka 0.11) are read, never truncated."""

from __future__ import annotations

from pathlib import Path

import pytest

from kafkasim.common.clock import ManualClock
from kafkasim.common.types import TopicPartition
from kafkasim.storage.config import LogConfig
from kafkasim.storage.log import Log
from kafkasim.storage.records.legacy import decode_legacy
from kafkasim.storage.verify import verify
from tests.unit.storage.legacy_logs import T0, write_legacy_partition


def _open(dir_: Path, *, clean: bool) -> Log:
    return Log.open(
        dir_,
        LogConfig.from_props({"index.interval.bytes": 100}),
        ManualClock(T0),
        topic_partition=TopicPartition("old", 0),
        had_clean_shutdown=clean,
    )


def _read_everything(log: Log) -> list[tuple[int, bytes | None]]:
    out: list[tuple[int, bytes | None]] = []
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        data = log.read(offset, 1 << 16).records
        assert data
        messages = [m for m in decode_legacy(data) if m.offset >= offset]
        out.extend((m.offset, m.value) for m in messages)
        offset = messages[-1].offset + 1
    return out


@pytest.mark.parametrize("magic", [0, 1])
@pytest.mark.parametrize("clean", [True, False])
def test_a_legacy_log_is_recovered_indexed_and_served_as_it_is(
    tmp_path: Path, magic: int, clean: bool
) -> None:
    dir_ = tmp_path / "old-0"
    written = write_legacy_partition(dir_, magic=magic)
    before = {p.name: p.read_bytes() for p in dir_.glob("*.log")}
    log = _open(dir_, clean=clean)
    try:
        assert log.log_end_offset == written[-1][0] + 1
        assert _read_everything(log) == written
        # A fetch in the middle of a compressed wrapper returns that wrapper, unchanged.
        info = log.read(5, 1 << 16)
        first = decode_legacy(info.records, deep=False)[0]
        assert first.offset >= 5 and first.offset - 2 <= 5
        if magic == 1:
            found = log.fetch_offset_by_timestamp(T0 + 7)
            assert found is not None and found.offset == 7
    finally:
        log.close()
    assert {p.name: p.read_bytes() for p in dir_.glob("*.log")} == before


@pytest.mark.parametrize("magic", [0, 1])
def test_verify_log_accepts_a_legacy_log(tmp_path: Path, magic: int) -> None:
    dir_ = tmp_path / "old-0"
    write_legacy_partition(dir_, magic=magic)
    assert [str(p) for p in verify(dir_)] == []


def test_recovery_of_a_legacy_log_checks_crc32_and_keeps_what_precedes_a_bad_message(
    tmp_path: Path,
) -> None:
    dir_ = tmp_path / "old-0"
    written = write_legacy_partition(dir_, magic=1, segments=1)
    seg = dir_ / f"{0:020d}.log"
    data = bytearray(seg.read_bytes())
    messages = decode_legacy(bytes(data), deep=False)
    position = sum(m.size_in_bytes for m in messages[:4])  # the 5th entry
    data[position + 30] ^= 0x40
    seg.write_bytes(bytes(data))
    problems = verify(dir_)
    assert any("CRC" in p.message for p in problems)
    log = _open(dir_, clean=False)
    try:
        kept = _read_everything(log)
        assert kept == written[: len(kept)]
        assert log.log_end_offset == messages[3].offset + 1
    finally:
        log.close()
