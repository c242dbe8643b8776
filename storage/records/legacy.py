"""The legacy message formats v0 (Kafka 0.8-0.9) and v1 (0.10, KIP-32 timestamps).

Byte layout of one log entry (big-endian)::

    off  field          type    notes
      0  offset         int64   absolute offset (for a v1 wrapper: of its LAST inner message)
      8  message_size   int32   bytes after this field
     12  crc            uint32  CRC32 (zlib/IEEE, not Castagnoli) of bytes [16, 12 + size)
     16  magic          int8    0 or 1
     17  attributes     int8    bits 0-2 codec; bit 3 timestamp type (v1 only, 1 = LogAppendTime)
     18  timestamp      int64   v1 only; -1 = none
      .  key_length     int32   -1 = null key
      .  key
      .  value_length   int32   -1 = null value
      .  value

Fixed overhead per message: 26 bytes in v0, 34 in v1 (12 of them are offset + size).

Compression wraps a whole message set in one *wrapper* message: key null, value = the
compressed concatenation of the inner messages (inner attributes carry no codec, nesting is
invalid). The wrapper's offset is the absolute offset of the last inner message. Inner offsets
are absolute in v0 and relative (0, 1, 2, ...) in v1, so a v1 reader computes
``absolute = wrapper_offset - last_inner_relative + inner_relative``. In v1 the wrapper's
timestamp is the largest inner timestamp (CreateTime) or the broker's time (LogAppendTime); with
LogAppendTime the inner messages report the wrapper's timestamp, as Kafka's deep iterator does.

lz4 and magic 0 (KAFKA-3160): Kafka 0.8/0.9 wrote lz4 frames whose header checksum also hashed
the frame magic. Kafka still writes v0 lz4 that way and ignores the header checksum when it
reads v0; :mod:`storage.records.compression` does the same when given ``magic=0``, so we read
both what we write and what old clients wrote. v1 and later use the correct checksum. zstd does
not exist in these formats (UNSUPPORTED_COMPRESSION_TYPE, like Kafka).

Errors: a size, magic, CRC or layout that does not hold raises
:class:`~common.errors.CorruptRecordError`; a well-formed wrapper with invalid content (nested
compression, inner magic differing from the wrapper's, a null wrapper value) raises
:class:`~common.errors.InvalidRecordError`.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

from kafkasim.common.errors import (
    CorruptRecordError,
    InvalidRecordError,
    UnsupportedCompressionTypeError,
)
from kafkasim.common.sentinels import NO_TIMESTAMP
from kafkasim.storage.records.batch import LOG_OVERHEAD, TimestampType
from kafkasim.storage.records.compression import CompressionType, compress, decompress

MAGIC_V0: Final = 0
MAGIC_V1: Final = 1

CRC_OFFSET: Final = 12
MAGIC_OFFSET: Final = 16
ATTRIBUTES_OFFSET: Final = 17
TIMESTAMP_OFFSET: Final = 18

RECORD_OVERHEAD_V0: Final = 14
"""crc 4 + magic 1 + attributes 1 + key length 4 + value length 4."""
RECORD_OVERHEAD_V1: Final = 22
"""v0 plus the 8-byte timestamp."""
LOG_OVERHEAD_V0: Final = LOG_OVERHEAD + RECORD_OVERHEAD_V0
LOG_OVERHEAD_V1: Final = LOG_OVERHEAD + RECORD_OVERHEAD_V1

COMPRESSION_CODEC_MASK: Final = 0x07
TIMESTAMP_TYPE_MASK: Final = 0x08

_ENTRY_HEAD = struct.Struct(">qiIbb")  # offset, size, crc, magic, attributes
_INT32 = struct.Struct(">i")
_INT64 = struct.Struct(">q")
_UINT32 = struct.Struct(">I")


@dataclass(frozen=True, slots=True)
class LegacyRecord:
    """One v0/v1 message as read from a buffer.

    ``timestamp`` is None in v0. ``size_in_bytes`` is the whole entry (offset and size fields
    included), ``crc`` the stored CRC32, ``compression`` the codec bits of ``attributes`` (not
    none only for a wrapper seen by a shallow read).
    """

    offset: int
    magic: int
    attributes: int
    timestamp: int | None
    timestamp_type: TimestampType
    key: bytes | None
    value: bytes | None
    crc: int
    size_in_bytes: int
    compression: CompressionType


# --- encoding ---------------------------------------------------------------------------------


def _encode_message(
    offset: int, magic: int, attributes: int, timestamp: int, kv: tuple[bytes | None, bytes | None]
) -> bytes:
    """One entry: offset, size, crc, then the CRC-covered body."""
    key, value = kv
    body = bytearray()
    body.append(magic)
    body.append(attributes)
    if magic == MAGIC_V1:
        body += _INT64.pack(timestamp)
    if key is None:
        body += _INT32.pack(-1)
    else:
        body += _INT32.pack(len(key))
        body += key
    if value is None:
        body += _INT32.pack(-1)
    else:
        body += _INT32.pack(len(value))
        body += value
    crc = zlib.crc32(body)
    return _INT64.pack(offset) + _INT32.pack(len(body) + 4) + _UINT32.pack(crc) + bytes(body)


def encode_legacy(
    records: Iterable[tuple[int | None, bytes | None, bytes | None]],
    *,
    magic: int,
    base_offset: int = 0,
    compression: CompressionType = CompressionType.NONE,
    timestamp_type: TimestampType = TimestampType.CREATE_TIME,
) -> bytes:
    """A v0 or v1 message set for ``(timestamp, key, value)`` tuples with offsets from
    ``base_offset``; compressed into one wrapper message when ``compression`` is not none.

    Timestamps are ignored in v0; in v1 None means -1 (no timestamp), anything else must be
    >= 0. An empty input gives an empty message set (b"").
    """
    if magic not in (MAGIC_V0, MAGIC_V1):
        raise ValueError(f"legacy magic must be 0 or 1, got {magic}")
    compression = CompressionType(compression)
    if compression == CompressionType.ZSTD:
        raise UnsupportedCompressionTypeError(f"zstd needs message format v2, not v{magic}")
    if timestamp_type == TimestampType.NO_TIMESTAMP_TYPE:
        raise ValueError("timestamp_type must be CreateTime or LogAppendTime")
    ts_bit = (
        TIMESTAMP_TYPE_MASK
        if magic == MAGIC_V1 and timestamp_type == TimestampType.LOG_APPEND_TIME
        else 0
    )
    items = list(records)
    if not items:
        return b""
    timestamps = []
    for timestamp, _, _ in items:
        ts = NO_TIMESTAMP if timestamp is None or magic == MAGIC_V0 else timestamp
        if ts < 0 and ts != NO_TIMESTAMP:
            raise ValueError(f"invalid negative timestamp {ts}")
        timestamps.append(ts)
    if compression == CompressionType.NONE:
        return b"".join(
            _encode_message(base_offset + i, magic, ts_bit, ts, (key, value))
            for i, (ts, (_, key, value)) in enumerate(zip(timestamps, items, strict=True))
        )
    # Inner messages: no codec bits, CreateTime bit; v1 offsets relative, v0 absolute.
    first_inner = 0 if magic == MAGIC_V1 else base_offset
    inner = b"".join(
        _encode_message(first_inner + i, magic, 0, ts, (key, value))
        for i, (ts, (_, key, value)) in enumerate(zip(timestamps, items, strict=True))
    )
    wrapper_ts = max(timestamps) if magic == MAGIC_V1 else NO_TIMESTAMP
    return _encode_message(
        base_offset + len(items) - 1,
        magic,
        int(compression) | ts_bit,
        wrapper_ts,
        (None, compress(compression, inner, magic=magic)),
    )


# --- decoding ---------------------------------------------------------------------------------


def _parse_entry(buf: memoryview, pos: int, end: int) -> tuple[LegacyRecord, int]:
    """Parse and CRC-check the entry at ``pos``; return it and the position after it."""
    if end - pos < LOG_OVERHEAD:
        raise CorruptRecordError(
            f"message at position {pos} is truncated: {end - pos} bytes, "
            f"offset and size alone take {LOG_OVERHEAD}"
        )
    (size,) = _INT32.unpack_from(buf, pos + 8)
    if size < RECORD_OVERHEAD_V0:
        raise CorruptRecordError(
            f"message at position {pos} has size {size}, below the minimum {RECORD_OVERHEAD_V0}"
        )
    entry_end = pos + LOG_OVERHEAD + size
    if entry_end > end:
        raise CorruptRecordError(
            f"message at position {pos} declares {size} bytes but only "
            f"{end - pos - LOG_OVERHEAD} remain (partial message)"
        )
    offset, _, crc, magic, attributes = _ENTRY_HEAD.unpack_from(buf, pos)
    if magic not in (MAGIC_V0, MAGIC_V1):
        raise CorruptRecordError(
            f"message at position {pos} has magic {magic}; legacy messages have 0 or 1"
        )
    overhead = RECORD_OVERHEAD_V0 if magic == MAGIC_V0 else RECORD_OVERHEAD_V1
    if size < overhead:
        raise CorruptRecordError(
            f"message at position {pos} has size {size}, below the v{magic} minimum {overhead}"
        )
    actual = zlib.crc32(buf[pos + MAGIC_OFFSET : entry_end])
    if actual != crc:
        raise CorruptRecordError(
            f"message at position {pos} has CRC {crc:#010x} "
            f"but its content hashes to {actual:#010x}"
        )
    p = pos + TIMESTAMP_OFFSET
    timestamp: int | None = None
    timestamp_type = TimestampType.NO_TIMESTAMP_TYPE
    if magic == MAGIC_V1:
        (timestamp,) = _INT64.unpack_from(buf, p)
        p += 8
        timestamp_type = (
            TimestampType.LOG_APPEND_TIME
            if attributes & TIMESTAMP_TYPE_MASK
            else TimestampType.CREATE_TIME
        )
    key, p = _read_bytes(buf, p, entry_end, pos, "key")
    if entry_end - p < 4:
        raise CorruptRecordError(f"message at position {pos} has no room for its value length")
    value, p = _read_bytes(buf, p, entry_end, pos, "value")
    if p != entry_end:
        raise CorruptRecordError(
            f"message at position {pos} has {entry_end - p} bytes after its value"
        )
    record = LegacyRecord(
        offset=offset,
        magic=magic,
        attributes=attributes,
        timestamp=timestamp,
        timestamp_type=timestamp_type,
        key=key,
        value=value,
        crc=crc,
        size_in_bytes=LOG_OVERHEAD + size,
        compression=CompressionType.from_id(attributes & COMPRESSION_CODEC_MASK),
    )
    return record, entry_end


def _read_bytes(
    buf: memoryview, p: int, entry_end: int, pos: int, what: str
) -> tuple[bytes | None, int]:
    (n,) = _INT32.unpack_from(buf, p)
    p += 4
    if n == -1:
        return None, p
    if n < 0 or p + n > entry_end:
        raise CorruptRecordError(f"message at position {pos} has invalid {what} length {n}")
    return bytes(buf[p : p + n]), p + n


def decode_legacy(buf: bytes | bytearray | memoryview, *, deep: bool = True) -> list[LegacyRecord]:
    """Decode a v0/v1 message set.

    Shallow (``deep=False``): the entries as stored, wrappers included. Deep: compressed
    wrappers are replaced by their inner messages with absolute offsets (and, for a v1
    LogAppendTime wrapper, the wrapper's timestamp). Every entry's CRC is checked.
    """
    out: list[LegacyRecord] = []
    with memoryview(buf) as view:
        pos = 0
        end = len(view)
        while pos < end:
            record, pos = _parse_entry(view, pos, end)
            if deep and record.compression != CompressionType.NONE:
                out.extend(_inner_records(record))
            else:
                out.append(record)
    return out


def _inner_records(wrapper: LegacyRecord) -> list[LegacyRecord]:
    if wrapper.value is None:
        raise InvalidRecordError(f"compressed message at offset {wrapper.offset} has a null value")
    if wrapper.compression == CompressionType.ZSTD:
        raise UnsupportedCompressionTypeError(
            f"message at offset {wrapper.offset} uses zstd, which needs message format v2"
        )
    data = decompress(wrapper.compression, wrapper.value, magic=wrapper.magic)
    inner: list[LegacyRecord] = []
    with memoryview(data) as view:
        pos = 0
        while pos < len(view):
            record, pos = _parse_entry(view, pos, len(view))
            if record.compression != CompressionType.NONE:
                raise InvalidRecordError(
                    f"compressed message at offset {wrapper.offset} nests another compressed one"
                )
            if record.magic != wrapper.magic:
                raise InvalidRecordError(
                    f"compressed message at offset {wrapper.offset} has magic {wrapper.magic} "
                    f"but an inner message has magic {record.magic}"
                )
            inner.append(record)
    if not inner or wrapper.magic == MAGIC_V0:
        return inner
    # v1: relative inner offsets; the wrapper carries the absolute offset of the last one.
    base = wrapper.offset - inner[-1].offset
    log_append = wrapper.timestamp_type == TimestampType.LOG_APPEND_TIME
    return [
        LegacyRecord(
            offset=base + r.offset,
            magic=r.magic,
            attributes=r.attributes,
            timestamp=wrapper.timestamp if log_append else r.timestamp,
            timestamp_type=wrapper.timestamp_type if log_append else r.timestamp_type,
            key=r.key,
            value=r.value,
            crc=r.crc,
            size_in_bytes=r.size_in_bytes,
            compression=r.compression,
        )
        for r in inner
    ]
