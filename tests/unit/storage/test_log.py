"""The partition log: leader and follower appends, reads, lookups, rolls, truncation."""

from __future__ import annotations

import os
import struct
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kafkasim.common.errors import (
    CorruptRecordError,
    InvalidOffsetError,
    InvalidRecordError,
    InvalidTimestampError,
    OffsetOutOfRangeError,
    OutOfOrderSequenceNumberError,
    RecordTooLargeError,
    UnsupportedForMessageFormatError,
)
from kafkasim.storage.log import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, MAX_TIMESTAMP, Log
from kafkasim.storage.producer_state import decode_snapshot
from kafkasim.storage.records.batch import (
    BatchHeader,
    ControlRecordType,
    RecordBatchBuilder,
    TimestampType,
    decode_batch,
    encode_control_batch,
    set_base_offset,
    set_partition_leader_epoch,
)
from kafkasim.storage.records.compression import CompressionType
from kafkasim.storage.records.legacy import encode_legacy
from tests.unit.storage.logtools import T0, make_batch, open_log, read_all, reopen


def _dir_bytes(path: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(path.iterdir()) if p.is_file()}


# -- leader appends --------------------------------------------------------------------------


def test_leader_append_assigns_dense_offsets_and_stamps_epoch(tmp_path: Path) -> None:
    """The leader rewrites baseOffset and partitionLeaderEpoch; the CRC still holds."""
    log, _ = open_log(tmp_path)
    first = log.append_as_leader(make_batch([b"a", b"b", b"c"]), leader_epoch=7)
    second = log.append_as_leader(make_batch([b"d"]), leader_epoch=7)
    assert (first.first_offset, first.last_offset) == (0, 2)
    assert (second.first_offset, second.last_offset) == (3, 3)
    assert log.log_end_offset == 4
    data = log.read(0, 1 << 20).records
    header, records = decode_batch(data)  # verifies the CRC
    assert header.partition_leader_epoch == 7
    assert [r.offset for r in records] == [0, 1, 2]
    assert [r.value for r in read_all(log)] == [b"a", b"b", b"c", b"d"]
    assert log.epoch_cache.entries()[0] == (7, 0)
    log.close()


def test_leader_append_of_several_batches_in_one_request(tmp_path: Path) -> None:
    log, _ = open_log(tmp_path)
    info = log.append_as_leader(make_batch([b"1", b"2"]) + make_batch([b"3"]), leader_epoch=0)
    assert (info.first_offset, info.last_offset, info.batch_count, info.record_count) == (
        0,
        2,
        2,
        3,
    )
    assert [r.offset for r in read_all(log)] == [0, 1, 2]
    log.close()


def test_new_leader_epoch_is_recorded_at_its_first_offset(tmp_path: Path) -> None:
    log, _ = open_log(tmp_path)
    log.append_as_leader(make_batch([b"a", b"b"]), leader_epoch=0)
    log.append_as_leader(make_batch([b"c"]), leader_epoch=3)
    assert [(e.epoch, e.start_offset) for e in log.epoch_cache.entries()] == [(0, 0), (3, 2)]
    assert log.end_offset_for_epoch(0) == (0, 2)
    assert log.end_offset_for_epoch(3) == (3, 3)
    log.close()


@pytest.mark.parametrize(
    ("make", "error"),
    [
        # too large for max.message.bytes=200
        (lambda: make_batch([b"x" * 300]), RecordTooLargeError),
        # a legacy v1 message set
        (lambda: encode_legacy([(T0, None, b"v")], magic=1), UnsupportedForMessageFormatError),
        # a control batch from a client
        (
            lambda: encode_control_batch(
                ControlRecordType.COMMIT, producer_id=1, producer_epoch=0, timestamp=T0
            ),
            InvalidRecordError,
        ),
        # trailing garbage after a valid batch
        (lambda: make_batch([b"ok"]) + b"\x00" * 20, InvalidRecordError),
        # batch length claims more than the request holds
        (lambda: make_batch([b"ok"])[:-5], InvalidRecordError),
    ],
    ids=["too-large", "legacy-magic", "client-control-batch", "trailing-garbage", "cut-short"],
)
def test_bad_client_batches_are_rejected_and_nothing_is_written(
    tmp_path: Path, make: object, error: type[Exception]
) -> None:
    log, _ = open_log(tmp_path, **{"max.message.bytes": 200})
    log.append_as_leader(make_batch([b"before"]), leader_epoch=0)
    log.flush()
    before = _dir_bytes(log.dir)
    with pytest.raises(error):
        log.append_as_leader(make(), leader_epoch=0)  # type: ignore[operator]
    assert log.log_end_offset == 1
    assert _dir_bytes(log.dir) == before
    log.close()


