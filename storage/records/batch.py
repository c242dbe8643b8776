"""RecordBatch v2 (magic 2): Kafka's on-disk and on-wire record format since 0.11.

(One module, ~975 lines: the layout, the builder, the decoder and control batches share the
byte offsets and the inlined varint fast paths, measured hot; a third of it is the layout's
documentation. The record walk the decoder and the consumer's columns share is
:mod:`storage.records.columns`.)

Byte layout of one batch (all integers big-endian; offsets are the ``*_OFFSET`` constants)::

    off  field                 type    notes
      0  baseOffset            int64   offset of the first record; rewritten by the leader
      8  batchLength           int32   bytes after this field: size = 12 (LOG_OVERHEAD) + length
     12  partitionLeaderEpoch  int32   stamped by the leader; NOT covered by the CRC
     16  magic                 int8    2
     17  crc                   uint32  CRC-32C (Castagnoli) of bytes [21, size)
     21  attributes            int16   bits 0-2 codec, 3 timestamp type (1 = LogAppendTime),
                                       4 transactional, 5 control, 6 delete horizon (Kafka 3.x)
     23  lastOffsetDelta       int32   last offset - base offset (kept when compaction empties)
     27  firstTimestamp        int64   timestamp of the first record, -1 when empty
     35  maxTimestamp          int64   max record timestamp, or the broker's LogAppendTime
     43  producerId            int64   -1 without an idempotent/transactional producer
     51  producerEpoch         int16   -1 likewise
     53  baseSequence          int32   -1 likewise
     57  recordsCount          int32   number of records
     61  records                       compressed as one payload when the codec is not none

Each record (uncompressed form; varints are zig-zag, see :mod:`storage.records.varint`)::

    length varint (bytes after it) | attributes int8 (0, unused) | timestampDelta varlong |
    offsetDelta varint | keyLength varint (-1 = null) | key | valueLength varint | value |
    headerCount varint | per header: keyLength varint, key (UTF-8), valueLength varint, value

Invariants this module enforces on read (Kafka's ``DefaultRecordBatch``/``DefaultRecord``):

* ``batchLength >= 49`` (a batch is never smaller than its header) and the batch fits in the
  bytes available; the stored CRC equals the CRC-32C of bytes [21, size). Violations raise
  :class:`~common.errors.CorruptRecordError` naming the position and what failed.
* Exactly ``recordsCount`` records fill the (decompressed) record area, each record consumes
  exactly its declared length, offset deltas strictly increase within
  ``[0, lastOffsetDelta]``. Violations raise :class:`~common.errors.InvalidRecordError`.
  Neither ``IndexError`` nor ``struct.error`` ever escapes.

What the CRC does not cover: baseOffset, batchLength, partitionLeaderEpoch and magic precede it.
The leader can therefore assign offsets and stamp its epoch in place (:func:`set_base_offset`,
:func:`set_partition_leader_epoch`) without touching the CRC; a corrupted length is still caught
because the CRC is then computed over the wrong range, a corrupted magic by the magic check, a
corrupted base offset or leader epoch is not caught at all (Kafka's design, not ours).

Thread-safety: everything here is pure except :class:`RecordBatchBuilder` (one writer) and the
in-place rewrites (the caller owns the ``bytearray``).
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from enum import IntEnum
from itertools import repeat, starmap
from typing import Final, NamedTuple

from kafkasim.common.errors import CorruptRecordError, InvalidRecordError
from kafkasim.common.frozen import fast_frozen_init
from kafkasim.common.sentinels import (
    INT16_MAX,
    INT16_MIN,
    INT32_MAX,
    INT32_MIN,
    INT64_MAX,
    INT64_MIN,
    NO_TIMESTAMP,
)
from kafkasim.storage.records.columns import BatchColumns, walk_records
from kafkasim.storage.records.compression import CompressionType, compress, decompress
from kafkasim.storage.records.crc import crc32c as _crc
from kafkasim.storage.records.varint import (
    NULL_VARINT,
    SMALL_VARINT_LIMIT,
    SMALL_VARINTS,
    encode_varint,
    encode_varlong,
)

# --- layout constants (Kafka's names) ---------------------------------------------------------

BASE_OFFSET_OFFSET: Final = 0
LENGTH_OFFSET: Final = 8
PARTITION_LEADER_EPOCH_OFFSET: Final = 12
MAGIC_OFFSET: Final = 16
CRC_OFFSET: Final = 17
ATTRIBUTES_OFFSET: Final = 21
LAST_OFFSET_DELTA_OFFSET: Final = 23
FIRST_TIMESTAMP_OFFSET: Final = 27
MAX_TIMESTAMP_OFFSET: Final = 35
PRODUCER_ID_OFFSET: Final = 43
PRODUCER_EPOCH_OFFSET: Final = 51
BASE_SEQUENCE_OFFSET: Final = 53
RECORDS_COUNT_OFFSET: Final = 57
RECORDS_OFFSET: Final = 61

RECORD_BATCH_OVERHEAD: Final = 61
"""Size of the batch header; an empty batch is exactly this long."""
LOG_OVERHEAD: Final = 12
"""baseOffset + batchLength: the part of every format's entry that precedes its length."""
BATCH_LENGTH_MIN: Final = RECORD_BATCH_OVERHEAD - LOG_OVERHEAD
MAGIC_V2: Final = 2

