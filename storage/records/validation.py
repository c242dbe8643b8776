"""Record-level validation of RecordBatch v2: what Kafka's leader checks before it appends.

Kafka's leader (``UnifiedLog.analyzeAndValidateRecords`` then ``LogValidator``) walks every
record of every batch a producer sends, decompressing compressed ones, before anything is
written. A batch whose header is fine and whose CRC matches can still be undecodable: a header
claiming more records than it holds moves the log end offset by billions and leaves a batch no
consumer can read past. Three layers, each the place where Kafka does the same check:

* :func:`check_produce_records` — the produce request, per partition (Kafka's
  ``ProduceRequest.validateRecords``, produce v3+): at least one batch and, for v2 batches,
  exactly one.
* :func:`validate_batch_records` — the structure of one batch's records, which Kafka's record
  iterator (``DefaultRecordBatch``/``DefaultRecord.readFrom``) enforces as it walks: exactly
  ``recordsCount`` records filling the (decompressed) record area with no byte left over, each
  record consuming exactly its declared length, offset deltas strictly increasing within
  ``[0, lastOffsetDelta]`` (or exactly ``0..n-1`` with ``dense_offsets``), header keys UTF-8
  (our decoder's rule, so that the project's consumers can read what is stored). Pure; usable on
  any batch whose CRC the caller has checked (the leader, ``verify-log``).
* :func:`validate_leader_batch` — the leader's rules on top (``LogValidator.validateBatch`` and
  ``validateRecord``): client batches hold records, no control batch, a consistent offset range,
  a sequence with every producer id; null keys refused on compacted topics; CreateTime
  timestamps within ``message.timestamp.difference.max.ms``; no producer-set LogAppendTime; and
  the batch's maxTimestamp set to its records' largest timestamp, as Kafka's in-place path does.

Error codes, as Kafka answers them: structure, offsets, keys and client rules are INVALID_RECORD
(:class:`~common.errors.InvalidRecordError`); timestamps are INVALID_TIMESTAMP. Where Kafka has
no named error — a codec id 5-7 (``IllegalArgumentException``) or a payload that does not
decompress (``KafkaException``), both UNKNOWN_SERVER_ERROR there — we answer CORRUPT_MESSAGE
(:class:`~common.errors.CorruptRecordError`). Kafka's uncompressed path ignores the records'
offset deltas and its 3.x compressed path rebuilds a batch with wrong ones; we refuse them with
INVALID_RECORD as Kafka 2.x's compressed path does ("inner record offsets"), because the
decoder (:func:`~storage.records.batch.decode_batch`) refuses them on every read.

Cost: one pass over the records per batch, without building :class:`Record` objects: in C
(``_cwalk.c``, built by ``pip install -e``) when it is built, else in bulk with numpy
(:mod:`~storage.records.walk_vector`) from ``MIN_RECORDS`` records and record by record below.
Either vouches for a sound batch only; on any fault the record-by-record walk runs and names
the batch's position, the record (its index in the batch) and what was wrong.
``KAFKASIM_PURE_PYTHON=1`` in the environment leaves the compiled walk unused (tests of the
fallback); a build that does not load (another interpreter's) falls back the same way.
"""

from __future__ import annotations

from collections.abc import Callable

from kafkasim.common.errors import (
    CorruptRecordError,
    InvalidRecordError,
    InvalidTimestampError,
)
from kafkasim.common.sentinels import INT64_MAX, NO_TIMESTAMP
from kafkasim.storage.records.batch import (
    COMPRESSION_CODEC_MASK,
    CONTROL_FLAG_MASK,
    LENGTH_OFFSET,
    MAGIC_OFFSET,
    MAGIC_V2,
    RECORDS_OFFSET,
    TIMESTAMP_TYPE_MASK,
    BatchHeader,
    TimestampType,
    set_max_timestamp,
)
from kafkasim.storage.records.columns import decode_headers
from kafkasim.storage.records.compiled import compiled
from kafkasim.storage.records.compression import CompressionType, decompress
from kafkasim.storage.records.varint import raw_varint
from kafkasim.storage.records.walk_vector import MIN_RECORDS, walk_records

UNBOUNDED = 1 << 70
"""Farther than any int64 timestamp delta can reach: a bound that never trips."""

Walk = Callable[..., int | None]
"""A record walk: ``(data, count, *, last_delta, dense, compacted, base_ts, low, high)``; the
compiled one also takes the checks by position (``COMPILED_WALK`` is called so on appends)."""


COMPILED_WALK: Walk | None = compiled("walk_records")
"""The compiled record walk in use, or None (the numpy and Python walks then run)."""

__all__ = [
    "check_produce_records",
    "validate_batch_records",
    "validate_leader_batch",
]


