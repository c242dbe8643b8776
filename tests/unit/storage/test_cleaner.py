"""Log compaction (``storage.cleaner``): what survives a clean, what is never touched, when a
log needs cleaning, tombstone expiry, the cleaner checkpoint, and crash safety of the swap.

The oracle for "what survives" is a brute-force dict over everything written: below the first
uncleanable offset exactly the latest record of each key remains, with its original offset.
"""

from __future__ import annotations

import random
import shutil
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path

import pytest

from kafkasim.common.clock import ManualClock
from kafkasim.common.errors import InvalidRecordError
from kafkasim.common.types import TopicPartition
from kafkasim.storage import file_names
from kafkasim.storage.checkpoints import CLEANER_OFFSET_CHECKPOINT_FILE
from kafkasim.storage.cleaner import CleanableRange, LogCleaner, cleanable_range, needs_cleaning
from kafkasim.storage.config import LogConfig
from kafkasim.storage.log import Log
from kafkasim.storage.log_manager import LogManager
from kafkasim.storage.records.batch import Record, RecordBatchBuilder, decode_batch

NOW_MS = 1_700_000_000_000
DAY_MS = 86_400_000
TP = TopicPartition("compacted", 0)
COMPACT: dict[str, object] = {"cleanup.policy": "compact"}

# (key, value) with value None for a tombstone; the offset is assigned by the log.
KV = tuple[bytes | None, bytes | None]
Written = tuple[int, bytes | None, bytes | None]  # (offset, key, value)
OpenLog = Callable[..., Log]


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(NOW_MS)


@pytest.fixture
def open_log(tmp_path: Path, clock: ManualClock) -> Iterator[OpenLog]:
    """Opens (or reopens) a log; closes every log it opened at teardown."""
    opened: list[Log] = []

    def _open(
        props: Mapping[str, object] | None = None,
        dir_: Path | None = None,
        *,
        had_clean_shutdown: bool = True,
    ) -> Log:
        log = Log.open(
            dir_ or tmp_path / "main" / TP.dir_name(),
            LogConfig.from_props({**COMPACT, **(props or {})}),
            clock,
            topic_partition=TP,
            had_clean_shutdown=had_clean_shutdown,
        )
        opened.append(log)
        return log

    yield _open
    for log in opened:
        log.close()


def batch(records: Sequence[KV], timestamp: int = NOW_MS) -> bytes:
    builder = RecordBatchBuilder()
    for key, value in records:
        builder.append(timestamp, key, value)
    return builder.build()


def append(log: Log, records: Sequence[KV], written: list[Written]) -> None:
    info = log.append_as_leader(batch(records), leader_epoch=0)
    for i, (key, value) in enumerate(records):
        written.append((info.first_offset + i, key, value))


def all_records(log: Log) -> list[Written]:
    """Every record of every segment, read straight from the segment files."""
    out: list[Written] = []
    for segment in log.segments:
        for position, header in segment.log.batch_headers(0):
            _, records = decode_batch(segment.log.read(position, header.size_in_bytes))
            out.extend((r.offset, r.key, r.value) for r in records)
    return out


def segment_bytes(log: Log) -> list[bytes]:
    return [s.log.read(0, s.size) if s.size else b"" for s in log.segments]


def latest_per_key(written: Sequence[Written], below: int) -> list[Written]:
    """The brute-force oracle: the last record of each key among offsets below ``below``."""
    latest: dict[bytes | None, Written] = {}
    for record in written:
        if record[0] < below:
            latest[record[1]] = record
    return sorted(latest.values())


def random_workload(
    log: Log, seed: int, segments: int, written: list[Written], *, tombstone_rate: float = 0.15
) -> None:
    """``segments`` closed segments of random batches over 8 keys; the active one gets data."""
    rng = random.Random(seed)
    keys = [f"key-{i}".encode() for i in range(8)]
    for s in range(segments + 1):
        for _ in range(rng.randint(1, 6)):
            records: list[KV] = []
            for _ in range(rng.randint(1, 5)):
                value = None if rng.random() < tombstone_rate else rng.randbytes(rng.randint(0, 20))
                records.append((rng.choice(keys), value))
            append(log, records, written)
        if s < segments:
            log.roll()


def clean(log: Log, checkpoint: int | None = None, cleaner: LogCleaner | None = None) -> int:
    """One cleaner pass as the log manager runs it; returns the new first dirty offset."""
    rng = cleanable_range(log, checkpoint, log._clock.time_ms())
    return (cleaner or LogCleaner()).clean(log, rng).first_dirty_offset


