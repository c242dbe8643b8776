"""The log's two append doors against damaged batches, and ListOffsets' special timestamps.

Why: the leader must refuse (with Kafka's error) every batch whose records do not match its
header, store nothing of the append, and stay readable; a follower must refuse what fails the
checks Kafka's follower makes (CRC, header, codec, offsets) and nothing more, because batches
from a compacted leader legitimately have offset gaps.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kafkasim.common.errors import (
    CorruptRecordError,
    InvalidRecordError,
    InvalidRequestError,
    InvalidTimestampError,
    KafkaError,
    error_for_name,
)
from kafkasim.storage.log import (
    EARLIEST_LOCAL_TIMESTAMP,
    LATEST_TIERED_TIMESTAMP,
    MAX_TIMESTAMP,
    AppendOrigin,
    Log,
)
from kafkasim.storage.records.batch import (
    ControlRecordType,
    decode_batch,
    encode_control_batch,
    iter_batches,
    set_base_offset,
    set_partition_leader_epoch,
)
from kafkasim.storage.records.legacy import encode_legacy
from tests.unit.storage.logtools import T0, open_log, read_all
from tests.unit.storage.records.crafted import (
    CORRUPTIONS,
    batch_of,
    claims,
    good_batch,
    record,
    with_header,
)


@pytest.mark.parametrize(
    ("batch", "error", "match"), [c[1:] for c in CORRUPTIONS], ids=[c[0] for c in CORRUPTIONS]
)
def test_leader_refuses_a_damaged_batch_and_stays_readable(
    tmp_path: Path, batch: bytes, error: str, match: str
) -> None:
    log, _ = open_log(tmp_path)
    log.append_as_leader(good_batch(2), leader_epoch=0)
    size = log.size_in_bytes
    with pytest.raises(error_for_name(error), match=match) as caught:
        log.append_as_leader(batch, leader_epoch=0)
    assert caught.value.message.startswith("topic-0: ")
    assert "batch at position 0" in caught.value.message
    assert (log.log_end_offset, log.size_in_bytes) == (2, size)
    log.append_as_leader(good_batch(1), leader_epoch=0)
    assert [r.offset for r in read_all(log)] == [0, 1, 2]
    log.close()


def test_one_bad_batch_stores_nothing_of_the_append(tmp_path: Path) -> None:
    log, _ = open_log(tmp_path)
    with pytest.raises(InvalidRecordError, match="position 87"):
        log.append_as_leader(good_batch(2) + claims(good_batch(3), 4), leader_epoch=0)
    assert (log.log_end_offset, log.size_in_bytes) == (0, 0)
    log.close()


def test_an_append_without_any_batch_is_invalid_record(tmp_path: Path) -> None:
    log, _ = open_log(tmp_path)
    with pytest.raises(InvalidRecordError, match="holds no record batch"):
        log.append_as_leader(b"", leader_epoch=0)
    log.close()


def test_legacy_message_sets_are_still_refused_by_the_v2_log(tmp_path: Path) -> None:
    log, _ = open_log(tmp_path)
    for magic in (0, 1):
        with pytest.raises(KafkaError, match="UNSUPPORTED_FOR_MESSAGE_FORMAT"):
            log.append_as_leader(encode_legacy([(T0, b"k", b"v")], magic=magic), leader_epoch=0)
    assert log.log_end_offset == 0
    log.close()


def test_the_broker_s_own_appends_are_walked_too(tmp_path: Path) -> None:
    """Kafka's LogValidator runs for coordinator appends as well; only the client rules
    (no control batch, records present) are the client's alone."""
    log, _ = open_log(tmp_path, **{"cleanup.policy": "compact"})
    marker = encode_control_batch(
        ControlRecordType.COMMIT, producer_id=3, producer_epoch=0, timestamp=T0
    )
    log.append_as_leader(marker, leader_epoch=0, origin=AppendOrigin.COORDINATOR)
    with pytest.raises(InvalidRecordError, match="record 1: compacted topic"):
        log.append_as_leader(
            good_batch(2, keys=[b"a", None]), leader_epoch=0, origin=AppendOrigin.COORDINATOR
        )
    with pytest.raises(InvalidTimestampError, match="LogAppendTime"):
        log.append_as_leader(
            with_header(good_batch(1), attributes=0x08),
            leader_epoch=0,
            origin=AppendOrigin.COORDINATOR,
        )
    assert log.log_end_offset == 1
    log.close()


