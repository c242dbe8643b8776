"""The one record walk of RecordBatch v2: a batch's records parsed into columns.

:func:`walk_records` parses the (decompressed) record area of one v2 batch into the lists of
a :class:`BatchColumns` — offsets, timestamps, keys, values, headers and encoded sizes — with
no object per record. Both readers of v2 records share it: storage's
:func:`~storage.records.batch.decode_batch` (which then builds one ``Record`` per row, in one
``map`` over the columns) and the consumer's columnar decoding
(``client.record_columns``, which appends straight into the caller's columns).

Checks, as Kafka's record iterator (``DefaultRecordBatch``/``DefaultRecord.readFrom``)
enforces them: exactly ``recordsCount`` records fill the record area with no byte left over,
each record consumes exactly its declared length, offset deltas strictly increase within
``[0, lastOffsetDelta]``, header counts and sizes stay inside their record and header keys are
UTF-8. Every violation raises :class:`~common.errors.InvalidRecordError` naming the batch's
position or the record's byte; neither IndexError nor struct.error escapes. On an error the
columns hold the rows (and part of the row) read before it: callers discard them.

Rationale for the repetitive shape: this loop is the consumer's per-record cost. Every
varint's one- and two-byte cases (values below 8192: lengths, offset and timestamp deltas)
are inlined, because a function call per field doubled the decode time; longer varints go
through :func:`~storage.records.varint.raw_varint`. Reading past the area raises IndexError,
turned into InvalidRecordError once, outside the loop, instead of a bounds check per field;
slices never raise, so each record's end is checked against its declared length. The leader's
validation (``storage.records.validation``) walks the same fields with its own checks and
messages and builds nothing; the bulk walk (``storage.records.walk_vector``) does it with numpy.

Timestamps are firstTimestamp + each record's delta whatever the batch's timestamp type (a
LogAppendTime batch's readers substitute its maxTimestamp, per batch). Pure; no state.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from kafkasim.common.errors import InvalidRecordError
from kafkasim.storage.records.varint import decode_varint, raw_varint

__all__ = ["BatchColumns", "HeaderPairs", "RecordsHeader", "decode_headers", "walk_records"]

HeaderPairs = tuple[tuple[str, bytes | None], ...]
"""A record's headers as (UTF-8 key, value or None) pairs; ``()`` when it has none."""


class RecordsHeader(Protocol):
    """The fields of a batch header the walk reads (``storage.records.batch.BatchHeader``
    has them; batch.py imports this module, so it is not imported here)."""

    @property
    def base_offset(self) -> int: ...
    @property
    def first_timestamp(self) -> int: ...
    @property
    def last_offset_delta(self) -> int: ...
    @property
    def records_count(self) -> int: ...


@dataclass(slots=True)
class BatchColumns:
    """Columns :func:`walk_records` appends to, one row per record: absolute ``offsets``,
    ``timestamps`` (firstTimestamp + delta), ``keys`` and ``values`` (bytes or None),
    ``headers`` (:data:`HeaderPairs`) and ``sizes`` (each record's encoded size including its
    length varint). The lists may be a caller's own (the consumer's), passed in."""

    offsets: list[int] = field(default_factory=list)
    timestamps: list[int] = field(default_factory=list)
    keys: list[bytes | None] = field(default_factory=list)
    values: list[bytes | None] = field(default_factory=list)
    headers: list[HeaderPairs] = field(default_factory=list)
    sizes: list[int] = field(default_factory=list)


