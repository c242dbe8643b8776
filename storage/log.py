"""The log of one partition replica: segments, offsets, appends, reads, truncation, retention.

This is Kafka's ``UnifiedLog`` + ``LocalLog`` in one class. It owns the segment map, the
leader-epoch cache and the producer state, and keeps:

  * ``log_start_offset`` ≤ ``high_watermark`` ≤ ``log_end_offset`` (LEO, the next offset);
  * ``recovery_point``: every byte below it has been fsync'd (recovery starts there);
  * leader appends get dense, increasing offsets; follower appends must continue the log.

The log reads time only from its injected clock and starts no threads: the owner (the broker's
log manager) calls ``delete_old_segments``, ``flush`` and ``run_pending_deletions`` on its own
schedule. Not thread-safe: one owner, one event loop.
"""

from __future__ import annotations

import logging
import random
import shutil
import struct
import zlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

from kafkasim.common.clock import Clock
from kafkasim.common.errors import (
    CorruptRecordError,
    InvalidOffsetError,
    InvalidRecordError,
    InvalidRequestError,
    InvalidTimestampError,
    KafkaStorageError,
    OffsetOutOfRangeError,
    RecordListTooLargeError,
    RecordTooLargeError,
    UnsupportedForMessageFormatError,
)
from kafkasim.common.types import TopicPartition
from kafkasim.storage import file_names
from kafkasim.storage.checkpoints import LEADER_EPOCH_CHECKPOINT_FILE, LeaderEpochCheckpointFile
from kafkasim.storage.config import LogConfig
from kafkasim.storage.epoch_cache import LeaderEpochFileCache
from kafkasim.storage.file_records import Buffer, TimestampAndOffset
from kafkasim.storage.loader import load_log, rebuild_producer_state
from kafkasim.storage.producer_state import ProducerStateManager
from kafkasim.storage.records.batch import (
    COMPRESSION_CODEC_MASK,
    LOG_OVERHEAD,
    MAGIC_OFFSET,
    RECORD_BATCH_OVERHEAD,
    BatchHeader,
    Record,
    compute_crc,
    decode_batch,
    rebuild_batch,
    set_base_offset,
    set_log_append_time,
    set_partition_leader_epoch,
)
from kafkasim.storage.records.compression import CompressionType
from kafkasim.storage.records.entry import LogEntryHeader, decode_entries
from kafkasim.storage.records.validation import validate_leader_batch
from kafkasim.storage.segment import (
    AppendedBatch,
    FetchDataInfo,
    LogSegment,
    RollParams,
    new_segment,
)
from kafkasim.storage.segments import LogSegments

logger = logging.getLogger(__name__)

EARLIEST_TIMESTAMP = -2
LATEST_TIMESTAMP = -1
MAX_TIMESTAMP = -3  # KIP-734
EARLIEST_LOCAL_TIMESTAMP = -4  # KIP-405: the local log start; without tiered storage, EARLIEST
LATEST_TIERED_TIMESTAMP = -5  # KIP-1005: the last tiered offset; without tiered storage, none
INT64_MAX = 2**63 - 1
_BASE_AND_EPOCH = struct.Struct(">qii")  # baseOffset, batchLength, partitionLeaderEpoch
LEGACY_MESSAGE_MIN_SIZE = 14  # crc, magic, attributes, key and value lengths


class AppendOrigin(Enum):
    """Who is appending: a client through the leader, a follower's fetcher, or the broker."""

    CLIENT = "client"
    REPLICATION = "replication"
    COORDINATOR = "coordinator"


@dataclass(frozen=True, slots=True)
class LogAppendInfo:
    """What an append did (offsets assigned, timestamps) — per append, not per record."""

    first_offset: int
    last_offset: int
    max_timestamp: int
    offset_of_max_timestamp: int
    log_append_time: int
    log_start_offset: int
    record_count: int
    batch_count: int
    valid_bytes: int
    duplicate: bool = False