def test_corrupt_batch_is_rejected_with_corrupt_message(tmp_path: Path) -> None:
    log, _ = open_log(tmp_path)
    data = bytearray(make_batch([b"hello"]))
    data[-1] ^= 0xFF
    with pytest.raises(CorruptRecordError, match="CRC"):
        log.append_as_leader(bytes(data), leader_epoch=0)
    assert log.log_end_offset == 0
    log.close()


def test_client_batch_with_zero_records_is_invalid(tmp_path: Path) -> None:
    log, _ = open_log(tmp_path)
    with pytest.raises(InvalidRecordError, match="at least one record"):
        log.append_as_leader(RecordBatchBuilder().build(), leader_epoch=0)
    log.close()


def test_compacted_topic_rejects_records_without_key(tmp_path: Path) -> None:
    log, _ = open_log(tmp_path, **{"cleanup.policy": "compact"})
    with pytest.raises(InvalidRecordError, match="record 0: compacted topic cannot accept message"):
        log.append_as_leader(make_batch([b"v"], keys=[None]), leader_epoch=0)
    log.append_as_leader(make_batch([b"v"], keys=[b"k"]), leader_epoch=0)
    assert log.log_end_offset == 1
    log.close()


def test_timestamp_difference_limit_is_enforced_per_record(tmp_path: Path) -> None:
    log, clock = open_log(tmp_path, **{"message.timestamp.difference.max.ms": 1000})
    ok = make_batch([b"a", b"b"], timestamps=[clock.time_ms(), clock.time_ms() + 999])
    log.append_as_leader(ok, leader_epoch=0)
    bad = make_batch([b"a", b"b"], timestamps=[clock.time_ms(), clock.time_ms() - 5000])
    with pytest.raises(InvalidTimestampError, match=r"message\.timestamp\.difference\.max\.ms"):
        log.append_as_leader(bad, leader_epoch=0)
    log.close()


def test_log_append_time_is_stamped_by_the_broker(tmp_path: Path) -> None:
    log, clock = open_log(tmp_path, **{"message.timestamp.type": "LogAppendTime"})
    clock.advance(5000)
    info = log.append_as_leader(make_batch([b"a", b"b"], timestamps=[1, 2]), leader_epoch=0)
    assert info.log_append_time == clock.time_ms()
    header, _ = decode_batch(log.read(0, 1 << 20).records)
    assert header.timestamp_type is TimestampType.LOG_APPEND_TIME
    assert header.max_timestamp == clock.time_ms()
    log.close()


def test_topic_compression_type_recompresses_batches(tmp_path: Path) -> None:
    log, _ = open_log(tmp_path, **{"compression.type": "gzip"})
    log.append_as_leader(make_batch([b"x" * 100] * 10), leader_epoch=0)
    header, records = decode_batch(log.read(0, 1 << 20).records)
    assert header.compression is CompressionType.GZIP
    assert [r.value for r in records] == [b"x" * 100] * 10
    log.close()


def test_idempotent_retry_is_acknowledged_without_a_second_append(tmp_path: Path) -> None:
    log, _ = open_log(tmp_path)
    batch = make_batch([b"a", b"b"], producer_id=42, producer_epoch=0, base_sequence=0)
    first = log.append_as_leader(batch, leader_epoch=0)
    retry = log.append_as_leader(batch, leader_epoch=0)
    assert retry.duplicate
    assert (retry.first_offset, retry.last_offset) == (first.first_offset, first.last_offset)
    assert log.log_end_offset == 2
    gap = make_batch([b"c"], producer_id=42, producer_epoch=0, base_sequence=5)
    with pytest.raises(OutOfOrderSequenceNumberError):
        log.append_as_leader(gap, leader_epoch=0)
    assert log.log_end_offset == 2
    log.close()


def test_flush_messages_one_advances_the_recovery_point_on_every_append(tmp_path: Path) -> None:
    log, _ = open_log(tmp_path, **{"flush.messages": 1})
    for i in range(3):
        log.append_as_leader(make_batch([b"v"]), leader_epoch=0)
        assert log.recovery_point == i + 1
    log.close()