def assert_offsets_strictly_increase(records: Sequence[Written]) -> None:
    offsets = [r[0] for r in records]
    assert offsets == sorted(set(offsets)), "duplicate or out-of-order offsets"


# -- what survives ------------------------------------------------------------------------


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_exactly_the_latest_record_per_key_remains_below_the_first_uncleanable_offset(
    open_log: OpenLog, seed: int
) -> None:
    """Compaction's contract: a reader from the start sees at least the final value per key."""
    log = open_log()
    written: list[Written] = []
    random_workload(log, seed, segments=5, written=written)
    log.update_high_watermark(log.log_end_offset)
    first_uncleanable = log.active_segment.base_offset

    assert clean(log) == first_uncleanable

    after = all_records(log)
    below = [r for r in after if r[0] < first_uncleanable]
    assert below == latest_per_key(written, first_uncleanable)
    # Everything from the first uncleanable offset on is exactly what was written.
    assert [r for r in after if r[0] >= first_uncleanable] == [
        r for r in written if r[0] >= first_uncleanable
    ]
    assert_offsets_strictly_increase(after)
    assert log.log_end_offset == written[-1][0] + 1


@pytest.mark.parametrize("seed", [5, 6])
def test_repeated_passes_keep_the_latest_record_per_key(open_log: OpenLog, seed: int) -> None:
    """A second pass over new dirty data compacts the old clean part against it too."""
    log = open_log()
    written: list[Written] = []
    random_workload(log, seed, segments=3, written=written)
    log.update_high_watermark(log.log_end_offset)
    first_dirty = clean(log)
    log.roll()
    random_workload(log, seed + 100, segments=3, written=written)
    log.update_high_watermark(log.log_end_offset)
    first_uncleanable = log.active_segment.base_offset

    assert clean(log, first_dirty) == first_uncleanable

    after = all_records(log)
    assert [r for r in after if r[0] < first_uncleanable] == latest_per_key(
        written, first_uncleanable
    )
    assert_offsets_strictly_increase(after)


def test_offsets_are_unchanged_and_reads_skip_the_gaps(open_log: OpenLog) -> None:
    """Cleaning never renumbers: a consumer's committed offsets stay meaningful."""
    log = open_log()
    written: list[Written] = []
    append(log, [(b"a", b"1"), (b"b", b"1"), (b"a", b"2")], written)
    append(log, [(b"c", b"1"), (b"b", b"2")], written)
    log.roll()
    append(log, [(b"d", b"1")], written)
    log.update_high_watermark(log.log_end_offset)

    clean(log)

    assert all_records(log) == [
        (2, b"a", b"2"),
        (3, b"c", b"1"),
        (4, b"b", b"2"),
        (5, b"d", b"1"),
    ]
    # A fetch from a removed offset starts at the next surviving record.
    _, records = decode_batch(log.read(0, 1 << 20).records)
    assert [r.offset for r in records] == [2]


def test_the_active_segment_is_never_touched(open_log: OpenLog) -> None:
    """The active segment is still being written; Kafka never compacts it."""
    log = open_log()
    written: list[Written] = []
    append(log, [(b"a", b"old"), (b"a", b"new"), (b"b", b"old")], written)
    log.roll()
    append(log, [(b"b", b"x"), (b"b", b"y"), (b"b", b"z")], written)  # duplicates in active
    log.update_high_watermark(log.log_end_offset)
    active = log.active_segment
    before = active.log.read(0, active.size)

    clean(log)

    assert log.active_segment is active
    assert active.log.read(0, active.size) == before
    # Keys in the active segment are not in the offset map either: b=old stays.
    assert all_records(log) == [
        (1, b"a", b"new"),
        (2, b"b", b"old"),
        (3, b"b", b"x"),
        (4, b"b", b"y"),
        (5, b"b", b"z"),
    ]


