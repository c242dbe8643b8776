"""Hand-built RecordBatch v2 bytes that a careless or hostile client could send.

Every helper returns a batch whose CRC is recomputed after the damage, so that only
record-level validation can tell it from a good one. Shared by the validator's unit tests and
the hostile-client integration test.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

from kafkasim.common.errors import InvalidRecordError, InvalidTimestampError
from kafkasim.storage.records.batch import (
    ATTRIBUTES_OFFSET,
    CRC_OFFSET,
    LAST_OFFSET_DELTA_OFFSET,
    LENGTH_OFFSET,
    LOG_OVERHEAD,
    MAX_TIMESTAMP_OFFSET,
    RECORDS_COUNT_OFFSET,
    RECORDS_OFFSET,
    BatchHeader,
    RecordBatchBuilder,
    compute_crc,
)
from kafkasim.storage.records.compression import CompressionType, compress
from kafkasim.storage.records.validation import _walk
from kafkasim.storage.records.varint import encode_varint, encode_varlong

T0 = 1_700_000_000_000


def good_batch(
    n: int = 3,
    *,
    compression: CompressionType = CompressionType.NONE,
    timestamps: Sequence[int] | None = None,
    keys: Sequence[bytes | None] | None = None,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    is_transactional: bool = False,
) -> bytes:
    """A valid batch of ``n`` records ``v0``, ``v1``, ... with keys ``k0``, ... by default."""
    builder = RecordBatchBuilder(
        compression=compression,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        is_transactional=is_transactional,
    )
    for i in range(n):
        ts = timestamps[i] if timestamps is not None else T0 + i
        key = keys[i] if keys is not None else b"k%d" % i
        builder.append(ts, key, b"v%d" % i, [("h", b"x")] if i == 1 else [])
    return builder.build()


def recrc(buf: bytearray) -> bytes:
    """Fix batchLength and the CRC after an edit, as a careful attacker would."""
    struct.pack_into(">i", buf, LENGTH_OFFSET, len(buf) - LOG_OVERHEAD)
    struct.pack_into(">I", buf, CRC_OFFSET, compute_crc(buf, 0, len(buf)))
    return bytes(buf)


def with_header(
    batch: bytes,
    *,
    records_count: int | None = None,
    last_offset_delta: int | None = None,
    attributes: int | None = None,
    max_timestamp: int | None = None,
) -> bytes:
    """``batch`` with header fields replaced and the CRC recomputed."""
    buf = bytearray(batch)
    if records_count is not None:
        struct.pack_into(">i", buf, RECORDS_COUNT_OFFSET, records_count)
    if last_offset_delta is not None:
        struct.pack_into(">i", buf, LAST_OFFSET_DELTA_OFFSET, last_offset_delta)
    if attributes is not None:
        struct.pack_into(">h", buf, ATTRIBUTES_OFFSET, attributes)
    if max_timestamp is not None:
        struct.pack_into(">q", buf, MAX_TIMESTAMP_OFFSET, max_timestamp)
    return recrc(buf)


def claims(batch: bytes, count: int) -> bytes:
    """``batch`` whose header claims ``count`` records (lastOffsetDelta to match)."""
    return with_header(batch, records_count=count, last_offset_delta=count - 1)


def with_records_area(
    batch: bytes, area: bytes, compression: CompressionType = CompressionType.NONE
) -> bytes:
    """``batch`` with its record area replaced by ``area`` (compressed with ``compression``
    and the codec bits set to it), the header otherwise kept."""
    buf = bytearray(batch[:RECORDS_OFFSET])
    (attributes,) = struct.unpack_from(">h", buf, ATTRIBUTES_OFFSET)
    struct.pack_into(">h", buf, ATTRIBUTES_OFFSET, (attributes & ~0x07) | int(compression))
    payload = area if compression == CompressionType.NONE else compress(compression, area)
    return recrc(buf + payload)


def record(
    offset_delta: int,
    *,
    ts_delta: int = 0,
    key: bytes | None = b"k",
    value: bytes | None = b"v",
    length_adjust: int = 0,
    raw_headers: bytes = b"\x00",
) -> bytes:
    """One v2 record, with a declared length off by ``length_adjust`` if asked."""
    body = bytearray(b"\x00")
    body += encode_varlong(ts_delta)
    body += encode_varint(offset_delta)
    for field in (key, value):
        if field is None:
            body += encode_varint(-1)
        else:
            body += encode_varint(len(field)) + field
    body += raw_headers
    return encode_varint(len(body) + length_adjust) + bytes(body)


def batch_of(
    records: Sequence[bytes],
    *,
    last_offset_delta: int | None = None,
    compression: CompressionType = CompressionType.NONE,
    first_timestamp: int = T0,
) -> bytes:
    """A batch holding exactly the hand-built ``records`` (count and lastOffsetDelta from their
    number unless ``last_offset_delta`` is given)."""
    base = good_batch(1, timestamps=[first_timestamp])
    header = with_header(
        base,
        records_count=len(records),
        last_offset_delta=len(records) - 1 if last_offset_delta is None else last_offset_delta,
    )
    return with_records_area(header, b"".join(records), compression)


GARBAGE = bytes(range(251, 256)) * 8

CORRUPTIONS: list[tuple[str, bytes, str, str]] = [
    # (name, batch with its CRC recomputed, Kafka error name, what the message says)
    ("claims 5 of 3", claims(good_batch(3), 5), "INVALID_RECORD", "premature end"),
    ("claims 1000 of 3", claims(good_batch(3), 1000), "INVALID_RECORD", "record 3 of 1000"),
    ("claims 2^31-1 of 3", claims(good_batch(3), 2**31 - 1), "INVALID_RECORD", "premature end"),
    ("claims 2 of 3", claims(good_batch(3), 2), "INVALID_RECORD", "bytes remain"),
    ("garbage records", with_records_area(good_batch(3), GARBAGE), "INVALID_RECORD", "record 0"),
    ("codec id 5", with_header(good_batch(3), attributes=5), "CORRUPT_MESSAGE", "type id 5"),
    ("gzip flag, plain data", with_header(good_batch(3), attributes=1), "CORRUPT_MESSAGE", "gzip"),
    (
        "gzip of garbage",
        with_records_area(good_batch(3), GARBAGE, CompressionType.GZIP),
        "INVALID_RECORD",
        "gzip, 3 records",
    ),
    (
        "offset deltas 0, 2, 1",
        batch_of([record(0), record(2), record(1)]),
        "INVALID_RECORD",
        "inner record offsets",
    ),
    (
        "last offset delta 9 for 3",
        with_header(good_batch(3), last_offset_delta=9),
        "INVALID_RECORD",
        "inconsistent batch offset range",
    ),
]
"""Damage a client could send, as the leader must refuse it."""


# -- the record walks' arguments and the record-by-record walk's answer ------------------------

Checks = dict[str, int | bool]


def records_area(batch: bytes) -> bytes:
    """The (uncompressed) record area of ``batch``."""
    return bytes(batch[RECORDS_OFFSET:])


def walk_checks(batch: bytes, **overrides: int | bool) -> Checks:
    """The record walks' keyword arguments for ``batch``: dense offsets, no key rule, no
    timestamp bounds, unless overridden."""
    header = BatchHeader.parse(memoryview(batch))
    checks: Checks = {
        "last_delta": header.last_offset_delta,
        "dense": True,
        "compacted": False,
        "base_ts": header.first_timestamp,
        "low": -(1 << 70),
        "high": 1 << 70,
    }
    checks.update(overrides)
    return checks


def walk_answer(area: bytes, count: int, checks: Checks) -> int | None:
    """The record-by-record walk's largest timestamp delta, or None where it refuses."""
    try:
        return _walk(area, count, **checks)  # type: ignore[arg-type]
    except (InvalidRecordError, InvalidTimestampError):
        return None