def test_default_flush_policy_leaves_flushing_to_the_os(tmp_path: Path) -> None:
    log, clock = open_log(tmp_path)
    log.append_as_leader(make_batch([b"v"]), leader_epoch=0)
    assert log.recovery_point == 0
    clock.advance(10**9)
    assert not log.flush_if_due()
    log.close()


# -- follower appends ------------------------------------------------------------------------


def _leader_bytes(base: int, values: list[bytes], epoch: int) -> bytes:
    data = bytearray(make_batch(values))
    set_base_offset(data, 0, base)
    set_partition_leader_epoch(data, 0, epoch)
    return bytes(data)


def test_follower_append_keeps_the_leaders_offsets_and_epochs(tmp_path: Path) -> None:
    log, _ = open_log(tmp_path)
    log.append_as_follower(_leader_bytes(0, [b"a", b"b"], 1) + _leader_bytes(2, [b"c"], 2))
    assert log.log_end_offset == 3
    assert [(e.epoch, e.start_offset) for e in log.epoch_cache.entries()] == [(1, 0), (2, 2)]
    with pytest.raises(InvalidOffsetError, match="log end offset is 3"):
        log.append_as_follower(_leader_bytes(1, [b"x"], 2))
    # A gap (the leader's log was compacted) is legal.
    log.append_as_follower(_leader_bytes(10, [b"d"], 2))
    assert log.log_end_offset == 11
    log.close()


def test_follower_append_rejects_offsets_out_of_order(tmp_path: Path) -> None:
    log, _ = open_log(tmp_path)
    with pytest.raises(InvalidOffsetError, match="out of order"):
        log.append_as_follower(_leader_bytes(5, [b"a"], 0) + _leader_bytes(5, [b"b"], 0))
    assert log.log_end_offset == 0
    log.close()


# -- reads -----------------------------------------------------------------------------------


def test_read_returns_whole_batches_and_at_least_one(tmp_path: Path) -> None:
    log, _ = open_log(tmp_path)
    for i in range(5):
        log.append_as_leader(make_batch([b"%d" % i * 50]), leader_epoch=0)
    size = BatchHeader.parse(log.read(0, 1 << 20).records).size_in_bytes
    assert len(log.read(0, size * 2 + 10).records) == size * 2
    assert len(log.read(0, 1).records) == size  # min one message
    assert log.read(0, 1, min_one_message=False).records == b""
    log.close()


def test_read_never_passes_max_offset(tmp_path: Path) -> None:
    """The broker passes the HW: a consumer never sees an offset at or past it."""
    log, _ = open_log(tmp_path, **{"segment.bytes": 300})
    for i in range(20):
        log.append_as_leader(make_batch([b"v%d" % i, b"w%d" % i]), leader_epoch=0)
    for hw in range(0, 41, 2):
        records = read_all(log, 0, max_offset=hw)
        assert [r.offset for r in records] == list(range(hw))
    log.close()


def test_read_out_of_range_is_offset_out_of_range(tmp_path: Path) -> None:
    log, _ = open_log(tmp_path)
    log.append_as_leader(make_batch([b"a"]), leader_epoch=0)
    assert log.read(1, 100).records == b""  # at the log end: empty, not an error
    with pytest.raises(OffsetOutOfRangeError, match="range 0 to 1"):
        log.read(2, 100)
    with pytest.raises(OffsetOutOfRangeError):
        log.read(-1, 100)
    log.close()


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    batch_sizes=st.lists(st.integers(1, 8), min_size=1, max_size=60),
    value_size=st.integers(1, 120),
    data=st.data(),
)
def test_lookup_by_offset_matches_a_brute_force_scan(
    tmp_path_factory: pytest.TempPathFactory,
    batch_sizes: list[int],
    value_size: int,
    data: st.DataObject,
) -> None:
    path = tmp_path_factory.mktemp("lookup")
    log, _ = open_log(path, **{"segment.bytes": 2048, "index.interval.bytes": 200})
    for n in batch_sizes:
        log.append_as_leader(make_batch([b"v" * value_size] * n), leader_epoch=0)
    everything = read_all(log)
    assert [r.offset for r in everything] == list(range(sum(batch_sizes)))
    target = data.draw(st.integers(0, log.log_end_offset - 1))
    info = log.read(target, 1)
    header, records = decode_batch(info.records)
    assert header.base_offset <= target <= header.last_offset
    assert records[target - header.base_offset].offset == target
    log.close()


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    timestamps=st.lists(st.integers(T0, T0 + 100_000), min_size=1, max_size=300),
    target=st.integers(T0 - 10, T0 + 100_010),
)
def test_lookup_by_timestamp_matches_a_brute_force_scan(
    tmp_path_factory: pytest.TempPathFactory, timestamps: list[int], target: int
) -> None:
    """Timestamps need not be monotonic; the answer is the first record with ts ≥ target."""
    path = tmp_path_factory.mktemp("ts")
    log, _ = open_log(path, **{"segment.bytes": 1024, "index.interval.bytes": 100})
    for i in range(0, len(timestamps), 3):
        chunk = timestamps[i : i + 3]
        log.append_as_leader(make_batch([b"x" * 20] * len(chunk), timestamps=chunk), leader_epoch=0)
    expected = next(((ts, off) for off, ts in enumerate(timestamps) if ts >= target), None)
    found = log.fetch_offset_by_timestamp(target)
    assert (None if found is None else (found.timestamp, found.offset)) == expected
    log.close()