@pytest.mark.parametrize("delete_retention_ms", [0, DAY_MS])
def test_records_at_or_above_the_high_watermark_are_untouched(
    open_log: OpenLog, delete_retention_ms: int
) -> None:
    """Uncommitted records may still be truncated by a new leader; the cleaner must not
    drop or rewrite any of them (tombstones included), even inside a segment it recopies."""
    log = open_log({"delete.retention.ms": delete_retention_ms})
    written: list[Written] = []
    append(log, [(b"a", b"1"), (b"b", b"1")], written)
    log.roll()
    log.update_high_watermark(log.log_end_offset)
    first_dirty = clean(log)  # segment 0 is now clean; a delete horizon exists from here on
    assert first_dirty == 2
    append(log, [(b"a", b"2")], written)  # offset 2: below the HW
    append(log, [(b"c", b"1"), (b"c", None), (b"d", None), (b"a", b"3")], written)  # 3..6
    log.roll()
    append(log, [(b"e", b"1")], written)
    log.update_high_watermark(3)  # inside the second segment
    above_before = [r for r in all_records(log) if r[0] >= 3]

    assert clean(log, first_dirty) == 3

    after = all_records(log)
    assert [r for r in after if r[0] >= 3] == above_before
    assert [r for r in after if r[0] < 3] == [(1, b"b", b"1"), (2, b"a", b"2")]
    assert_offsets_strictly_increase(after)


def test_a_batch_whose_records_all_go_is_dropped(open_log: OpenLog) -> None:
    """An empty batch without a producer id carries nothing worth keeping."""
    log = open_log()
    written: list[Written] = []
    append(log, [(b"a", b"1"), (b"b", b"1")], written)
    append(log, [(b"a", b"2"), (b"b", b"2")], written)
    log.roll()
    log.update_high_watermark(log.log_end_offset)
    clean(log)
    headers = [h for s in log.segments for _, h in s.log.batch_headers(0)]
    assert [(h.base_offset, h.last_offset, h.records_count) for h in headers] == [(2, 3, 2)]


def test_a_full_offset_map_stops_at_a_segment_boundary_and_the_next_pass_continues(
    open_log: OpenLog,
) -> None:
    """log.cleaner.dedupe.buffer.size bounds one pass; the checkpoint carries the rest over."""
    cleaner = LogCleaner(dedupe_buffer_size=60)  # 60 * 0.9 / 24 bytes an entry: 2 keys
    assert cleaner.max_map_entries == 2
    log = open_log()
    written: list[Written] = []
    for keys in ([b"a", b"a", b"b"], [b"c", b"d", b"c"], [b"a", b"b"]):
        append(log, [(k, b"v") for k in keys], written)
        log.roll()
    log.update_high_watermark(log.log_end_offset)

    first_dirty = clean(log, cleaner=cleaner)

    assert first_dirty == 3  # only segment 0 fitted the map
    assert all_records(log) == [(1, b"a", b"v"), (2, b"b", b"v"), *written[3:]]
    first_dirty = clean(log, first_dirty, cleaner=cleaner)
    assert first_dirty == 6
    first_dirty = clean(log, first_dirty, cleaner=cleaner)
    assert first_dirty == 8
    assert all_records(log) == [(4, b"d", b"v"), (5, b"c", b"v"), (6, b"a", b"v"), (7, b"b", b"v")]


# -- tombstones ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("gap_ms", "tombstone_kept"),
    [
        (0, True),
        (DAY_MS - 1, True),
        (DAY_MS, False),  # retainDeletes = segment.lastModified > horizon, strictly
        (DAY_MS + 1, False),
    ],
)
def test_tombstones_are_kept_within_delete_retention_ms_of_the_last_clean_segment(
    open_log: OpenLog, clock: ManualClock, gap_ms: int, tombstone_kept: bool
) -> None:
    """Kafka's legacy horizon: lastModified(last clean segment) - delete.retention.ms; a
    consumer that lags less than delete.retention.ms still sees the delete."""
    # One batch per segment and segments too large to merge, so each keeps its own mtime.
    log = open_log({"delete.retention.ms": DAY_MS, "segment.bytes": 160})
    written: list[Written] = []
    append(log, [(b"a", b"v" * 40), (b"t", None)], written)  # segment 0, written at NOW
    log.roll()
    log.update_high_watermark(log.log_end_offset)
    first_dirty = clean(log)  # no clean segment yet: horizon 0, the tombstone stays
    assert (1, b"t", None) in all_records(log)

    clock.advance(gap_ms)
    append(log, [(b"b", b"v" * 40)], written)  # segment 2, written at NOW + gap
    log.roll()
    log.update_high_watermark(log.log_end_offset)
    first_dirty = clean(log, first_dirty)  # segment 0 is the clean one: horizon NOW - day
    assert (1, b"t", None) in all_records(log)

    append(log, [(b"c", b"v" * 40)], written)
    log.roll()
    log.update_high_watermark(log.log_end_offset)
    clean(log, first_dirty)  # last clean segment written at NOW + gap: horizon NOW + gap - day

    assert ((1, b"t", None) in all_records(log)) is tombstone_kept
    assert (0, b"a", b"v" * 40) in all_records(log)


