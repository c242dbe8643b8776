"""Reads of a partition log: whole batches from an offset, and offsets found by timestamp.

Kafka's ``LocalLog.read`` (the segment holding the offset, then the next ones, never past
``max_offset``) and ``UnifiedLog.fetchOffsetByTimestamp`` (ListOffsets' special timestamps,
then the first segment whose largest timestamp reaches the target). Functions over the
segments :class:`~storage.log.Log` owns; they change nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from kafkasim.common.errors import InvalidRequestError, OffsetOutOfRangeError
from kafkasim.common.sentinels import (
    EARLIEST_LOCAL_TIMESTAMP,
    EARLIEST_TIMESTAMP,
    LATEST_TIERED_TIMESTAMP,
    LATEST_TIMESTAMP,
    MAX_TIMESTAMP,
    NO_LEADER_EPOCH,
    NO_TIMESTAMP,
)
from kafkasim.common.types import TopicPartition
from kafkasim.storage.epoch_cache import LeaderEpochFileCache
from kafkasim.storage.file_records import TimestampAndOffset
from kafkasim.storage.records.batch import Record
from kafkasim.storage.records.entry import LogEntryHeader, decode_entries, iter_entries
from kafkasim.storage.segment import FetchDataInfo, LogSegment
from kafkasim.storage.segments import LogSegments


def read_segments(
    segments: LogSegments,
    topic_partition: TopicPartition,
    *,
    log_start_offset: int,
    log_end_offset: int,
    start_offset: int,
    max_bytes: int,
    max_offset: int | None,
    min_one_message: bool,
) -> FetchDataInfo:
    """Whole batches from ``start_offset``, never a batch at or past ``max_offset``; below the
    log start offset or above the log end offset is OFFSET_OUT_OF_RANGE."""
    end = log_end_offset
    if start_offset < log_start_offset or start_offset > end:
        raise OffsetOutOfRangeError(
            f"Received request for offset {start_offset} for partition "
            f"{topic_partition}, but we only have log segments in the range "
            f"{log_start_offset} to {end}."
        )
    if start_offset == end or (max_offset is not None and start_offset >= max_offset):
        return FetchDataInfo(start_offset, segments.active.base_offset, -1, b"")
    segment = segments.floor(start_offset)
    while segment is not None:
        next_segment = segments.higher(segment.base_offset)
        max_position = None
        if max_offset is not None:
            segment_end = next_segment.base_offset if next_segment else end
            if max_offset < segment_end:
                found = segment.translate_offset(max_offset)
                max_position = found.position if found else segment.size
        info = segment.read(start_offset, max_bytes, max_position, min_one_message)
        if info is not None:
            return info
        segment = next_segment
    return FetchDataInfo(start_offset, segments.active.base_offset, -1, b"")


def offset_by_timestamp(
    segments: LogSegments,
    epoch_cache: LeaderEpochFileCache,
    topic_partition: TopicPartition,
    timestamp: int,
    *,
    log_start_offset: int,
    log_end_offset: int,
) -> TimestampAndOffset | None:
    """ListOffsets: EARLIEST (-2), LATEST (-1), MAX_TIMESTAMP (-3), EARLIEST_LOCAL (-4),
    LATEST_TIERED (-5) or a timestamp ≥ 0, as Kafka's ``fetchOffsetByTimestamp`` answers
    them without tiered storage (-4 is the log start offset, -5 finds no offset). Other
    negative timestamps are INVALID_REQUEST (Kafka would search for them as timestamps).

    For a timestamp: the first segment whose largest timestamp reaches it, its time index,
    then its offset index, then a scan — the first record with timestamp ≥ ``timestamp``.
    """
    if timestamp in (EARLIEST_TIMESTAMP, EARLIEST_LOCAL_TIMESTAMP):
        start_epoch = epoch_cache.epoch_for_offset(log_start_offset)
        return TimestampAndOffset(
            NO_TIMESTAMP, log_start_offset, NO_LEADER_EPOCH if start_epoch is None else start_epoch
        )
    if timestamp == LATEST_TIMESTAMP:
        epoch = epoch_cache.latest_epoch
        return TimestampAndOffset(
            NO_TIMESTAMP, log_end_offset, NO_LEADER_EPOCH if epoch is None else epoch
        )
    if timestamp == LATEST_TIERED_TIMESTAMP:
        return TimestampAndOffset(NO_TIMESTAMP, -1, NO_LEADER_EPOCH)
    if timestamp == MAX_TIMESTAMP:
        return _max_timestamp_and_offset(segments)
    if timestamp < 0:
        raise InvalidRequestError(
            f"{topic_partition}: unknown special timestamp {timestamp} for an offset "
            "lookup (-1 latest, -2 earliest, -3 max timestamp, -4 earliest local, "
            "-5 latest tiered, or a timestamp >= 0)"
        )
    for segment in segments:
        if segment.largest_timestamp >= timestamp:
            found = segment.find_offset_by_timestamp(timestamp, log_start_offset)
            if found is not None:
                return found
    return None


def _max_timestamp_and_offset(segments: LogSegments) -> TimestampAndOffset | None:
    """MAX_TIMESTAMP (KIP-734, as Kafka 3.8+ answers it): the largest timestamp, the offset
    of the first record that has it and the leader epoch of its batch."""
    best: LogSegment | None = None
    for segment in segments:
        ts = segment.max_timestamp_so_far
        if ts >= 0 and (best is None or ts > best.max_timestamp_so_far):
            best = segment
    if best is None:
        return None
    max_ts = best.max_timestamp_so_far
    batch_last = best.offset_of_max_timestamp_so_far
    info = best.read(batch_last, 1, None, True)
    data = b"" if info is None else info.records
    for header, records in decode_entries(data):
        if header.last_offset < batch_last:
            continue
        epoch = header.partition_leader_epoch
        epoch = epoch if epoch >= 0 else NO_LEADER_EPOCH
        for record in records:
            if record.timestamp == max_ts:
                return TimestampAndOffset(max_ts, record.offset, epoch)
        return TimestampAndOffset(max_ts, batch_last, epoch)
    return TimestampAndOffset(max_ts, batch_last, NO_LEADER_EPOCH)


def read_entries(
    read: Callable[[int, int], FetchDataInfo], start: int, end: int, max_bytes: int
) -> Iterator[tuple[LogEntryHeader, list[Record]]]:
    """Every entry from ``start`` to ``end`` through ``read(offset, max_bytes)``, decoded
    whatever its format, ``max_bytes`` at a time (see :meth:`~storage.log.Log.batches`)."""
    for data in read_chunks(read, start, end, max_bytes):
        yield from decode_entries(data)


def read_chunks(
    read: Callable[[int, int], FetchDataInfo], start: int, end: int, max_bytes: int
) -> Iterator[bytes]:
    """The reads :func:`read_entries` decodes, as read: each a run of whole entries, from
    ``start`` to ``end`` through ``read(offset, max_bytes)``, ``max_bytes`` at a time (for a
    reader that may skip decoding bytes it has decoded before)."""
    position = start
    while position < end:
        data = read(position, max_bytes).records
        if not data:
            return
        yield data
        for _, header in iter_entries(data):
            position = header.next_offset