def test_special_timestamps_earliest_latest_and_max(tmp_path: Path) -> None:
    log, _ = open_log(tmp_path)
    log.append_as_leader(
        make_batch([b"a", b"b", b"c"], timestamps=[T0 + 5, T0 + 9, T0 + 1]), leader_epoch=2
    )
    earliest = log.fetch_offset_by_timestamp(EARLIEST_TIMESTAMP)
    latest = log.fetch_offset_by_timestamp(LATEST_TIMESTAMP)
    largest = log.fetch_offset_by_timestamp(MAX_TIMESTAMP)
    assert earliest is not None and earliest.offset == 0
    assert latest is not None and (latest.offset, latest.leader_epoch) == (3, 2)
    assert largest is not None and largest.timestamp == T0 + 9
    log.close()


# -- rolling ---------------------------------------------------------------------------------


def test_roll_when_the_next_batch_would_overflow_segment_bytes(tmp_path: Path) -> None:
    batch = make_batch([b"x" * 100])
    log, _ = open_log(tmp_path, **{"segment.bytes": len(batch) * 3})
    for _ in range(3):
        log.append_as_leader(batch, leader_epoch=0)
    assert log.num_segments == 1
    log.append_as_leader(batch, leader_epoch=0)
    assert [s.base_offset for s in log.segments] == [0, 3]
    assert log.segments.first is not None and log.segments.first.size == len(batch) * 3
    log.close()


def _snapshot_last_offsets(log: Log) -> dict[int, list[int]]:
    """Each snapshot's offset -> its producers' last batch offsets."""
    return {
        int(path.name.split(".")[0]): [
            e.last_data_offset for e in decode_snapshot(path.read_bytes())
        ]
        for path in sorted(log.dir.glob("*.snapshot"))
    }


@pytest.mark.parametrize("follower", [False, True], ids=["leader", "follower"])
def test_the_snapshot_at_a_roll_holds_the_state_below_the_new_segment(
    tmp_path: Path, follower: bool
) -> None:
    """Kafka rolls before the batch that caused the roll updates the producer state: the
    snapshot named by the new segment's base offset covers exactly the offsets below it."""
    size = len(make_batch([b"x" * 100], producer_id=7, producer_epoch=0, base_sequence=0))
    log, _ = open_log(tmp_path, **{"segment.bytes": size * 3})
    for i in range(7):
        batch = make_batch([b"x" * 100], producer_id=7, producer_epoch=0, base_sequence=i)
        if follower:
            data = bytearray(batch)
            set_base_offset(data, 0, i)
            log.append_as_follower(bytes(data))
        else:
            log.append_as_leader(batch, leader_epoch=0)
    assert [s.base_offset for s in log.segments] == [0, 3, 6]
    assert _snapshot_last_offsets(log) == {3: [2], 6: [5]}
    log.close()


def test_roll_when_segment_ms_passed_since_the_first_batch_timestamp(tmp_path: Path) -> None:
    log, _ = open_log(tmp_path, **{"segment.ms": 1000})
    log.append_as_leader(make_batch([b"a"], timestamps=[T0]), leader_epoch=0)
    log.append_as_leader(make_batch([b"b"], timestamps=[T0 + 1000]), leader_epoch=0)
    assert log.num_segments == 1  # exactly segment.ms is not past it
    log.append_as_leader(make_batch([b"c"], timestamps=[T0 + 1001]), leader_epoch=0)
    assert [s.base_offset for s in log.segments] == [0, 2]
    log.close()


