"""Retention (``Log.delete_old_segments``): time, size and log-start rules, the high-watermark
bound, the roll-before-deleting-everything rule, ``.deleted`` files and delete-records.

Every closed segment built here holds one record batch of the same size, so sizes and offsets
are easy to reason about: segment ``i`` holds offset ``i``.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path

import pytest

from kafkasim.common.clock import ManualClock
from kafkasim.common.errors import OffsetOutOfRangeError
from kafkasim.common.types import TopicPartition
from kafkasim.storage import file_names
from kafkasim.storage.config import LogConfig
from kafkasim.storage.log import Log
from kafkasim.storage.records.batch import RecordBatchBuilder, decode_batch

NOW_MS = 1_700_000_000_000
HOUR_MS = 3_600_000
TP = TopicPartition("retention", 0)

OpenLog = Callable[[Mapping[str, object]], Log]


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(NOW_MS)


@pytest.fixture
def open_log(tmp_path: Path, clock: ManualClock) -> Iterator[OpenLog]:
    """Opens a log with topic overrides; closes every log it opened at teardown."""
    opened: list[Log] = []

    def _open(props: Mapping[str, object]) -> Log:
        log = Log.open(
            tmp_path / TP.dir_name(), LogConfig.from_props(props), clock, topic_partition=TP
        )
        opened.append(log)
        return log

    yield _open
    for log in opened:
        log.close()


def one_record(timestamp: int, key: bytes = b"key", value: bytes | None = b"value") -> bytes:
    builder = RecordBatchBuilder()
    builder.append(timestamp, key, value)
    return builder.build()


def fill_closed_segments(log: Log, timestamps: Sequence[int]) -> None:
    """One same-sized record per segment, rolled after each: the active segment ends empty."""
    for ts in timestamps:
        log.append_as_leader(one_record(ts), leader_epoch=0)
        log.roll()
    log.update_high_watermark(log.log_end_offset)


def base_offsets(log: Log) -> list[int]:
    return [s.base_offset for s in log.segments]


def offsets_read(log: Log, start: int) -> list[int]:
    """Every record offset from ``start`` to the log end (one read per segment, as Kafka)."""
    out: list[int] = []
    offset = start
    while offset < log.log_end_offset:
        data = log.read(offset, 1 << 20).records
        if not data:
            break
        position = 0
        while position < len(data):
            header, records = decode_batch(data[position:])
            out.extend(r.offset for r in records if r.offset >= start)
            position += header.size_in_bytes
            offset = header.last_offset + 1
    return out


def segment_files(dir_: Path, base: int, suffix: str = "") -> list[Path]:
    return [
        file_names.log_file(dir_, base, suffix),
        file_names.index_file(dir_, base, suffix),
        file_names.time_index_file(dir_, base, suffix),
    ]


# -- time retention -----------------------------------------------------------------------


def test_time_retention_judges_by_largest_record_timestamp_not_file_mtime(
    open_log: OpenLog,
) -> None:
    """A segment copied or touched on disk must not live longer (or shorter) because of it."""
    log = open_log({"retention.ms": HOUR_MS})
    fill_closed_segments(log, [NOW_MS - 2 * HOUR_MS, NOW_MS - 10])
    # Lie with the mtimes: the expired segment looks brand new, the fresh one ancient.
    os.utime(file_names.log_file(log.dir, 0), ns=(NOW_MS * 10**6, NOW_MS * 10**6))
    os.utime(file_names.log_file(log.dir, 1), ns=(0, 0))

    assert log.delete_old_segments() == 1
    assert base_offsets(log) == [1, 2]
    assert log.log_start_offset == 1


@pytest.mark.parametrize(
    ("age_ms", "deleted"),
    [
        (HOUR_MS - 1, False),
        (HOUR_MS, False),  # Kafka's test is strictly "older than retention.ms"
        (HOUR_MS + 1, True),
    ],
)
def test_time_retention_boundary_is_strictly_greater_than_retention_ms(
    open_log: OpenLog, age_ms: int, deleted: bool
) -> None:
    """now - largestTimestamp > retention.ms, exactly as Kafka's deletion predicate."""
    log = open_log({"retention.ms": HOUR_MS})
    fill_closed_segments(log, [NOW_MS - age_ms])
    assert log.delete_old_segments() == int(deleted)
    assert base_offsets(log) == ([1] if deleted else [0, 1])