def test_the_stored_max_timestamp_is_the_records_largest(tmp_path: Path) -> None:
    """A client claiming a far-future maxTimestamp cannot hold back retention or skew the
    time index: the leader stores what the records say, and MAX_TIMESTAMP finds the record."""
    log, _ = open_log(tmp_path)
    log.append_as_leader(good_batch(2), leader_epoch=4)
    lying = with_header(good_batch(3, timestamps=[T0, T0 + 9, T0 + 1]), max_timestamp=2**62)
    log.append_as_leader(lying, leader_epoch=5)
    data = log.read(2, 1 << 20).records
    header, _ = decode_batch(data)
    assert header.max_timestamp == T0 + 9
    assert log.segments.active.max_timestamp_so_far == T0 + 9
    found = log.fetch_offset_by_timestamp(MAX_TIMESTAMP)
    assert found is not None
    assert (found.timestamp, found.offset, found.leader_epoch) == (T0 + 9, 3, 5)
    log.close()


def test_special_list_offsets_timestamps(tmp_path: Path) -> None:
    log, _ = open_log(tmp_path)
    log.append_as_leader(good_batch(5), leader_epoch=2)
    log.update_high_watermark(5)
    log.maybe_increment_log_start_offset(3)
    earliest_local = log.fetch_offset_by_timestamp(EARLIEST_LOCAL_TIMESTAMP)
    assert earliest_local is not None and earliest_local.offset == 3
    assert earliest_local.leader_epoch == 2
    tiered = log.fetch_offset_by_timestamp(LATEST_TIERED_TIMESTAMP)
    assert tiered is not None and (tiered.timestamp, tiered.offset) == (-1, -1)
    for unknown in (-6, -100):
        with pytest.raises(InvalidRequestError, match=f"unknown special timestamp {unknown}"):
            log.fetch_offset_by_timestamp(unknown)
    log.close()


# -- followers ---------------------------------------------------------------------------------


def _as_leader_wrote(batch: bytes, base_offset: int, epoch: int = 0) -> bytes:
    buf = bytearray(batch)
    set_base_offset(buf, 0, base_offset)
    set_partition_leader_epoch(buf, 0, epoch)
    return bytes(buf)


def _follower(tmp_path: Path) -> Log:
    log, _ = open_log(tmp_path)
    log.append_as_follower(_as_leader_wrote(good_batch(2), 0))
    return log


def test_follower_refuses_a_batch_failing_its_crc(tmp_path: Path) -> None:
    log = _follower(tmp_path)
    damaged = bytearray(_as_leader_wrote(good_batch(2), 2))
    damaged[-1] ^= 0x55
    with pytest.raises(CorruptRecordError, match="CRC"):
        log.append_as_follower(_as_leader_wrote(good_batch(1), 2) + bytes(damaged))
    assert log.log_end_offset == 2 and len(list(iter_batches(log.read(0, 1 << 20).records))) == 1
    log.close()


def test_follower_refuses_an_unknown_codec(tmp_path: Path) -> None:
    log = _follower(tmp_path)
    with pytest.raises(CorruptRecordError, match="unknown compression type id 6"):
        log.append_as_follower(_as_leader_wrote(with_header(good_batch(2), attributes=6), 2))
    assert log.log_end_offset == 2
    log.close()


def test_follower_refuses_a_truncated_or_non_batch_tail(tmp_path: Path) -> None:
    log = _follower(tmp_path)
    whole = _as_leader_wrote(good_batch(2), 2)
    with pytest.raises(KafkaError):
        log.append_as_follower(whole + whole[:30])
    with pytest.raises(KafkaError):
        log.append_as_follower(encode_legacy([(T0, b"k", b"v")], magic=1, base_offset=2))
    assert log.log_end_offset == 2
    log.close()


def test_follower_takes_a_compacted_leader_s_batch_with_offset_gaps(tmp_path: Path) -> None:
    """Kafka's follower checks batches, not the leader's record rules: after compaction a
    batch keeps its offset span with fewer records than it spans."""
    log = _follower(tmp_path)
    compacted = batch_of([record(0), record(3)], last_offset_delta=4)
    log.append_as_follower(_as_leader_wrote(compacted, 2))
    assert log.log_end_offset == 7
    assert [r.offset for _, records in log.batches() for r in records] == [0, 1, 2, 5]
    log.close()
