"""decode_entries: the one reader of records out of a buffer mixing v0/v1 message sets and v2
batches (a fetch response of a partition written before and after Kafka 0.11)."""

from __future__ import annotations

import struct
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kafkasim.common.errors import CorruptRecordError, InvalidRecordError
from kafkasim.common.sentinels import NO_TIMESTAMP
from kafkasim.storage.records.batch import (
    ControlRecordType,
    Header,
    TimestampType,
    encode_batch,
    encode_control_batch,
    encode_empty_batch,
)
from kafkasim.storage.records.compression import CompressionType, compress
from kafkasim.storage.records.entry import (
    EntryRecords,
    check_entry_records,
    decode_entries,
    iter_entries,
)
from kafkasim.storage.records.legacy import encode_legacy
from tests.unit.storage.records.crafted import batch_of, claims, good_batch, record

T0 = 1_700_000_000_000
GZIP = CompressionType.GZIP


def _legacy(
    magic: int, base: int, count: int, codec: CompressionType = GZIP, **kw: object
) -> bytes:
    return encode_legacy(
        [(T0 + base + i, b"k%d" % (base + i), b"v%d" % (base + i)) for i in range(count)],
        magic=magic,
        base_offset=base,
        compression=codec,
        **kw,  # type: ignore[arg-type]
    )


def _flat(data: bytes, fetch_offset: int = 0) -> list[tuple[int, int, bytes | None, bytes | None]]:
    return [
        (r.offset, r.timestamp, r.key, r.value)
        for _, records in decode_entries(data, fetch_offset=fetch_offset)
        for r in records
    ]


def test_v0_messages_have_no_timestamp() -> None:
    """Kafka's consumer reports a v0 record with timestamp -1 and NO_TIMESTAMP_TYPE."""
    data = _legacy(0, 5, 1, CompressionType.NONE) + _legacy(0, 6, 1, CompressionType.NONE)
    entries = list(decode_entries(data))
    assert [h.timestamp_type for h, _ in entries] == [TimestampType.NO_TIMESTAMP_TYPE] * 2
    assert [h.next_offset for h, _ in entries] == [6, 7]
    assert _flat(data) == [(5, NO_TIMESTAMP, b"k5", b"v5"), (6, NO_TIMESTAMP, b"k6", b"v6")]


@pytest.mark.parametrize(
    "timestamp_type", [TimestampType.CREATE_TIME, TimestampType.LOG_APPEND_TIME]
)
def test_v1_message_keeps_its_timestamp_and_type(timestamp_type: TimestampType) -> None:
    data = _legacy(1, 3, 1, CompressionType.NONE, timestamp_type=timestamp_type)
    ((header, records),) = decode_entries(data)
    assert header.timestamp_type is timestamp_type
    assert [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in records] == [
        (3, T0 + 3, b"k3", b"v3", ())
    ]


@pytest.mark.parametrize("magic", [0, 1])
@pytest.mark.parametrize("codec", [GZIP, CompressionType.SNAPPY, CompressionType.LZ4])
def test_a_compressed_wrapper_gives_its_inner_records_at_absolute_offsets(
    magic: int, codec: CompressionType
) -> None:
    """v1 inner offsets are relative to the wrapper, v0 ones absolute: both read the same."""
    data = _legacy(magic, 10, 4, codec)
    ((header, records),) = decode_entries(data)
    assert (header.last_offset, header.next_offset) == (13, 14)
    ts = [NO_TIMESTAMP] * 4 if magic == 0 else [T0 + 10 + i for i in range(4)]
    assert [(r.offset, r.timestamp, r.value) for r in records] == [
        (10 + i, ts[i], b"v%d" % (10 + i)) for i in range(4)
    ]


def test_a_log_append_time_wrapper_gives_every_inner_record_its_timestamp() -> None:
    data = _legacy(1, 0, 3, timestamp_type=TimestampType.LOG_APPEND_TIME)
    ((header, records),) = decode_entries(data)
    assert header.timestamp_type is TimestampType.LOG_APPEND_TIME
    assert [r.timestamp for r in records] == [T0 + 2] * 3