def test_time_retention_uses_the_largest_timestamp_of_the_segment_not_the_first(
    open_log: OpenLog,
) -> None:
    """One recent record keeps its whole segment: retention is per segment, by its newest."""
    log = open_log({"retention.ms": HOUR_MS})
    log.append_as_leader(one_record(NOW_MS - 5 * HOUR_MS), leader_epoch=0)
    log.append_as_leader(one_record(NOW_MS - 1), leader_epoch=0)
    log.roll()
    log.update_high_watermark(log.log_end_offset)
    assert log.delete_old_segments() == 0
    assert base_offsets(log) == [0, 2]


@pytest.mark.parametrize(
    ("waited_ms", "deleted"),
    [
        (0, False),
        (HOUR_MS, False),
        (HOUR_MS + 1, True),
    ],
)
def test_a_segment_without_record_timestamps_falls_back_to_its_last_modified_time(
    open_log: OpenLog, clock: ManualClock, waited_ms: int, deleted: bool
) -> None:
    """Records may carry no timestamp (-1); Kafka's largestTimestamp then falls back to the
    segment's last-modified time instead of treating the segment as infinitely old."""
    log = open_log({"retention.ms": HOUR_MS})
    fill_closed_segments(log, [-1])
    assert log.segments.first is not None
    assert log.segments.first.max_timestamp_so_far == -1
    clock.advance(waited_ms)
    assert log.delete_old_segments() == int(deleted)


def test_retention_ms_minus_one_keeps_segments_forever(
    open_log: OpenLog, clock: ManualClock
) -> None:
    """-1 disables time retention however old the records are."""
    log = open_log({"retention.ms": -1})
    fill_closed_segments(log, [0, 1, NOW_MS - 50 * 365 * 24 * HOUR_MS])
    clock.advance(10 * 365 * 24 * HOUR_MS)
    assert log.delete_old_segments() == 0
    assert base_offsets(log) == [0, 1, 2, 3]
    assert log.log_start_offset == 0


# -- size retention -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("retention_segments", "extra_bytes", "expected_deleted"),
    [
        (None, 0, 0),  # retention.bytes = -1: unlimited
        (5, 0, 0),  # more than the log holds
        (4, 0, 0),  # exactly the log's size
        (4, -1, 0),  # one byte over: deleting a whole segment would go below the limit
        (3, 0, 1),
        (3, -1, 1),
        (2, 1, 1),
        (2, 0, 2),
        (1, 0, 3),
        (0, 0, 4),  # everything closed may go; the empty active segment stays
    ],
)
def test_size_retention_deletes_oldest_whole_segments_while_the_rest_stays_at_least_retention_bytes(
    open_log: OpenLog, retention_segments: int | None, extra_bytes: int, expected_deleted: int
) -> None:
    """Kafka deletes while size - retention.bytes - segment.size >= 0, oldest first."""
    probe = len(one_record(NOW_MS))
    retention_bytes = -1 if retention_segments is None else retention_segments * probe + extra_bytes
    log = open_log({"retention.bytes": retention_bytes, "retention.ms": -1})
    fill_closed_segments(log, [NOW_MS] * 4)
    segment_size = log.segments.first.size if log.segments.first else 0
    assert segment_size == probe
    total = log.size_in_bytes

    assert log.delete_old_segments() == expected_deleted

    assert base_offsets(log) == list(range(expected_deleted, 5))
    if retention_bytes >= 0:
        assert log.size_in_bytes >= min(retention_bytes, total)
        # Maximal: one more segment gone would break the limit (or none is left to delete).
        closed_left = 4 - expected_deleted
        assert closed_left == 0 or log.size_in_bytes - segment_size < retention_bytes


