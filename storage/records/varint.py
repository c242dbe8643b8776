"""Variable-length integers as Kafka's record format v2 writes them.

Format (Protobuf's base-128 varint, "the same varint encoding as Protobuf" in Kafka's docs):

* A value is written 7 bits at a time, least significant group first; every byte except the
  last has its high bit (0x80) set.
* Signed values are zig-zag mapped first, so that small negative numbers stay short:
  ``0 -> 0, -1 -> 1, 1 -> 2, -2 -> 3, ...`` i.e. ``(n << 1) ^ (n >> 31)`` for a *varint*
  (int32, at most 5 bytes) and ``(n << 1) ^ (n >> 63)`` for a *varlong* (int64, at most 10
  bytes).
* The unsigned flavour (Kafka's ``writeUnsignedVarint``, used by flexible protocol versions)
  skips the zig-zag step.

Invariants: encoders reject values outside int32 / int64 (uint32 for the unsigned flavour) with
:class:`ValueError` — that is a caller's mistake. Decoders reject a varint that is longer than
its type allows or that runs past the end of the buffer with
:class:`~common.errors.InvalidRecordError`, as Kafka's ``ByteUtils.readVarint`` does inside a
record; they never raise ``IndexError``.

The record codec in :mod:`storage.records.batch` inlines the one-byte fast path of these
functions; the functions here are the reference and the slow path.
"""

from __future__ import annotations

from kafkasim.common.errors import InvalidRecordError
from kafkasim.common.sentinels import INT32_MAX, INT32_MIN, INT64_MAX, INT64_MIN

UINT32_MAX = (1 << 32) - 1

# Pre-encoded zig-zag varints for 0 <= n < SMALL_VARINT_LIMIT. Lengths, offset deltas and most
# timestamp deltas of a record fall in this range, so the encoder does one tuple lookup per
# field instead of a loop of shifts. 8192 values cost ~0.5 MB of small bytes objects.
SMALL_VARINT_LIMIT = 8192


def _zigzag_bytes(z: int) -> bytes:
    """The base-128 encoding of an already zig-zagged (non-negative) value."""
    out = bytearray()
    while z >= 0x80:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)


SMALL_VARINTS: tuple[bytes, ...] = tuple(_zigzag_bytes(n << 1) for n in range(SMALL_VARINT_LIMIT))
"""``SMALL_VARINTS[n]`` is the zig-zag varint encoding of ``n`` for ``0 <= n < 8192``."""

NULL_VARINT = b"\x01"
"""The zig-zag varint encoding of -1, Kafka's length of a null key, value or header value."""


def encode_varint(value: int) -> bytes:
    """Zig-zag varint encoding of an int32 (1 to 5 bytes)."""
    if 0 <= value < SMALL_VARINT_LIMIT:
        return SMALL_VARINTS[value]
    if not INT32_MIN <= value <= INT32_MAX:
        raise ValueError(f"varint {value} is outside the int32 range")
    return _zigzag_bytes((value << 1) ^ (value >> 31))


def encode_varlong(value: int) -> bytes:
    """Zig-zag varint encoding of an int64 (1 to 10 bytes)."""
    if 0 <= value < SMALL_VARINT_LIMIT:
        return SMALL_VARINTS[value]
    if not INT64_MIN <= value <= INT64_MAX:
        raise ValueError(f"varlong {value} is outside the int64 range")
    return _zigzag_bytes((value << 1) ^ (value >> 63))


def encode_unsigned_varint(value: int) -> bytes:
    """Base-128 encoding of a uint32 without zig-zag (Kafka's ``writeUnsignedVarint``)."""
    if not 0 <= value <= UINT32_MAX:
        raise ValueError(f"unsigned varint {value} is outside the uint32 range")
    return _zigzag_bytes(value)


def size_of_varint(value: int) -> int:
    """Number of bytes :func:`encode_varint` writes for ``value`` (an int32)."""
    if not INT32_MIN <= value <= INT32_MAX:
        raise ValueError(f"varint {value} is outside the int32 range")
    return _size_of_zigzagged((value << 1) ^ (value >> 31))


def size_of_varlong(value: int) -> int:
    """Number of bytes :func:`encode_varlong` writes for ``value`` (an int64)."""
    if not INT64_MIN <= value <= INT64_MAX:
        raise ValueError(f"varlong {value} is outside the int64 range")
    return _size_of_zigzagged((value << 1) ^ (value >> 63))


def size_of_unsigned_varint(value: int) -> int:
    """Number of bytes :func:`encode_unsigned_varint` writes for ``value``."""
    if not 0 <= value <= UINT32_MAX:
        raise ValueError(f"unsigned varint {value} is outside the uint32 range")
    return _size_of_zigzagged(value)


def _size_of_zigzagged(z: int) -> int:
    # One byte per started group of 7 bits; 0 still takes one byte.
    return max(1, (z.bit_length() + 6) // 7)


def _read_raw(buf: bytes | bytearray | memoryview, pos: int, max_bytes: int) -> tuple[int, int]:
    """Read one base-128 group sequence of at most ``max_bytes`` bytes starting at ``pos``."""
    raw = 0
    shift = 0
    end = len(buf)
    limit = pos + max_bytes
    while True:
        if pos >= end:
            raise InvalidRecordError("varint runs past the end of the buffer")
        if pos >= limit:
            raise InvalidRecordError(f"varint is longer than {max_bytes} bytes")
        b = buf[pos]
        pos += 1
        raw |= (b & 0x7F) << shift
        if b < 0x80:
            return raw, pos
        shift += 7


def decode_varint(buf: bytes | bytearray | memoryview, pos: int = 0) -> tuple[int, int]:
    """Decode a zig-zag int32 varint at ``pos``; return ``(value, position after it)``."""
    raw, pos = _read_raw(buf, pos, 5)
    if raw > UINT32_MAX:
        raise InvalidRecordError(f"varint value {raw:#x} does not fit in 32 bits")
    return (raw >> 1) ^ -(raw & 1), pos


def decode_varlong(buf: bytes | bytearray | memoryview, pos: int = 0) -> tuple[int, int]:
    """Decode a zig-zag int64 varint at ``pos``; return ``(value, position after it)``."""
    raw, pos = _read_raw(buf, pos, 10)
    if raw >> 64:
        raise InvalidRecordError(f"varlong value {raw:#x} does not fit in 64 bits")
    return (raw >> 1) ^ -(raw & 1), pos


def decode_unsigned_varint(buf: bytes | bytearray | memoryview, pos: int = 0) -> tuple[int, int]:
    """Decode an unsigned (not zig-zagged) uint32 varint at ``pos``."""
    raw, pos = _read_raw(buf, pos, 5)
    if raw > UINT32_MAX:
        raise InvalidRecordError(f"unsigned varint value {raw:#x} does not fit in 32 bits")
    return raw, pos


def raw_varint(data: bytes | bytearray | memoryview, pos: int, max_bytes: int) -> tuple[int, int]:
    """The still zig-zagged value of a varint (``max_bytes`` 5) or varlong (10) at ``pos``:
    the record walks' slow path, for varints of three bytes or more (they inline the rest)."""
    if max_bytes == 5:
        value, pos = decode_varint(data, pos)
    else:
        value, pos = decode_varlong(data, pos)
    return (value << 1) ^ (value >> 63), pos