class Log:
    """A partition replica's log. Open one with :meth:`Log.open` (which runs recovery)."""

    def __init__(
        self,
        dir_: Path,
        topic_partition: TopicPartition,
        config: LogConfig,
        clock: Clock,
        segments: LogSegments,
        *,
        log_start_offset: int,
        recovery_point: int,
        epoch_cache: LeaderEpochFileCache,
        producer_state: ProducerStateManager,
        rng: random.Random | None = None,
    ) -> None:
        self.dir = dir_
        self.topic_partition = topic_partition
        self._apply_config(config)
        self._clock = clock
        self.segments = segments
        self.log_start_offset = log_start_offset
        self.recovery_point = recovery_point
        self.epoch_cache = epoch_cache
        self.producer_state = producer_state
        # Seeded from the name, not hash(): str hashes differ per process, replays must not.
        self._rng = rng or random.Random(zlib.crc32(str(topic_partition).encode()))
        self._next_offset = segments.active.read_next_offset()
        self.high_watermark = min(max(log_start_offset, 0), self._next_offset)
        self.last_flush_ms = clock.time_ms()
        self._pending_deletions: list[tuple[int, LogSegment]] = []
        self._closed = False
        # Told of an I/O error on an append (Kafka's LogDirFailureChannel): the log manager
        # takes the log dir offline. The append itself fails with KAFKA_STORAGE_ERROR.
        self.on_io_error: Callable[[OSError], None] | None = None

    # -- opening ----------------------------------------------------------------------------

    @classmethod
    def open(
        cls,
        dir_: Path,
        config: LogConfig,
        clock: Clock,
        *,
        topic_partition: TopicPartition | None = None,
        recovery_point: int = 0,
        log_start_offset: int = 0,
        had_clean_shutdown: bool = False,
        rng: random.Random | None = None,
    ) -> Log:
        """Open (creating if needed) the log in ``dir_`` and recover it (see ``loader``)."""
        tp = topic_partition or TopicPartition.from_dir_name(dir_.name)
        dir_.mkdir(parents=True, exist_ok=True)
        epoch_cache = LeaderEpochFileCache(
            LeaderEpochCheckpointFile(dir_ / LEADER_EPOCH_CHECKPOINT_FILE)
        )
        producer_state = ProducerStateManager(dir_)
        loaded = load_log(
            dir_,
            config,
            clock,
            recovery_point=recovery_point,
            log_start_offset=log_start_offset,
            had_clean_shutdown=had_clean_shutdown,
            epoch_cache=epoch_cache,
            producer_state=producer_state,
        )
        return cls(
            dir_,
            tp,
            config,
            clock,
            loaded.segments,
            log_start_offset=loaded.log_start_offset,
            recovery_point=loaded.recovery_point,
            epoch_cache=epoch_cache,
            producer_state=producer_state,
            rng=rng,
        )

    # -- facts ------------------------------------------------------------------------------

    @property
    def log_end_offset(self) -> int:
        return self._next_offset

    @property
    def active_segment(self) -> LogSegment:
        return self.segments.active

    @property
    def size_in_bytes(self) -> int:
        return self.segments.size_in_bytes()

    @property
    def num_segments(self) -> int:
        return len(self.segments)

    @property
    def latest_epoch(self) -> int | None:
        return self.epoch_cache.latest_epoch

    def __repr__(self) -> str:
        return (
            f"Log({self.topic_partition}, start={self.log_start_offset}, "
            f"hw={self.high_watermark}, leo={self.log_end_offset}, segments={len(self.segments)})"
        )

    def update_config(self, config: LogConfig) -> None:
        self._apply_config(config)

    # -- high watermark ---------------------------------------------------------------------

    def update_high_watermark(self, offset: int) -> int:
        """Set the HW, clamped to [log_start_offset, log_end_offset]; returns the value kept."""
        self.high_watermark = min(max(offset, self.log_start_offset), self.log_end_offset)
        return self.high_watermark

    def maybe_increment_high_watermark(self, offset: int) -> bool:
        """Move the HW forward only (a leader's HW never goes back)."""
        if offset > self.high_watermark:
            self.update_high_watermark(offset)
            return True
        return False

    # -- appends ----------------------------------------------------------------------------

    def append_as_leader(
        self,
        records: Buffer,
        leader_epoch: int,
        origin: AppendOrigin = AppendOrigin.CLIENT,
    ) -> LogAppendInfo:
        """Validate batches, assign offsets, stamp the leader epoch, append.

        Per batch, without decoding records except where a field outside the header is needed
        (keys of a compacted topic, per-record timestamp bounds, recompression). All or
        nothing: when any batch is refused, or the write fails, nothing is appended and the
        producer state is as it was.
        """
        self._check_open()
        view = memoryview(records)
        headers = self._analyze(view, origin, leader=True)
        if not headers:
            raise InvalidRecordError(f"{self.topic_partition}: the append holds no record batch")
        now_ms = self._clock.time_ms()
        is_client = origin is AppendOrigin.CLIENT
        headers = self._validate_and_convert(headers, now_ms, is_client)
        producer_ids = {h.producer_id for _, h, _ in headers if h.producer_id >= 0}
        saved = self.producer_state.save_entries(producer_ids) if producer_ids else None
        try:
            return self._assign_and_write(headers, leader_epoch, now_ms, is_client)
        except BaseException:
            if saved is not None:
                self.producer_state.restore_entries(saved)
            raise

    def _validate_and_convert(
        self,
        headers: list[tuple[int, BatchHeader, memoryview]],
        now_ms: int,
        is_client: bool,
    ) -> list[tuple[int, BatchHeader, memoryview]]:
        """Kafka's LogValidator on every batch (records walked, see ``records.validation``),
        then the topic's compression.type. Nothing is written before every batch passed."""
        out = []
        config = self.config
        for position, received, received_view in headers:
            try:
                header, batch_view = validate_leader_batch(
                    received_view,
                    received,
                    is_client=is_client,
                    compacted=config.compact,
                    log_append_time=self._log_append_time,
                    max_timestamp_difference_ms=config.message_timestamp_difference_max_ms,
                    now_ms=now_ms,
                    position=position,
                )
            except (CorruptRecordError, InvalidRecordError, InvalidTimestampError) as e:
                raise type(e)(f"{self.topic_partition}: {e.message}") from None
            if self._target_codec is not None and self._target_codec != header.compression:
                converted = memoryview(_recompress(batch_view, self._target_codec))
                out.append((position, BatchHeader.parse(converted), converted))
            else:
                out.append((position, header, batch_view))
        return out

    def _assign_and_write(
        self,
        headers: list[tuple[int, BatchHeader, memoryview]],
        leader_epoch: int,
        now_ms: int,
        is_client: bool,
    ) -> LogAppendInfo:
        append_time = now_ms if self._log_append_time else -1
        chunks: list[Buffer] = []
        batches: list[AppendedBatch] = []
        first_offset = next_offset = self._next_offset
        max_ts, max_ts_offset = -1, next_offset
        record_count = total = 0
        for _, header, batch_view in headers:
            base = next_offset
            last = base + header.last_offset_delta
            size = header.size_in_bytes
            if append_time >= 0:
                rewritten = bytearray(batch_view)
                set_base_offset(rewritten, 0, base)
                set_partition_leader_epoch(rewritten, 0, leader_epoch)
                set_log_append_time(rewritten, 0, append_time)
                chunks.append(rewritten)
                batch_max_ts = append_time
            else:
                # Only the first 16 bytes change (base offset, leader epoch: outside the CRC),
                # so the header is copied and the body goes out untouched beside it.
                head = bytearray(batch_view[:RECORD_BATCH_OVERHEAD])
                _BASE_AND_EPOCH.pack_into(head, 0, base, size - LOG_OVERHEAD, leader_epoch)
                chunks.append(head)
                chunks.append(batch_view[RECORD_BATCH_OVERHEAD:])
                batch_max_ts = header.max_timestamp
            if batch_max_ts > max_ts:
                max_ts, max_ts_offset = batch_max_ts, last
            batches.append(AppendedBatch(last, batch_max_ts, size))
            record_count += header.records_count
            total += size
            next_offset = last + 1
        # Kafka's order: roll first (its producer snapshot covers the offsets below the new
        # segment), then the producers' sequences, then the write.
        segment = self._maybe_roll(total, max_ts, first_offset, next_offset - 1)
        if is_client:
            for (_, header, _), appended in zip(headers, batches, strict=True):
                if header.producer_id < 0:
                    continue
                duplicate = self.producer_state.check_and_update(
                    header.producer_id,
                    header.producer_epoch,
                    header.base_sequence,
                    header.last_sequence,
                    appended.last_offset,
                    header.max_timestamp,
                    is_from_client=True,
                )
                if duplicate is not None:
                    # An idempotent retry: acknowledge the original, append nothing.
                    if len(headers) > 1:
                        raise InvalidRecordError(
                            f"{self.topic_partition}: a duplicate batch (producer "
                            f"{header.producer_id}, sequence {header.base_sequence}) inside a "
                            "request of several batches"
                        )
                    return LogAppendInfo(
                        duplicate.first_offset,
                        duplicate.last_offset,
                        duplicate.timestamp,
                        duplicate.last_offset,
                        append_time,
                        self.log_start_offset,
                        0,
                        0,
                        0,
                        duplicate=True,
                    )
        self._write(segment, chunks, batches, total, epochs=((leader_epoch, first_offset),))
        return LogAppendInfo(
            first_offset,
            next_offset - 1,
            max_ts,
            max_ts_offset,
            append_time,
            self.log_start_offset,
            record_count,
            len(batches),
            total,
        )

    def append_as_follower(self, records: Buffer) -> LogAppendInfo:
        """Append batches exactly as the leader wrote them; offsets must continue the log."""
        self._check_open()
        view = memoryview(records)
        headers = self._analyze(view, AppendOrigin.REPLICATION, leader=False)
        if not headers:
            return LogAppendInfo(
                self._next_offset,
                self._next_offset - 1,
                -1,
                -1,
                -1,
                self.log_start_offset,
                0,
                0,
                0,
            )
        first = headers[0][1]
        if first.base_offset < self._next_offset:
            raise InvalidOffsetError(
                f"{self.topic_partition}: follower append starts at offset {first.base_offset} "
                f"but the log end offset is {self._next_offset}"
            )
        batches: list[AppendedBatch] = []
        epochs: list[tuple[int, int]] = []
        max_ts, max_ts_offset = -1, first.base_offset
        record_count = total = 0
        for _, header, _ in headers:
            batches.append(
                AppendedBatch(header.last_offset, header.max_timestamp, header.size_in_bytes)
            )
            if header.partition_leader_epoch >= 0:
                epochs.append((header.partition_leader_epoch, header.base_offset))
            if header.max_timestamp > max_ts:
                max_ts, max_ts_offset = header.max_timestamp, header.last_offset
            record_count += header.records_count
            total += header.size_in_bytes
        segment = self._maybe_roll(total, max_ts, first.base_offset, batches[-1].last_offset)
        producer_ids = {h.producer_id for _, h, _ in headers if h.producer_id >= 0}
        saved = self.producer_state.save_entries(producer_ids) if producer_ids else None
        try:
            for _, header, _ in headers:
                self.producer_state.update_from_replicated_batch(header)
            self._write(segment, [view[:total]], batches, total, epochs=epochs)
        except BaseException:
            if saved is not None:
                self.producer_state.restore_entries(saved)
            raise
        return LogAppendInfo(
            first.base_offset,
            headers[-1][1].last_offset,
            max_ts,
            max_ts_offset,
            -1,
            self.log_start_offset,
            record_count,
            len(batches),
            total,
        )

    def _maybe_roll(
        self, total: int, max_timestamp: int, first_offset: int, last_offset: int
    ) -> LogSegment:
        """The segment an append of ``total`` bytes goes to: the active one, or a new one rolled
        at ``first_offset`` (Kafka's ``maybeRoll``), before the producer state sees the
        append."""
        if total > self.config.segment_bytes:
            raise RecordListTooLargeError(
                f"{self.topic_partition}: an append of {total} bytes exceeds segment.bytes="
                f"{self.config.segment_bytes}"
            )
        segment = self.segments.active
        if segment.should_roll(
            RollParams(
                self.config.segment_ms,
                self.config.segment_bytes,
                max_timestamp,
                last_offset,
                total,
                self._clock.time_ms(),
            )
        ):
            segment = self.roll(first_offset)
        return segment

    def _write(
        self,
        segment: LogSegment,
        chunks: Sequence[Buffer],
        batches: Sequence[AppendedBatch],
        total: int,
        *,
        epochs: Sequence[tuple[int, int]],
    ) -> None:
        last_offset = batches[-1].last_offset
        try:
            segment.append(chunks, batches, total)
        except OSError as e:
            # Nothing was counted as appended (sizes move only after a write succeeds); the
            # dir is as suspect as Kafka deems it: the handler takes it offline.
            if self.on_io_error is not None:
                self.on_io_error(e)
            raise KafkaStorageError(
                f"Error while appending records to {self.topic_partition} in dir "
                f"{self.dir.parent}: {e}"
            ) from e
        cache = self.epoch_cache
        for epoch, start in epochs:
            latest = cache.latest_epoch
            if epoch >= 0 and (latest is None or epoch > latest):
                cache.assign(epoch, start)
        self._next_offset = last_offset + 1
        self.producer_state.update_map_end_offset(self._next_offset)
        if self._next_offset - self.recovery_point >= self.config.flush_messages:
            self.flush()

    def _analyze(
        self, view: memoryview, origin: AppendOrigin, *, leader: bool
    ) -> list[tuple[int, BatchHeader, memoryview]]:
        """Shallow-validate every batch in an append: header, size, CRC, offsets in order."""
        out: list[tuple[int, BatchHeader, memoryview]] = []
        position = 0
        size = len(view)
        last_offset = -1
        max_message_bytes = self.config.max_message_bytes
        while position < size:
            remaining = size - position
            magic = view[position + MAGIC_OFFSET] if remaining > MAGIC_OFFSET else -1
            if magic != 2 or remaining < RECORD_BATCH_OVERHEAD:
                self._reject_non_batch(view, position, magic)
            header = BatchHeader.parse(view, position)
            batch_size = header.size_in_bytes
            if batch_size > remaining:
                raise InvalidRecordError(
                    f"{self.topic_partition}: batch at position {position} claims "
                    f"{batch_size} bytes but the append has {remaining}"
                )
            if leader and batch_size > max_message_bytes:
                raise RecordTooLargeError(
                    f"{self.topic_partition}: a batch of {batch_size} bytes exceeds "
                    f"max.message.bytes={max_message_bytes}"
                )
            actual = compute_crc(view, position, batch_size)
            if actual != header.crc:
                raise CorruptRecordError(
                    f"{self.topic_partition}: batch at position {position} has CRC "
                    f"{header.crc:#010x} but its content hashes to {actual:#010x}"
                )
            codec_id = header.attributes & COMPRESSION_CODEC_MASK
            if codec_id > max(CompressionType):
                # Kafka's CompressionType.forId refuses ids 5-7, on the leader and followers.
                raise CorruptRecordError(
                    f"{self.topic_partition}: batch at position {position}: unknown "
                    f"compression type id {codec_id}"
                )
            if not leader:
                if header.base_offset <= last_offset or header.last_offset < header.base_offset:
                    raise InvalidOffsetError(
                        f"{self.topic_partition}: out of order offsets in follower append: "
                        f"batch {header.base_offset}..{header.last_offset} after {last_offset}"
                    )
                last_offset = header.last_offset
            out.append((position, header, view[position : position + batch_size]))
            position += batch_size
        return out

    def _reject_non_batch(self, view: memoryview, position: int, magic: int) -> None:
        remaining = len(view) - position
        legacy_size = (
            int.from_bytes(view[position + 8 : position + 12], "big", signed=True)
            if remaining >= LOG_OVERHEAD
            else 0
        )
        if magic in (0, 1) and legacy_size >= LEGACY_MESSAGE_MIN_SIZE:
            raise UnsupportedForMessageFormatError(
                f"{self.topic_partition}: batch at position {position} has magic {magic}; "
                "this log stores RecordBatch v2 (magic 2) only"
            )
        raise InvalidRecordError(
            f"{self.topic_partition}: {remaining} bytes at position {position} are "
            f"not a record batch (magic {magic})"
        )

    def _apply_config(self, config: LogConfig) -> None:
        """Derive what the append path needs from the config once, not per append."""
        self.config = config
        self._log_append_time = config.message_timestamp_type == "LogAppendTime"
        name = config.compression_type
        self._target_codec: CompressionType | None = (
            None
            if name == "producer"
            else CompressionType.NONE
            if name == "uncompressed"
            else CompressionType.from_name(name)
        )

    # -- rolling ----------------------------------------------------------------------------

    def roll(self, expected_next_offset: int | None = None) -> LogSegment:
        """Start a new active segment at the log end (or at ``expected_next_offset``)."""
        self._check_open()
        new_offset = max(expected_next_offset or 0, self._next_offset)
        active = self.segments.active
        if active.base_offset == new_offset and active.size == 0:
            return active  # nothing to roll: the active segment is already empty here
        if self.segments.get(new_offset) is not None:
            raise InvalidOffsetError(
                f"{self.topic_partition}: cannot roll to {new_offset}: a segment starts there"
            )
        active.on_become_inactive_segment()
        self.producer_state.update_map_end_offset(new_offset)
        self.producer_state.take_snapshot()
        segment = self.create_segment(new_offset)
        self.segments.add(segment)
        # Kafka flushes the old segment asynchronously on roll; we have no threads, so do it now.
        self.flush(new_offset)
        return segment

    def create_segment(self, base_offset: int, *, file_suffix: str = "") -> LogSegment:
        """A new, empty segment file set at ``base_offset`` with this log's config (not yet in
        the segment map). Stale files of the same name (an earlier truncation) go first."""
        for make in (file_names.log_file, file_names.index_file, file_names.time_index_file):
            make(self.dir, base_offset, file_suffix).unlink(missing_ok=True)
        return new_segment(
            self.dir, base_offset, self.config, self._clock, self._rng, file_suffix=file_suffix
        )

    # -- reads ------------------------------------------------------------------------------

    def read(
        self,
        start_offset: int,
        max_bytes: int,
        max_offset: int | None = None,
        min_one_message: bool = True,
    ) -> FetchDataInfo:
        """Whole batches from ``start_offset``, never a batch at or past ``max_offset``.

        The broker passes the high watermark as ``max_offset`` for consumers. Reading below the
        log start offset or above the log end offset is OFFSET_OUT_OF_RANGE.
        """
        self._check_open()
        end = self._next_offset
        if start_offset < self.log_start_offset or start_offset > end:
            raise OffsetOutOfRangeError(
                f"Received request for offset {start_offset} for partition "
                f"{self.topic_partition}, but we only have log segments in the range "
                f"{self.log_start_offset} to {end}."
            )
        empty = FetchDataInfo(start_offset, self.segments.active.base_offset, -1, b"")
        if start_offset == end or (max_offset is not None and start_offset >= max_offset):
            return empty
        segment = self.segments.floor(start_offset)
        while segment is not None:
            next_segment = self.segments.higher(segment.base_offset)
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
        return empty

    def batches(self, max_bytes: int = 1 << 20) -> Iterator[tuple[LogEntryHeader, list[Record]]]:
        """Every entry (v2 batch, or v0/v1 message of a log written before Kafka 0.11) from the
        log start offset to the log end, decoded, read ``max_bytes`` at a time: for rebuilding
        state from a whole log (the group coordinator loading ``__consumer_offsets``, a
        simulation's snapshot of each replica)."""
        position = self.log_start_offset
        end = self.log_end_offset
        while position < end:
            data = self.read(position, max_bytes).records
            if not data:
                return
            for header, records in decode_entries(data):
                position = header.next_offset
                yield header, records

    def fetch_offset_by_timestamp(self, timestamp: int) -> TimestampAndOffset | None:
        """ListOffsets: EARLIEST (-2), LATEST (-1), MAX_TIMESTAMP (-3), EARLIEST_LOCAL (-4),
        LATEST_TIERED (-5) or a timestamp ≥ 0, as Kafka's ``fetchOffsetByTimestamp`` answers
        them without tiered storage (-4 is the log start offset, -5 finds no offset). Other
        negative timestamps are INVALID_REQUEST (Kafka would search for them as timestamps).

        For a timestamp: the first segment whose largest timestamp reaches it, its time index,
        then its offset index, then a scan — the first record with timestamp ≥ ``timestamp``.
        """
        self._check_open()
        epoch = self.epoch_cache.latest_epoch
        latest_epoch = -1 if epoch is None else epoch
        if timestamp in (EARLIEST_TIMESTAMP, EARLIEST_LOCAL_TIMESTAMP):
            start_epoch = self.epoch_cache.epoch_for_offset(self.log_start_offset)
            return TimestampAndOffset(
                -1, self.log_start_offset, -1 if start_epoch is None else start_epoch
            )
        if timestamp == LATEST_TIMESTAMP:
            return TimestampAndOffset(-1, self._next_offset, latest_epoch)
        if timestamp == LATEST_TIERED_TIMESTAMP:
            return TimestampAndOffset(-1, -1, -1)
        if timestamp == MAX_TIMESTAMP:
            return self._max_timestamp_and_offset()
        if timestamp < 0:
            raise InvalidRequestError(
                f"{self.topic_partition}: unknown special timestamp {timestamp} for an offset "
                "lookup (-1 latest, -2 earliest, -3 max timestamp, -4 earliest local, "
                "-5 latest tiered, or a timestamp >= 0)"
            )
        for segment in self.segments:
            if segment.largest_timestamp >= timestamp:
                found = segment.find_offset_by_timestamp(timestamp, self.log_start_offset)
                if found is not None:
                    return found
        return None

    def _max_timestamp_and_offset(self) -> TimestampAndOffset | None:
        """MAX_TIMESTAMP (KIP-734, as Kafka 3.8+ answers it): the largest timestamp, the offset
        of the first record that has it and the leader epoch of its batch."""
        best: LogSegment | None = None
        for segment in self.segments:
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
            epoch = header.partition_leader_epoch if header.partition_leader_epoch >= 0 else -1
            for record in records:
                if record.timestamp == max_ts:
                    return TimestampAndOffset(max_ts, record.offset, epoch)
            return TimestampAndOffset(max_ts, batch_last, epoch)
        return TimestampAndOffset(max_ts, batch_last, -1)

    def end_offset_for_epoch(self, leader_epoch: int) -> tuple[int, int]:
        """OffsetsForLeaderEpoch (KIP-101/279): (largest epoch ≤ requested, its end offset)."""
        return self.epoch_cache.end_offset_for(leader_epoch, self._next_offset)

    # -- truncation -------------------------------------------------------------------------

    def truncate_to(self, target_offset: int) -> bool:
        """Drop everything from ``target_offset`` on (follower divergence); True if it did."""
        self._check_open()
        if target_offset < 0:
            raise ValueError(f"cannot truncate {self.topic_partition} to {target_offset}")
        if target_offset >= self._next_offset:
            return False
        first = self.segments.first
        if first is None or first.base_offset > target_offset:
            self.truncate_fully_and_start_at(target_offset)
            return True
        logger.info(
            "%s: truncating log from %d to %d",
            self.topic_partition,
            self._next_offset,
            target_offset,
        )
        for segment in list(self.segments):
            if segment.base_offset > target_offset:
                self.segments.remove(segment.base_offset)
                segment.close_handlers()
                segment.delete_if_exists()
        self.segments.active.truncate_to(target_offset)
        self._next_offset = self.segments.active.read_next_offset()
        self.epoch_cache.truncate_from_end(target_offset)
        self.log_start_offset = min(self.log_start_offset, target_offset)
        self.recovery_point = min(self.recovery_point, self._next_offset)
        self.high_watermark = min(self.high_watermark, self._next_offset)
        self._reload_producer_state()
        return True

    def truncate_fully_and_start_at(self, new_offset: int) -> None:
        """Delete every segment and restart the log empty at ``new_offset``."""
        self._check_open()
        logger.info("%s: truncating fully and starting at %d", self.topic_partition, new_offset)
        for segment in self.segments.clear():
            segment.close_handlers()
            segment.delete_if_exists()
        self.segments.add(self.create_segment(new_offset))
        self._next_offset = new_offset
        self.epoch_cache.clear_and_flush()
        self.log_start_offset = new_offset
        self.recovery_point = new_offset
        self.high_watermark = new_offset
        self.producer_state.truncate_fully_and_start_at(new_offset)

    def _reload_producer_state(self) -> None:
        self.producer_state.truncate_snapshots(self._next_offset)
        self.producer_state.truncate_and_reload(
            self.log_start_offset, self._next_offset, self._clock.time_ms()
        )
        rebuild_producer_state(self.producer_state, self.segments, self._next_offset)

    # -- retention and log start offset ------------------------------------------------------

    def maybe_increment_log_start_offset(self, new_start: int) -> bool:
        """delete-records: move the log start offset forward (never past the HW)."""
        self._check_open()
        if new_start > self.high_watermark:
            raise OffsetOutOfRangeError(
                f"Cannot increment the log start offset to {new_start} of partition "
                f"{self.topic_partition} since it is larger than the high watermark "
                f"{self.high_watermark}"
            )
        if new_start <= self.log_start_offset:
            return False
        self.log_start_offset = new_start
        self.epoch_cache.truncate_from_start(new_start)
        self.producer_state.delete_snapshots_below(new_start)
        self.recovery_point = max(self.recovery_point, new_start)
        return True

    def delete_old_segments(self) -> int:
        """Retention by time, size and log start offset; whole segments, oldest first.

        Only segments entirely below the high watermark go; if every segment would go, a new
        active segment is rolled first so that the log always has one. Returns how many.
        """
        self._check_open()
        deleted = 0
        if self.config.delete:
            deleted += self._delete_segments_by(self._breached_time_retention, "time")
            deleted += self._delete_segments_by(self._make_size_predicate(), "size")
        deleted += self._delete_segments_by(self._below_log_start_offset, "log start offset")
        return deleted

    def _breached_time_retention(self, segment: LogSegment, _next: LogSegment | None) -> bool:
        if self.config.retention_ms < 0:
            return False
        return self._clock.time_ms() - segment.largest_timestamp > self.config.retention_ms

    def _make_size_predicate(self) -> _SizePredicate:
        return _SizePredicate(self.config.retention_bytes, self.size_in_bytes)

    def _below_log_start_offset(self, _segment: LogSegment, nxt: LogSegment | None) -> bool:
        return nxt is not None and nxt.base_offset <= self.log_start_offset

    def _delete_segments_by(self, predicate: _Predicate, reason: str) -> int:
        deletable: list[LogSegment] = []
        for segment in self.segments:
            nxt = self.segments.higher(segment.base_offset)
            upper_bound = nxt.base_offset if nxt is not None else self._next_offset
            last_and_empty = nxt is None and segment.size == 0
            if (
                self.high_watermark >= upper_bound
                and not last_and_empty
                and predicate(segment, nxt)
            ):
                deletable.append(segment)
            else:
                break
        if not deletable:
            return 0
        if len(deletable) == len(self.segments):
            self.roll()  # a log always keeps one segment
        for segment in deletable:
            logger.info(
                "%s: deleting segment %s (retention by %s)", self.topic_partition, segment, reason
            )
            self._remove_and_schedule_deletion(segment)
        first = self.segments.first
        if first is not None and first.base_offset > self.log_start_offset:
            self.log_start_offset = first.base_offset
            self.epoch_cache.truncate_from_start(self.log_start_offset)
            self.producer_state.delete_snapshots_below(self.log_start_offset)
        return len(deletable)

    def _remove_and_schedule_deletion(self, segment: LogSegment) -> None:
        """Drop from the map, rename to ``.deleted``, remove after ``file.delete.delay.ms``."""
        self.segments.remove(segment.base_offset)
        segment.close_handlers()
        segment.change_file_suffixes("", file_names.DELETED_SUFFIX)
        due = self._clock.time_ms() + self.config.file_delete_delay_ms
        self._pending_deletions.append((due, segment))

    def replace_segments(self, new_segment: LogSegment, old_segments: Sequence[LogSegment]) -> None:
        """Swap a cleaned segment in for the old ones (crash-safe via ``.swap``).

        ``new_segment`` arrives with ``.cleaned`` files. Order: rename them to ``.swap``; rename
        the old segments to ``.deleted``; rename the swap files to their final names. A crash
        at any point is completed by the loader (a ``.swap`` wins over what it overlaps).
        """
        new_segment.change_file_suffixes(file_names.CLEANED_SUFFIX, file_names.SWAP_SUFFIX)
        for old in old_segments:
            if old.base_offset != new_segment.base_offset:
                self.segments.remove(old.base_offset)
            old.close_handlers()
            old.change_file_suffixes("", file_names.DELETED_SUFFIX)
            self._pending_deletions.append(
                (self._clock.time_ms() + self.config.file_delete_delay_ms, old)
            )
        new_segment.change_file_suffixes(file_names.SWAP_SUFFIX, "")
        self.segments.add(new_segment)

    def run_pending_deletions(self) -> int:
        """Remove ``.deleted`` files whose delay has passed; returns how many segments."""
        now = self._clock.time_ms()
        due = [s for t, s in self._pending_deletions if t <= now]
        self._pending_deletions = [(t, s) for t, s in self._pending_deletions if t > now]
        for segment in due:
            segment.delete_if_exists()
        return len(due)

    # -- durability -------------------------------------------------------------------------

    def flush(self, up_to: int | None = None) -> None:
        """fsync segments holding offsets below ``up_to`` (default: LEO); advance the
        recovery point."""
        self._check_open()
        target = self._next_offset if up_to is None else min(up_to, self._next_offset)
        if target <= self.recovery_point:
            return
        for segment in self.segments.between(self.recovery_point, target):
            segment.flush()
        self.recovery_point = target
        self.last_flush_ms = self._clock.time_ms()

    def flush_if_due(self) -> bool:
        """The ``flush.ms`` rule, for the owner's periodic check."""
        if self._clock.time_ms() - self.last_flush_ms >= self.config.flush_ms:
            self.flush()
            return True
        return False

    # -- lifecycle --------------------------------------------------------------------------

    def close(self) -> None:
        """Clean close: snapshot producer state, close segments (trimming indexes and files)."""
        if self._closed:
            return
        self.producer_state.update_map_end_offset(self._next_offset)
        self.producer_state.take_snapshot()
        self.flush()
        for segment in self.segments:
            segment.close()
        for _, segment in self._pending_deletions:
            segment.close_handlers()
        self._closed = True

    def drop_unflushed(self) -> None:
        """Lose every byte not yet fsynced, as a power loss would (the simulation's crash).

        Indexes and checkpoints are left as they are: recovery must cope with that.
        """
        for segment in self.segments:
            if segment.log.closed:
                continue
            if segment.log.size > segment.log.flushed_size:
                segment.log.truncate_to(segment.log.flushed_size)

    def close_handlers(self) -> None:
        """Close file handles without flushing (a crash, in tests and the simulation)."""
        for segment in self.segments:
            segment.close_handlers()
        self._closed = True

    def delete(self) -> None:
        """Remove the whole partition directory."""
        self.close_handlers()
        shutil.rmtree(self.dir, ignore_errors=True)

    def rename_dir(self, new_dir: Path) -> None:
        self.dir.rename(new_dir)
        self.dir = new_dir

    def _check_open(self) -> None:
        if self._closed:
            raise KafkaStorageError(f"log {self.topic_partition} in {self.dir} is closed")


_Predicate = Callable[[LogSegment, "LogSegment | None"], bool]


class _SizePredicate:
    """Delete oldest segments while the log stays at or above ``retention.bytes`` without them."""

    def __init__(self, retention_bytes: int, total: int) -> None:
        self.diff = total - retention_bytes if 0 <= retention_bytes <= total else -1

    def __call__(self, segment: LogSegment, nxt: LogSegment | None) -> bool:
        if self.diff - segment.size >= 0:
            self.diff -= segment.size
            return True
        return False


def _recompress(batch: memoryview, codec: CompressionType) -> bytes:
    """Re-encode a client batch with the topic's compression.type (Kafka does the same)."""
    header, records = decode_batch(batch)
    return rebuild_batch(header, records, compression=codec)