def test_size_retention_stops_at_the_first_segment_it_keeps(open_log: OpenLog) -> None:
    """Segments go oldest first only: a small younger segment is not deleted in place of a
    large older one that does not fit the excess."""
    log = open_log({"retention.ms": -1})
    big = RecordBatchBuilder()
    for _ in range(3):
        big.append(NOW_MS, b"key", b"value")
    log.append_as_leader(big.build(), leader_epoch=0)
    log.roll()
    fill_closed_segments(log, [NOW_MS] * 2)
    sizes = [s.size for s in log.segments]
    assert sizes[0] > sizes[1] == sizes[2] > 0
    # The excess is exactly one small segment: it would fit, but segment 0 comes first.
    retention_bytes = log.size_in_bytes - sizes[1]
    log.update_config(
        LogConfig.from_props({"retention.ms": -1, "retention.bytes": retention_bytes})
    )
    assert log.delete_old_segments() == 0
    assert base_offsets(log) == [0, 3, 4, 5]


# -- high watermark -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("high_watermark", "expected_bases"),
    [
        (0, [0, 1, 2, 3]),
        (1, [1, 2, 3]),  # segment 0 holds only offset 0 < HW: deletable
        (2, [2, 3]),
        (3, [3]),
    ],
)
def test_nothing_at_or_above_the_high_watermark_is_deleted(
    open_log: OpenLog, high_watermark: int, expected_bases: list[int]
) -> None:
    """Only segments wholly below the HW may go: uncommitted data can still be fetched."""
    log = open_log({"retention.ms": HOUR_MS})
    fill_closed_segments(log, [NOW_MS - 2 * HOUR_MS] * 3)
    log.update_high_watermark(high_watermark)
    log.delete_old_segments()
    assert base_offsets(log) == expected_bases
    assert log.log_start_offset == expected_bases[0]
    assert log.log_start_offset <= log.high_watermark


def test_a_segment_straddling_the_high_watermark_is_kept(open_log: OpenLog) -> None:
    """HW inside a segment: its upper bound is above the HW, so the segment stays."""
    log = open_log({"retention.ms": HOUR_MS})
    for _ in range(3):
        log.append_as_leader(one_record(NOW_MS - 2 * HOUR_MS), leader_epoch=0)
    log.roll()
    log.update_high_watermark(2)
    assert log.delete_old_segments() == 0
    assert base_offsets(log) == [0, 3]


# -- every segment expired ----------------------------------------------------------------


def test_when_every_segment_expired_a_new_active_segment_is_rolled_first(
    open_log: OpenLog,
) -> None:
    """A log always has an active segment; the log start offset moves to its base."""
    log = open_log({"retention.ms": HOUR_MS})
    fill_closed_segments(log, [NOW_MS - 3 * HOUR_MS] * 2)
    log.append_as_leader(one_record(NOW_MS - 2 * HOUR_MS), leader_epoch=0)  # active has data
    log.update_high_watermark(log.log_end_offset)
    assert log.log_end_offset == 3

    assert log.delete_old_segments() == 3

    assert base_offsets(log) == [3]
    assert log.active_segment.size == 0
    assert log.log_start_offset == 3
    assert log.log_end_offset == 3
    assert log.read(3, 1024).records == b""
    with pytest.raises(OffsetOutOfRangeError):
        log.read(2, 1024)
    # New appends continue the offsets.
    info = log.append_as_leader(one_record(NOW_MS), leader_epoch=0)
    assert info.first_offset == 3