NO_PRODUCER_ID: Final = -1
NO_PRODUCER_EPOCH: Final = -1
NO_SEQUENCE: Final = -1
NO_PARTITION_LEADER_EPOCH: Final = -1

COMPRESSION_CODEC_MASK: Final = 0x07
TIMESTAMP_TYPE_MASK: Final = 0x08
TRANSACTIONAL_FLAG_MASK: Final = 0x10
CONTROL_FLAG_MASK: Final = 0x20
DELETE_HORIZON_FLAG_MASK: Final = 0x40

MAX_RECORD_OVERHEAD: Final = 21
"""Upper bound of a record's fixed fields: length 5 + attributes 1 + timestamp 10 + offset 5."""

_HEADER = struct.Struct(">qiibIhiqqqhii")
_tuple_new = tuple.__new__
_INT64 = struct.Struct(">q")
_INT32 = struct.Struct(">i")
_UINT32 = struct.Struct(">I")
_INT16 = struct.Struct(">h")
_CONTROL_KEY = struct.Struct(">hh")
_END_TXN_VALUE = struct.Struct(">hi")


class TimestampType(IntEnum):
    """What a batch's timestamps mean (attributes bit 3)."""

    NO_TIMESTAMP_TYPE = -1
    CREATE_TIME = 0
    LOG_APPEND_TIME = 1

    @property
    def kafka_name(self) -> str:
        """Kafka's display name: ``NoTimestampType``, ``CreateTime`` or ``LogAppendTime``."""
        return _TIMESTAMP_TYPE_NAMES[self]


_TIMESTAMP_TYPE_NAMES = {
    TimestampType.NO_TIMESTAMP_TYPE: "NoTimestampType",
    TimestampType.CREATE_TIME: "CreateTime",
    TimestampType.LOG_APPEND_TIME: "LogAppendTime",
}


def increment_sequence(sequence: int, increment: int) -> int:
    """``sequence + increment`` wrapping past int32 max to 0, as Kafka's producer sequences do."""
    if sequence > INT32_MAX - increment:
        return increment - (INT32_MAX - sequence) - 1
    return sequence + increment


# --- value types ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Header:
    """A record header: a UTF-8 key and an optional value."""

    key: str
    value: bytes | None


@fast_frozen_init
@dataclass(frozen=True, slots=True)
class Record:
    """One decoded record with its absolute offset.

    ``timestamp`` is the batch's maxTimestamp for LogAppendTime batches (as Kafka's reader
    reports it), else firstTimestamp + the record's delta. ``sequence`` is baseSequence + offset
    delta (wrapping) when the batch has one, else -1. ``size_in_bytes`` is the encoded size of
    the record including its length varint (what ``dump-log`` prints).
    """

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...] = ()
    sequence: int = NO_SEQUENCE
    size_in_bytes: int = 0


class BatchHeader(NamedTuple):
    """The 61-byte header of a v2 batch, parsed without touching the records.

    A named tuple rather than a frozen dataclass: every batch appended or read parses one, and
    a tuple is built from the unpacked fields at once (a frozen dataclass sets its 13 fields
    one ``object.__setattr__`` at a time, most of the parse's cost)."""

    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    first_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int

    @classmethod
    def parse(cls, buf: bytes | bytearray | memoryview, pos: int = 0) -> BatchHeader:
        """Parse the header at ``pos``; CorruptRecordError when fewer than 61 bytes remain, the
        magic is not 2, or batchLength is smaller than the rest of the header (49)."""
        available = len(buf) - pos
        if available < RECORD_BATCH_OVERHEAD:
            raise CorruptRecordError(
                f"record batch at position {pos} is truncated: {available} bytes left, "
                f"its header alone takes {RECORD_BATCH_OVERHEAD}"
            )
        # tuple.__new__ as ``_make`` calls it (the unpack always has the 13 fields it checks)
        header = _tuple_new(cls, _HEADER.unpack_from(buf, pos))
        if header.magic != MAGIC_V2:
            raise CorruptRecordError(
                f"record batch at position {pos} has magic {header.magic}, expected {MAGIC_V2}"
            )
        if header.batch_length < BATCH_LENGTH_MIN:
            raise CorruptRecordError(
                f"record batch at position {pos} has batch length {header.batch_length}, "
                f"smaller than its header ({BATCH_LENGTH_MIN})"
            )
        return header

    @property
    def size_in_bytes(self) -> int:
        """Whole batch size: LOG_OVERHEAD + batchLength."""
        return LOG_OVERHEAD + self.batch_length

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def compression(self) -> CompressionType:
        """The codec; CorruptRecordError for ids 5-7, which no Kafka version writes."""
        return CompressionType.from_id(self.attributes & COMPRESSION_CODEC_MASK)

    @property
    def timestamp_type(self) -> TimestampType:
        if self.attributes & TIMESTAMP_TYPE_MASK:
            return TimestampType.LOG_APPEND_TIME
        return TimestampType.CREATE_TIME

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_FLAG_MASK)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_FLAG_MASK)

    @property
    def has_producer_id(self) -> bool:
        return self.producer_id > NO_PRODUCER_ID

    @property
    def last_sequence(self) -> int:
        """baseSequence + lastOffsetDelta (wrapping at int32 max), or -1 without a sequence."""
        if self.base_sequence == NO_SEQUENCE:
            return NO_SEQUENCE
        return increment_sequence(self.base_sequence, self.last_offset_delta)


