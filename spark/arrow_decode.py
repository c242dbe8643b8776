"""One fetch's records straight into an Arrow record batch of the source's schema.

The read tasks' fast path (``kafkasim.read.format=arrow``, the default). The entries of a
fetch answer are walked as a consumer walks them
(:func:`client.completed_fetch.entries_to_read`: control batches and, under read_committed,
aborted transactions' batches give no record), and only the records in ``[position, until)``
are kept, as :func:`client.record_columns.consumed_columns` with ``until`` keeps them.

A v2 batch is decoded with numpy, field by field over all its records at once
(:func:`_batch_segment`): where each record starts is found by runs of records of equal
length, each run checked at once (:func:`_record_positions`); every varint after the length
(timestamp delta, offset delta, key and value lengths) is decoded by :func:`_varints` as
whole arrays; keys and values become Arrow binary columns by gathering their bytes out of
the batch's payload with one mask (:func:`_binary_column`): no Python object per record.
The batch is checked as the consumer's walk checks it (CRC first, then every record filling
its declared length, offset deltas increasing and within the header's last offset delta,
the batch filled exactly, varints within Kafka's bounds). A batch the vectorised walk does
not take as it is (records with headers, or any failed check) is decoded by that walk
(:func:`client.record_columns.entry_columns`), which raises the exact error
(InvalidRecordError, CorruptRecordError) or gives the records, headers included; so are
v0/v1 entries (logs written before Kafka 0.11).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Final

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from kafkasim.client.completed_fetch import SKIP, entries_to_read
from kafkasim.client.record_columns import RecordColumns, entry_columns
from kafkasim.common.errors import InvalidRecordError
from kafkasim.storage.records.batch import (
    TIMESTAMP_TYPE_MASK,
    BatchHeader,
    record_area,
    validate_batch,
)
from kafkasim.storage.records.varint import decode_varint

__all__ = ["ArrowChunkDecoder"]

I64 = npt.NDArray[np.int64]
_PAD: Final = bytes(16)  # reads past a payload's end see zeros (then fail a check)
_MAX_RUNS: Final = 16
_UINT32_MAX: Final = np.uint64(0xFFFFFFFF)
_CONCAT_LIMIT: Final = 1 << 30  # binary columns have 32-bit offsets: never concatenate past it


@dataclass(frozen=True, slots=True)
class ArrowChunkDecoder:
    """Decodes fetch answers of one partition into record batches of ``schema``
    (:func:`spark.rows.arrow_schema`: Spark's Kafka columns, ``headers`` last when present)."""

    topic: str
    partition: int
    schema: pa.Schema

    def decode(
        self,
        data: bytes,
        position: int,
        until: int,
        aborted: Iterable[tuple[int, int]] | None = None,
    ) -> tuple[list[pa.RecordBatch], int]:
        """The records in ``[position, until)`` of fetched ``data`` that a consumer returns,
        as record batches (none when there are none), and the position after them."""
        batches: list[pa.RecordBatch] = []
        pending = RecordColumns(self.topic, self.partition)  # records of the fallback walk
        next_position = position
        for pos, header, action in entries_to_read(data, aborted):
            next_position = max(next_position, min(header.next_offset, until))
            if action != SKIP:
                segment = None
                if isinstance(header, BatchHeader) and not header.is_control:
                    segment = self._batch_segment(data, pos, header, position, until)
                if segment is None:
                    entry_columns(data, pos, header, action, pending, fetch_offset=position)
                    _drop_from(pending, until)
                else:
                    self._flush(pending, batches)
                    if segment.num_rows:
                        batches.append(segment)
            if header.next_offset >= until:
                break  # every later entry starts at or past the end of the range
        self._flush(pending, batches)
        return _concatenated(batches), next_position

    def _flush(self, pending: RecordColumns, batches: list[pa.RecordBatch]) -> None:
        if pending.offsets:
            batches.append(columns_batch(pending, self.schema))
            for column in _columns(pending):
                column.clear()

    def _batch_segment(
        self, data: bytes, pos: int, header: BatchHeader, position: int, until: int
    ) -> pa.RecordBatch | None:
        """The records in ``[position, until)`` of the v2 data batch at ``pos``, decoded with
        numpy; None when the vectorised walk does not take the batch (see the module doc)."""
        count = header.records_count
        if count <= 0 or header.next_offset <= position or header.base_offset >= until:
            return None  # nothing to read, or a count for the walk to reject
        validate_batch(data, pos)
        payload = record_area(data, pos, header)
        end = len(payload)
        buf = np.frombuffer(payload + _PAD, dtype=np.uint8)
        starts = _record_positions(buf, end, count)
        if starts is None:
            return None
        size, p0 = _varints(buf, starts, 5)
        if size is None or (size < 0).any():
            return None
        rec_end = p0 + size
        expected_end = np.empty_like(rec_end)
        expected_end[:-1] = starts[1:]
        expected_end[-1] = end
        if not np.array_equal(rec_end, expected_end):
            return None
        ts_delta, p1 = _varints(buf, p0 + 1, 10)  # after the attributes byte
        if ts_delta is None:
            return None
        offset_delta, p2 = _varints(buf, p1, 5)
        if offset_delta is None:
            return None
        if offset_delta[0] < 0 or offset_delta[-1] > header.last_offset_delta:
            return None
        if count > 1 and not (np.diff(offset_delta) > 0).all():
            return None
        key_len, key_start = _varints(buf, p2, 5)
        if key_len is None:
            return None
        key_end = key_start + np.maximum(key_len, 0)
        if (key_end >= rec_end).any():
            return None
        value_len, value_start = _varints(buf, key_end, 5)
        if value_len is None:
            return None
        headers_at = value_start + np.maximum(value_len, 0)
        if (headers_at >= rec_end).any() or not np.array_equal(headers_at + 1, rec_end):
            return None  # fields not filling their record: the walk names the error
        if buf[headers_at].any():
            return None  # headers: the walk decodes them
        offsets = header.base_offset + offset_delta
        lo = int(np.searchsorted(offsets, position))
        hi = int(np.searchsorted(offsets, until))
        n = hi - lo
        if header.attributes & TIMESTAMP_TYPE_MASK:  # LogAppendTime: the batch's time for all
            timestamps = np.full(n, header.max_timestamp, dtype=np.int64)
        else:
            timestamps = header.first_timestamp + ts_delta[lo:hi]
        types = self.schema.types
        arrays = [
            _binary_column(buf, key_start[lo:hi], key_len[lo:hi]),
            _binary_column(buf, value_start[lo:hi], value_len[lo:hi]),
            pa.repeat(pa.scalar(self.topic, type=types[2]), n),
            pa.repeat(pa.scalar(self.partition, type=types[3]), n),
            pa.array(offsets[lo:hi], type=types[4]),
            pa.array(timestamps, type=pa.timestamp("ms", tz="UTC")).cast(types[5]),
            pa.array(np.full(n, int(header.timestamp_type), dtype=np.int32), type=types[6]),
        ]
        if len(types) > 7:
            empty = pa.array([], type=types[7].value_type)
            arrays.append(
                pa.ListArray.from_arrays(pa.array(np.zeros(n + 1, np.int32)), empty, type=types[7])
            )
        return pa.RecordBatch.from_arrays(arrays, schema=self.schema)


def _columns(c: RecordColumns) -> tuple[list[Any], ...]:
    return (c.offsets, c.timestamps, c.timestamp_types, c.keys, c.values, c.headers)


def _drop_from(c: RecordColumns, until: int) -> None:
    """Drop the records at or above ``until`` (offsets ascend: they are at the end)."""
    cut = len(c.offsets)
    while cut and c.offsets[cut - 1] >= until:
        cut -= 1
    if cut < len(c.offsets):
        for column in _columns(c):
            del column[cut:]


def _concatenated(batches: list[pa.RecordBatch]) -> list[pa.RecordBatch]:
    if len(batches) < 2 or sum(b.nbytes for b in batches) >= _CONCAT_LIMIT:
        return batches
    return [pa.concat_batches(batches)]


def columns_batch(c: RecordColumns, schema: pa.Schema) -> pa.RecordBatch:
    """Records decoded into Python lists (the fallback walk) as a batch of ``schema``."""
    n = len(c)
    types = schema.types
    arrays = [
        pa.array(c.keys, type=types[0]),
        pa.array(c.values, type=types[1]),
        pa.repeat(pa.scalar(c.topic, type=types[2]), n),
        pa.repeat(pa.scalar(c.partition, type=types[3]), n),
        pa.array(c.offsets, type=types[4]),
        # Milliseconds as Kafka keeps them, widened to Spark's microseconds by Arrow.
        pa.array(c.timestamps, type=pa.timestamp("ms", tz="UTC")).cast(types[5]),
        pa.array(c.timestamp_types, type=types[6]),
    ]
    if len(types) > 7:
        headers = [[{"key": k, "value": v} for k, v in hs] for hs in c.headers]
        arrays.append(pa.array(headers, type=types[7]))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def _record_positions(buf: npt.NDArray[np.uint8], end: int, count: int) -> I64 | None:
    """Where each of the ``count`` records of the payload in ``buf`` starts (``end`` long),
    following their length varints; None when they do not lead exactly to the end.

    Records come in runs of equal length (their deltas' varints grow a byte at 64, 8,192,
    ...): from each record, the next ones are assumed to have its length, and the
    assumption is checked for all of them at once; the run ends at the first one that does
    not. Past ``_MAX_RUNS`` runs (lengths that keep changing), one record at a time."""
    starts = np.empty(count, dtype=np.int64)
    done = 0
    pos = 0
    runs = 0
    while done < count and runs < _MAX_RUNS:
        runs += 1
        size, body = _varints(buf, np.array([pos], dtype=np.int64), 5)
        if size is None or size[0] < 0 or pos >= end:
            return None
        stride = int(body[0] - pos + size[0])
        if stride <= 0:
            return None
        candidates = pos + stride * np.arange(min(count - done, (end - pos - 1) // stride + 1))
        sizes, bodies = _guessed_varints(buf, candidates)
        fits = bodies + sizes == candidates + stride
        run = int(np.argmin(fits)) if not fits.all() else len(fits)
        run = max(run, 1)  # the first fits: its own length
        starts[done : done + run] = candidates[:run]
        done += run
        pos += stride * run
    if done < count:
        pos = _record_positions_one_by_one(buf, starts, done, pos)
    return starts if pos == end else None


def _record_positions_one_by_one(
    buf: npt.NDArray[np.uint8], starts: I64, done: int, pos: int
) -> int:
    """:func:`_record_positions` from record ``done`` at ``pos`` on, by a plain walk; the
    position after the last record, -1 when a length cannot be read."""
    data = buf.tobytes()
    found = [0] * (len(starts) - done)
    try:
        for i in range(len(found)):
            found[i] = pos
            z = data[pos]
            if z < 0x80:
                pos += 1 + ((z >> 1) ^ -(z & 1))
            else:
                size, pos = decode_varint(data, pos)
                pos += size
            if pos < 0:
                return -1
    except (IndexError, InvalidRecordError):
        return -1
    starts[done:] = found
    return pos


def _varints(buf: npt.NDArray[np.uint8], at: I64, max_bytes: int) -> tuple[I64 | None, I64]:
    """The zigzag varints starting at each position ``at`` of ``buf`` and the positions after
    them; (None, at) when one runs past ``max_bytes`` bytes or past ``buf``, or does not fit
    in 32 (``max_bytes`` 5) or 64 bits (the walk's decode_varint/varlong name the error)."""
    if at.size and (at.min() < 0 or at.max() + max_bytes > len(buf)):
        return None, at
    raw, length, unterminated = _raw_varints(buf, at, max_bytes)
    if unterminated.any():
        return None, at
    if max_bytes == 5 and (raw > _UINT32_MAX).any():
        return None, at
    if max_bytes == 10 and ((length == 10) & (buf[at + 9] > 1)).any():
        return None, at
    return _unzigzag(raw), at + length


def _guessed_varints(buf: npt.NDArray[np.uint8], at: I64) -> tuple[I64, I64]:
    """As :func:`_varints` (32 bits) at positions that are guesses, all within ``buf``: one
    that does not end within 5 bytes reads as -1."""
    raw, length, unterminated = _raw_varints(buf, at, 5)
    raw[unterminated] = 1  # zigzag for -1
    return _unzigzag(raw), at + length


def _raw_varints(
    buf: npt.NDArray[np.uint8], at: I64, max_bytes: int
) -> tuple[npt.NDArray[np.uint64], I64, npt.NDArray[np.bool_]]:
    """Still-zigzagged values, byte lengths, and which ones go on past ``max_bytes``."""
    raw = np.zeros(at.shape, dtype=np.uint64)
    length = np.zeros(at.shape, dtype=np.int64)
    active = np.ones(at.shape, dtype=bool)
    for i in range(max_bytes):
        byte = buf[at + i]
        bits = (byte & 0x7F).astype(np.uint64) << np.uint64(7 * i)
        raw |= np.where(active, bits, np.uint64(0))
        length += active
        active &= byte >= 0x80
        if not active.any():
            break
    return raw, length, active


def _unzigzag(raw: npt.NDArray[np.uint64]) -> I64:
    signed: I64 = ((raw >> np.uint64(1)) ^ (np.uint64(0) - (raw & np.uint64(1)))).view(np.int64)
    return signed


def _binary_column(buf: npt.NDArray[np.uint8], start: I64, length: I64) -> pa.Array:
    """An Arrow ``binary`` column of the byte ranges ``[start, start + length)`` of ``buf``;
    a negative length is null (Kafka reads any negative length as null)."""
    n = len(start)
    valid = length >= 0
    sizes = np.where(valid, length, 0)
    offsets = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(sizes, out=offsets[1:])
    taken = sizes > 0
    if taken.any():
        edges = np.zeros(len(buf) + 1, dtype=np.int8)
        edges[start[taken]] = 1
        edges[start[taken] + sizes[taken]] -= 1  # ranges of one column never touch
        data = buf[np.cumsum(edges[:-1], dtype=np.int8).view(bool)]
    else:
        data = np.zeros(0, dtype=np.uint8)
    nulls = n - int(valid.sum())
    validity = pa.py_buffer(np.packbits(valid, bitorder="little")) if nulls else None
    return pa.Array.from_buffers(
        pa.binary(), n, [validity, pa.py_buffer(offsets), pa.py_buffer(data)], null_count=nulls
    )