def walk_records(data: bytes, header: RecordsHeader, batch_pos: int, out: BatchColumns) -> None:
    """Append to ``out`` the ``header.records_count`` records that must fill ``data`` exactly
    (the record area of the batch at ``batch_pos``, decompressed); InvalidRecordError
    otherwise (see the module doc)."""
    base_offset = header.base_offset
    base_ts = header.first_timestamp
    last_delta = header.last_offset_delta
    count = header.records_count
    # The lists as locals, each ``.append`` called in place (CPython specialises list.append
    # at the call site; a bound method held in a local is slower).
    offsets, timestamps, keys, values = out.offsets, out.timestamps, out.keys, out.values
    headers, sizes = out.headers, out.sizes
    end = len(data)
    prev_delta = -1
    pos = 0
    read = 0
    try:
        for read in range(count):  # noqa: B007 -- reported on failure
            start = pos
            z = data[pos]  # record length
            if z < 0x80:
                pos += 1
            elif data[pos + 1] < 0x80:
                z = (z & 0x7F) | (data[pos + 1] << 7)
                pos += 2
            else:
                z, pos = raw_varint(data, pos, 5)
            size = (z >> 1) ^ -(z & 1)
            body_start = pos
            rec_end = pos + size
            if size < 0 or rec_end > end:
                raise InvalidRecordError(
                    f"record at byte {start} declares {size} bytes, {end - pos} remain"
                )
            pos += 1  # attributes: unused in v2
            z = data[pos]  # timestamp delta (varlong)
            if z < 0x80:
                pos += 1
            elif data[pos + 1] < 0x80:
                z = (z & 0x7F) | (data[pos + 1] << 7)
                pos += 2
            else:
                z, pos = raw_varint(data, pos, 10)
            timestamps.append(base_ts + ((z >> 1) ^ -(z & 1)))
            z = data[pos]  # offset delta
            if z < 0x80:
                pos += 1
            elif data[pos + 1] < 0x80:
                z = (z & 0x7F) | (data[pos + 1] << 7)
                pos += 2
            else:
                z, pos = raw_varint(data, pos, 5)
            delta = (z >> 1) ^ -(z & 1)
            if delta <= prev_delta or delta > last_delta:
                raise InvalidRecordError(
                    f"record offset delta {delta} after {prev_delta} "
                    f"(batch last offset delta {last_delta})"
                )
            prev_delta = delta
            offsets.append(base_offset + delta)
            z = data[pos]  # key
            if z < 0x80:
                pos += 1
            elif data[pos + 1] < 0x80:
                z = (z & 0x7F) | (data[pos + 1] << 7)
                pos += 2
            else:
                z, pos = raw_varint(data, pos, 5)
            if z & 1:
                keys.append(None)  # Kafka reads any negative length as null
            else:
                z >>= 1
                keys.append(data[pos : pos + z])
                pos += z
            z = data[pos]  # value
            if z < 0x80:
                pos += 1
            elif data[pos + 1] < 0x80:
                z = (z & 0x7F) | (data[pos + 1] << 7)
                pos += 2
            else:
                z, pos = raw_varint(data, pos, 5)
            if z & 1:
                values.append(None)
            else:
                z >>= 1
                values.append(data[pos : pos + z])
                pos += z
            if data[pos] == 0:  # headers
                headers.append(())
                pos += 1
            else:
                pairs, pos = decode_headers(data, pos, rec_end)
                headers.append(pairs)
            if pos != rec_end:
                raise InvalidRecordError(
                    f"record at byte {start} declares {size} bytes but its fields take "
                    f"{pos - body_start}"
                )
            sizes.append(rec_end - start)
    except IndexError:
        raise InvalidRecordError(
            f"record batch at position {batch_pos}: premature end of records "
            f"({read} of {count} read)"
        ) from None
    if pos != end:
        raise InvalidRecordError(
            f"record batch at position {batch_pos}: {end - pos} bytes remain after "
            f"its {count} records"
        )


def decode_headers(data: bytes, pos: int, rec_end: int) -> tuple[HeaderPairs, int]:
    """The headers of a record at ``pos`` (count varint, then each key and value), none of
    them running past ``rec_end``; InvalidRecordError for a bad count, size or non-UTF-8 key."""
    count, pos = decode_varint(data, pos)
    if count < 0 or count > rec_end - pos:
        raise InvalidRecordError(f"invalid number of record headers {count}")
    pairs = []
    for _ in range(count):
        n, pos = decode_varint(data, pos)
        if n < 0 or pos + n > rec_end:
            raise InvalidRecordError(f"invalid record header key size {n}")
        try:
            hkey = data[pos : pos + n].decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InvalidRecordError(f"record header key is not UTF-8: {exc}") from None
        pos += n
        n, pos = decode_varint(data, pos)
        if n >= 0:
            if pos + n > rec_end:
                raise InvalidRecordError(f"invalid record header value size {n}")
            hvalue: bytes | None = data[pos : pos + n]
            pos += n
        else:
            hvalue = None
        pairs.append((hkey, hvalue))
    return tuple(pairs), pos