# --- validation and in-place rewrites ---------------------------------------------------------


def peek_magic(buf: bytes | bytearray | memoryview, pos: int = 0) -> int:
    """The magic byte of the entry at ``pos``. It sits at byte 16 in every format (v0, v1, v2),
    which is how a reader of a mixed log picks the parser; CorruptRecordError when truncated."""
    if len(buf) - pos <= MAGIC_OFFSET:
        raise CorruptRecordError(f"entry at position {pos} is too short to hold a magic byte")
    magic = buf[pos + MAGIC_OFFSET]
    # Signed int8 on the wire.
    return magic - 256 if magic > 127 else magic


def compute_crc(buf: bytes | bytearray | memoryview, pos: int, size: int) -> int:
    """CRC-32C of bytes [pos + 21, pos + size): what the batch at ``pos`` must store."""
    if type(buf) is memoryview:  # the append path's case: slice it, no second view to release
        return _crc(buf[pos + ATTRIBUTES_OFFSET : pos + size])
    if type(buf) is bytes:  # a read's: immutable, nothing to release for
        return _crc(memoryview(buf)[pos + ATTRIBUTES_OFFSET : pos + size])
    with memoryview(buf) as view:
        return _crc(view[pos + ATTRIBUTES_OFFSET : pos + size])


def validate_batch(
    buf: bytes | bytearray | memoryview, pos: int = 0, available: int | None = None
) -> BatchHeader:
    """Check the batch at ``pos`` fits in ``available`` bytes (default: the rest of ``buf``) and
    that its CRC matches its content; return its header or raise CorruptRecordError."""
    limit = len(buf) - pos if available is None else min(available, len(buf) - pos)
    header = BatchHeader.parse(buf, pos)
    size = LOG_OVERHEAD + header.batch_length  # header.size_in_bytes
    if size > limit:
        raise CorruptRecordError(
            f"record batch at position {pos} declares {size} bytes but only {limit} are available"
        )
    actual = compute_crc(buf, pos, size)
    if actual != header.crc:
        raise CorruptRecordError(
            f"record batch at position {pos} has CRC {header.crc:#010x} "
            f"but its content hashes to {actual:#010x}"
        )
    return header


def set_base_offset(buf: bytearray, pos: int, offset: int) -> None:
    """Rewrite baseOffset in place (outside the CRC, so no recompute): the leader's offset
    assignment."""
    _INT64.pack_into(buf, pos + BASE_OFFSET_OFFSET, offset)


def set_last_offset(buf: bytearray, pos: int, offset: int) -> None:
    """Set baseOffset so that the batch's last offset becomes ``offset`` (Kafka's
    ``setLastOffset``, used for legacy-style assignment)."""
    (delta,) = _INT32.unpack_from(buf, pos + LAST_OFFSET_DELTA_OFFSET)
    _INT64.pack_into(buf, pos + BASE_OFFSET_OFFSET, offset - delta)


def set_partition_leader_epoch(buf: bytearray, pos: int, epoch: int) -> None:
    """Stamp partitionLeaderEpoch in place (outside the CRC by design, so no recompute)."""
    _INT32.pack_into(buf, pos + PARTITION_LEADER_EPOCH_OFFSET, epoch)


