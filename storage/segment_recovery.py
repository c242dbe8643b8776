"""Re-reading one segment after an unclean shutdown: the loop of Kafka's ``LogSegment.recover``.

Split from :mod:`storage.segment` (which resets the indexes, then truncates and trims after
this pass). Each entry is checked (:func:`check_entry`); valid ones are indexed every
``index.interval.bytes``, their leader epochs go to the epoch cache, and v2 batches of
producers to the producer state given: a COMMIT/ABORT marker completes its transaction and an
aborted one is written to the segment's ``.txnindex`` with the LSO of that moment, so the index
is rebuilt exactly as the appends wrote it (the caller brings producer state up to the
segment's base offset first, or transactions begun in earlier segments would be missed).

As Kafka's ``recover``: a control batch whose record is not a marker (INVALID_RECORD) ends the
valid part of the segment like a corrupt batch (truncated there); a producer's
non-transactional batch inside its open transaction is INVALID_TXN_STATE, which is not caught
here: the log fails to load, as Kafka's broker fails its log loading.
"""

from __future__ import annotations

import logging
import mmap
from typing import Protocol

from kafkasim.common.errors import CorruptRecordError, InvalidRecordError
from kafkasim.common.sentinels import NO_TIMESTAMP
from kafkasim.storage.epoch_cache import LeaderEpochFileCache
from kafkasim.storage.file_records import FileRecords
from kafkasim.storage.log_transactions import apply_batch, complete_txns, read_marker
from kafkasim.storage.offset_index import OffsetIndex
from kafkasim.storage.producer_state import AppendOrigin, ProducerStateManager
from kafkasim.storage.records.batch import BatchHeader
from kafkasim.storage.records.entry import (
    ENTRY_HEADER_BYTES,
    MIN_ENTRY_SIZE,
    LogEntryHeader,
    entry_crc,
    parse_entry_header,
)
from kafkasim.storage.time_index import TimeIndex
from kafkasim.storage.txn_index import TransactionIndex

log = logging.getLogger(__name__)


class LogSegment(Protocol):
    """What recovery uses of a :class:`~storage.segment.LogSegment`."""

    base_offset: int
    log: FileRecords
    offset_index: OffsetIndex
    time_index: TimeIndex
    txn_index: TransactionIndex
    index_interval_bytes: int
    bytes_since_last_index_entry: int

    def can_convert_to_relative_offset(self, offset: int) -> bool: ...


def reindex_entries(
    segment: LogSegment,
    file_length: int,
    producer_state: ProducerStateManager | None,
    epoch_cache: LeaderEpochFileCache | None,
    *,
    warn_on_gaps: bool,
) -> tuple[int, int, int]:
    """Walk the segment's entries up to the first invalid one, indexing them (the indexes
    were reset); returns (valid bytes, max timestamp, its offset)."""
    max_ts, max_ts_offset = NO_TIMESTAMP, segment.base_offset
    valid_bytes = 0
    next_expected = segment.base_offset
    if file_length == 0:
        return valid_bytes, max_ts, max_ts_offset
    offset_index, time_index = segment.offset_index, segment.time_index
    with mmap.mmap(segment.log.fd, file_length, access=mmap.ACCESS_READ) as mapped:
        view = memoryview(mapped)
        try:
            position = 0
            while position + MIN_ENTRY_SIZE <= file_length:
                header, reason = check_entry(view, position, file_length, next_expected, segment)
                first = first_offset(header) if header is not None else 0
                # (A legacy wrapper's first offset is unknown here: v2 gaps only.)
                if isinstance(header, BatchHeader) and warn_on_gaps and first > next_expected:
                    log.warning(
                        "%s: offsets %d..%d are missing before the batch at position %d",
                        segment.log.path,
                        next_expected,
                        first - 1,
                        position,
                    )
                if header is None:
                    if reason != "zero-filled tail":
                        log.warning("%s: %s", segment.log.path, reason)
                    break
                if producer_state is not None and _bad_marker(view, position, header, segment):
                    break  # Kafka's recover: an InvalidRecordException ends the valid part
                if header.max_timestamp > max_ts:
                    max_ts, max_ts_offset = header.max_timestamp, header.last_offset
                if segment.bytes_since_last_index_entry > segment.index_interval_bytes and (
                    not offset_index.is_full()
                ):
                    offset_index.append(header.last_offset, position)
                    if not time_index.is_full():
                        time_index.maybe_append(max_ts, max_ts_offset)
                    segment.bytes_since_last_index_entry = 0
                segment.bytes_since_last_index_entry += header.size_in_bytes
                if epoch_cache is not None and header.partition_leader_epoch >= 0:
                    latest = epoch_cache.latest_epoch
                    if latest is None or header.partition_leader_epoch > latest:
                        epoch_cache.assign(header.partition_leader_epoch, first)
                if producer_state is not None and isinstance(header, BatchHeader):
                    _update_producer_state(segment, producer_state, header, view, position)
                position += header.size_in_bytes
                valid_bytes = position
                next_expected = header.last_offset + 1
        finally:
            view.release()
    return valid_bytes, max_ts, max_ts_offset