def _mixed() -> bytes:
    """0: v0 message, 1-3: v0 gzip wrapper, 4: v1 message, 5-7: v1 gzip wrapper, 8-9: a v2
    batch with a header, 10: a control batch, 11-12: an empty (compacted) batch, 13: v2."""
    return b"".join(
        [
            _legacy(0, 0, 1, CompressionType.NONE),
            _legacy(0, 1, 3),
            _legacy(1, 4, 1, CompressionType.NONE),
            _legacy(1, 5, 3),
            encode_batch(
                [(T0 + 8, b"k8", b"v8", (("h", b"x"),)), (T0 + 9, b"k9", b"v9")],
                base_offset=8,
                compression=GZIP,
            ),
            encode_control_batch(
                ControlRecordType.COMMIT,
                producer_id=1,
                producer_epoch=0,
                timestamp=T0,
                base_offset=10,
            ),
            encode_empty_batch(base_offset=11, last_offset=12),
            encode_batch([(T0 + 13, None, b"v13")], base_offset=13),
        ]
    )


def test_a_fetch_response_mixing_every_format_reads_in_offset_order() -> None:
    entries = list(decode_entries(_mixed()))
    assert [h.magic for h, _ in entries] == [0, 0, 1, 1, 2, 2, 2, 2]
    assert [h.next_offset for h, _ in entries] == [1, 4, 5, 8, 10, 11, 13, 14]
    assert [h.is_control for h, _ in entries] == [False] * 5 + [True, False, False]
    data_records = [r for h, records in entries if not h.is_control for r in records]
    assert [r.offset for r in data_records] == [*range(10), 13]
    assert [r.value for r in data_records][:4] == [b"v0", b"v1", b"v2", b"v3"]
    assert data_records[3].timestamp == NO_TIMESTAMP  # v0
    assert data_records[4].timestamp == T0 + 4  # v1
    assert data_records[8].headers == (Header("h", b"x"),)  # headers only in v2
    assert all(r.headers == () for r in data_records[:8])


@pytest.mark.parametrize(
    ("fetch_offset", "first_offsets"),
    [
        (2, [None, 2, 4]),  # inside the v0 wrapper 1-3
        (6, [None, None, None, 6, 8]),  # inside the v1 wrapper 5-7
        (9, [None, None, None, None, 9]),  # inside the v2 batch 8-9
    ],
)
def test_records_below_the_fetch_offset_inside_an_entry_are_skipped(
    fetch_offset: int, first_offsets: list[int | None]
) -> None:
    """A fetch answers from the entry holding the fetch offset: its earlier records (and any
    entry wholly below the offset) give nothing, as Kafka's consumer skips them."""
    entries = list(decode_entries(_mixed(), fetch_offset=fetch_offset))
    firsts = [records[0].offset if records else None for _, records in entries]
    assert firsts[: len(first_offsets)] == first_offsets
    offsets = [r.offset for h, records in entries if not h.is_control for r in records]
    assert offsets == [o for o in [*range(10), 13] if o >= fetch_offset]


def _v1_gzip_wrapper(offset: int, inner: bytes) -> bytes:
    """A v1 gzip wrapper around ``inner`` with a correct outer CRC, whatever ``inner`` holds."""
    value = compress(GZIP, inner)
    body = struct.pack(">bbqi", 1, int(GZIP), T0, -1) + struct.pack(">i", len(value)) + value
    return struct.pack(">qiI", offset, len(body) + 4, zlib.crc32(body)) + body


def test_a_bad_crc_of_a_message_inside_a_wrapper_is_corrupt_message() -> None:
    """CRC-32 of each message inside a wrapper is checked, as check.crcs does."""
    inner = bytearray(encode_legacy([(T0, b"k", b"v0"), (T0, b"k", b"v1")], magic=1))
    assert [r.value for _, rs in decode_entries(_v1_gzip_wrapper(1, bytes(inner))) for r in rs] == [
        b"v0",
        b"v1",
    ]
    inner[-1] ^= 0xFF
    with pytest.raises(CorruptRecordError, match="CRC"):
        list(decode_entries(_v1_gzip_wrapper(1, bytes(inner))))