def set_max_timestamp(
    buf: bytearray, pos: int, timestamp_type: TimestampType, max_timestamp: int
) -> None:
    """Kafka's ``setMaxTimestamp``: set the timestamp-type bit and maxTimestamp, then recompute
    the CRC — unless both already hold those values, in which case nothing is written.

    Like Kafka, the attributes are recomputed from the flags it knows (codec, timestamp type,
    transactional, control, delete horizon); undefined bits 7-15 are cleared.
    """
    if timestamp_type == TimestampType.NO_TIMESTAMP_TYPE:
        raise ValueError("a v2 batch needs CreateTime or LogAppendTime")
    (attributes,) = _INT16.unpack_from(buf, pos + ATTRIBUTES_OFFSET)
    (current,) = _INT64.unpack_from(buf, pos + MAX_TIMESTAMP_OFFSET)
    current_type = (
        TimestampType.LOG_APPEND_TIME
        if attributes & TIMESTAMP_TYPE_MASK
        else TimestampType.CREATE_TIME
    )
    if current_type == timestamp_type and current == max_timestamp:
        return
    kept = attributes & (
        COMPRESSION_CODEC_MASK
        | TRANSACTIONAL_FLAG_MASK
        | CONTROL_FLAG_MASK
        | DELETE_HORIZON_FLAG_MASK
    )
    if timestamp_type == TimestampType.LOG_APPEND_TIME:
        kept |= TIMESTAMP_TYPE_MASK
    _INT16.pack_into(buf, pos + ATTRIBUTES_OFFSET, kept)
    _INT64.pack_into(buf, pos + MAX_TIMESTAMP_OFFSET, max_timestamp)
    (length,) = _INT32.unpack_from(buf, pos + LENGTH_OFFSET)
    _UINT32.pack_into(buf, pos + CRC_OFFSET, compute_crc(buf, pos, LOG_OVERHEAD + length))


def set_log_append_time(buf: bytearray, pos: int, timestamp: int) -> None:
    """Mark the batch LogAppendTime with broker time ``timestamp`` (CRC recomputed)."""
    set_max_timestamp(buf, pos, TimestampType.LOG_APPEND_TIME, timestamp)


# --- encoding ---------------------------------------------------------------------------------


def _check_range(name: str, value: int, low: int, high: int) -> None:
    if not low <= value <= high:
        raise ValueError(f"{name} {value} is outside [{low}, {high}]")


def _attributes(
    compression: CompressionType,
    timestamp_type: TimestampType,
    is_transactional: bool,
    is_control: bool,
) -> int:
    if timestamp_type == TimestampType.NO_TIMESTAMP_TYPE:
        raise ValueError("a v2 batch needs CreateTime or LogAppendTime")
    attributes = int(compression) & COMPRESSION_CODEC_MASK
    if timestamp_type == TimestampType.LOG_APPEND_TIME:
        attributes |= TIMESTAMP_TYPE_MASK
    if is_transactional:
        attributes |= TRANSACTIONAL_FLAG_MASK
    if is_control:
        attributes |= CONTROL_FLAG_MASK
    return attributes


def _encode_headers(headers: Sequence[tuple[str, bytes | None]]) -> bytes:
    """headerCount varint + each header; only called for records that have headers."""
    sv = SMALL_VARINTS
    parts = [encode_varint(len(headers))]
    for hkey, hvalue in headers:
        kb = hkey.encode("utf-8")
        parts.append(sv[len(kb)] if len(kb) < SMALL_VARINT_LIMIT else encode_varint(len(kb)))
        parts.append(kb)
        if hvalue is None:
            parts.append(NULL_VARINT)
        else:
            n = len(hvalue)
            parts.append(sv[n] if n < SMALL_VARINT_LIMIT else encode_varint(n))
            parts.append(hvalue)
    return b"".join(parts)


def record_size_upper_bound(
    key: bytes | None, value: bytes | None, headers: Sequence[tuple[str, bytes | None]] = ()
) -> int:
    """An upper bound of one record's encoded size (Kafka's ``recordSizeUpperBound``): what a
    producer checks against ``batch.size`` before it appends."""
    size = MAX_RECORD_OVERHEAD + 10 + (len(key) if key else 0) + (len(value) if value else 0)
    if headers:
        size += len(_encode_headers(headers))
    return size


def _write_header(
    buf: bytearray,
    *,
    base_offset: int,
    batch_length: int,
    partition_leader_epoch: int,
    attributes: int,
    last_offset_delta: int,
    first_timestamp: int,
    max_timestamp: int,
    producer_id: int,
    producer_epoch: int,
    base_sequence: int,
    records_count: int,
) -> None:
    """Fill bytes [0, 61) of ``buf`` (the whole batch) and compute its CRC over [21, end)."""
    _HEADER.pack_into(
        buf,
        0,
        base_offset,
        batch_length,
        partition_leader_epoch,
        MAGIC_V2,
        0,
        attributes,
        last_offset_delta,
        first_timestamp,
        max_timestamp,
        producer_id,
        producer_epoch,
        base_sequence,
        records_count,
    )
    with memoryview(buf) as view:
        _UINT32.pack_into(buf, CRC_OFFSET, _crc(view[ATTRIBUTES_OFFSET:]))


