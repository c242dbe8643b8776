"""One fetch's records straight into an Arrow record batch of the source's schema.

The read tasks' fast path (``kafkasim.read.format=arrow``, the default). The entries of a
fetch answer are walked as a consumer walks them
(:func:`client.completed_fetch.entries_to_read`: control batches and, under read_committed,
aborted transactions' batches give no record), and only the records in ``[position, until)``
are kept, as :func:`client.record_columns.consumed_columns` with ``until`` keeps them.

V2 batches are decoded with numpy, field by field over all their records at once: no Python
object per record. The uncompressed data batches that follow one another in a fetch (a
producer's, usually all of them) are decoded together, where they lie in the fetched bytes
(:meth:`ArrowChunkDecoder._decode_group`), into one record batch; a compressed batch is
decoded alone from its decompressed records (:meth:`ArrowChunkDecoder._batch_segment`).

The records' fields (where each starts, its deltas, its key's and value's place) are found
in one pass in C where the compiled extension is built (``_cwalk.plain_fields``, bounded
reads: the fetched bytes are read in place), else with numpy as follows (on a copy padded
past the end, for its unbounded reads); both give the same answers (tested side by side).
The profile that asked for it (py-spy on Spark's Python workers during ``count()``): the
numpy varint passes and the padded copy were half the decoding; in process, a 4 MiB fetch
of 100-byte records went from 279 to 134 ns a record.

With numpy, where each record starts is found by runs of records of equal length, each
payload's run checked at once (a record is in it when its length varint is the same bytes) and all
payloads in the same numpy pass (:func:`_record_positions`); every varint after the length
(timestamp delta, offset delta, key and value lengths) is decoded by :func:`_varints` as
whole arrays (those of one or two bytes from one two-byte gather); keys and values become
Arrow binary columns (:func:`_binary_column`): of one length, cut out of the fetched bytes
by Arrow in one copy, else gathered with one mask. The batches are checked as the consumer's
walk checks them (CRC first, then every record filling its declared length, offset deltas
increasing and within the header's last offset delta, the batch filled exactly, varints
within Kafka's bounds). Batches the vectorised walk does not take as they are (records with
headers, or any failed check) are decoded one by one, and a batch it still does not take by
the consumer's walk (:func:`client.record_columns.entry_columns`), which raises the exact
error (InvalidRecordError, CorruptRecordError) or gives the records, headers included; so
are v0/v1 entries (logs written before Kafka 0.11).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Final

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from kafkasim.client.completed_fetch import READ, SKIP, entries_to_read
from kafkasim.client.record_columns import RecordColumns, entry_columns
from kafkasim.common.errors import InvalidRecordError
from kafkasim.storage.records.batch import (
    RECORDS_OFFSET,
    TIMESTAMP_TYPE_MASK,
    BatchHeader,
    record_area,
    validate_batch,
)
from kafkasim.storage.records.compiled import compiled
from kafkasim.storage.records.compression import CompressionType
from kafkasim.storage.records.entry import LogEntryHeader
from kafkasim.storage.records.varint import decode_varint

__all__ = ["ArrowChunkDecoder"]

I64 = npt.NDArray[np.int64]
_PAD: Final = bytes(16)  # reads past a payload's end see zeros (then fail a check)
_MAX_RUNS: Final = 16
# Records checked per payload in the first round of the run walk (varint deltas grow a byte at
# 64), and how much more each round after it checks.
_FIRST_WINDOW: Final = 64
# The bytes of a varint of each length (1 to 5) in an eight-byte window.
_VARINT_MASKS: Final = np.array([0] + [(1 << 8 * n) - 1 for n in range(1, 6)], dtype=np.uint64)
_WINDOW_GROWTH: Final = 8
_UINT32_MAX: Final = np.uint64(0xFFFFFFFF)
_CONCAT_LIMIT: Final = 1 << 30  # binary columns have 32-bit offsets: never concatenate past it
_COMPILED_FIELDS = compiled("plain_fields")  # None: numpy decodes the fields (_plain_fields)


@dataclass(slots=True)
class _Fetch:
    """One fetch answer being decoded: its bytes (``buf``: padded, made once when needed),
    the range kept, the records of the fallback walk and the batches so far."""

    data: bytes
    position: int
    until: int
    pending: RecordColumns
    batches: list[pa.RecordBatch] = field(default_factory=list)
    buf: npt.NDArray[np.uint8] | None = None


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
        fetch = _Fetch(data, position, until, RecordColumns(self.topic, self.partition))
        group: list[tuple[int, BatchHeader]] = []  # consecutive plain batches to decode
        next_position = position
        for pos, header, action in entries_to_read(data, aborted):
            next_position = max(next_position, min(header.next_offset, until))
            if action != SKIP:
                if _plain(header, position, until) and len(data) < _CONCAT_LIMIT:
                    assert isinstance(header, BatchHeader)
                    validate_batch(data, pos)
                    self._flush(fetch.pending, fetch.batches)
                    group.append((pos, header))
                else:
                    self._decode_group(fetch, group)
                    group = []
                    self._decode_entry(fetch, pos, header, action)
            if header.next_offset >= until:
                break  # every later entry starts at or past the end of the range
        self._decode_group(fetch, group)
        self._flush(fetch.pending, fetch.batches)
        return _concatenated(fetch.batches), next_position

    def _decode_group(self, fetch: _Fetch, group: list[tuple[int, BatchHeader]]) -> None:
        """Consecutive plain batches (CRC checked) decoded at once, in place in the fetched
        bytes; one batch at a time when that does not take them."""
        if not group:
            return
        if fetch.buf is None:
            fetch.buf = _buffer(fetch.data)
        spans = [
            (pos + RECORDS_OFFSET, pos + header.size_in_bytes, header) for pos, header in group
        ]
        segment = self._records_batch(fetch.buf, spans, fetch.position, fetch.until)
        if segment is None:
            for pos, header in group:
                self._decode_entry(fetch, pos, header, READ)
        elif segment.num_rows:
            fetch.batches.append(segment)

    def _decode_entry(self, fetch: _Fetch, pos: int, header: LogEntryHeader, action: int) -> None:
        """One entry: a v2 data batch by numpy when it takes it, else by the column walk."""
        segment = None
        if isinstance(header, BatchHeader) and not header.is_control:
            segment = self._batch_segment(fetch.data, pos, header, fetch.position, fetch.until)
        if segment is None:
            entry_columns(
                fetch.data, pos, header, action, fetch.pending, fetch_offset=fetch.position
            )
            _drop_from(fetch.pending, fetch.until)
        else:
            self._flush(fetch.pending, fetch.batches)
            if segment.num_rows:
                fetch.batches.append(segment)

    def _flush(self, pending: RecordColumns, batches: list[pa.RecordBatch]) -> None:
        if pending.offsets:
            batches.append(columns_batch(pending, self.schema))
            for column in _columns(pending):
                column.clear()

    def _batch_segment(
        self, data: bytes, pos: int, header: BatchHeader, position: int, until: int
    ) -> pa.RecordBatch | None:
        """The records in ``[position, until)`` of the v2 data batch at ``pos`` (any
        compression), decoded with numpy; None when the vectorised walk does not take the
        batch (see the module doc)."""
        count = header.records_count
        if count <= 0 or header.next_offset <= position or header.base_offset >= until:
            return None  # nothing to read, or a count for the walk to reject
        validate_batch(data, pos)
        payload = record_area(data, pos, header)
        return self._records_batch(_buffer(payload), [(0, len(payload), header)], position, until)

    def _records_batch(
        self,
        buf: npt.NDArray[np.uint8],
        spans: list[tuple[int, int, BatchHeader]],
        position: int,
        until: int,
    ) -> pa.RecordBatch | None:
        """The records in ``[position, until)`` of batches whose records lie in ``buf`` at
        ``[begin, end)`` of each span (``buf``: from :func:`_buffer`); None when the
        vectorised walk does not take one of them."""
        counts = np.array([header.records_count for _, _, header in spans], dtype=np.int64)
        payload_ends = np.array([end for _, end, _ in spans], dtype=np.int64)
        begins = np.array([begin for begin, _, _ in spans], dtype=np.int64)
        fields = _plain_fields(buf, begins, payload_ends, counts)
        if fields is None:
            return None
        last = np.cumsum(counts) - 1  # each batch's last record
        first = last - counts + 1
        ts_delta, offset_delta, key_start, key_len, value_start, value_len = fields
        last_deltas = np.array([h.last_offset_delta for _, _, h in spans], dtype=np.int64)
        if (offset_delta[first] < 0).any() or (offset_delta[last] > last_deltas).any():
            return None
        rising = np.diff(offset_delta) > 0
        rising[last[:-1]] = True  # a batch's first delta follows the previous batch's last
        if not rising.all():
            return None
        headers = [h for _, _, h in spans]
        batch_of = np.repeat(np.arange(len(spans)), counts) if len(spans) > 1 else None
        offsets = _per_record([h.base_offset for h in headers], batch_of, offset_delta.size)
        offsets += offset_delta
        timestamps = _per_record([h.first_timestamp for h in headers], batch_of, offsets.size)
        timestamps += ts_delta
        if any(h.attributes & TIMESTAMP_TYPE_MASK for h in headers):  # LogAppendTime
            log_append = _per_record(
                [h.attributes & TIMESTAMP_TYPE_MASK for h in headers], batch_of, offsets.size
            )
            max_timestamps = _per_record([h.max_timestamp for h in headers], batch_of, offsets.size)
            timestamps = np.where(log_append != 0, max_timestamps, timestamps)
        kinds = {int(h.timestamp_type) for h in headers}
        types = None
        if len(kinds) > 1:
            types = _per_record([int(h.timestamp_type) for h in headers], batch_of, offsets.size)
        keep = (offsets >= position) & (offsets < until)
        if not keep.all():
            offsets, timestamps = offsets[keep], timestamps[keep]
            types = None if types is None else types[keep]
            key_start, key_len = key_start[keep], key_len[keep]
            value_start, value_len = value_start[keep], value_len[keep]
        n = len(offsets)
        schema_types = self.schema.types
        arrays = [
            _binary_column(buf, key_start, key_len),
            _binary_column(buf, value_start, value_len),
            pa.repeat(pa.scalar(self.topic, type=schema_types[2]), n),
            pa.repeat(pa.scalar(self.partition, type=schema_types[3]), n),
            pa.array(offsets, type=schema_types[4]),
            pa.array(timestamps, type=pa.timestamp("ms", tz="UTC")).cast(schema_types[5]),
            pa.repeat(pa.scalar(kinds.pop(), type=schema_types[6]), n)
            if types is None
            else pa.array(types.astype(np.int32), type=schema_types[6]),
        ]
        if len(schema_types) > 7:
            empty = pa.array([], type=schema_types[7].value_type)
            arrays.append(
                pa.ListArray.from_arrays(
                    pa.array(np.zeros(n + 1, np.int32)), empty, type=schema_types[7]
                )
            )
        return pa.RecordBatch.from_arrays(arrays, schema=self.schema)


def _plain(header: LogEntryHeader, position: int, until: int) -> bool:
    """A v2 data batch, uncompressed, with records in ``[position, until)``: decoded in place
    in the fetched bytes, with its neighbours of the same kind."""
    return (
        isinstance(header, BatchHeader)
        and not header.is_control
        and header.compression == CompressionType.NONE
        and header.records_count > 0
        and header.next_offset > position
        and header.base_offset < until
    )


def _buffer(data: bytes) -> npt.NDArray[np.uint8]:
    """``data`` as the vectorised walk reads it: in place where the compiled walk decodes
    (its reads are bounded), else a copy padded past the end (:func:`_record_positions` and
    :func:`_varints` read a few bytes past a record without bounds checks)."""
    if _COMPILED_FIELDS is not None:
        return np.frombuffer(data, dtype=np.uint8)
    return np.frombuffer(data + _PAD, dtype=np.uint8)


def _plain_fields(buf: npt.NDArray[np.uint8], begins: I64, ends: I64, counts: I64) -> Fields | None:
    """The fields of the records of the payloads at ``[begins[j], ends[j])`` of ``buf``
    (``counts[j]`` records each): timestamp deltas, offset deltas, key starts and lengths,
    value starts and lengths; None when a record has headers or does not decode (the walk
    names the error). Compiled (``_cwalk.plain_fields``, one pass in C) where it is built,
    else with numpy (:func:`_record_positions`, then :func:`_record_fields`): the same
    answers (tests/unit/spark/test_arrow_decode.py compares them)."""
    compiled = _COMPILED_FIELDS
    if compiled is not None:
        out = np.empty((6, int(counts.sum())), dtype=np.int64)
        if not compiled(buf, begins, ends, counts, out):
            return None
        return out[0], out[1], out[2], out[3], out[4], out[5]
    positions = _record_positions(buf, begins, ends, counts)
    if positions is None:
        return None
    starts, bodies = positions
    record_ends = np.empty_like(starts)
    record_ends[:-1] = starts[1:]
    record_ends[np.cumsum(counts) - 1] = ends
    return _record_fields(buf, bodies, record_ends)


def _per_record(values: list[int], batch_of: I64 | None, n: int) -> I64:
    """A per-batch value for each record (``batch_of``: each record's batch; None: one batch)."""
    if batch_of is None:
        return np.full(n, values[0], dtype=np.int64)
    out: I64 = np.array(values, dtype=np.int64)[batch_of]
    return out


Fields = tuple[I64, I64, I64, I64, I64, I64]


def _record_fields(buf: npt.NDArray[np.uint8], p0: I64, rec_end: I64) -> Fields | None:
    """Timestamp delta, offset delta, key start and length, value start and length of the
    records whose bodies (after their length) span ``[p0, rec_end)``, without headers; None
    when their fields do not fill them exactly (the walk names the error) or one has headers
    (the walk decodes them)."""
    ts_delta, p1 = _varints(buf, p0 + 1, 10)  # after the attributes byte
    if ts_delta is None:
        return None
    offset_delta, p2 = _varints(buf, p1, 5)
    if offset_delta is None:
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
    return ts_delta, offset_delta, key_start, key_len, value_start, value_len


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


def _record_positions(
    buf: npt.NDArray[np.uint8], begins: I64, ends: I64, counts: I64
) -> tuple[I64, I64] | None:
    """Where each record of the payloads at ``[begins[j], ends[j])`` of ``buf`` (``counts[j]``
    records each) starts, and where its body (after its length varint) starts, one array for
    all, following their length varints; None when a length is negative or does not end
    within 5 bytes, or the records of a payload do not lead exactly to its end.

    Records come in runs of equal length (their deltas' varints grow a byte at 64, 8,192,
    ...): from each payload's next record, the following ones are assumed to have its
    length, and the assumption is checked for all of them, in all payloads, at once; each
    payload's run ends at its first record that does not fit. A round checks at most a
    window of records a payload, 64 in the first (a batch's offset deltas, from 0, take a
    second byte at 64) and eight times more in each next one, so that records past a length
    change are rarely checked twice. Past ``_MAX_RUNS`` rounds (lengths that keep changing),
    one record at a time."""
    if not counts.size or len(buf) < 8 or ends.max() + 7 > len(buf) or not buf.flags.c_contiguous:
        return None  # (a padded buffer always has the 7 bytes past a payload's end)
    words = _windows(buf)
    first = np.cumsum(counts) - counts  # where each payload's records go in ``starts``
    done = np.zeros_like(counts)
    pos = begins.copy()
    found: list[tuple[I64, I64, I64, I64, I64]] = []  # each round's runs: into, at, stride, ...
    for round_ in range(_MAX_RUNS):
        todo = np.flatnonzero(done < counts)
        if not todo.size:
            break
        at = pos[todo]
        size, body = _varints(buf, at, 5)
        if size is None or (size < 0).any() or (at >= ends[todo]).any():
            return None
        length = body - at
        stride = length + size
        # Candidates: each payload's next records, assumed ``stride`` apart, within its end;
        # one is in the run when its length varint is the same bytes as the run's first one.
        many = np.minimum(counts[todo] - done[todo], (ends[todo] - at - 1) // stride + 1)
        np.minimum(many, _FIRST_WINDOW * _WINDOW_GROWTH**round_, out=many)
        seg_start = np.cumsum(many) - many
        local = np.arange(int(many.sum())) - np.repeat(seg_start, many)
        candidates = np.repeat(at, many) + np.repeat(stride, many) * local
        masks = _VARINT_MASKS[length]
        fits = (words[candidates] & np.repeat(masks, many)) == np.repeat(words[at] & masks, many)
        run = np.minimum.reduceat(np.where(fits, np.repeat(many, many), local), seg_start)
        found.append((first[todo] + done[todo], at, stride, length, run))
        done[todo] += run
        pos[todo] += stride * run
    starts = np.empty(int(counts.sum()), dtype=np.int64)
    record_bodies = np.empty_like(starts)
    if found:  # every run's records, written at once
        into, at, stride, length, run = (
            np.concatenate(column) for column in zip(*found, strict=True)
        )
        local = np.arange(int(run.sum())) - np.repeat(np.cumsum(run) - run, run)
        where = np.repeat(into, run) + local
        starts[where] = np.repeat(at, run) + np.repeat(stride, run) * local
        record_bodies[where] = starts[where] + np.repeat(length, run)
    for j in np.flatnonzero(done < counts):
        mine = slice(first[j], first[j] + counts[j])
        pos[j] = _record_positions_one_by_one(
            buf,
            starts[mine],
            record_bodies[mine],
            done=int(done[j]),
            pos=int(pos[j]),
            end=int(ends[j]),
        )
    return (starts, record_bodies) if np.array_equal(pos, ends) else None


def _windows(buf: npt.NDArray[np.uint8]) -> npt.NDArray[np.uint64]:
    """The eight bytes from each position of ``buf`` on, as little-endian integers (a view)."""
    view: npt.NDArray[np.uint64] = np.ndarray(
        (len(buf) - 7,), dtype="<u8", buffer=buf, strides=(1,)
    )
    return view


def _record_positions_one_by_one(
    buf: npt.NDArray[np.uint8], starts: I64, bodies: I64, *, done: int, pos: int, end: int
) -> int:
    """:func:`_record_positions` of one payload from its record ``done`` at ``pos`` on, by a
    plain walk up to its ``end`` (``starts`` and ``bodies``: its records'); the position after
    the last record, -1 when a length is negative or cannot be read within the payload."""
    data = buf[pos:end].tobytes()
    found = [0] * (len(starts) - done)
    found_bodies = [0] * len(found)
    at = 0
    try:
        for i in range(len(found)):
            found[i] = pos + at
            z = data[at]
            if z < 0x80:
                size, at = (z >> 1) ^ -(z & 1), at + 1
            else:
                size, at = decode_varint(data, at)
            if size < 0:
                return -1
            found_bodies[i] = pos + at
            at += size
    except (IndexError, InvalidRecordError):
        return -1
    starts[done:] = found
    bodies[done:] = found_bodies
    return pos + at


def _varints(buf: npt.NDArray[np.uint8], at: I64, max_bytes: int) -> tuple[I64 | None, I64]:
    """The zigzag varints starting at each position ``at`` of ``buf`` and the positions after
    them; (None, at) when one runs past ``max_bytes`` bytes or past ``buf``, or does not fit
    in 32 (``max_bytes`` 5) or 64 bits (the walk's decode_varint/varlong name the error)."""
    if at.size and (at.min() < 0 or at.max() + max_bytes > len(buf)):
        return None, at
    short = _short_varints(buf, at)
    if short is not None:
        return short
    raw, length, unterminated = _raw_varints(buf, at, max_bytes)
    if unterminated.any():
        return None, at
    if max_bytes == 5 and (raw > _UINT32_MAX).any():
        return None, at
    if max_bytes == 10 and ((length == 10) & (buf[at + 9] > 1)).any():
        return None, at
    return _unzigzag(raw), at + length


def _short_varints(buf: npt.NDArray[np.uint8], at: I64) -> tuple[I64, I64] | None:
    """:func:`_varints` when every one is one or two bytes long (lengths below 8,192 and
    most deltas: the usual case), from one two-byte gather per position; None when one is
    longer (or ``at`` reaches the last byte of ``buf``)."""
    if not at.size or at.max() + 2 > len(buf) or not buf.flags.c_contiguous:
        return None
    # Each position's byte and the next, little-endian: a two-byte window on ``buf``.
    pairs = np.ndarray((len(buf) - 1,), dtype="<u2", buffer=buf, strides=(1,))[at]
    continued = (pairs & 0x80) != 0
    if (continued & (pairs >= 0x8000)).any():
        return None  # a third byte
    raw = np.where(continued, (pairs & 0x7F) | ((pairs >> 1) & 0x3F80), pairs & 0x7F)
    wide = raw.astype(np.int64)
    values: I64 = (wide >> 1) ^ -(wide & 1)
    return values, at + 1 + continued


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
    """An Arrow ``binary`` column of the byte ranges ``[start, start + length)`` of ``buf``
    (ascending, never overlapping); a negative length is null (Kafka reads any negative
    length as null).

    All null: no buffer at all. All of one length (a producer's keys or values usually
    are): each range spread up to the next one's start over ``buf`` in place, then cut to
    that length by Arrow, one copy. Else: the ranges' bytes gathered with one mask."""
    n = len(start)
    valid = length >= 0
    if n and not valid.any():
        return pa.nulls(n, pa.binary())
    if n and len(buf) < _CONCAT_LIMIT and valid.all() and (length == length[0]).all():
        width = int(length[0])
        spread = np.empty(n + 1, dtype=np.int32)
        spread[:-1] = start
        spread[-1] = start[-1] + width
        wide = pa.Array.from_buffers(
            pa.binary(), n, [None, pa.py_buffer(spread), pa.py_buffer(buf)], null_count=0
        )
        cut: pa.Array = pc.binary_slice(wide, 0, width)
        return cut
    sizes = np.where(valid, length, 0)
    offsets = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(sizes, out=offsets[1:])
    taken = sizes > 0
    if taken.any():
        lo = int(start[taken][0])
        hi = int(start[taken][-1] + sizes[taken][-1])
        edges = np.zeros(hi - lo + 1, dtype=np.int8)
        edges[start[taken] - lo] = 1
        edges[start[taken] + sizes[taken] - lo] -= 1  # ranges of one column never touch
        data = buf[lo:hi][np.cumsum(edges[:-1], dtype=np.int8).view(bool)]
    else:
        data = np.zeros(0, dtype=np.uint8)
    nulls = n - int(valid.sum())
    validity = pa.py_buffer(np.packbits(valid, bitorder="little")) if nulls else None
    return pa.Array.from_buffers(
        pa.binary(), n, [validity, pa.py_buffer(offsets), pa.py_buffer(data)], null_count=nulls
    )
