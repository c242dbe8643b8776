"""The one v2 record walk (``storage.records.columns``): columns appended after a caller's
rows, the same rows ``decode_batch`` builds its records from, and its errors."""

from __future__ import annotations

import pytest

from kafkasim.common.errors import InvalidRecordError
from kafkasim.storage.records.batch import (
    RECORDS_OFFSET,
    BatchHeader,
    TimestampType,
    decode_batch,
    encode_batch,
    set_log_append_time,
)
from kafkasim.storage.records.columns import BatchColumns, decode_headers, walk_records
from kafkasim.storage.records.varint import encode_varint

T0 = 1_700_000_000_000


def test_walk_appends_rows_after_the_callers_own() -> None:
    data = encode_batch(
        [
            (T0 + 5, b"k0", b"v0", (("h", b"x"), ("n", None))),
            (T0 + 10_000, None, b"v" * 9000),  # a two- and a three-byte varint
            (T0, b"k2", None),
        ],
        base_offset=40,
    )
    header = BatchHeader.parse(data)
    out = BatchColumns([1], [2], [b"a"], [b"b"], [()], [3])
    walk_records(data[RECORDS_OFFSET:], header, 0, out)
    assert out.offsets == [1, 40, 41, 42]
    assert out.timestamps == [2, T0 + 5, T0 + 10_000, T0]
    assert out.keys == [b"a", b"k0", None, b"k2"]
    assert out.values == [b"b", b"v0", b"v" * 9000, None]
    assert out.headers == [(), (("h", b"x"), ("n", None)), (), ()]
    _, records = decode_batch(data)
    assert out.sizes == [3] + [r.size_in_bytes for r in records]
    assert sum(out.sizes[1:]) == len(data) - RECORDS_OFFSET


def test_columns_hold_record_timestamps_of_a_log_append_time_batch() -> None:
    # The batch's maxTimestamp is substituted by its readers, per batch; decode_batch does.
    data = bytearray(
        encode_batch(
            [(T0, b"k", b"a"), (T0 + 1, b"k", b"b")],
            timestamp_type=TimestampType.LOG_APPEND_TIME,
        )
    )
    set_log_append_time(data, 0, T0 + 99)
    out = BatchColumns()
    walk_records(bytes(data[RECORDS_OFFSET:]), BatchHeader.parse(data), 0, out)
    assert out.timestamps == [T0, T0 + 1]
    assert [r.timestamp for r in decode_batch(data)[1]] == [T0 + 99, T0 + 99]


def test_decode_batch_builds_header_objects_and_wrapping_sequences_from_the_columns() -> None:
    data = encode_batch(
        [(T0, b"k", b"a", (("h", b"x"),)), (T0, b"k", b"b")],
        producer_id=3,
        producer_epoch=0,
        base_sequence=2**31 - 1,
    )
    _, records = decode_batch(data)
    assert [(h.key, h.value) for h in records[0].headers] == [("h", b"x")]
    assert records[1].headers == ()
    assert [r.sequence for r in records] == [2**31 - 1, 0]


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (None, r"record batch at position 7: premature end of records \(1 of 2 read\)"),
        (b"\x00", r"record batch at position 7: 1 bytes remain after its 2 records"),
    ],
)
def test_walk_errors_name_the_batch_position(extra: bytes | None, message: str) -> None:
    data = encode_batch([(T0, b"k", b"a"), (T0, b"k", b"b")])
    area = data[RECORDS_OFFSET:]
    # None: the area ends after the first record; else bytes follow the last one.
    area = area[: decode_batch(data)[1][0].size_in_bytes] if extra is None else area + extra
    with pytest.raises(InvalidRecordError, match=message):
        walk_records(area, BatchHeader.parse(data), 7, BatchColumns())


def test_decode_headers_returns_key_value_pairs_within_the_record() -> None:
    raw = encode_varint(2) + encode_varint(1) + b"a" + encode_varint(-1)
    raw += encode_varint(1) + b"b" + encode_varint(2) + b"xy"
    assert decode_headers(raw, 0, len(raw)) == ((("a", None), ("b", b"xy")), len(raw))
    with pytest.raises(InvalidRecordError, match="invalid record header value size 2"):
        decode_headers(raw, 0, len(raw) - 1)