class RecordBatchBuilder:
    """Accumulates records and writes one v2 batch, the way a producer fills a batch.

    Rationale for the shape of :meth:`append` (measured, 1000 records of 10 + 100 bytes,
    CPython 3.11): appending each record's pieces to a list and joining once in :meth:`build`
    beat growing a ``bytearray`` with ``+=`` by ~25% and a preallocated ``bytearray`` filled by
    slice assignment or ``struct.pack_into`` by ~45%, because a record is 9 small variable-length
    pieces and a list append is the cheapest way to keep one. Varints below 8192 come from a
    table; the record length is computed arithmetically, so no piece is copied twice before the
    final join. The header, CRC and compression are per batch.

    Invariants: offset deltas strictly increase in append order — 0, 1, 2, ... for a producer;
    with gaps when the log cleaner re-encodes the survivors of a batch (``offset_delta=`` on
    :meth:`append`, ``last_offset_delta=`` on :meth:`build`, Kafka's ``appendWithOffset`` and
    ``overrideLastOffset``); firstTimestamp is the first record's timestamp; maxTimestamp the
    largest (-1 if none). After :meth:`build` the builder is closed: :meth:`append` raises,
    :meth:`build` returns the same bytes again. Not thread-safe: one producer thread owns a
    builder.
    """

    __slots__ = (
        "_attributes",
        "_base_offset",
        "_base_sequence",
        "_built",
        "_compression",
        "_count",
        "_first_ts",
        "_last_delta",
        "_max_ts",
        "_partition_leader_epoch",
        "_parts",
        "_producer_epoch",
        "_producer_id",
        "_size",
    )

    def __init__(
        self,
        *,
        base_offset: int = 0,
        compression: CompressionType = CompressionType.NONE,
        timestamp_type: TimestampType = TimestampType.CREATE_TIME,
        producer_id: int = NO_PRODUCER_ID,
        producer_epoch: int = NO_PRODUCER_EPOCH,
        base_sequence: int = NO_SEQUENCE,
        partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
        is_transactional: bool = False,
        is_control: bool = False,
    ) -> None:
        _check_range("base_offset", base_offset, INT64_MIN, INT64_MAX)
        _check_range("producer_id", producer_id, INT64_MIN, INT64_MAX)
        _check_range("producer_epoch", producer_epoch, INT16_MIN, INT16_MAX)
        _check_range("base_sequence", base_sequence, INT32_MIN, INT32_MAX)
        _check_range("partition_leader_epoch", partition_leader_epoch, INT32_MIN, INT32_MAX)
        # CompressionType() of a member is that member (an enum call: skipped for one)
        self._compression = (
            compression if type(compression) is CompressionType else CompressionType(compression)
        )
        self._attributes = _attributes(
            self._compression, timestamp_type, is_transactional, is_control
        )
        self._base_offset = base_offset
        self._producer_id = producer_id
        self._producer_epoch = producer_epoch
        self._base_sequence = base_sequence
        self._partition_leader_epoch = partition_leader_epoch
        self._parts: list[bytes] = []
        self._count = 0
        self._last_delta = -1
        self._size = 0
        self._first_ts = NO_TIMESTAMP
        self._max_ts = NO_TIMESTAMP
        self._built: bytes | None = None

    @property
    def record_count(self) -> int:
        return self._count

    def estimated_size_in_bytes(self) -> int:
        """Batch size so far: exact for an uncompressed batch; for a compressed one the
        uncompressed size (an upper bound in practice) until :meth:`build`, then exact."""
        if self._built is not None:
            return len(self._built)
        return RECORD_BATCH_OVERHEAD + self._size

    def append(
        self,
        timestamp: int,
        key: bytes | None,
        value: bytes | None,
        headers: Sequence[tuple[str, bytes | None]] = (),
        *,
        offset_delta: int | None = None,
    ) -> int:
        """Add one record; return its offset delta. ``timestamp`` is milliseconds since the
        epoch, >= 0, or -1 (NO_TIMESTAMP) as Kafka allows. ``offset_delta`` defaults to the
        previous one + 1; an explicit one (the cleaner keeping original offsets) must be larger
        than the previous one."""
        if self._built is not None:
            raise RuntimeError("append to a RecordBatchBuilder after build()")
        if timestamp < 0 and timestamp != NO_TIMESTAMP:
            raise ValueError(f"invalid negative timestamp {timestamp}")
        sv = SMALL_VARINTS
        limit = SMALL_VARINT_LIMIT
        if offset_delta is None:
            delta = self._last_delta + 1
        elif self._last_delta < offset_delta <= INT32_MAX:
            delta = offset_delta
        else:
            raise ValueError(
                f"offset delta {offset_delta} does not follow {self._last_delta} within int32"
            )
        if self._count == 0:
            self._first_ts = timestamp
            ts_enc = b"\x00"
        else:
            ts_delta = timestamp - self._first_ts
            ts_enc = sv[ts_delta] if 0 <= ts_delta < limit else encode_varlong(ts_delta)
        # A branch, not max(): the builtin call costs more than the compare on this path.
        if timestamp > self._max_ts:  # noqa: PLR1730
            self._max_ts = timestamp
        od_enc = sv[delta] if delta < limit else encode_varint(delta)
        if key is None:
            key = b""
            kl_enc = NULL_VARINT
        else:
            kl_enc = sv[len(key)] if len(key) < limit else encode_varint(len(key))
        if value is None:
            value = b""
            vl_enc = NULL_VARINT
        else:
            vl_enc = sv[len(value)] if len(value) < limit else encode_varint(len(value))
        hdr = _encode_headers(headers) if headers else b"\x00"
        # attributes byte (1) + the pieces below; key/value are b"" when null.
        body = (
            1
            + len(ts_enc)
            + len(od_enc)
            + len(kl_enc)
            + len(key)
            + len(vl_enc)
            + len(value)
            + len(hdr)
        )
        size_enc = sv[body] if body < limit else encode_varint(body)
        self._parts.extend((size_enc, b"\x00", ts_enc, od_enc, kl_enc, key, vl_enc, value, hdr))
        self._size += len(size_enc) + body
        self._count += 1
        self._last_delta = delta
        return delta

    def build(self, *, last_offset_delta: int | None = None) -> bytes:
        """Write the batch: header, CRC and (if configured) the compressed record payload. An
        empty builder yields an empty batch (see :func:`encode_empty_batch`).

        ``last_offset_delta`` defaults to the last record's; a larger one keeps the offset span
        of a batch whose last records the cleaner removed (Kafka's ``overrideLastOffset``).
        """
        if self._built is not None:
            return self._built
        if last_offset_delta is None:
            last_offset_delta = max(self._last_delta, 0)
        elif not max(self._last_delta, 0) <= last_offset_delta <= INT32_MAX:
            raise ValueError(
                f"last offset delta {last_offset_delta} is below the last record's "
                f"({self._last_delta}) or outside int32"
            )
        if self._count == 0:
            self._built = encode_empty_batch(
                base_offset=self._base_offset,
                last_offset=self._base_offset + last_offset_delta,
                timestamp_type=(
                    TimestampType.LOG_APPEND_TIME
                    if self._attributes & TIMESTAMP_TYPE_MASK
                    else TimestampType.CREATE_TIME
                ),
                producer_id=self._producer_id,
                producer_epoch=self._producer_epoch,
                base_sequence=self._base_sequence,
                partition_leader_epoch=self._partition_leader_epoch,
                is_transactional=bool(self._attributes & TRANSACTIONAL_FLAG_MASK),
                is_control=bool(self._attributes & CONTROL_FLAG_MASK),
            )
            self._parts = []
            return self._built
        if self._compression == CompressionType.NONE:
            buf = bytearray(RECORD_BATCH_OVERHEAD)
            buf += b"".join(self._parts)
        else:
            buf = bytearray(RECORD_BATCH_OVERHEAD)
            buf += compress(self._compression, b"".join(self._parts))
        _write_header(
            buf,
            base_offset=self._base_offset,
            batch_length=len(buf) - LOG_OVERHEAD,
            partition_leader_epoch=self._partition_leader_epoch,
            attributes=self._attributes,
            last_offset_delta=last_offset_delta,
            first_timestamp=self._first_ts,
            max_timestamp=self._max_ts,
            producer_id=self._producer_id,
            producer_epoch=self._producer_epoch,
            base_sequence=self._base_sequence,
            records_count=self._count,
        )
        self._built = bytes(buf)
        self._parts = []
        return self._built


