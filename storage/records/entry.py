"""One entry of a segment file, whatever its format: a v2 batch or a v0/v1 message.

A segment written by Kafka before 0.11 holds v0/v1 messages (uncompressed ones, or compressed
*wrapper* messages holding a compressed message set); a later broker appends v2 batches after
them. Kafka reads every format it ever wrote, so storage (recovery, indexes, fetch,
``verify-log``) walks entries through :func:`parse_entry_header`, which picks the parser by the
magic byte (byte 16 in every format).

What storage needs of an entry is format-neutral: its size, its *last* offset (a v2 batch's
``base_offset + lastOffsetDelta``; a legacy message's own offset, which for a wrapper is the
offset of its last inner message), its largest timestamp and its checksum. A legacy wrapper's
*first* offset is only known after decompression (Kafka's ``AbstractLegacyRecordBatch.baseOffset``
decompresses), so :class:`LegacyEntryHeader` has no ``base_offset``: code that needs one must
branch on the type, and recovery orders legacy entries by their last offsets, as Kafka's
``LogSegment.recover`` does (it looks at nothing else).

:func:`check_entry_records` is the strict check of an entry's records for stored data
(``verify-log``, ``dump-log``): a v2 batch goes through the leader's own record walk
(:func:`~storage.records.validation.validate_batch_records`), a v0/v1 message's inner messages
are decoded here.

:func:`decode_entries` is the one reader of records out of a buffer of entries of any format (a
fetch response, a read of the log): every consumer, the simple client, the Spark reader and
``Log.batches`` decode through it, so a partition written before Kafka 0.11 reads the same
everywhere, as Kafka's consumer reads every format.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Final, NamedTuple

from kafkasim.common.errors import CorruptRecordError, InvalidRecordError
from kafkasim.common.sentinels import NO_TIMESTAMP
from kafkasim.storage.records.batch import (
    LOG_OVERHEAD,
    MAGIC_OFFSET,
    MAGIC_V2,
    NO_PARTITION_LEADER_EPOCH,
    NO_PRODUCER_ID,
    RECORD_BATCH_OVERHEAD,
    BatchHeader,
    Record,
    TimestampType,
    compute_crc,
    decode_batch,
)
from kafkasim.storage.records.compression import CompressionType
from kafkasim.storage.records.legacy import (
    COMPRESSION_CODEC_MASK,
    LOG_OVERHEAD_V0,
    LOG_OVERHEAD_V1,
    MAGIC_V0,
    MAGIC_V1,
    RECORD_OVERHEAD_V0,
    RECORD_OVERHEAD_V1,
    TIMESTAMP_TYPE_MASK,
    LegacyRecord,
    decode_legacy,
)
from kafkasim.storage.records.validation import validate_batch_records

MIN_ENTRY_SIZE: Final = LOG_OVERHEAD_V0
"""The smallest entry of any format (an empty v0 message): a reader needs this many bytes."""
ENTRY_HEADER_BYTES: Final = RECORD_BATCH_OVERHEAD
"""Bytes to read to parse the header of an entry of any format (fewer may remain at the end)."""

_LEGACY_HEAD = struct.Struct(">qiIbb")  # offset, size, crc, magic, attributes
_INT64 = struct.Struct(">q")


@dataclass(frozen=True, slots=True)
class LegacyEntryHeader:
    """The fixed fields of a v0/v1 message as stored in a log (a wrapper is one entry)."""

    offset: int
    message_size: int
    crc: int
    magic: int
    attributes: int
    timestamp: int  # -1 in v0

    @property
    def size_in_bytes(self) -> int:
        return LOG_OVERHEAD + self.message_size

    @property
    def last_offset(self) -> int:
        return self.offset

    @property
    def next_offset(self) -> int:
        return self.offset + 1

    @property
    def max_timestamp(self) -> int:
        """The message's timestamp (a v1 wrapper carries its largest inner one), -1 in v0."""
        return self.timestamp

    @property
    def partition_leader_epoch(self) -> int:
        return NO_PARTITION_LEADER_EPOCH

    @property
    def producer_id(self) -> int:
        return NO_PRODUCER_ID

    @property
    def is_control(self) -> bool:
        return False

    @property
    def compression(self) -> CompressionType:
        return CompressionType.from_id(self.attributes & COMPRESSION_CODEC_MASK)

    @property
    def timestamp_type(self) -> TimestampType:
        if self.magic == MAGIC_V0:
            return TimestampType.NO_TIMESTAMP_TYPE
        if self.attributes & TIMESTAMP_TYPE_MASK:
            return TimestampType.LOG_APPEND_TIME
        return TimestampType.CREATE_TIME