def check_produce_records(records: bytes | bytearray | memoryview) -> None:
    """A produce request's records for one partition (Kafka's ``validateRecords``, v3+): empty
    is INVALID_RECORD; a v2 batch must be the only one. Other magics go on to the log, which
    answers them itself."""
    with memoryview(records) as view:
        size = len(view)
        if size == 0:
            raise InvalidRecordError(
                "Produce requests must have at least one record batch per partition "
                "(the records field is empty)"
            )
        if size <= MAGIC_OFFSET or view[MAGIC_OFFSET] != MAGIC_V2 or size < RECORDS_OFFSET:
            return
        batch_size = LENGTH_OFFSET + 4 + int.from_bytes(view[LENGTH_OFFSET : LENGTH_OFFSET + 4])
        if 0 < batch_size < size:
            raise InvalidRecordError(
                "Produce requests are only allowed to contain exactly one record batch per "
                f"partition (the first batch takes {batch_size} of {size} bytes)"
            )


def validate_batch_records(
    buf: bytes | bytearray | memoryview,
    pos: int = 0,
    header: BatchHeader | None = None,
    *,
    dense_offsets: bool = False,
    compacted: bool = False,
    timestamp_range: tuple[int, int] | None = None,
) -> int:
    """Walk every record of the v2 batch at ``pos`` (decompressing it); return its largest
    record timestamp (-1 for a batch without records).

    The one record-level check of a v2 batch: the leader's (through
    :func:`validate_leader_batch`) and that of stored data (``verify-log``, ``dump-log``,
    through :func:`~storage.records.entry.check_entry_records`, with ``dense_offsets`` off since
    compaction leaves gaps). The caller has parsed the header (pass it to save a parse) and
    checked the CRC. Raises CorruptRecordError for an unknown codec or a payload that does not
    decompress, InvalidRecordError for records that do not match the header (see the module
    docstring; an empty batch has no record area at all);
    with ``compacted``, InvalidRecordError for a null key; with ``timestamp_range`` (inclusive
    bounds), InvalidTimestampError for a CreateTime record outside it (records without a
    timestamp, -1, are exempt, as in Kafka).
    """
    if header is None:
        header = BatchHeader.parse(buf, pos)
    # Per batch, on every append: the messages' "where" is built only on a fault.
    size = header.size_in_bytes
    if size > len(buf) - pos:
        raise CorruptRecordError(
            f"{_where(pos)} declares {size} bytes but only {len(buf) - pos} are available"
        )
    count = header.records_count
    if count < 0:
        raise InvalidRecordError(f"{_where(pos)}: invalid record count {count}")
    if header.attributes & COMPRESSION_CODEC_MASK == 0:
        codec = CompressionType.NONE  # the usual batch: no codec lookup
    else:
        try:
            codec = header.compression
        except CorruptRecordError as e:
            raise CorruptRecordError(f"{_where(pos)}: {e.message}") from None
    if count == 0:
        # Kafka's record iterator stops at once, then finds any record data left over
        # ("records still remaining"); an empty batch as compaction writes it has none.
        if size != RECORDS_OFFSET:
            raise InvalidRecordError(
                f"{_where(pos)} declares 0 records but carries {size - RECORDS_OFFSET} bytes "
                "of record data"
            )
        return NO_TIMESTAMP
    base_ts = header.first_timestamp
    log_append_time = header.attributes & TIMESTAMP_TYPE_MASK != 0
    if timestamp_range is None or log_append_time:
        low, high = -UNBOUNDED, UNBOUNDED
    else:
        low, high = timestamp_range[0] - base_ts, timestamp_range[1] - base_ts
    last_delta = header.last_offset_delta
    found: int | None = None
    if codec is CompressionType.NONE and COMPILED_WALK is not None:
        # The compiled walk reads the records where they are, no copy: a slice of the
        # caller's view (the append path passes one) or of a view of its buffer, released
        # when the call returns (no ``with``: its calls cost more than a small batch's walk).
        view = buf if type(buf) is memoryview else memoryview(buf)
        # By position: the compiled walk takes its checks so without a keyword parse.
        found = COMPILED_WALK(
            view[pos + RECORDS_OFFSET : pos + size],
            count,
            last_delta,
            dense_offsets,
            compacted,
            base_ts,
            low,
            high,
        )
        del view
    if found is None:
        checks = {
            "last_delta": last_delta,
            "dense": dense_offsets,
            "compacted": compacted,
            "base_ts": base_ts,
            "low": low,
            "high": high,
        }
        found = _walk_slowly(buf, pos, size, codec=codec, count=count, checks=checks)
    return header.max_timestamp if log_append_time else max(NO_TIMESTAMP, base_ts + found)


def _where(pos: int) -> str:
    return f"record batch at position {pos}"