RecordInput = (
    tuple[int, bytes | None, bytes | None]
    | tuple[int, bytes | None, bytes | None, Sequence[tuple[str, bytes | None]]]
)
"""What :func:`encode_batch` takes per record: (timestamp, key, value[, headers])."""


def rebuild_batch(
    header: BatchHeader,
    records: Sequence[Record],
    *,
    compression: CompressionType | None = None,
) -> bytes:
    """Re-encode ``records`` as a batch that keeps ``header``'s identity.

    Kept from the header: base offset, each record's offset delta, the last offset delta (so
    a batch thinned by compaction keeps its offset range and producer sequence range),
    timestamp type (and the LogAppendTime), producer id/epoch/sequence, partition leader epoch
    and the transactional and control flags. ``compression`` replaces the codec (a topic's
    ``compression.type``); by default the header's codec is kept. Used by the log (recompress
    on append) and the cleaner (drop records).
    """
    builder = RecordBatchBuilder(
        base_offset=header.base_offset,
        compression=header.compression if compression is None else compression,
        timestamp_type=header.timestamp_type,
        producer_id=header.producer_id,
        producer_epoch=header.producer_epoch,
        base_sequence=header.base_sequence,
        partition_leader_epoch=header.partition_leader_epoch,
        is_transactional=header.is_transactional,
        is_control=header.is_control,
    )
    for r in records:
        builder.append(
            r.timestamp,
            r.key,
            r.value,
            [(h.key, h.value) for h in r.headers],
            offset_delta=r.offset - header.base_offset,
        )
    data = bytearray(builder.build(last_offset_delta=header.last_offset_delta))
    if header.timestamp_type is TimestampType.LOG_APPEND_TIME:
        set_log_append_time(data, 0, header.max_timestamp)
    return bytes(data)