LogEntryHeader = BatchHeader | LegacyEntryHeader


def parse_entry_header(buf: bytes | bytearray | memoryview, pos: int = 0) -> LogEntryHeader:
    """The header of the entry at ``pos`` (v2 batch or v0/v1 message).

    CorruptRecordError when too few bytes remain for the header its magic announces, the magic
    is not 0, 1 or 2, or the declared size is below that format's minimum. Whether the whole
    entry fits, and its checksum, are the caller's to check (:func:`entry_crc_matches`).
    """
    available = len(buf) - pos
    if available <= MAGIC_OFFSET:
        raise CorruptRecordError(
            f"entry at position {pos} is truncated: {available} bytes, too few for a header"
        )
    magic = buf[pos + MAGIC_OFFSET]
    if magic == MAGIC_V2:
        return BatchHeader.parse(buf, pos)
    if magic not in (MAGIC_V0, MAGIC_V1):
        signed = magic - 256 if magic > 127 else magic
        raise CorruptRecordError(
            f"entry at position {pos} has magic {signed}; Kafka writes 0, 1 or 2"
        )
    overhead = LOG_OVERHEAD_V0 if magic == MAGIC_V0 else LOG_OVERHEAD_V1
    if available < overhead:
        raise CorruptRecordError(
            f"v{magic} message at position {pos} is truncated: {available} bytes, "
            f"its header takes {overhead}"
        )
    offset, size, crc, _, attributes = _LEGACY_HEAD.unpack_from(buf, pos)
    minimum = RECORD_OVERHEAD_V0 if magic == MAGIC_V0 else RECORD_OVERHEAD_V1
    if size < minimum:
        raise CorruptRecordError(
            f"v{magic} message at position {pos} has size {size}, below the minimum {minimum}"
        )
    timestamp = (
        _INT64.unpack_from(buf, pos + MAGIC_OFFSET + 2)[0] if magic == MAGIC_V1 else NO_TIMESTAMP
    )
    return LegacyEntryHeader(offset, size, crc, magic, attributes, timestamp)


def entry_crc(buf: bytes | bytearray | memoryview, pos: int, header: LogEntryHeader) -> int:
    """The checksum the entry's content hashes to: CRC-32C over [21, size) for a v2 batch,
    CRC-32 (zlib/IEEE) over [16, size) for a legacy message. The entry must fit in ``buf``."""
    if isinstance(header, BatchHeader):
        return compute_crc(buf, pos, header.size_in_bytes)
    with memoryview(buf) as view:
        return zlib.crc32(view[pos + MAGIC_OFFSET : pos + header.size_in_bytes])


class EntryRecords(NamedTuple):
    """What a full decode of an entry learnt: its first record offset (a v2 batch's base
    offset; a legacy wrapper's first inner offset) and its number of records."""

    first_offset: int
    record_count: int