@pytest.mark.parametrize(
    ("gap_ms", "tombstone_kept"),
    [(DAY_MS - 1, True), (DAY_MS, False)],
)
def test_the_tombstone_horizon_is_the_same_after_close_and_reopen(
    open_log: OpenLog, clock: ManualClock, gap_ms: int, tombstone_kept: bool
) -> None:
    """A restart must not move the horizon: cleaned segments keep their last-modified time
    (Kafka sets it on the files), so the same tombstones expire as without the restart."""
    log = open_log({"delete.retention.ms": DAY_MS, "segment.bytes": 160})
    written: list[Written] = []
    append(log, [(b"a", b"v" * 40), (b"t", None)], written)
    log.roll()
    log.update_high_watermark(log.log_end_offset)
    first_dirty = clean(log)
    clock.advance(gap_ms)
    append(log, [(b"b", b"v" * 40)], written)
    log.roll()
    log.update_high_watermark(log.log_end_offset)
    first_dirty = clean(log, first_dirty)
    log.close()

    log = open_log({"delete.retention.ms": DAY_MS, "segment.bytes": 160})
    append(log, [(b"c", b"v" * 40)], written)
    log.roll()
    log.update_high_watermark(log.log_end_offset)
    clean(log, first_dirty)

    assert ((1, b"t", None) in all_records(log)) is tombstone_kept


def test_a_fresh_tombstone_survives_a_clean_after_a_restart(
    open_log: OpenLog, clock: ManualClock
) -> None:
    """Segments written before a restart and cleaned after it must stay on the log's clock:
    a tombstone written a moment ago (by that clock) is within delete.retention.ms and must
    be kept, or a consumer that is barely behind misses the delete."""
    log = open_log({"delete.retention.ms": DAY_MS, "segment.bytes": 160})
    written: list[Written] = []
    append(log, [(b"a", b"v" * 40)], written)
    log.roll()
    log.update_high_watermark(log.log_end_offset)
    log.close()

    log = open_log({"delete.retention.ms": DAY_MS, "segment.bytes": 160})
    log.update_high_watermark(log.log_end_offset)  # as the log manager restores it
    first_dirty = clean(log)  # the pre-restart segment becomes the last clean segment
    assert first_dirty == 1
    clock.advance(1)
    append(log, [(b"t", None), (b"b", b"v" * 40)], written)  # a tombstone, written now
    log.roll()
    log.update_high_watermark(log.log_end_offset)
    clean(log, first_dirty)

    assert (1, b"t", None) in all_records(log)


def test_the_first_clean_keeps_every_latest_tombstone(
    open_log: OpenLog, clock: ManualClock
) -> None:
    """With no clean segment the horizon is 0: a delete is never lost on its first pass."""
    log = open_log({"delete.retention.ms": 0})
    written: list[Written] = []
    append(log, [(b"a", b"1"), (b"a", None), (b"b", None)], written)
    log.roll()
    log.update_high_watermark(log.log_end_offset)
    clock.advance(10 * DAY_MS)
    clean(log)
    assert all_records(log) == [(1, b"a", None), (2, b"b", None)]


# -- when to clean ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("min_ratio", "checkpoint", "expected"),
    [
        (0.5, 0, True),  # all dirty: ratio 1.0
        (1.0, 0, True),
        (0.5, 2, True),  # 2 of 4 equal segments dirty: ratio 0.5 reaches 0.5
        (0.51, 2, False),
        (0.75, 1, True),
        (0.76, 1, False),
        (0.25, 3, True),
        (0.5, 3, False),
        (0.0, 3, True),
        (0.0, 4, False),  # nothing dirty below the active segment: nothing to do
    ],
)
def test_min_cleanable_dirty_ratio_decides_needs_cleaning(
    open_log: OpenLog, min_ratio: float, checkpoint: int, expected: bool
) -> None:
    """dirty / (clean + dirty) >= min.cleanable.dirty.ratio, with dirty from the checkpoint."""
    log = open_log({"min.cleanable.dirty.ratio": min_ratio})
    written: list[Written] = []
    for _ in range(4):
        append(log, [(b"same", b"value")], written)
        log.roll()
    log.update_high_watermark(log.log_end_offset)

    rng = cleanable_range(log, checkpoint, NOW_MS)

    assert rng == CleanableRange(checkpoint, 4, rng.clean_bytes, rng.dirty_bytes)
    assert rng.clean_bytes == checkpoint * log.segments.first.size  # type: ignore[union-attr]
    assert rng.dirty_ratio == pytest.approx((4 - checkpoint) / 4)
    assert needs_cleaning(log, rng, NOW_MS) is expected


