"""Log compaction (``cleanup.policy=compact``): keep the latest record for every key.

One pass over a log, as Kafka's ``Cleaner.clean`` does it:

1. The dirty section is [first dirty offset, first uncleanable offset). The first uncleanable
   offset is the smallest of: the active segment's base (the active segment is never touched),
   the high watermark, and the base of the first segment still inside ``min.compaction.lag.ms``.
2. Build the offset map key → last offset over the dirty section, segment by segment, stopping
   at a segment boundary when the map is full (``log.cleaner.dedupe.buffer.size`` at Kafka's
   24 bytes an entry, load factor 0.9).
3. Recopy every segment below the end of the mapped section, in groups that fit one segment:
   a record survives when its key's latest offset is not later than it, tombstones (null
   values) survive only in segments modified after the delete horizon (last modified time of
   the last clean segment minus ``delete.retention.ms``), records without a key are dropped.
   Offsets never change; a batch whose records all go is kept empty only when it is the last
   batch of a live producer (to keep its sequence and epoch state). Transactions (see
   :mod:`storage.cleaner_txn`): aborted transactions' data batches are discarded, and kept out
   of the offset map; a COMMIT/ABORT marker goes once no data of its transaction remain and
   its segment is past the delete horizon; the cleaned ``.txnindex`` keeps the aborted
   transactions that still have data in the group.
4. Each group is written as ``.cleaned`` files, flushed, then swapped in through ``.swap``
   (see ``Log.replace_segments``); a crash at any step leaves a log the loader can finish.
5. The end of the mapped section becomes the new first dirty offset
   (``cleaner-offset-checkpoint``).

Not thread-safe; the log manager runs it between other operations on the same log.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from kafkasim.common.errors import UnsupportedForMessageFormatError
from kafkasim.common.sentinels import INT32_MAX, INT64_MAX
from kafkasim.storage import file_names
from kafkasim.storage.cleaner_txn import (
    CleanedTransactions,
    LastBatch,
    is_last_batch_of_producer,
    last_batches_of_producers,
)
from kafkasim.storage.log import Log
from kafkasim.storage.records.batch import (
    BatchHeader,
    Record,
    decode_batch,
    encode_empty_batch,
    rebuild_batch,
)
from kafkasim.storage.segment import AppendedBatch, LogSegment

logger = logging.getLogger(__name__)

BYTES_PER_MAP_ENTRY = 24  # Kafka's SkimpyOffsetMap: 16-byte MD5 of the key + 8-byte offset
MAP_LOAD_FACTOR = 0.9


@dataclass
class CleanerStats:
    bytes_read: int = 0
    bytes_written: int = 0
    records_read: int = 0
    records_retained: int = 0
    tombstones_dropped: int = 0
    aborted_batches_discarded: int = 0
    markers_removed: int = 0
    segments_cleaned: int = 0


@dataclass(frozen=True)
class CleanableRange:
    first_dirty_offset: int
    first_uncleanable_offset: int
    clean_bytes: int
    dirty_bytes: int

    @property
    def dirty_ratio(self) -> float:
        total = self.clean_bytes + self.dirty_bytes
        return self.dirty_bytes / total if total else 0.0


@dataclass
class CleanResult:
    first_dirty_offset: int
    stats: CleanerStats = field(default_factory=CleanerStats)


def cleanable_range(log: Log, checkpointed_first_dirty: int | None, now_ms: int) -> CleanableRange:
    """Where the dirty section starts and ends, and how dirty the log is."""
    first_dirty = log.log_start_offset
    if checkpointed_first_dirty is not None and (
        log.log_start_offset <= checkpointed_first_dirty <= log.log_end_offset
    ):
        first_dirty = checkpointed_first_dirty
    # Kafka cleans below the last stable offset only: an undecided transaction's records
    # must not win (or lose) the key map before their outcome is known.
    candidates = [log.active_segment.base_offset, log.last_stable_offset]
    if log.config.min_compaction_lag_ms > 0:
        for segment in log.segments.from_offset(first_dirty):
            if segment.largest_timestamp > now_ms - log.config.min_compaction_lag_ms:
                candidates.append(segment.base_offset)
                break
    first_uncleanable = max(min(candidates), first_dirty)
    clean = dirty = 0
    for segment in log.segments:
        if segment.base_offset >= first_uncleanable:
            break
        nxt = log.segments.higher(segment.base_offset)
        if nxt is not None and nxt.base_offset <= first_dirty:
            clean += segment.size
        else:
            dirty += segment.size
    return CleanableRange(first_dirty, first_uncleanable, clean, dirty)


def needs_cleaning(log: Log, rng: CleanableRange, now_ms: int) -> bool:
    """Dirty ratio at or above ``min.cleanable.dirty.ratio``, or ``max.compaction.lag.ms`` due."""
    if not log.config.compact or rng.first_uncleanable_offset <= rng.first_dirty_offset:
        return False
    if rng.dirty_ratio >= log.config.min_cleanable_dirty_ratio:
        return True
    first = log.segments.floor(rng.first_dirty_offset)
    if first is not None and log.config.max_compaction_lag_ms < INT64_MAX:
        for _, header in first.log.batch_headers(0):
            first_ts = (
                header.first_timestamp if isinstance(header, BatchHeader) else header.max_timestamp
            )
            return first_ts >= 0 and (now_ms - first_ts > log.config.max_compaction_lag_ms)
    return False


class LogCleaner:
    """Compacts one log per call; ``dedupe_buffer_size`` bounds the key map as in Kafka."""

    def __init__(self, dedupe_buffer_size: int = 128 * 1024 * 1024) -> None:
        self.max_map_entries = int(dedupe_buffer_size * MAP_LOAD_FACTOR / BYTES_PER_MAP_ENTRY)

    def clean(self, log: Log, rng: CleanableRange) -> CleanResult:
        stats = CleanerStats()
        offset_map, end_offset = self._build_offset_map(log, rng, stats)
        if end_offset <= rng.first_dirty_offset:
            return CleanResult(rng.first_dirty_offset, stats)
        horizon = self._delete_horizon_ms(log, rng.first_dirty_offset)
        to_clean = [
            s for s in log.segments if s.base_offset < end_offset and s is not log.active_segment
        ]
        for group in self._group_segments(log, to_clean, end_offset):
            self._clean_group(
                log,
                group,
                offset_map,
                delete_horizon_ms=horizon,
                end_offset=end_offset,
                stats=stats,
            )
        logger.info(
            "%s: cleaned up to offset %d: %d records read, %d retained, %d tombstones dropped",
            log.topic_partition,
            end_offset,
            stats.records_read,
            stats.records_retained,
            stats.tombstones_dropped,
        )
        return CleanResult(end_offset, stats)

    # -- pass 2: the key → last offset map ---------------------------------------------------

    def _build_offset_map(
        self, log: Log, rng: CleanableRange, stats: CleanerStats
    ) -> tuple[dict[bytes, int], int]:
        offset_map: dict[bytes, int] = {}
        end = rng.first_dirty_offset
        txns = CleanedTransactions(
            log.collect_aborted_txns(rng.first_dirty_offset, rng.first_uncleanable_offset)
        )
        for segment in log.segments.between(rng.first_dirty_offset, rng.first_uncleanable_offset):
            segment_map: dict[bytes, int] = {}
            for header, records, _ in _decoded_batches(segment):
                if header.is_control:
                    txns.on_control_batch(header, records)
                    continue
                if txns.on_data_batch(header):
                    continue  # aborted: its keys must not shadow committed records
                for record in records:
                    if rng.first_dirty_offset <= record.offset < rng.first_uncleanable_offset and (
                        record.key is not None
                    ):
                        segment_map[record.key] = record.offset
            new_keys = sum(1 for k in segment_map if k not in offset_map)
            if offset_map and len(offset_map) + new_keys > self.max_map_entries:
                break  # full: stop at this segment boundary, the rest waits for the next pass
            offset_map.update(segment_map)
            nxt = log.segments.higher(segment.base_offset)
            end = min(nxt.base_offset if nxt else log.log_end_offset, rng.first_uncleanable_offset)
            stats.bytes_read += segment.size
        return offset_map, end

    @staticmethod
    def _delete_horizon_ms(log: Log, first_dirty: int) -> int:
        clean = [
            s
            for s in log.segments
            if s.base_offset < first_dirty
            and (n := log.segments.higher(s.base_offset)) is not None
            and n.base_offset <= first_dirty
        ]
        return clean[-1].last_modified_ms - log.config.delete_retention_ms if clean else 0

    # -- pass 3: recopy in groups ------------------------------------------------------------

    @staticmethod
    def _group_segments(
        log: Log, segments: list[LogSegment], end_offset: int
    ) -> list[list[LogSegment]]:
        groups: list[list[LogSegment]] = []
        current: list[LogSegment] = []
        size = offset_index_bytes = time_index_bytes = 0
        # Kafka's groupSegmentsBySize bounds the group's indexes by segment.index.bytes. Not by
        # a segment's own ``max_entries``: a rolled segment's index is trimmed to its entries,
        # so that bound would never let two segments share a group.
        max_index_bytes = log.config.segment_index_bytes
        for segment in segments:
            nxt = log.segments.higher(segment.base_offset)
            last = (nxt.base_offset if nxt else end_offset) - 1
            fits = (
                current
                and size + segment.size <= log.config.segment_bytes
                and last - current[0].base_offset <= INT32_MAX
                and offset_index_bytes + segment.offset_index.size_in_bytes <= max_index_bytes
                and time_index_bytes + segment.time_index.size_in_bytes <= max_index_bytes
            )
            if current and not fits:
                groups.append(current)
                current, size, offset_index_bytes, time_index_bytes = [], 0, 0, 0
            current.append(segment)
            size += segment.size
            offset_index_bytes += segment.offset_index.size_in_bytes
            time_index_bytes += segment.time_index.size_in_bytes
        if current:
            groups.append(current)
        return groups

    def _clean_group(
        self,
        log: Log,
        group: list[LogSegment],
        offset_map: dict[bytes, int],
        *,
        delete_horizon_ms: int,
        end_offset: int,
        stats: CleanerStats,
    ) -> None:
        base = group[0].base_offset
        cleaned = log.create_segment(base, file_suffix=file_names.CLEANED_SUFFIX)
        nxt = log.segments.higher(group[-1].base_offset)
        group_end = nxt.base_offset if nxt is not None else log.log_end_offset
        txns = CleanedTransactions(log.collect_aborted_txns(base, group_end), cleaned.txn_index)
        last_batches = last_batches_of_producers(log.producer_state.active_producers)
        for segment in group:
            retain_deletes = segment.last_modified_ms > delete_horizon_ms
            for header, records, raw in _decoded_batches(segment):
                stats.records_read += len(records)
                data = self._filter_batch(
                    header,
                    records,
                    raw,
                    offset_map,
                    txns,
                    last_batches,
                    retain_deletes=retain_deletes,
                    end_offset=end_offset,
                    stats=stats,
                )
                if data is not None:
                    cleaned.append(
                        [data],
                        [
                            AppendedBatch(
                                header.last_offset, BatchHeader.parse(data).max_timestamp, len(data)
                            )
                        ],
                        len(data),
                        # Set to the group's own below, once the cleaned segment is complete.
                        cleaned.last_modified_ms,
                    )
                    stats.bytes_written += len(data)
        cleaned.on_become_inactive_segment()
        cleaned.flush()
        cleaned.last_modified_ms = max(s.last_modified_ms for s in group)
        cleaned.persist_last_modified()
        log.replace_segments(cleaned, group)
        stats.segments_cleaned += len(group)

    @staticmethod
    def _filter_batch(  # noqa: PLR0917 -- one batch and the pass's state
        header: BatchHeader,
        records: list[Record],
        raw: bytes,
        offset_map: dict[bytes, int],
        txns: CleanedTransactions,
        last_batches: dict[int, LastBatch],
        *,
        retain_deletes: bool,
        end_offset: int,
        stats: CleanerStats,
    ) -> bytes | None:
        """The batch as it should be stored after cleaning, or None to drop it (Kafka's
        ``checkBatchRetention`` then ``shouldRetainRecord``)."""
        if header.is_control:
            discard = txns.on_control_batch(header, records) and not retain_deletes
            kept = [] if discard else records
        else:
            discard = txns.on_data_batch(header)
            # Past the mapped section (at or above the HW, or beyond a full map) no key is
            # judged: no later offset is known there, and uncommitted records may still be
            # truncated by a new leader (Kafka's ``pastLatestOffset``: always retain).
            kept = (
                []
                if discard
                else [
                    r
                    for r in records
                    if r.offset >= end_offset or _retain(r, offset_map, retain_deletes, stats)
                ]
            )
        stats.records_retained += len(kept)
        if kept and len(kept) == len(records):
            return raw
        if kept:
            return rebuild_batch(header, kept)
        if is_last_batch_of_producer(header, last_batches):
            return encode_empty_batch(  # Kafka's RETAIN_EMPTY: the producer's state survives
                base_offset=header.base_offset,
                last_offset=header.last_offset,
                max_timestamp=header.max_timestamp,
                timestamp_type=header.timestamp_type,
                producer_id=header.producer_id,
                producer_epoch=header.producer_epoch,
                base_sequence=header.base_sequence,
                partition_leader_epoch=header.partition_leader_epoch,
                is_transactional=header.is_transactional,
                is_control=header.is_control,
            )
        if discard:
            if header.is_control:
                stats.markers_removed += 1
            else:
                stats.aborted_batches_discarded += 1
        return None


def _retain(
    record: Record, offset_map: dict[bytes, int], retain_deletes: bool, stats: CleanerStats
) -> bool:
    if record.key is None:
        return False  # a compacted log cannot keep a keyless record
    latest = offset_map.get(record.key)
    if latest is not None and record.offset < latest:
        return False
    if record.value is None and not retain_deletes:
        stats.tombstones_dropped += 1
        return False
    return True


def _decoded_batches(segment: LogSegment) -> list[tuple[BatchHeader, list[Record], bytes]]:
    out = []
    for position, header in segment.log.batch_headers(0):
        if not isinstance(header, BatchHeader):
            raise UnsupportedForMessageFormatError(
                f"{segment.log.path} holds v{header.magic} messages (written before Kafka "
                "0.11); the cleaner rewrites RecordBatch v2 segments only"
            )
        data = segment.log.read(position, header.size_in_bytes)
        _, records = decode_batch(data)
        out.append((header, records, data))
    return out