def check_entry_records(buf: bytes | bytearray | memoryview, pos: int = 0) -> EntryRecords:
    """Check every record of the stored entry at ``pos`` (its checksum already checked); say
    where it starts and how many records it holds.

    Beyond the header: the codec id is known and the payload decompresses; a v2 batch holds
    exactly ``recordsCount`` well-formed records with increasing offset deltas and no byte
    after them (:func:`~storage.records.validation.validate_batch_records`, gaps allowed as
    compaction leaves them); a legacy wrapper's inner messages are well formed, uncompressed, of
    the wrapper's magic, with valid CRCs. CorruptRecordError or InvalidRecordError (Kafka's
    CORRUPT_MESSAGE / INVALID_RECORD) naming what is wrong.
    """
    header = parse_entry_header(buf, pos)
    size = header.size_in_bytes
    if size > len(buf) - pos:
        raise CorruptRecordError(
            f"entry at position {pos} declares {size} bytes but only {len(buf) - pos} remain"
        )
    if isinstance(header, BatchHeader):
        validate_batch_records(buf, pos, header, dense_offsets=False)
        return EntryRecords(header.base_offset, header.records_count)
    with memoryview(buf) as view:
        messages = decode_legacy(view[pos : pos + size], deep=True)
    if not messages:
        raise InvalidRecordError(f"compressed message at position {pos} holds no message")
    if messages[-1].offset != header.last_offset:
        raise InvalidRecordError(
            f"compressed message at position {pos} has offset {header.last_offset} but its "
            f"last inner message has offset {messages[-1].offset}"
        )
    return EntryRecords(messages[0].offset, len(messages))


def iter_entries(buf: bytes | bytearray | memoryview) -> Iterator[tuple[int, LogEntryHeader]]:
    """``(position, header)`` of each entry of a buffer of concatenated entries of any format
    (v2 batches and v0/v1 messages, mixed). CorruptRecordError at a header that cannot be an
    entry's or a trailing partial entry; checksums are :func:`decode_entries`' to check."""
    pos = 0
    end = len(buf)
    while pos < end:
        header = parse_entry_header(buf, pos)
        size = header.size_in_bytes
        if pos + size > end:
            raise CorruptRecordError(
                f"entry at position {pos} declares {size} bytes "
                f"but only {end - pos} remain (partial entry)"
            )
        yield pos, header
        pos += size


def decode_entries(
    buf: bytes | bytearray | memoryview, *, fetch_offset: int = 0
) -> Iterator[tuple[LogEntryHeader, list[Record]]]:
    """Each entry of ``buf`` (v2 batches and v0/v1 messages, in any mix) with its records at
    or above ``fetch_offset``, as Kafka's consumer reads a fetch response.

    Every entry's checksum is checked (Kafka's ``check.crcs``): CRC-32C of a v2 batch, CRC-32 of
    a legacy message and of each message inside a compressed wrapper. Records come out as
    :class:`~storage.records.batch.Record`: a v0 message has timestamp -1 (NO_TIMESTAMP); a v1
    message its own, except inside a LogAppendTime wrapper, where each inner message reports
    the wrapper's; legacy messages have no headers. The records' timestamp type is the entry's
    (``header.timestamp_type``). A fetch answers from the start of the entry holding
    ``fetch_offset`` (a v2 batch, or a legacy wrapper whose first inner offset is only known
    once decompressed), so the records below it are dropped here; an entry may thus come with
    no record, and control batches come with theirs: callers move on to ``header.next_offset``
    and skip ``header.is_control`` entries. CorruptRecordError / InvalidRecordError (Kafka's
    CORRUPT_MESSAGE / INVALID_RECORD) naming the entry's position and what is wrong.
    """
    for pos, header in iter_entries(buf):
        yield header, decode_entry(buf, pos, header, fetch_offset=fetch_offset)


def decode_entry(
    buf: bytes | bytearray | memoryview,
    pos: int,
    header: LogEntryHeader,
    *,
    fetch_offset: int = 0,
) -> list[Record]:
    """The records at or above ``fetch_offset`` of the entry at ``pos`` whose header
    :func:`iter_entries` gave, checksums checked (one step of :func:`decode_entries`, for a
    reader that decides per entry whether to decode it)."""
    if isinstance(header, BatchHeader):
        _, records = decode_batch(buf, pos)
        if header.base_offset < fetch_offset:
            records = [r for r in records if r.offset >= fetch_offset]
        return records
    with memoryview(buf) as view:
        messages = decode_legacy(view[pos : pos + header.size_in_bytes], deep=True)
    return [_legacy_record(m) for m in messages if m.offset >= fetch_offset]


def _legacy_record(message: LegacyRecord) -> Record:
    timestamp = NO_TIMESTAMP if message.timestamp is None else message.timestamp
    return Record(
        message.offset,
        timestamp,
        message.key,
        message.value,
        size_in_bytes=message.size_in_bytes,
    )
