"""Item 6 of issue 20: offset holes and misplaced batches are found when a log is loaded."""

from __future__ import annotations

import logging
import struct
from pathlib import Path

import pytest

from kafkasim.common.clock import ManualClock
from kafkasim.common.types import TopicPartition
from kafkasim.storage.config import LogConfig
from kafkasim.storage.log import Log
from kafkasim.storage.verify import verify
from tests.unit.storage.logtools import T0, make_batch, open_log, read_all, reopen


def _log_with_segments(tmp_path: Path, **props: object) -> tuple[Path, list[int]]:
    log, _ = open_log(tmp_path, **{"segment.bytes": 600, "index.interval.bytes": 100, **props})
    for i in range(40):
        log.append_as_leader(make_batch([b"v%03d" % i] * 3), leader_epoch=0)
    log.close()
    bases = sorted(int(p.name[:20]) for p in log.dir.glob("*.log"))
    assert len(bases) >= 4
    return log.dir, bases


def _load(dir_: Path, *, clean: bool, **props: object) -> tuple[Log, ManualClock]:
    """Open the log as a broker start does: after a clean shutdown (no batch re-read), or
    after a crash (every segment recovered)."""
    clock = ManualClock(T0)
    log = Log.open(
        dir_,
        LogConfig.from_props({"segment.bytes": 600, "index.interval.bytes": 100, **props}),
        clock,
        topic_partition=TopicPartition("topic", 0),
        had_clean_shutdown=clean,
        recovery_point=2**62 if clean else 0,
    )
    return log, clock


def _records_after_clean_start(dir_: Path) -> list[tuple[int, bytes | None]]:
    log, _ = _load(dir_, clean=True)
    try:
        return [(r.offset, r.value) for r in read_all(log)]
    finally:
        log.close()


@pytest.mark.parametrize("policy", ["delete", "compact"])
def test_a_deleted_middle_segment_is_warned_about_at_load_and_found_by_verify_log(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, policy: str
) -> None:
    """A gap is only warned about where compaction cannot have made it."""
    dir_, bases = _log_with_segments(tmp_path)
    for suffix in (".log", ".index", ".timeindex"):
        (dir_ / f"{bases[1]:020d}{suffix}").unlink()
    with caplog.at_level(logging.WARNING):
        log, _ = _load(dir_, clean=True, **{"cleanup.policy": policy})
    log.close()
    hole = f"offsets {bases[1]}..{bases[2] - 1} are missing"
    warned = any(hole in r.getMessage() for r in caplog.records)
    assert warned == (policy == "delete")
    assert any(hole in str(p) for p in verify(dir_))


def test_a_rewritten_base_offset_below_the_segment_is_truncated_there_and_nothing_before(
    tmp_path: Path,
) -> None:
    dir_, bases = _log_with_segments(tmp_path)
    before = _records_after_clean_start(dir_)
    seg = dir_ / f"{bases[2]:020d}.log"
    data = bytearray(seg.read_bytes())
    struct.pack_into(">q", data, 0, bases[2] - 10)  # not covered by the CRC
    seg.write_bytes(bytes(data))
    assert any("below the segment's base offset" in str(p) for p in verify(dir_))
    after = _records_after_clean_start(dir_)
    assert after == [r for r in before if r[0] < bases[2]]


def test_a_rewritten_base_offset_in_the_middle_is_found_by_verify_log_and_recovery(
    tmp_path: Path,
) -> None:
    dir_, bases = _log_with_segments(tmp_path)
    log, clock = _load(dir_, clean=True)
    before = [(r.offset, r.value) for r in read_all(log)]
    seg = dir_ / f"{bases[1]:020d}.log"
    data = bytearray(seg.read_bytes())
    second = 12 + struct.unpack_from(">i", data, 8)[0]
    moved = struct.unpack_from(">q", data, second)[0]
    struct.pack_into(">q", data, second, moved + 170)
    seg.write_bytes(bytes(data))
    problems = [str(p) for p in verify(dir_)]
    assert any("are missing" in p for p in problems) and any("expected ≥" in p for p in problems)
    log = reopen(log, clock, clean=False, recovery_point=0)  # type: ignore[arg-type]
    after = [(r.offset, r.value) for r in read_all(log)]
    log.close()
    assert after[: len([r for r in before if r[0] < moved])] == [r for r in before if r[0] < moved]
    assert all(offset < moved or offset >= moved + 170 for offset, _ in after)


def test_a_segment_that_begins_inside_the_previous_one_is_deleted_at_load(
    tmp_path: Path,
) -> None:
    dir_, bases = _log_with_segments(tmp_path)
    before = _records_after_clean_start(dir_)
    for suffix in (".log", ".index", ".timeindex"):
        (dir_ / f"{bases[2]:020d}{suffix}").rename(dir_ / f"{bases[2] - 2:020d}{suffix}")
    assert any("but the previous one ends" in str(p) for p in verify(dir_))
    after = _records_after_clean_start(dir_)
    assert after == [r for r in before if r[0] < bases[2]]
