"""What one append to a partition log holds and becomes, before the log writes it.

Kafka's ``UnifiedLog.analyzeAndValidateRecords`` (the batches of a request: header, size, CRC,
codec, order), the leader's ``LogValidator`` glue (record-level validation, the topic's
``compression.type``), the offset assignment of a leader append and the producers' sequence
check of a client's batches. Per batch, never per record, except where the validator walks
records. :class:`~storage.log.Log` owns the state these read (its next offset, its producer
state) and does the roll and the write.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

from kafkasim.common.errors import (
    CorruptRecordError,
    InvalidOffsetError,
    InvalidRecordError,
    InvalidTimestampError,
    RecordTooLargeError,
    UnsupportedForMessageFormatError,
)
from kafkasim.common.sentinels import INT64_MAX, NO_TIMESTAMP
from kafkasim.common.types import TopicPartition
from kafkasim.storage.config import LogConfig
from kafkasim.storage.file_records import Buffer
from kafkasim.storage.producer_state import AppendOrigin, ProducerStateManager
from kafkasim.storage.records import validation
from kafkasim.storage.records.batch import (
    ATTRIBUTES_OFFSET,
    COMPRESSION_CODEC_MASK,
    CONTROL_FLAG_MASK,
    LOG_OVERHEAD,
    MAGIC_OFFSET,
    MAGIC_V2,
    RECORD_BATCH_OVERHEAD,
    RECORDS_OFFSET,
    TIMESTAMP_TYPE_MASK,
    BatchHeader,
    compute_crc,
    decode_batch,
    rebuild_batch,
    set_base_offset,
    set_log_append_time,
    set_partition_leader_epoch,
)
from kafkasim.storage.records.compression import MAX_CODEC_ID, CompressionType
from kafkasim.storage.records.crc import crc32c
from kafkasim.storage.records.validation import UNBOUNDED, validate_leader_batch
from kafkasim.storage.segment import AppendedBatch

_BASE_AND_EPOCH = struct.Struct(">qii")  # baseOffset, batchLength, partitionLeaderEpoch
# The header fields the one-batch path reads (see ``plan_client_batch``): batchLength, magic,
# crc, attributes, lastOffsetDelta, firstTimestamp, maxTimestamp, producerId, recordsCount; the
# rest skipped unbuilt.
_VOUCHED_HEADER = struct.Struct(">8xi4xbIhiqqq6xi")
# A batch with any of these set takes the general path: a codec (decompressed to walk), a
# producer-set LogAppendTime (refused), a control batch (refused from a client).
_GENERAL_ATTRIBUTES = COMPRESSION_CODEC_MASK | TIMESTAMP_TYPE_MASK | CONTROL_FLAG_MASK
LEGACY_MESSAGE_MIN_SIZE = 14  # crc, magic, attributes, key and value lengths

__all__ = [
    "AppendOrigin",
    "AppendRules",
    "BatchEntry",
    "LogAppendInfo",
    "PlannedAppend",
    "analyze_append",
    "as_replicated",
    "assign_offsets",
    "check_client_sequences",
    "plan_client_batch",
    "validate_and_convert",
]

BatchEntry = tuple[int, BatchHeader, memoryview]
"""One batch of an append: its position in the request, its header, its bytes."""


class LogAppendInfo(NamedTuple):
    """What an append did (offsets assigned, timestamps) — per append, not per record.

    (A named tuple, as :class:`PlannedAppend`: one is built per append, at a fraction of a
    frozen dataclass's cost.)"""

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


@dataclass(frozen=True, slots=True)
class AppendRules:
    """What the append path needs of a topic's config, derived once per config change."""

    topic_partition: TopicPartition
    config: LogConfig
    log_append_time: bool
    target_codec: CompressionType | None  # None: keep the producer's
    compacted: bool
    max_timestamp_difference_ms: int
    # What :func:`plan_client_batch` reads per append, derived here once: a CreateTime topic
    # that keeps an uncompressed batch as it is; the timestamp window (or none).
    keeps_plain_batches: bool
    max_message_bytes: int
    timestamps_bounded: bool

    @classmethod
    def of(cls, topic_partition: TopicPartition, config: LogConfig) -> AppendRules:
        name = config.compression_type
        codec = (
            None
            if name == "producer"
            else CompressionType.NONE
            if name == "uncompressed"
            else CompressionType.from_name(name)
        )
        log_append_time = config.message_timestamp_type == "LogAppendTime"
        limit = config.message_timestamp_difference_max_ms
        return cls(
            topic_partition,
            config,
            log_append_time,
            codec,
            config.compact,
            limit,
            not log_append_time and codec in (None, CompressionType.NONE),
            config.max_message_bytes,
            0 <= limit < INT64_MAX,
        )


class PlannedAppend(NamedTuple):
    """The bytes of an append ready for the segment, and what the log learns from them."""

    chunks: list[Buffer]
    batches: list[AppendedBatch]
    epochs: Sequence[tuple[int, int]]  # (leader epoch, its first offset) to record
    first_offset: int
    last_offset: int
    max_timestamp: int
    offset_of_max_timestamp: int
    record_count: int
    total: int

    def info(self, log_append_time: int, log_start_offset: int) -> LogAppendInfo:
        return LogAppendInfo(
            self.first_offset,
            self.last_offset,
            self.max_timestamp,
            self.offset_of_max_timestamp,
            log_append_time,
            log_start_offset,
            self.record_count,
            len(self.batches),
            self.total,
        )


def analyze_append(view: memoryview, rules: AppendRules, *, leader: bool) -> list[BatchEntry]:
    """Shallow-validate every batch in an append: header, size, CRC, codec id, and on a
    follower the offsets in order. Only v2 batches are appended."""
    tp = rules.topic_partition
    out: list[BatchEntry] = []
    position = 0
    size = len(view)
    last_offset = -1
    max_message_bytes = rules.config.max_message_bytes
    while position < size:
        remaining = size - position
        magic = view[position + MAGIC_OFFSET] if remaining > MAGIC_OFFSET else -1
        if magic != 2 or remaining < RECORD_BATCH_OVERHEAD:
            _reject_non_batch(view, position, magic, tp)
        header = BatchHeader.parse(view, position)
        batch_size = header.size_in_bytes
        if batch_size > remaining:
            raise InvalidRecordError(
                f"{tp}: batch at position {position} claims {batch_size} bytes but the append "
                f"has {remaining}"
            )
        if leader and batch_size > max_message_bytes:
            raise RecordTooLargeError(
                f"{tp}: a batch of {batch_size} bytes exceeds max.message.bytes={max_message_bytes}"
            )
        actual = compute_crc(view, position, batch_size)
        if actual != header.crc:
            raise CorruptRecordError(
                f"{tp}: batch at position {position} has CRC {header.crc:#010x} but its "
                f"content hashes to {actual:#010x}"
            )
        codec_id = header.attributes & COMPRESSION_CODEC_MASK
        if codec_id > MAX_CODEC_ID:
            # Kafka's CompressionType.forId refuses ids 5-7, on the leader and followers.
            raise CorruptRecordError(
                f"{tp}: batch at position {position}: unknown compression type id {codec_id}"
            )
        if not leader:
            if header.base_offset <= last_offset or header.last_offset < header.base_offset:
                raise InvalidOffsetError(
                    f"{tp}: out of order offsets in follower append: batch "
                    f"{header.base_offset}..{header.last_offset} after {last_offset}"
                )
            last_offset = header.last_offset
        out.append((position, header, view[position : position + batch_size]))
        position += batch_size
    return out


def plan_client_batch(
    view: memoryview, rules: AppendRules, now_ms: int, next_offset: int, leader_epoch: int
) -> tuple[bytes, int, int, int] | None:
    """The common leader append in one pass: one uncompressed batch from a client without
    producer id, on a CreateTime topic that keeps it uncompressed, every check passing. Returns
    the rewritten first 16 bytes (base offset ``next_offset``, length, ``leader_epoch``), the
    last offset, the max timestamp and the record count; None sends the append to the general
    path (``analyze_append``, ``validate_and_convert``, ``assign_offsets``).

    Only vouches, as the compiled walk does: every check of the general path is made here
    (header, size, max.message.bytes, CRC-32C, Kafka's ``validateBatch`` for a client, the
    record walk with its timestamp window and compacted-topic keys, maxTimestamp equal to the
    records' largest) and any that fails, or any case it does not cover, answers None so that
    the general path runs the same checks again and raises its own named errors. Why a second
    path: an append of one batch is the usual produce request, and the general one spends
    about 60 Python calls on it, as much as the write of a 16 KiB batch.
    """
    size = len(view)
    walk = validation.COMPILED_WALK  # read per call: tests swap it for the fallbacks
    if size < RECORD_BATCH_OVERHEAD or walk is None or not rules.keeps_plain_batches:
        return None
    (length, magic, crc, attributes, last_delta, first_ts, max_ts, producer_id, count) = (
        _VOUCHED_HEADER.unpack_from(view)
    )
    if (
        magic != MAGIC_V2
        or length + LOG_OVERHEAD != size  # exactly one batch (its header fits: size >= 61)
        or size > rules.max_message_bytes
        or producer_id >= 0  # the producer state's sequences: the general path
        or attributes & _GENERAL_ATTRIBUTES
        or count <= 0
        or last_delta + 1 != count
        or crc32c(view[ATTRIBUTES_OFFSET:]) != crc
    ):
        return None
    if rules.timestamps_bounded:
        limit = rules.max_timestamp_difference_ms
        low, high = now_ms - limit - first_ts, now_ms + limit - first_ts
    else:
        low, high = -UNBOUNDED, UNBOUNDED
    records = view[RECORDS_OFFSET:]
    found = walk(records, count, last_delta, True, rules.compacted, first_ts, low, high)
    if found is None:
        return None  # a fault: the general path names it
    largest = first_ts + found
    if (largest if largest > NO_TIMESTAMP else NO_TIMESTAMP) != max_ts:
        return None  # a maxTimestamp to correct: the general path copies the batch
    head = _BASE_AND_EPOCH.pack(next_offset, length, leader_epoch)
    return head, next_offset + last_delta, max_ts, count


def _reject_non_batch(view: memoryview, position: int, magic: int, tp: TopicPartition) -> None:
    remaining = len(view) - position
    legacy_size = (
        int.from_bytes(view[position + 8 : position + 12], "big", signed=True)
        if remaining >= LOG_OVERHEAD
        else 0
    )
    if magic in (0, 1) and legacy_size >= LEGACY_MESSAGE_MIN_SIZE:
        raise UnsupportedForMessageFormatError(
            f"{tp}: batch at position {position} has magic {magic}; this log stores "
            "RecordBatch v2 (magic 2) only"
        )
    raise InvalidRecordError(
        f"{tp}: {remaining} bytes at position {position} are not a record batch (magic {magic})"
    )


def validate_and_convert(
    entries: list[BatchEntry], rules: AppendRules, now_ms: int, *, is_client: bool
) -> list[BatchEntry]:
    """Kafka's LogValidator on every batch (records walked, see ``records.validation``),
    then the topic's compression.type. Nothing is written before every batch passed."""
    out = []
    target = rules.target_codec
    for position, received, received_view in entries:
        try:
            header, batch_view = validate_leader_batch(
                received_view,
                received,
                is_client=is_client,
                compacted=rules.compacted,
                log_append_time=rules.log_append_time,
                max_timestamp_difference_ms=rules.max_timestamp_difference_ms,
                now_ms=now_ms,
                position=position,
            )
        except (CorruptRecordError, InvalidRecordError, InvalidTimestampError) as e:
            raise type(e)(f"{rules.topic_partition}: {e.message}") from None
        if target is not None and target != header.compression:
            converted = memoryview(_recompress(batch_view, target))
            out.append((position, BatchHeader.parse(converted), converted))
        else:
            out.append((position, header, batch_view))
    return out


def assign_offsets(
    entries: list[BatchEntry], next_offset: int, leader_epoch: int, append_time: int
) -> PlannedAppend:
    """A leader append: dense offsets from ``next_offset``, the leader epoch stamped, and with
    ``append_time`` ≥ 0 (LogAppendTime) the broker's timestamp set."""
    chunks: list[Buffer] = []
    batches: list[AppendedBatch] = []
    first_offset = next_offset
    max_ts, max_ts_offset = -1, next_offset
    record_count = total = 0
    for _, header, batch_view in entries:
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
            # Only the first 16 bytes change (base offset, leader epoch: outside the CRC):
            # they are packed anew and the rest goes out untouched beside them, uncopied.
            chunks.append(_BASE_AND_EPOCH.pack(base, size - LOG_OVERHEAD, leader_epoch))
            chunks.append(batch_view[_BASE_AND_EPOCH.size :])
            batch_max_ts = header.max_timestamp
        if batch_max_ts > max_ts:
            max_ts, max_ts_offset = batch_max_ts, last
        batches.append(AppendedBatch(last, batch_max_ts, size))
        record_count += header.records_count
        total += size
        next_offset = last + 1
    return PlannedAppend(
        chunks,
        batches,
        ((leader_epoch, first_offset),),
        first_offset,
        next_offset - 1,
        max_ts,
        max_ts_offset,
        record_count,
        total,
    )


def as_replicated(view: memoryview, entries: list[BatchEntry]) -> PlannedAppend:
    """A follower append: the leader's bytes as they are, its epochs recorded."""
    batches: list[AppendedBatch] = []
    epochs: list[tuple[int, int]] = []
    first = entries[0][1]
    max_ts, max_ts_offset = -1, first.base_offset
    record_count = total = 0
    for _, header, _ in entries:
        batches.append(
            AppendedBatch(header.last_offset, header.max_timestamp, header.size_in_bytes)
        )
        if header.partition_leader_epoch >= 0:
            epochs.append((header.partition_leader_epoch, header.base_offset))
        if header.max_timestamp > max_ts:
            max_ts, max_ts_offset = header.max_timestamp, header.last_offset
        record_count += header.records_count
        total += header.size_in_bytes
    return PlannedAppend(
        [view[:total]],
        batches,
        epochs,
        first.base_offset,
        batches[-1].last_offset,
        max_ts,
        max_ts_offset,
        record_count,
        total,
    )


def check_client_sequences(
    producer_state: ProducerStateManager,
    entries: list[BatchEntry],
    plan: PlannedAppend,
    rules: AppendRules,
    *,
    append_time: int,
    log_start_offset: int,
) -> LogAppendInfo | None:
    """Check and record each idempotent batch's sequence; the original append's info when
    the (single) batch is a retry of one already written, else None."""
    for (_, header, _), appended in zip(entries, plan.batches, strict=True):
        if header.producer_id < 0:
            continue
        duplicate = producer_state.check_and_update(
            header.producer_id,
            header.producer_epoch,
            header.base_sequence,
            header.last_sequence,
            appended.last_offset,
            header.max_timestamp,
            is_from_client=True,
            is_transactional=header.is_transactional,
            first_offset=appended.last_offset - header.last_offset_delta,
        )
        if duplicate is None:
            continue
        if len(entries) > 1:
            raise InvalidRecordError(
                f"{rules.topic_partition}: a duplicate batch (producer {header.producer_id}, "
                f"sequence {header.base_sequence}) inside a request of several batches"
            )
        return LogAppendInfo(
            duplicate.first_offset,
            duplicate.last_offset,
            duplicate.timestamp,
            duplicate.last_offset,
            append_time,
            log_start_offset,
            0,
            0,
            0,
            duplicate=True,
        )
    return None


def _recompress(batch: memoryview, codec: CompressionType) -> bytes:
    """Re-encode a client batch with the topic's compression.type (Kafka does the same)."""
    header, records = decode_batch(batch)
    return rebuild_batch(header, records, compression=codec)