def _walk_slowly(
    buf: bytes | bytearray | memoryview,
    pos: int,
    size: int,
    *,
    codec: CompressionType,
    count: int,
    checks: dict[str, int | bool],
) -> int:
    """The walks other than the compiled one over uncompressed records: compressed batches
    (decompressed first), the fallbacks without a compiled walk, and any batch the compiled
    walk did not vouch for (the record-by-record walk then names the fault)."""
    with memoryview(buf) as view, view[pos + RECORDS_OFFSET : pos + size] as payload:
        if codec == CompressionType.NONE:
            data = bytes(payload)
        else:
            try:
                data = decompress(codec, payload)
            except CorruptRecordError as e:
                raise CorruptRecordError(f"{_where(pos)}: {e.message}") from None
    # Compiled, or in bulk, when it can vouch for every record; else (and for every fault, so
    # that the message names the record) one record at a time.
    walks: tuple[Walk, ...]
    if COMPILED_WALK is not None:
        walks = (_walk,) if codec == CompressionType.NONE else (COMPILED_WALK, _walk)
    elif count >= MIN_RECORDS:
        walks = (walk_records, _walk)
    else:
        walks = (_walk,)
    try:
        for walk in walks:
            found = walk(data, count, **checks)
            if found is not None:
                return found
    except (InvalidRecordError, InvalidTimestampError) as e:
        raise type(e)(f"{_where(pos)} ({codec.kafka_name}, {count} records): {e.message}") from None
    raise AssertionError("the record-by-record walk answers or raises")


def validate_leader_batch(
    batch: memoryview,
    header: BatchHeader,
    *,
    is_client: bool,
    compacted: bool,
    log_append_time: bool,
    max_timestamp_difference_ms: int,
    now_ms: int,
    position: int = 0,
) -> tuple[BatchHeader, memoryview]:
    """Kafka's LogValidator for one batch (``batch`` holds exactly it) on the leader.

    Returns the batch to append: the same one, or — for a CreateTime topic whose batch claims
    another maxTimestamp than its records' largest — a copy with maxTimestamp corrected and the
    CRC recomputed, as Kafka's in-place assignment sets it. ``position`` is the batch's place in
    the request, for messages.
    """
    if is_client:
        _check_client_batch(header, position)
    ts_range: tuple[int, int] | None = None
    limit = max_timestamp_difference_ms
    if not log_append_time and 0 <= limit < INT64_MAX:
        ts_range = (now_ms - limit, now_ms + limit)
    try:
        max_timestamp = validate_batch_records(
            batch,
            0,
            header,
            dense_offsets=is_client,
            compacted=compacted,
            timestamp_range=ts_range,
        )
    except (CorruptRecordError, InvalidRecordError, InvalidTimestampError) as e:
        message = e.message.replace(_where(0), _where(position), 1)
        if isinstance(e, InvalidTimestampError) and ts_range is not None:
            message += f" (message.timestamp.difference.max.ms={limit}, now {now_ms})"
        raise type(e)(message) from None
    has_records = header.records_count > 0
    if has_records and header.attributes & TIMESTAMP_TYPE_MASK:
        raise InvalidTimestampError(
            f"{_where(position)}: invalid timestamp type LogAppendTime; producers should not "
            "set the timestamp type to LogAppendTime"
        )
    if log_append_time or not has_records or max_timestamp == header.max_timestamp:
        return header, batch
    fixed = bytearray(batch)
    set_max_timestamp(fixed, 0, TimestampType.CREATE_TIME, max_timestamp)
    view = memoryview(fixed)
    return BatchHeader.parse(view), view


def _check_client_batch(header: BatchHeader, position: int) -> None:
    """Kafka's ``validateBatch`` for a client's v2 batch (per batch, no records read)."""
    count = header.records_count
    span = header.last_offset_delta + 1
    if (
        span == count
        and count > 0
        and not header.attributes & CONTROL_FLAG_MASK
        and (header.producer_id < 0 or header.base_sequence >= 0)
    ):
        return  # the usual batch: every check below passes
    where = _where(position)
    if span <= 0:
        raise InvalidRecordError(
            f"{where}: batch has an invalid offset range: last offset delta "
            f"{header.last_offset_delta}"
        )
    if count <= 0:
        raise InvalidRecordError(
            f"{where}: invalid reported count for record batch: {count} (a client's batch "
            "must hold at least one record)"
        )
    if span != count:
        raise InvalidRecordError(
            f"{where}: inconsistent batch offset range [0, {header.last_offset_delta}] and "
            f"count of records {count}"
        )
    if header.is_control:
        raise InvalidRecordError(f"{where}: clients are not allowed to write control records")
    if header.has_producer_id and header.base_sequence < 0:
        raise InvalidRecordError(
            f"{where}: invalid sequence number {header.base_sequence} in record batch with "
            f"producerId {header.producer_id}"
        )


