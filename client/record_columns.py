"""Fetched records decoded column by column (the consumer's ``poll_batch`` and its buffer).

:func:`consumed_columns` is :func:`~client.completed_fetch.consumed_entries` (the same
entries read and skipped: control batches, aborted transactions, records below the fetch
offset) with the records of each v2 batch appended straight into the lists of a
:class:`RecordColumns` (offsets, timestamps, keys, values, headers) by one walk over the
batch, without a ``Record`` or ``ConsumerRecord`` object per record. The walk keeps every
check of ``storage.records.batch.decode_batch`` (CRC, sizes, offset deltas, a record's fields
filling its declared length, the batch filled exactly) and raises the same errors
(CorruptRecordError, InvalidRecordError). Entries of message formats v0/v1 (rare: logs
written before Kafka 0.11) go through ``decode_entry`` and are appended record by record.

Rationale for the repetitive shape of :func:`_walk_v2`: as in the storage decoder, the
one- and two-byte cases of every varint are inlined (a call per field doubles the cost);
longer varints go through ``raw_varint``. It mirrors ``storage.records.batch._decode_records``
field by field, check by check (``tests/unit/client/test_record_columns.py`` holds the two to
the same answers); the storage one could become this walk plus a Record per row, leaving one
copy, when storage is changed next (it was another branch's during issue 19).

:func:`to_arrow` turns columns into a ``pyarrow.Table`` when pyarrow is installed.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from kafkasim.client.completed_fetch import READ, SKIP, entries_to_read
from kafkasim.common.errors import InvalidRecordError
from kafkasim.storage.records.batch import (
    RECORDS_OFFSET,
    TIMESTAMP_TYPE_MASK,
    BatchHeader,
    decode_headers,
    raw_varint,
    validate_batch,
)
from kafkasim.storage.records.compression import CompressionType, decompress
from kafkasim.storage.records.entry import LogEntryHeader, decode_entry

__all__ = ["RecordColumns", "consumed_columns", "entry_columns", "to_arrow"]

HeaderTuple = tuple[tuple[str, bytes | None], ...]


@dataclass(slots=True)
class RecordColumns:
    """Records of one partition, column by column, in offset order. ``timestamp_types``
    holds one TimestampType value per record; ``headers`` one tuple of (key, value) pairs per
    record (empty: none)."""

    topic: str
    partition: int
    offsets: list[int] = field(default_factory=list)
    timestamps: list[int] = field(default_factory=list)
    timestamp_types: list[int] = field(default_factory=list)
    keys: list[Any] = field(default_factory=list)
    values: list[Any] = field(default_factory=list)
    headers: list[HeaderTuple] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.offsets)

    def slice(self, start: int, stop: int) -> RecordColumns:
        """Records ``start`` .. ``stop - 1`` as columns of their own."""
        return RecordColumns(
            self.topic,
            self.partition,
            self.offsets[start:stop],
            self.timestamps[start:stop],
            self.timestamp_types[start:stop],
            self.keys[start:stop],
            self.values[start:stop],
            self.headers[start:stop],
        )


def consumed_columns(
    data: bytes,
    out: RecordColumns,
    *,
    fetch_offset: int,
    aborted: Iterable[tuple[int, int]] | None = None,
    until: int | None = None,
) -> int:
    """Append to ``out`` the records of fetched ``data`` a consumer returns (see the module
    doc); return the offset after the last entry of ``data`` (at least ``fetch_offset``).
    With ``until``, only records below it: decoding stops after the entry reaching it, and
    the offset returned is at most ``until``."""
    next_offset = fetch_offset
    first = len(out.offsets)
    for pos, header, action in entries_to_read(data, aborted):
        next_offset = max(next_offset, header.next_offset)
        if action != SKIP:
            entry_columns(data, pos, header, action, out, fetch_offset=fetch_offset)
        if until is not None and header.next_offset >= until:
            cut = bisect_left(out.offsets, until, first)
            if cut < len(out.offsets):
                for column in _columns(out):
                    del column[cut:]
            return max(fetch_offset, min(next_offset, until))
    return next_offset


def _columns(out: RecordColumns) -> tuple[list[Any], ...]:
    return (out.offsets, out.timestamps, out.timestamp_types, out.keys, out.values, out.headers)


def entry_columns(
    data: bytes,
    pos: int,
    header: LogEntryHeader,
    action: int,
    out: RecordColumns,
    *,
    fetch_offset: int,
) -> None:
    """Append the records at or above ``fetch_offset`` of the entry at ``pos`` to ``out``:
    a READ entry's (:func:`~client.completed_fetch.entries_to_read`); a CONTROL batch is
    decoded (checked) and gives none."""
    if isinstance(header, BatchHeader):
        if action == READ:
            _batch_columns(data, pos, header, fetch_offset, out)
        else:  # a control batch: checked as the record path checks it, never returned
            decode_entry(data, pos, header)
        return
    timestamp_type = int(header.timestamp_type)
    for record in decode_entry(data, pos, header, fetch_offset=fetch_offset):
        out.offsets.append(record.offset)
        out.timestamps.append(record.timestamp)
        out.timestamp_types.append(timestamp_type)
        out.keys.append(record.key)
        out.values.append(record.value)
        out.headers.append(())


def _batch_columns(
    data: bytes, pos: int, header: BatchHeader, fetch_offset: int, out: RecordColumns
) -> None:
    """Append the records at or above ``fetch_offset`` of the v2 batch at ``pos``."""
    validate_batch(data, pos)
    count = header.records_count
    if count < 0:
        raise InvalidRecordError(f"record batch at position {pos} has record count {count}")
    if count == 0:
        return
    with memoryview(data) as view, view[pos + RECORDS_OFFSET : pos + header.size_in_bytes] as p:
        ctype = header.compression
        payload = decompress(ctype, p) if ctype != CompressionType.NONE else bytes(p)
    first = len(out.offsets)
    _walk_v2(payload, header, pos, out)
    if header.base_offset < fetch_offset:  # drop what precedes the position, per batch
        skip = bisect_left(out.offsets, fetch_offset, first) - first
        if skip:
            for column in (out.offsets, out.timestamps, out.keys, out.values, out.headers):
                del column[first : first + skip]
    added = len(out.offsets) - first
    out.timestamp_types.extend([int(header.timestamp_type)] * added)
    if header.attributes & TIMESTAMP_TYPE_MASK:  # LogAppendTime: the batch's time for all
        out.timestamps[first:] = [header.max_timestamp] * added


def _walk_v2(data: bytes, header: BatchHeader, batch_pos: int, out: RecordColumns) -> None:
    """Parse exactly ``header.records_count`` records filling ``data`` into ``out``."""
    base_offset = header.base_offset
    base_ts = header.first_timestamp
    last_delta = header.last_offset_delta
    offsets, timestamps = out.offsets, out.timestamps
    keys, values, headers = out.keys, out.values, out.headers
    end = len(data)
    prev_delta = -1
    pos = 0
    read = 0
    try:
        for read in range(header.records_count):  # noqa: B007 -- reported on failure
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
                decoded, pos = decode_headers(data, pos, rec_end)
                headers.append(tuple((h.key, h.value) for h in decoded))
            if pos != rec_end:
                raise InvalidRecordError(
                    f"record at byte {start} declares {size} bytes but its fields take "
                    f"{pos - body_start}"
                )
    except IndexError:
        raise InvalidRecordError(
            f"record batch at position {batch_pos}: premature end of records "
            f"({read} of {header.records_count} read)"
        ) from None
    if pos != end:
        raise InvalidRecordError(
            f"record batch at position {batch_pos}: {end - pos} bytes remain after "
            f"its {header.records_count} records"
        )


def to_arrow(columns: Iterable[RecordColumns]) -> Any:
    """One ``pyarrow.Table`` of ``columns`` (topic, partition, offset, timestamp,
    timestamp_type, key, value; headers as a list of key/value structs). Keys and values
    must be bytes or None (no deserializer). ImportError naming pyarrow without it."""
    try:
        import pyarrow as pa  # noqa: PLC0415 -- optional: only this function needs it
    except ImportError as e:  # pragma: no cover -- pyarrow is in the dev environment
        raise ImportError("to_arrow needs pyarrow (pip install pyarrow)") from e
    parts = list(columns)
    header_type = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
    schema = pa.schema(
        [
            ("topic", pa.string()),
            ("partition", pa.int32()),
            ("offset", pa.int64()),
            ("timestamp", pa.int64()),
            ("timestamp_type", pa.int8()),
            ("key", pa.binary()),
            ("value", pa.binary()),
            ("headers", header_type),
        ]
    )
    batches = []
    for part in parts:
        n = len(part)
        batches.append(
            pa.RecordBatch.from_arrays(
                [
                    pa.repeat(pa.scalar(part.topic, pa.string()), n),
                    pa.repeat(pa.scalar(part.partition, pa.int32()), n),
                    pa.array(part.offsets, pa.int64()),
                    pa.array(part.timestamps, pa.int64()),
                    pa.array(part.timestamp_types, pa.int8()),
                    pa.array(part.keys, pa.binary()),
                    pa.array(part.values, pa.binary()),
                    pa.array(
                        [[{"key": k, "value": v} for k, v in hs] for hs in part.headers],
                        header_type,
                    ),
                ],
                schema=schema,
            )
        )
    return pa.Table.from_batches(batches, schema=schema)