@pytest.mark.parametrize("policy", ["delete", "compact", "compact,delete"])
def test_the_empty_active_segment_is_never_deleted(
    open_log: OpenLog, clock: ManualClock, policy: str
) -> None:
    """An empty active segment has no timestamp (-1) but must survive every rule."""
    log = open_log({"retention.ms": 0, "retention.bytes": 0, "cleanup.policy": policy})
    clock.advance(24 * HOUR_MS)
    assert log.delete_old_segments() == 0
    assert base_offsets(log) == [0]


def test_the_rolled_in_empty_active_segment_survives_later_passes(
    open_log: OpenLog, clock: ManualClock
) -> None:
    """After everything expired, the new empty active segment stays pass after pass."""
    log = open_log({"retention.ms": 0, "retention.bytes": 0})
    log.append_as_leader(one_record(NOW_MS), leader_epoch=0)
    log.update_high_watermark(log.log_end_offset)
    clock.advance(1)
    assert log.delete_old_segments() == 1
    active = log.active_segment
    for _ in range(3):
        clock.advance(HOUR_MS)
        assert log.delete_old_segments() == 0
        assert log.active_segment is active
    assert base_offsets(log) == [1]


# -- .deleted files and file.delete.delay.ms ---------------------------------------------


@pytest.mark.parametrize(
    ("waited_ms", "removed"),
    [
        (0, False),
        (59_999, False),
        (60_000, True),
        (60_001, True),
    ],
)
def test_deleted_segments_are_renamed_then_removed_only_after_file_delete_delay_ms(
    open_log: OpenLog, clock: ManualClock, waited_ms: int, removed: bool
) -> None:
    """Readers holding the old file keep working until the delay has passed."""
    log = open_log({"retention.ms": HOUR_MS, "file.delete.delay.ms": 60_000})
    fill_closed_segments(log, [NOW_MS - 2 * HOUR_MS, NOW_MS])
    assert log.delete_old_segments() == 1

    assert not any(p.exists() for p in segment_files(log.dir, 0))
    assert all(p.exists() for p in segment_files(log.dir, 0, file_names.DELETED_SUFFIX))

    clock.advance(waited_ms)
    assert log.run_pending_deletions() == int(removed)
    deleted = segment_files(log.dir, 0, file_names.DELETED_SUFFIX)
    assert [p.exists() for p in deleted] == [not removed] * 3
    assert all(p.exists() for p in segment_files(log.dir, 1))


def test_pending_deletions_are_removed_once(open_log: OpenLog, clock: ManualClock) -> None:
    """A second pass after the delay finds nothing left to remove."""
    log = open_log({"retention.ms": HOUR_MS, "file.delete.delay.ms": 0})
    fill_closed_segments(log, [NOW_MS - 2 * HOUR_MS] * 2)
    assert log.delete_old_segments() == 2
    assert log.run_pending_deletions() == 2
    assert log.run_pending_deletions() == 0
    assert sorted(p.name for p in log.dir.iterdir() if file_names.DELETED_SUFFIX in p.name) == []


# -- delete-records (log start offset) ---------------------------------------------------


@pytest.mark.parametrize("beyond", [1, 2, 100])
def test_delete_records_beyond_the_high_watermark_is_offset_out_of_range(
    open_log: OpenLog, beyond: int
) -> None:
    """A client may only delete committed records."""
    log = open_log({"retention.ms": -1})
    fill_closed_segments(log, [NOW_MS] * 3)
    log.update_high_watermark(2)
    with pytest.raises(OffsetOutOfRangeError) as excinfo:
        log.maybe_increment_log_start_offset(2 + beyond)
    assert excinfo.value.error_name == "OFFSET_OUT_OF_RANGE"
    assert log.log_start_offset == 0


def test_delete_records_up_to_the_high_watermark_is_allowed(open_log: OpenLog) -> None:
    """The HW itself is a valid new start (everything committed is gone)."""
    log = open_log({"retention.ms": -1})
    fill_closed_segments(log, [NOW_MS] * 3)
    assert log.maybe_increment_log_start_offset(log.high_watermark)
    assert log.log_start_offset == 3
    assert not log.maybe_increment_log_start_offset(2)  # never backwards
    assert log.log_start_offset == 3