def encode_batch(
    records: Iterable[RecordInput],
    *,
    base_offset: int = 0,
    compression: CompressionType = CompressionType.NONE,
    timestamp_type: TimestampType = TimestampType.CREATE_TIME,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = NO_PRODUCER_EPOCH,
    base_sequence: int = NO_SEQUENCE,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
    is_transactional: bool = False,
    is_control: bool = False,
) -> bytes:
    """One batch holding ``records`` ((timestamp, key, value) or (timestamp, key, value,
    headers) tuples); no records gives an empty batch."""
    builder = RecordBatchBuilder(
        base_offset=base_offset,
        compression=compression,
        timestamp_type=timestamp_type,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        partition_leader_epoch=partition_leader_epoch,
        is_transactional=is_transactional,
        is_control=is_control,
    )
    append = builder.append
    for record in records:
        append(*record)
    return builder.build()


def encode_empty_batch(
    *,
    base_offset: int,
    last_offset: int,
    max_timestamp: int = NO_TIMESTAMP,
    timestamp_type: TimestampType = TimestampType.CREATE_TIME,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = NO_PRODUCER_EPOCH,
    base_sequence: int = NO_SEQUENCE,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
    is_transactional: bool = False,
    is_control: bool = False,
) -> bytes:
    """A batch with no records, as Kafka's ``writeEmptyHeader`` writes it when compaction
    removes every record but the producer state must survive: 61 bytes, codec none,
    firstTimestamp -1, recordsCount 0, lastOffsetDelta = last_offset - base_offset (the batch
    keeps its offset span and so its last sequence), maxTimestamp kept from the old batch."""
    delta = last_offset - base_offset
    _check_range("last_offset - base_offset", delta, 0, INT32_MAX)
    buf = bytearray(RECORD_BATCH_OVERHEAD)
    _write_header(
        buf,
        base_offset=base_offset,
        batch_length=RECORD_BATCH_OVERHEAD - LOG_OVERHEAD,
        partition_leader_epoch=partition_leader_epoch,
        attributes=_attributes(CompressionType.NONE, timestamp_type, is_transactional, is_control),
        last_offset_delta=delta,
        first_timestamp=NO_TIMESTAMP,
        max_timestamp=max_timestamp,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        records_count=0,
    )
    return bytes(buf)


# --- decoding ---------------------------------------------------------------------------------


def iter_batches(
    buf: bytes | bytearray | memoryview, *, verify_crc: bool = False
) -> Iterator[tuple[int, BatchHeader]]:
    """Yield ``(position, header)`` for each batch of a buffer of concatenated batches (a
    produce request, a fetch response, a segment). Raises CorruptRecordError at an invalid
    header or a trailing partial batch, and with ``verify_crc`` at a CRC mismatch."""
    pos = 0
    end = len(buf)
    while pos < end:
        header = validate_batch(buf, pos) if verify_crc else BatchHeader.parse(buf, pos)
        size = header.size_in_bytes
        if pos + size > end:
            raise CorruptRecordError(
                f"record batch at position {pos} declares {size} bytes "
                f"but only {end - pos} remain (partial batch)"
            )
        yield pos, header
        pos += size


def decode_batch(
    buf: bytes | bytearray | memoryview, pos: int = 0, *, verify_crc: bool = True
) -> tuple[BatchHeader, list[Record]]:
    """Decode the batch at ``pos``: its header and its records (decompressed).

    CorruptRecordError for a bad header, size, CRC or compressed payload; InvalidRecordError
    when the records do not match the header (count, offset deltas, lengths).
    """
    if verify_crc:
        header = validate_batch(buf, pos)
    else:
        header = BatchHeader.parse(buf, pos)
        if header.size_in_bytes > len(buf) - pos:
            raise CorruptRecordError(
                f"record batch at position {pos} declares {header.size_in_bytes} bytes "
                f"but only {len(buf) - pos} are available"
            )
    count = header.records_count
    if count < 0:
        raise InvalidRecordError(f"record batch at position {pos} has record count {count}")
    if count == 0:
        # Kafka does not look past the header of an empty batch either.
        return header, []
    return header, _decode_records(record_area(buf, pos, header), header, pos)


def record_area(buf: bytes | bytearray | memoryview, pos: int, header: BatchHeader) -> bytes:
    """The records of the batch at ``pos`` (``header`` parsed there), decompressed: bytes, so
    that slices of it are the records' immutable keys and values. CorruptRecordError for a
    payload that does not decompress."""
    if type(buf) is bytes and not header.attributes & COMPRESSION_CODEC_MASK:
        # A read's bytes, uncompressed (the usual case): the slice is the copy, no view.
        return buf[pos + RECORDS_OFFSET : pos + LOG_OVERHEAD + header.batch_length]
    ctype = header.compression
    # Views released on every path, so that a caller's bytearray can grow again afterwards.
    with (
        memoryview(buf) as view,
        view[pos + RECORDS_OFFSET : pos + header.size_in_bytes] as payload,
    ):
        return decompress(ctype, payload) if ctype != CompressionType.NONE else bytes(payload)