def test_roll_when_the_offset_index_is_full(tmp_path: Path) -> None:
    # segment.index.bytes=24 holds 3 offset entries (and 2 time entries, one reserved).
    log, _ = open_log(tmp_path, **{"segment.index.bytes": 24, "index.interval.bytes": 0})
    for _ in range(8):
        log.append_as_leader(make_batch([b"v"]), leader_epoch=0)
    assert log.num_segments > 1
    assert all(s.offset_index.entries <= 3 for s in log.segments)
    assert [r.offset for r in read_all(log)] == list(range(8))
    log.close()


def test_roll_when_an_offset_no_longer_fits_a_relative_offset(tmp_path: Path) -> None:
    log, _ = open_log(tmp_path)
    log.append_as_follower(_leader_bytes(0, [b"a"], 0))
    far = 2**31  # base 0 + 2^31 does not fit an int32 relative offset
    log.append_as_follower(_leader_bytes(far, [b"b"], 0))
    assert [s.base_offset for s in log.segments] == [0, far]
    log.close()


def test_inactive_segments_are_trimmed_and_read_only(tmp_path: Path) -> None:
    log, _ = open_log(tmp_path, **{"segment.bytes": 200, "index.interval.bytes": 10})
    for _ in range(6):
        log.append_as_leader(make_batch([b"x" * 60]), leader_epoch=0)
    first = log.segments.first
    assert first is not None and first is not log.active_segment
    assert first.offset_index.length_bytes == first.offset_index.entries * 8
    assert not first.offset_index.writable and not first.time_index.writable
    assert log.active_segment.offset_index.length_bytes == 10 * 1024 * 1024
    log.close()


# -- truncation ------------------------------------------------------------------------------