def test_a_bad_v2_crc_after_legacy_entries_is_corrupt_message() -> None:
    data = bytearray(_legacy(0, 0, 2) + encode_batch([(T0, None, b"v")], base_offset=2))
    data[-1] ^= 0xFF
    with pytest.raises(CorruptRecordError):
        list(decode_entries(bytes(data)))


@pytest.mark.parametrize("cut", [1, 20, 40])
def test_a_partial_entry_at_the_end_is_corrupt_message_naming_its_position(cut: int) -> None:
    first = _legacy(1, 0, 1, CompressionType.NONE)
    data = first + _legacy(1, 1, 3)[:-cut]
    with pytest.raises(CorruptRecordError, match=f"position {len(first)}"):
        list(iter_entries(data))


def test_an_unknown_magic_is_corrupt_message() -> None:
    data = bytearray(_legacy(1, 0, 1, CompressionType.NONE))
    data[16] = 3
    with pytest.raises(CorruptRecordError, match="magic 3"):
        list(decode_entries(bytes(data)))


_SET = st.tuples(
    st.sampled_from([0, 1, 2]),
    st.sampled_from([CompressionType.NONE, GZIP, CompressionType.LZ4]),
    st.integers(1, 4),
)


@settings(max_examples=60, deadline=None)
@given(sets=st.lists(_SET, min_size=1, max_size=8), data=st.data())
def test_any_mix_reads_every_record_from_any_fetch_offset(
    sets: list[tuple[int, CompressionType, int]], data: st.DataObject
) -> None:
    chunks: list[bytes] = []
    offset = 0
    for magic, codec, count in sets:
        if magic == 2:
            rows = [(T0 + offset + i, b"k", struct.pack(">q", offset + i)) for i in range(count)]
            chunks.append(encode_batch(rows, base_offset=offset, compression=codec))
        else:
            rows = [(T0 + offset + i, b"k", struct.pack(">q", offset + i)) for i in range(count)]
            chunks.append(encode_legacy(rows, magic=magic, base_offset=offset, compression=codec))
        offset += count
    fetch_offset = data.draw(st.integers(0, offset - 1))
    got = [
        (r.offset, struct.unpack(">q", r.value or b"")[0])
        for _, records in decode_entries(b"".join(chunks), fetch_offset=fetch_offset)
        for r in records
    ]
    assert got == [(o, o) for o in range(fetch_offset, offset)]


# -- check_entry_records: the strict check of stored entries (verify-log, dump-log) -------------


def test_check_entry_records_accepts_a_compacted_v2_batch_with_gaps() -> None:
    """Stored data is checked without the client's dense offsets: compaction leaves gaps."""
    gaps = batch_of([record(0), record(2), record(5)], last_offset_delta=5)
    buf = b"\x00" * 7 + gaps
    assert check_entry_records(buf, 7) == EntryRecords(first_offset=0, record_count=3)


def test_check_entry_records_walks_v2_records_as_the_leader_does() -> None:
    with pytest.raises(InvalidRecordError, match="record 2 has offset delta 1 after 2"):
        check_entry_records(batch_of([record(0), record(2), record(1)], last_offset_delta=5))
    with pytest.raises(InvalidRecordError, match="premature end of records: record 3 of 5"):
        check_entry_records(claims(good_batch(3), 5))


@pytest.mark.parametrize("magic", [0, 1])
def test_check_entry_records_decodes_legacy_inner_messages(magic: int) -> None:
    assert check_entry_records(_legacy(magic, 10, 4)) == EntryRecords(10, 4)
    inner = bytearray(encode_legacy([(T0, b"k", b"v0"), (T0, b"k", b"v1")], magic=1))
    assert check_entry_records(_v1_gzip_wrapper(1, bytes(inner))) == EntryRecords(0, 2)
    inner[-1] ^= 0xFF  # an inner message's CRC no longer matches
    with pytest.raises(CorruptRecordError, match="CRC"):
        check_entry_records(_v1_gzip_wrapper(1, bytes(inner)))