def _bad_marker(
    view: memoryview, position: int, header: LogEntryHeader, segment: LogSegment
) -> bool:
    """Whether the entry is a producer's control batch whose record is not a COMMIT/ABORT
    marker (INVALID_RECORD), checked before the entry is indexed so that recovery truncates
    the segment there, as Kafka's ``LogSegment.recover`` does for an invalid record."""
    if not (isinstance(header, BatchHeader) and header.is_control and header.producer_id >= 0):
        return False
    try:
        with view[position : position + header.size_in_bytes] as batch:
            read_marker(batch)
    except InvalidRecordError as e:
        log.warning(
            "%s: found invalid messages at byte offset %d: %s", segment.log.path, position, e
        )
        return True
    return False


def _update_producer_state(
    segment: LogSegment,
    producer_state: ProducerStateManager,
    header: BatchHeader,
    view: memoryview,
    position: int,
) -> None:
    """Kafka's ``LogSegment.updateProducerState``: the batch into producer state, an aborted
    transaction it completes into the transaction index, the map end offset past it."""
    if header.producer_id >= 0:
        with view[position : position + header.size_in_bytes] as batch:
            completed = apply_batch(
                producer_state,
                header,
                batch,
                base_offset=header.base_offset,
                last_offset=header.last_offset,
                origin=AppendOrigin.REPLICATION,
            )
        if completed is not None:
            complete_txns(producer_state, segment.txn_index, (completed,))
    producer_state.update_map_end_offset(header.last_offset + 1)


def first_offset(header: LogEntryHeader) -> int:
    """A v2 batch's base offset; a legacy message's own offset (a wrapper's first inner offset
    needs decompression, and neither recovery nor Kafka's looks at it)."""
    return header.base_offset if isinstance(header, BatchHeader) else header.last_offset


def check_entry(
    view: memoryview, position: int, file_length: int, next_expected: int, segment: LogSegment
) -> tuple[LogEntryHeader, None] | tuple[None, str]:
    """The header of the valid entry at ``position``, or None and why it is not valid."""
    try:
        header = parse_entry_header(view, position)
    except CorruptRecordError as e:
        if not any(view[position : position + ENTRY_HEADER_BYTES]):
            return None, "zero-filled tail"
        return None, f"invalid batch header at position {position}: {e.message}"
    if position + header.size_in_bytes > file_length:
        return None, (
            f"batch at position {position} claims {header.size_in_bytes} bytes, "
            f"only {file_length - position} remain (torn write)"
        )
    actual = entry_crc(view, position, header)
    first = first_offset(header)
    if actual != header.crc:
        return None, (
            f"batch at position {position} (offsets {first}..{header.last_offset}) "
            f"has CRC {header.crc:#010x} but its content hashes to {actual:#010x}"
        )
    if first < next_expected or header.last_offset < first:
        where = (
            f"below the segment's base offset {segment.base_offset}"
            if first < segment.base_offset
            else "not after the previous batch"
        )
        return None, (
            f"batch at position {position} has offsets {first}..{header.last_offset}"
            f" but the log expected an offset ≥ {next_expected} ({where}: misplaced)"
        )
    if not segment.can_convert_to_relative_offset(header.last_offset):
        return None, (
            f"batch at position {position} has offset {header.last_offset} outside the segment"
        )
    return header, None