def test_truncate_to_drops_later_segments_and_epochs(tmp_path: Path) -> None:
    log, _ = open_log(tmp_path, **{"segment.bytes": 300})
    for i in range(12):
        log.append_as_leader(make_batch([b"v%02d" % i] * 2), leader_epoch=i // 4)
    assert log.num_segments > 2
    log.update_high_watermark(24)
    assert log.truncate_to(9 * 2)
    assert log.log_end_offset == 18
    assert log.high_watermark == 18
    assert log.epoch_cache.latest_epoch == 2
    assert [r.offset for r in read_all(log)] == list(range(18))
    info = log.append_as_leader(make_batch([b"new"]), leader_epoch=5)
    assert info.first_offset == 18
    assert not log.truncate_to(100)
    log.close()


def test_truncate_fully_and_start_at(tmp_path: Path) -> None:
    log, _ = open_log(tmp_path)
    log.append_as_leader(make_batch([b"a", b"b"]), leader_epoch=1)
    log.truncate_fully_and_start_at(50)
    assert (log.log_start_offset, log.log_end_offset, log.num_segments) == (50, 50, 1)
    assert log.epoch_cache.entries() == []
    assert log.append_as_leader(make_batch([b"c"]), leader_epoch=2).first_offset == 50
    assert sorted(p.name for p in log.dir.glob("*.log")) == ["00000000000000000050.log"]
    log.close()


def test_truncated_log_survives_a_crash_and_restart(tmp_path: Path) -> None:
    log, clock = open_log(tmp_path, **{"segment.bytes": 300})
    for i in range(10):
        log.append_as_leader(make_batch([b"v%d" % i]), leader_epoch=0)
    log.truncate_to(4)
    log.flush()
    log = reopen(log, clock, clean=False)
    assert log.log_end_offset == 4
    log.close()


def test_clean_close_and_reopen_keeps_everything(tmp_path: Path) -> None:
    log, clock = open_log(tmp_path, **{"segment.bytes": 500})
    for i in range(30):
        log.append_as_leader(
            make_batch([b"v%d" % i] * 3, timestamps=[T0 + i] * 3), leader_epoch=i // 10
        )
    before = [(r.offset, r.value) for r in read_all(log)]
    epochs = log.epoch_cache.entries()
    log = reopen(log, clock, clean=True)
    assert [(r.offset, r.value) for r in read_all(log)] == before
    assert log.epoch_cache.entries() == epochs
    found = log.fetch_offset_by_timestamp(T0 + 25)
    assert found is not None and found.offset == 75
    log.close()


def test_closed_log_refuses_work(tmp_path: Path) -> None:
    from kafkasim.common.errors import KafkaStorageError

    log, _ = open_log(tmp_path)
    log.close()
    with pytest.raises(KafkaStorageError, match="closed"):
        log.append_as_leader(make_batch([b"a"]), leader_epoch=0)


def test_segment_file_names_are_twenty_digit_base_offsets(tmp_path: Path) -> None:
    log, _ = open_log(tmp_path, **{"segment.bytes": 150})
    for _ in range(4):
        log.append_as_leader(make_batch([b"x" * 50]), leader_epoch=0)
    names = sorted(os.listdir(log.dir))
    assert "00000000000000000000.log" in names
    assert "00000000000000000001.index" in names
    assert "00000000000000000001.timeindex" in names
    assert "leader-epoch-checkpoint" in names
    assert (log.dir / "leader-epoch-checkpoint").read_text() == "0\n1\n0 0\n"
    log.close()


def test_index_entries_map_last_offset_to_batch_start(tmp_path: Path) -> None:
    """Kafka's rule: entry = (last offset of a batch, its start position), every interval."""
    log, _ = open_log(tmp_path, **{"index.interval.bytes": 100})
    sizes = []
    for i in range(10):
        batch = make_batch([b"%d" % i * 40, b"y"])
        sizes.append(len(batch))
        log.append_as_leader(batch, leader_epoch=0)
    index = log.active_segment.offset_index
    assert index.entries > 0
    positions = [sum(sizes[:i]) for i in range(10)]
    for n in range(index.entries):
        entry = index.entry(n)
        batch_no = entry.offset // 2
        assert entry.offset == batch_no * 2 + 1
        assert entry.position == positions[batch_no]
    raw = log.active_segment.log.read(index.entry(0).position, 8)
    assert struct.unpack(">q", raw)[0] == index.entry(0).offset - 1
    log.close()


def test_lookup_by_timestamp_in_a_log_append_time_log(tmp_path: Path) -> None:
    """Each record of a LogAppendTime batch carries the batch's time (no decoding needed)."""
    log, clock = open_log(
        tmp_path,
        **{
            "message.timestamp.type": "LogAppendTime",
            "segment.bytes": 600,
            "index.interval.bytes": 100,
        },
    )
    for i in range(40):
        log.append_as_leader(make_batch([b"a%d" % i, b"b%d" % i]), leader_epoch=0)
        clock.advance(3)
    everything = read_all(log)
    for target in range(T0 - 1, T0 + 125):
        expected = next(
            ((r.timestamp, r.offset) for r in everything if r.timestamp >= target), None
        )
        found = log.fetch_offset_by_timestamp(target)
        assert (None if found is None else (found.timestamp, found.offset)) == expected
    log.close()


def test_roll_when_the_time_index_is_full_before_the_offset_index(tmp_path: Path) -> None:
    """36 bytes: the offset index holds 4 entries, the time index 3 (one reserved for the roll
    entry), so rising timestamps fill the time index first."""
    log, _ = open_log(tmp_path, **{"segment.index.bytes": 36, "index.interval.bytes": 0})
    for i in range(4):
        log.append_as_leader(make_batch([b"v"], timestamps=[T0 + i]), leader_epoch=0)
    first = log.segments.first
    assert first is not None
    assert [s.base_offset for s in log.segments] == [0, 3]
    # Rolled with the offset index at 2 of its 4 entries: the time index (2 of 3, last
    # reserved) was the full one. The roll entry repeats the last timestamp, so it is not added.
    assert first.offset_index.entries == 2
    assert first.time_index.entries == 2
    log.close()


def test_batches_walks_every_segment_from_the_log_start_in_small_reads(tmp_path: Path) -> None:
    """Log.batches: every batch, decoded, across segments, from the log start to the end, even
    when one read holds a single batch."""
    log, _ = open_log(tmp_path, **{"segment.bytes": 300})
    for i in range(12):
        log.append_as_leader(make_batch([b"v%d" % i, b"w%d" % i]), leader_epoch=0)
    assert log.num_segments > 1
    log.update_high_watermark(log.log_end_offset)
    log.maybe_increment_log_start_offset(4)
    seen = [
        (record.offset, record.value)
        for _, records in log.batches(max_bytes=1)
        for record in records
    ]
    assert [offset for offset, _ in seen] == list(range(4, 24))
    assert seen[0] == (4, b"v2") and seen[-1] == (23, b"w11")