def _walk(
    data: bytes,
    count: int,
    *,
    last_delta: int,
    dense: bool,
    compacted: bool,
    base_ts: int,
    low: int,
    high: int,
) -> int:
    """Check ``count`` records fill ``data`` exactly; return the largest timestamp delta.

    The decoder's loop (:func:`~storage.records.columns.walk_records`) without building
    records: one- and two-byte varints inlined, longer ones through ``raw_varint``; a read past
    the end raises IndexError, turned into "premature end" once, outside the loop. Timestamp
    deltas are compared with ``[low, high]`` (the bounds minus firstTimestamp).
    """
    end = len(data)
    pos = 0
    prev = -1
    max_delta = -UNBOUNDED
    index = 0
    try:
        for index in range(count):
            start = pos
            z = data[pos]
            if z < 0x80:
                pos += 1
            elif data[pos + 1] < 0x80:
                z = (z & 0x7F) | (data[pos + 1] << 7)
                pos += 2
            else:
                z, pos = raw_varint(data, pos, 5)
            length = (z >> 1) ^ -(z & 1)
            rec_end = pos + length
            if length <= 0 or rec_end > end:
                raise InvalidRecordError(
                    f"record {index} at byte {start} declares {length} bytes, "
                    f"{end - pos} remain in the record area"
                )
            body = pos
            pos += 1  # attributes: unused in v2
            z = data[pos]
            if z < 0x80:
                pos += 1
            elif data[pos + 1] < 0x80:
                z = (z & 0x7F) | (data[pos + 1] << 7)
                pos += 2
            else:
                z, pos = raw_varint(data, pos, 10)
            ts_delta = (z >> 1) ^ -(z & 1)
            if ts_delta > max_delta:  # noqa: PLR1730 (max() is a call per record)
                max_delta = ts_delta
            if (ts_delta < low or ts_delta > high) and base_ts + ts_delta != NO_TIMESTAMP:
                raise InvalidTimestampError(
                    f"record {index}: timestamp {base_ts + ts_delta} is out of range; it "
                    f"should be within [{base_ts + low}, {base_ts + high}]"
                )
            z = data[pos]
            if z < 0x80:
                pos += 1
            elif data[pos + 1] < 0x80:
                z = (z & 0x7F) | (data[pos + 1] << 7)
                pos += 2
            else:
                z, pos = raw_varint(data, pos, 5)
            if dense:
                if z != index << 1:
                    raise InvalidRecordError(
                        f"record {index} has offset delta {(z >> 1) ^ -(z & 1)}, expected "
                        f"{index}: inner record offsets must be 0..{count - 1} in order"
                    )
            else:
                delta = (z >> 1) ^ -(z & 1)
                if delta <= prev or delta > last_delta:
                    raise InvalidRecordError(
                        f"record {index} has offset delta {delta} after {prev} (batch last "
                        f"offset delta {last_delta})"
                    )
                prev = delta
            z = data[pos]  # key length
            if z < 0x80:
                pos += 1
            elif data[pos + 1] < 0x80:
                z = (z & 0x7F) | (data[pos + 1] << 7)
                pos += 2
            else:
                z, pos = raw_varint(data, pos, 5)
            if z & 1:
                if compacted:
                    raise InvalidRecordError(
                        f"record {index}: compacted topic cannot accept message without key"
                    )
            else:
                pos += z >> 1
                if pos > rec_end:
                    raise InvalidRecordError(
                        f"record {index}: its key of {z >> 1} bytes runs past the record's end"
                    )
            z = data[pos]  # value length
            if z < 0x80:
                pos += 1
            elif data[pos + 1] < 0x80:
                z = (z & 0x7F) | (data[pos + 1] << 7)
                pos += 2
            else:
                z, pos = raw_varint(data, pos, 5)
            if not z & 1:
                pos += z >> 1
                if pos > rec_end:
                    raise InvalidRecordError(
                        f"record {index}: its value of {z >> 1} bytes runs past the record's end"
                    )
            if data[pos] == 0:
                pos += 1
            else:
                _, pos = decode_headers(data, pos, rec_end)
            if pos != rec_end:
                raise InvalidRecordError(
                    f"record {index} at byte {start} declares {length} bytes but its fields "
                    f"take {pos - body}"
                )
    except IndexError:
        raise InvalidRecordError(
            f"premature end of records: record {index} of {count} runs past the end of the "
            f"{end}-byte record area"
        ) from None
    except InvalidRecordError as e:
        if e.message.startswith((f"record {index} ", f"record {index}:")):
            raise
        raise InvalidRecordError(f"record {index}: {e.message}") from None
    if pos != end:
        raise InvalidRecordError(
            f"{end - pos} bytes remain in the record area after its {count} records"
        )
    return max_delta
