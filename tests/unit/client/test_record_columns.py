"""The consumer's columnar decoding (``client.record_columns``): the same records, offsets,
timestamps and errors as the record-by-record path (``consumed_entries``), whatever the
message format, compression, isolation level or fetch offset."""

from __future__ import annotations

import pytest

from kafkasim.client.completed_fetch import consumed_entries
from kafkasim.client.record_columns import RecordColumns, consumed_columns, to_arrow
from kafkasim.common.errors import CorruptRecordError, InvalidRecordError
from kafkasim.storage.records.batch import (
    CRC_OFFSET,
    RECORD_BATCH_OVERHEAD,
    TimestampType,
    compute_crc,
    encode_batch,
    set_log_append_time,
)
from kafkasim.storage.records.compression import CompressionType
from kafkasim.storage.records.legacy import encode_legacy
from tests.txn_records import ABORT, COMMIT, Producer

T0 = 1_700_000_000_000


def mixed() -> bytes:
    """0-2 a v1 gzip wrapper; 3-6 a v2 batch with a header, a null key and a null value;
    7-9 a zstd v2 batch with big timestamp deltas and values over 8192 bytes; 10-11 a
    LogAppendTime batch."""
    log_append = bytearray(
        encode_batch(
            [(T0, b"k", b"a"), (T0 + 1, b"k", b"b")],
            base_offset=10,
            timestamp_type=TimestampType.LOG_APPEND_TIME,
        )
    )
    set_log_append_time(log_append, 0, T0 + 99)
    return b"".join(
        [
            encode_legacy(
                [(T0 + o, b"k%d" % o, b"v%d" % o) for o in range(3)],
                magic=1,
                compression=CompressionType.GZIP,
            ),
            encode_batch(
                [
                    (T0 + 3, b"k3", b"v3", (("h", b"x"), ("n", None))),
                    (T0 + 4, None, b"v4"),
                    (T0 + 5, b"k5", None),
                    (T0 + 6, b"k6", b""),
                ],
                base_offset=3,
            ),
            encode_batch(
                [(T0 + 10**9 * o, b"big", bytes([o]) * 9000) for o in range(3)],
                base_offset=7,
                compression=CompressionType.ZSTD,
            ),
            bytes(log_append),
        ]
    )


def by_records(data: bytes, fetch_offset: int, aborted: list[tuple[int, int]] | None) -> list:
    return [
        (r.offset, r.timestamp, int(h.timestamp_type), r.key, r.value,
         tuple((x.key, x.value) for x in r.headers))
        for h, records in consumed_entries(data, fetch_offset=fetch_offset, aborted=aborted)
        for r in records
    ]  # fmt: skip


def by_columns(data: bytes, fetch_offset: int, aborted: list[tuple[int, int]] | None) -> list:
    out = RecordColumns("t", 0)
    consumed_columns(data, out, fetch_offset=fetch_offset, aborted=aborted)
    return list(
        zip(out.offsets, out.timestamps, out.timestamp_types, out.keys, out.values, out.headers,
            strict=True)
    )  # fmt: skip


@pytest.mark.parametrize("fetch_offset", [0, 2, 4, 7, 8, 11, 12])
def test_columns_hold_exactly_what_the_record_path_returns(fetch_offset: int) -> None:
    data = mixed()
    expected = by_records(data, fetch_offset, None)
    assert [row[0] for row in expected] == list(range(fetch_offset, 12))
    assert by_columns(data, fetch_offset, None) == expected
    out = RecordColumns("t", 0)
    assert consumed_columns(data, out, fetch_offset=fetch_offset) == 12  # past every entry


def test_a_log_append_time_batch_gives_the_broker_time_to_every_record() -> None:
    rows = by_columns(mixed(), 10, None)
    assert [(ts, kind) for _, ts, kind, *_ in rows] == [
        (T0 + 99, int(TimestampType.LOG_APPEND_TIME))
    ] * 2


def transactions() -> bytes:
    """0-1 producer 1's aborted transaction, 2 producer 2's committed one, 5 producer 1's
    committed one, with their markers (3, 4, 6)."""
    p1, p2 = Producer(1), Producer(2)
    return b"".join(
        (
            p1.batch(2, base_offset=0),
            p2.batch(base_offset=2),
            p1.marker(ABORT, base_offset=3),
            p2.marker(COMMIT, base_offset=4),
            p1.batch(base_offset=5),
            p1.marker(COMMIT, base_offset=6),
        )
    )


def test_read_committed_columns_skip_aborted_transactions_and_markers() -> None:
    data = transactions()
    for aborted in ([(1, 0)], None):
        assert by_columns(data, 0, aborted) == by_records(data, 0, aborted)
    assert [row[4] for row in by_columns(data, 0, [(1, 0)])] == [b"p2-0", b"p1-2"]


def _recrc(buf: bytearray) -> bytes:
    buf[CRC_OFFSET : CRC_OFFSET + 4] = compute_crc(buf, 0, len(buf)).to_bytes(4, "big")
    return bytes(buf)


def test_damaged_batches_raise_the_record_paths_errors() -> None:
    good = encode_batch([(T0, b"k", b"value"), (T0, b"k", b"other")])
    flipped = bytearray(good)
    flipped[-1] ^= 0xFF
    with pytest.raises(CorruptRecordError, match="CRC"):
        by_columns(bytes(flipped), 0, None)
    # A record length one byte too long, the CRC made to match: the fields do not fill it.
    longer = bytearray(good)
    longer[RECORD_BATCH_OVERHEAD] += 2  # zig-zag: +1 byte
    with pytest.raises(InvalidRecordError) as columns_error:
        by_columns(_recrc(longer), 0, None)
    with pytest.raises(InvalidRecordError) as records_error:
        by_records(_recrc(longer), 0, None)
    assert str(columns_error.value) == str(records_error.value)
    # The record count says 3 where there are 2.
    short = bytearray(good)
    short[RECORD_BATCH_OVERHEAD - 1] = 3
    with pytest.raises(InvalidRecordError, match="premature end of records"):
        by_columns(_recrc(short), 0, None)


def test_to_arrow_makes_one_table_of_every_partitions_columns() -> None:
    first = RecordColumns("t", 0)
    consumed_columns(mixed(), first, fetch_offset=3)
    second = RecordColumns("u", 5)
    table = to_arrow([first.slice(0, 2), second])
    assert table.num_rows == 2
    assert table.column("offset").to_pylist() == [3, 4]
    assert table.column("key").to_pylist() == [b"k3", None]
    assert table.column("topic").to_pylist() == ["t", "t"]
    assert table.column("headers").to_pylist()[0] == [
        {"key": "h", "value": b"x"},
        {"key": "n", "value": None},
    ]