def test_a_delete_only_topic_never_needs_cleaning(open_log: OpenLog) -> None:
    """The cleaner only runs for cleanup.policy containing compact."""
    log = open_log({"cleanup.policy": "delete"})
    log.append_as_leader(batch([(b"a", b"1")]), leader_epoch=0)
    log.append_as_leader(batch([(b"a", b"2")]), leader_epoch=0)
    log.roll()
    log.update_high_watermark(log.log_end_offset)
    rng = cleanable_range(log, None, NOW_MS)
    assert not needs_cleaning(log, rng, NOW_MS)


@pytest.mark.parametrize(
    ("checkpoint", "expected_first_dirty"),
    [
        (None, 0),
        (-5, 0),  # out of range: start from the log start offset
        (2, 2),
        (99, 0),  # beyond the log end (e.g. after a truncation): start over
    ],
)
def test_cleanable_range_trusts_the_checkpoint_only_within_the_log(
    open_log: OpenLog, checkpoint: int | None, expected_first_dirty: int
) -> None:
    """Kafka resets a checkpoint outside [logStartOffset, logEndOffset] to the log start."""
    log = open_log()
    for i in range(4):
        log.append_as_leader(batch([(b"k", str(i).encode())]), leader_epoch=0)
        log.roll()
    log.update_high_watermark(log.log_end_offset)
    assert cleanable_range(log, checkpoint, NOW_MS).first_dirty_offset == expected_first_dirty


# -- the cleaner offset checkpoint --------------------------------------------------------


def test_cleaner_offset_checkpoint_advances_with_each_pass(
    tmp_path: Path, clock: ManualClock
) -> None:
    """The next pass must start where the last one stopped (cleaner-offset-checkpoint)."""
    manager = LogManager([tmp_path / "d0"], LogConfig.from_props(COMPACT), clock)
    manager.startup()
    try:
        log = manager.get_or_create_log(TP)
        for i in range(3):
            log.append_as_leader(batch([(b"k", str(i).encode())]), leader_epoch=0)
        log.roll()
        log.update_high_watermark(log.log_end_offset)
        checkpoint_file = tmp_path / "d0" / CLEANER_OFFSET_CHECKPOINT_FILE

        assert manager.run_cleaner() == 1
        assert checkpoint_file.read_text() == "0\n1\ncompacted 0 3\n"

        # Clean part 1 segment, dirty part 2 segments: ratio 2/3 ≥ 0.5.
        for i in range(3, 5):
            log.append_as_leader(batch([(b"k", str(i).encode())]), leader_epoch=0)
            log.roll()
        log.update_high_watermark(log.log_end_offset)
        assert manager.run_cleaner() == 1
        assert checkpoint_file.read_text() == "0\n1\ncompacted 0 5\n"

        # Nothing new: not cleaned again, checkpoint unchanged.
        assert manager.run_cleaner() == 0
        assert checkpoint_file.read_text() == "0\n1\ncompacted 0 5\n"
        assert all_records(log) == [(4, b"k", b"4")]
    finally:
        manager.shutdown()


# -- crash safety -------------------------------------------------------------------------


def build_dirty_log(open_log: OpenLog, dir_: Path) -> list[Written]:
    log = open_log(dir_=dir_)
    written: list[Written] = []
    random_workload(log, 42, segments=4, written=written)
    log.update_high_watermark(log.log_end_offset)
    log.close()
    return written


def cleaned_copy(open_log: OpenLog, src: Path, dst: Path) -> tuple[list[Written], int]:
    """Clean a copy of ``src``; return its records and the base of its active segment."""
    shutil.copytree(src, dst)
    copy = open_log(dir_=dst)
    copy.update_high_watermark(copy.log_end_offset)
    clean(copy)
    bases = [s.base_offset for s in copy.segments]
    assert bases == [0, copy.active_segment.base_offset]  # one group: one cleaned segment
    records = all_records(copy)
    copy.close()
    return records, bases[-1]