def _decode_records(data: bytes, header: BatchHeader, batch_pos: int) -> list[Record]:
    """Parse exactly ``header.records_count`` records filling ``data``: the one record walk
    (:func:`~storage.records.columns.walk_records`, its checks and errors), then one
    ``Record`` per row built by ``map`` over the columns; the batch's LogAppendTime, producer
    sequences and headers applied per batch, not per field."""
    cols = BatchColumns()
    walk_records(data, header, batch_pos, cols)
    timestamps: Iterable[int] = cols.timestamps
    if header.attributes & TIMESTAMP_TYPE_MASK:  # LogAppendTime: the batch's time for all
        timestamps = repeat(header.max_timestamp)
    sequences: Iterable[int] = repeat(NO_SEQUENCE)
    base_seq = header.base_sequence
    if base_seq >= 0:
        base_offset = header.base_offset
        sequences = [increment_sequence(base_seq, o - base_offset) for o in cols.offsets]
    headers: Iterable[tuple[Header, ...]] = repeat(())  # no record has any (the usual case)
    if any(cols.headers):
        headers = [tuple(starmap(Header, pairs)) for pairs in cols.headers]
    rows = map(
        Record, cols.offsets, timestamps, cols.keys, cols.values, headers, sequences, cols.sizes
    )
    return list(rows)


# --- control batches --------------------------------------------------------------------------


class ControlRecordType(IntEnum):
    """The type in a control record's key; UNKNOWN for types this version does not know (a
    consumer skips them, as Kafka's does)."""

    UNKNOWN = -1
    ABORT = 0
    COMMIT = 1


CONTROL_RECORD_KEY_VERSION: Final = 0
END_TXN_MARKER_VERSION: Final = 0


@dataclass(frozen=True, slots=True)
class EndTransactionMarker:
    """The content of an abort/commit control record."""

    control_type: ControlRecordType
    coordinator_epoch: int


def control_record_key(control_type: ControlRecordType) -> bytes:
    """Key of a control record: version int16 (0) + type int16."""
    return _CONTROL_KEY.pack(CONTROL_RECORD_KEY_VERSION, control_type)


def parse_control_key(key: bytes | None) -> ControlRecordType:
    """The type in a control record key (Kafka's ``ControlRecordType.parse``): at least 4
    bytes and a non-negative version, else InvalidRecordError; unknown types are UNKNOWN."""
    if key is None or len(key) < _CONTROL_KEY.size:
        size = -1 if key is None else len(key)
        raise InvalidRecordError(f"control record key has {size} bytes, needs at least 4")
    version, type_id = _CONTROL_KEY.unpack_from(key)
    if version < 0:
        raise InvalidRecordError(f"control record key version {version} is invalid")
    try:
        return ControlRecordType(type_id)
    except ValueError:
        return ControlRecordType.UNKNOWN


def parse_end_transaction_marker(key: bytes | None, value: bytes | None) -> EndTransactionMarker:
    """Parse an abort/commit control record: value = version int16 (0) + coordinator epoch
    int32 (Kafka's ``EndTransactionMarker``)."""
    control_type = parse_control_key(key)
    if control_type not in (ControlRecordType.ABORT, ControlRecordType.COMMIT):
        raise InvalidRecordError(f"control record of type {control_type.name} is not a marker")
    if value is None or len(value) < _END_TXN_VALUE.size:
        size = -1 if value is None else len(value)
        raise InvalidRecordError(f"end transaction marker value has {size} bytes, needs 6")
    version, coordinator_epoch = _END_TXN_VALUE.unpack_from(value)
    if version < 0:
        raise InvalidRecordError(f"end transaction marker version {version} is invalid")
    return EndTransactionMarker(control_type, coordinator_epoch)


def encode_control_batch(
    control_type: ControlRecordType,
    *,
    producer_id: int,
    producer_epoch: int,
    timestamp: int,
    coordinator_epoch: int = 0,
    base_offset: int = 0,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
) -> bytes:
    """A transaction marker batch as Kafka's ``writeEndTransactionalMarker`` writes it:
    transactional + control, codec none, CreateTime, no base sequence, one record whose key is
    :func:`control_record_key` and whose value is version 0 + ``coordinator_epoch``."""
    if control_type not in (ControlRecordType.ABORT, ControlRecordType.COMMIT):
        raise ValueError(f"{control_type!r} is not an end-transaction marker")
    builder = RecordBatchBuilder(
        base_offset=base_offset,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        partition_leader_epoch=partition_leader_epoch,
        is_transactional=True,
        is_control=True,
    )
    builder.append(
        timestamp,
        control_record_key(control_type),
        _END_TXN_VALUE.pack(END_TXN_MARKER_VERSION, coordinator_epoch),
    )
    return builder.build()
