"""The record walk of :mod:`~storage.records.validation`, vectorised over a batch with numpy.

Kafka's leader walks every record of a batch (``LogValidator.validateRecord``); in Python
that walk is most of a broker's produce cost. Here it is done per batch instead of per record:
one short Python loop finds where each record ends (only its length varint is read), then
every other field of every record is decoded and checked at once, a numpy operation per field.

It only vouches for a batch: :func:`walk_records` returns the largest timestamp delta when
every check the record-by-record walk makes holds, and None otherwise — for a batch it cannot
judge in bulk (headers, a varint longer than the bulk decoder reads) and for any batch with a
fault, so that the record-by-record walk runs and names the record and what was wrong, with the
same message as before. Where the compiled walk (``_cwalk.c``) is built, validation uses that
instead; this is its fallback (no compiler, another interpreter, ``KAFKASIM_PURE_PYTHON=1``).
Accepting exactly what that walk accepts is what the tests check
(``tests/unit/storage/records/test_walk_vector.py`` compares the two on valid and broken
batches).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from kafkasim.common.sentinels import NO_TIMESTAMP

MIN_RECORDS = 192
"""Below this many records the record-by-record walk is faster: numpy's cost per call makes
the bulk walk about 60 µs a batch plus 0.2 µs a record, the walk 0.55 µs a record (100 B
records, measured side by side)."""

_INT64_MIN = -(1 << 63)
_INT64_MAX = (1 << 63) - 1
_PAD = 16  # zero bytes after the records: reads past the end decode, then fail the checks
# The smallest record: its length, attributes, timestamp, offset, key and value lengths and
# header count take a byte each. ``count`` comes from the batch header, so it is bounded by
# this before anything is sized by it.
_MIN_RECORD_BYTES = 7

Positions = npt.NDArray[np.int64]


def _varints(
    area: npt.NDArray[np.uint8], pos: Positions, max_bytes: int
) -> tuple[Positions, Positions] | None:
    """The zig-zagged values of the varints at ``pos`` and the positions after them; None if
    one runs longer than ``max_bytes`` (at most 8: the value stays below 2**56)."""
    value = np.zeros(len(pos), dtype=np.int64)
    after = pos.copy()
    going = np.ones(len(pos), dtype=bool)
    for k in range(max_bytes):
        byte = area[pos + k].astype(np.int64)
        value |= np.where(going, (byte & 0x7F) << (7 * k), 0)
        after += going
        going &= byte >= 0x80
        if not going.any():
            return value, after
    return None


def _unzigzag(z: Positions) -> Positions:
    return np.asarray((z >> 1) ^ -(z & 1), dtype=np.int64)


def _record_ends(data: bytes, count: int) -> Positions | None:
    """Where each record ends, found one length varint after the other (one- and two-byte
    lengths only); None when a length is not positive, runs past the area, or is longer."""
    end = len(data)
    ends = [0] * count
    pos = 0
    try:
        for index in range(count):
            z = data[pos]
            if z < 0x80:
                pos += 1
            elif data[pos + 1] < 0x80:
                z = (z & 0x7F) | (data[pos + 1] << 7)
                pos += 2
            else:
                return None
            length = (z >> 1) ^ -(z & 1)
            if length <= 0:
                return None
            pos += length
            ends[index] = pos
    except IndexError:
        return None
    return np.array(ends, dtype=np.int64) if pos == end else None


def walk_records(
    data: bytes,
    count: int,
    *,
    last_delta: int,
    dense: bool,
    compacted: bool,
    base_ts: int,
    low: int,
    high: int,
) -> int | None:
    """The largest timestamp delta of ``count`` records filling ``data``, if every record
    passes the record-by-record walk's checks (same arguments); None to let that walk judge."""
    if count > len(data) // _MIN_RECORD_BYTES:
        return None  # the header claims more records than the area can hold: the walk says so
    rec_end = _record_ends(data, count)
    if rec_end is None:
        return None
    area = np.frombuffer(data + bytes(_PAD), dtype=np.uint8)
    starts = np.concatenate((np.zeros(1, dtype=np.int64), rec_end[:-1]))
    # The length varint: one byte below 0x80, else two (_record_starts read no longer ones).
    body = starts + 1 + (area[starts] >= 0x80)
    ts = _varints(area, body + 1, 8)  # after the attributes byte
    if ts is None:
        return None
    ts_delta, pos = _unzigzag(ts[0]), ts[1]
    if bool(np.any(pos > rec_end)):  # every read starts inside the area: _PAD covers the rest
        return None
    # Bounds held to int64 (numpy's); a delta has under 56 bits, so no outcome changes.
    lo = min(max(low, _INT64_MIN), _INT64_MAX)
    hi = min(max(high, _INT64_MIN), _INT64_MAX)
    unset = NO_TIMESTAMP - base_ts
    if not bool(np.all(((ts_delta >= lo) & (ts_delta <= hi)) | (ts_delta == unset))):
        return None
    offsets = _varints(area, pos, 3)
    if offsets is None:
        return None
    z, pos = offsets
    if bool(np.any(pos > rec_end)):
        return None
    if dense:
        if not np.array_equal(z, np.arange(0, 2 * count, 2, dtype=np.int64)):
            return None
    else:
        delta = _unzigzag(z)
        if int(delta[0]) <= -1 or int(delta[-1]) > last_delta:
            return None
        if count > 1 and not bool(np.all(delta[1:] > delta[:-1])):
            return None
    for field in ("key", "value"):
        sizes = _varints(area, pos, 4)
        if sizes is None:
            return None
        z, pos = sizes
        null = (z & 1).astype(bool)
        if field == "key" and compacted and bool(null.any()):
            return None
        pos = pos + np.where(null, 0, z >> 1)
        if bool(np.any(pos > rec_end)):
            return None
    if bool(np.any(area[pos] != 0)):  # a record with headers: the walk decodes them
        return None
    if not np.array_equal(pos + 1, rec_end):
        return None
    return int(ts_delta.max())