@pytest.mark.parametrize("old_segments", ["in place", "renamed .deleted"])
def test_a_crash_in_the_middle_of_a_swap_is_completed_by_the_loader(
    open_log: OpenLog, tmp_path: Path, old_segments: str
) -> None:
    """Crash after the cleaned segment became ``.swap``: before or after the old segments
    were renamed ``.deleted``. Reopening must give the compacted log, without duplicates."""
    src = tmp_path / "crashed" / TP.dir_name()
    written = build_dirty_log(open_log, src)
    expected, active_base = cleaned_copy(open_log, src, tmp_path / "copy" / TP.dir_name())
    old_bases = sorted(file_names.offset_from_file_name(p.name) for p in src.glob("*.log"))
    assert len(old_bases) == 5
    for make in (file_names.log_file, file_names.index_file, file_names.time_index_file):
        shutil.copyfile(
            make(tmp_path / "copy" / TP.dir_name(), 0), make(src, 0, file_names.SWAP_SUFFIX)
        )
    if old_segments == "renamed .deleted":
        for base in old_bases[:-1]:
            for make in (file_names.log_file, file_names.index_file, file_names.time_index_file):
                path = make(src, base)
                path.rename(path.with_name(path.name + file_names.DELETED_SUFFIX))

    log = open_log(dir_=src, had_clean_shutdown=False)

    assert all_records(log) == expected
    assert [r for r in expected if r[0] < active_base] == latest_per_key(written, active_base)
    assert_offsets_strictly_increase(all_records(log))
    assert [s.base_offset for s in log.segments] == [0, active_base]
    leftovers = [p.name for p in src.iterdir() if p.name.endswith(file_names.TEMP_SUFFIXES)]
    assert leftovers == []
    assert log.log_end_offset == written[-1][0] + 1


def test_a_leftover_cleaned_file_is_removed_on_load_and_the_old_data_is_intact(
    open_log: OpenLog, tmp_path: Path
) -> None:
    """``.cleaned`` means the swap never started: the old segments are the truth."""
    src = tmp_path / "crashed" / TP.dir_name()
    written = build_dirty_log(open_log, src)
    cleaned_copy(open_log, src, tmp_path / "copy" / TP.dir_name())
    for make in (file_names.log_file, file_names.index_file, file_names.time_index_file):
        shutil.copyfile(
            make(tmp_path / "copy" / TP.dir_name(), 0), make(src, 0, file_names.CLEANED_SUFFIX)
        )

    log = open_log(dir_=src, had_clean_shutdown=False)

    assert all_records(log) == written
    assert not list(src.glob(f"*{file_names.CLEANED_SUFFIX}"))


@pytest.mark.parametrize("had_clean_shutdown", [True, False])
def test_a_compacted_log_survives_close_and_reopen(
    open_log: OpenLog, had_clean_shutdown: bool
) -> None:
    """The swapped-in segment is a normal segment on disk: indexes and recovery accept it."""
    log = open_log()
    written: list[Written] = []
    random_workload(log, 7, segments=4, written=written)
    log.update_high_watermark(log.log_end_offset)
    clean(log)
    compacted = all_records(log)
    end = log.log_end_offset
    log.close()

    reopened = open_log(had_clean_shutdown=had_clean_shutdown)

    assert all_records(reopened) == compacted
    assert reopened.log_end_offset == end
    for offset, key, value in compacted:
        _, records = decode_batch(reopened.read(offset, 1 << 20).records)
        found: list[Record] = [r for r in records if r.offset == offset]
        assert [(r.key, r.value) for r in found] == [(key, value)]


# -- keys are mandatory -------------------------------------------------------------------


@pytest.mark.parametrize(
    "records",
    [
        [(None, b"v")],
        [(b"k", b"v"), (None, b"v")],
        [(None, None)],
    ],
)
def test_a_compacted_topic_rejects_keyless_records_on_leader_append(
    open_log: OpenLog, records: list[KV]
) -> None:
    """Without a key a record can never be compacted away (Kafka: INVALID_RECORD)."""
    log = open_log()
    with pytest.raises(InvalidRecordError) as excinfo:
        log.append_as_leader(batch(records), leader_epoch=0)
    assert excinfo.value.error_name == "INVALID_RECORD"
    assert log.log_end_offset == 0