def test_reads_below_a_new_log_start_offset_are_offset_out_of_range(open_log: OpenLog) -> None:
    """After delete-records the deleted prefix is gone for fetchers even before files go."""
    log = open_log({"retention.ms": -1})
    for _ in range(6):
        log.append_as_leader(one_record(NOW_MS), leader_epoch=0)
        if log.log_end_offset % 2 == 0:
            log.roll()
    log.update_high_watermark(log.log_end_offset)
    assert base_offsets(log) == [0, 2, 4, 6]

    log.maybe_increment_log_start_offset(3)

    for offset in (0, 1, 2):
        with pytest.raises(OffsetOutOfRangeError):
            log.read(offset, 1024)
    assert offsets_read(log, 3)[0] == 3


def test_next_retention_pass_deletes_segments_wholly_below_the_log_start_offset(
    open_log: OpenLog,
) -> None:
    """The log-start rule: a segment goes when the next one starts at or below the start."""
    log = open_log({"retention.ms": -1})
    for _ in range(6):
        log.append_as_leader(one_record(NOW_MS), leader_epoch=0)
        if log.log_end_offset % 2 == 0:
            log.roll()
    log.update_high_watermark(log.log_end_offset)
    log.maybe_increment_log_start_offset(3)
    assert base_offsets(log) == [0, 2, 4, 6]  # delete-records alone removes no file

    assert log.delete_old_segments() == 1

    assert base_offsets(log) == [2, 4, 6]  # segment 2 still holds offset 3
    assert log.log_start_offset == 3  # not moved back to the segment's base
    assert offsets_read(log, 3) == [3, 4, 5]


@pytest.mark.parametrize(
    ("new_start", "expected_bases"),
    [
        (1, [0, 2, 4]),
        (2, [2, 4]),  # segment 0 ends at 1 < 2: wholly below
        (4, [4]),
    ],
)
def test_log_start_rule_boundary(
    open_log: OpenLog, new_start: int, expected_bases: list[int]
) -> None:
    """nextSegment.baseOffset <= logStartOffset, as Kafka's predicate reads."""
    log = open_log({"retention.ms": -1})
    for _ in range(4):
        log.append_as_leader(one_record(NOW_MS), leader_epoch=0)
        if log.log_end_offset % 2 == 0:
            log.roll()
    log.update_high_watermark(log.log_end_offset)
    log.maybe_increment_log_start_offset(new_start)
    log.delete_old_segments()
    assert base_offsets(log) == expected_bases


# -- compacted topics ---------------------------------------------------------------------


def test_compacted_topic_retention_applies_only_the_log_start_rule(open_log: OpenLog) -> None:
    """cleanup.policy=compact: time and size never delete; delete-records still does."""
    log = open_log({"cleanup.policy": "compact", "retention.ms": 1, "retention.bytes": 0})
    fill_closed_segments(log, [NOW_MS - 10 * HOUR_MS] * 3)

    assert log.delete_old_segments() == 0
    assert base_offsets(log) == [0, 1, 2, 3]

    log.maybe_increment_log_start_offset(2)
    assert log.delete_old_segments() == 2
    assert base_offsets(log) == [2, 3]
    assert log.log_start_offset == 2


def test_compact_and_delete_policy_applies_time_retention(open_log: OpenLog) -> None:
    """cleanup.policy=compact,delete: both cleaners apply, so old segments still expire."""
    log = open_log({"cleanup.policy": "compact,delete", "retention.ms": HOUR_MS})
    fill_closed_segments(log, [NOW_MS - 2 * HOUR_MS, NOW_MS])
    assert log.delete_old_segments() == 1
    assert base_offsets(log) == [1, 2]
