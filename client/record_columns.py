"""Fetched records decoded column by column (the consumer's ``poll_batch`` and its buffer).

:func:`consumed_columns` is :func:`~client.completed_fetch.consumed_entries` (the same
entries read and skipped: control batches, aborted transactions, records below the fetch
offset) with the records of each v2 batch appended straight into the lists of a
:class:`RecordColumns` (offsets, timestamps, keys, values, headers) by one walk over the
batch, without a ``Record`` or ``ConsumerRecord`` object per record. That walk is storage's
own (:func:`~storage.records.columns.walk_records`, the one ``decode_batch`` builds its
records from), so the columns keep every check of the record path (CRC, sizes, offset deltas,
a record's fields filling its declared length, the batch filled exactly) and raise the same
errors (CorruptRecordError, InvalidRecordError). Entries of message formats v0/v1 (rare: logs
written before Kafka 0.11) go through ``decode_entry`` and are appended record by record.

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
    TIMESTAMP_TYPE_MASK,
    BatchHeader,
    record_area,
    validate_batch,
)
from kafkasim.storage.records.columns import BatchColumns, HeaderPairs, walk_records
from kafkasim.storage.records.entry import LogEntryHeader, decode_entry

__all__ = ["RecordColumns", "consumed_columns", "entry_columns", "to_arrow"]

HeaderTuple = HeaderPairs  # the consumer's name for a record's (key, value) header pairs


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
    first = len(out.offsets)
    into = BatchColumns(out.offsets, out.timestamps, out.keys, out.values, out.headers)
    walk_records(record_area(data, pos, header), header, pos, into)  # sizes: not kept
    if header.base_offset < fetch_offset:  # drop what precedes the position, per batch
        skip = bisect_left(out.offsets, fetch_offset, first) - first
        if skip:
            for column in (out.offsets, out.timestamps, out.keys, out.values, out.headers):
                del column[first : first + skip]
    added = len(out.offsets) - first
    out.timestamp_types.extend([int(header.timestamp_type)] * added)
    if header.attributes & TIMESTAMP_TYPE_MASK:  # LogAppendTime: the batch's time for all
        out.timestamps[first:] = [header.max_timestamp] * added


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
