"""RecordBatch v2: byte layout, CRC-32C, in-place rewrites, builder and decoder."""

from __future__ import annotations

import contextlib
import struct
from collections.abc import Sequence
from typing import Any

import crc32c
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from kafkasim.common.errors import CorruptRecordError, InvalidRecordError
from kafkasim.common.sentinels import INT16_MAX, INT32_MAX, INT64_MAX
from kafkasim.storage.records.batch import (
    ATTRIBUTES_OFFSET,
    BASE_OFFSET_OFFSET,
    BASE_SEQUENCE_OFFSET,
    CRC_OFFSET,
    FIRST_TIMESTAMP_OFFSET,
    LAST_OFFSET_DELTA_OFFSET,
    LENGTH_OFFSET,
    LOG_OVERHEAD,
    MAGIC_OFFSET,
    MAX_TIMESTAMP_OFFSET,
    PARTITION_LEADER_EPOCH_OFFSET,
    PRODUCER_EPOCH_OFFSET,
    PRODUCER_ID_OFFSET,
    RECORD_BATCH_OVERHEAD,
    RECORDS_COUNT_OFFSET,
    BatchHeader,
    ControlRecordType,
    Header,
    RecordBatchBuilder,
    TimestampType,
    compute_crc,
    decode_batch,
    encode_batch,
    encode_control_batch,
    encode_empty_batch,
    increment_sequence,
    iter_batches,
    parse_control_key,
    parse_end_transaction_marker,
    peek_magic,
    record_size_upper_bound,
    set_base_offset,
    set_last_offset,
    set_log_append_time,
    set_max_timestamp,
    set_partition_leader_epoch,
    validate_batch,
)
from kafkasim.storage.records.compression import CompressionType
from kafkasim.storage.records.legacy import encode_legacy
from kafkasim.storage.records.varint import encode_varint

HeaderList = Sequence[tuple[str, bytes | None]]
RecordTuple = tuple[int, bytes | None, bytes | None, HeaderList]

# A batch assembled by hand from the layout in Kafka's DefaultRecordBatch/DefaultRecord docs:
# base offset 5, leader epoch 3, CreateTime, no producer, two records:
#   offset 5, ts 1000, key b"a", value b"xyz", no headers
#   offset 6, ts 1003, null key, empty value, header ("h", b"1")
GOLDEN_HEADER_FIELDS = (
    "0000000000000005"  # baseOffset
    "00000047"  # batchLength = 83 - 12
    "00000003"  # partitionLeaderEpoch
    "02"  # magic
    "{crc}"  # crc
    "0000"  # attributes
    "00000001"  # lastOffsetDelta
    "00000000000003e8"  # firstTimestamp 1000
    "00000000000003eb"  # maxTimestamp 1003
    "ffffffffffffffff"  # producerId -1
    "ffff"  # producerEpoch -1
    "ffffffff"  # baseSequence -1
    "00000002"  # recordsCount
)
GOLDEN_RECORDS = bytes.fromhex(
    "14"  # record 0: length 10
    "00"  # attributes (unused)
    "00"  # timestampDelta 0
    "00"  # offsetDelta 0
    "02"  # keyLength 1
    "61"  # "a"
    "06"  # valueLength 3
    "78797a"  # "xyz"
    "00"  # headerCount 0
    "14"  # record 1: length 10
    "00"  # attributes
    "06"  # timestampDelta 3
    "02"  # offsetDelta 1
    "01"  # keyLength -1: null
    "00"  # valueLength 0: empty
    "02"  # headerCount 1
    "02"  # header keyLength 1
    "68"  # "h"
    "02"  # header valueLength 1
    "31"  # "1"
)


def _golden_bytes() -> bytes:
    without_crc = bytes.fromhex(GOLDEN_HEADER_FIELDS.format(crc="00000000")) + GOLDEN_RECORDS
    # CRC-32C from the crc32c package directly, independent of compute_crc.
    crc = crc32c.crc32c(without_crc[21:])
    return bytes.fromhex(GOLDEN_HEADER_FIELDS.format(crc=f"{crc:08x}")) + GOLDEN_RECORDS


def _golden_encoded(compression: CompressionType = CompressionType.NONE) -> bytes:
    return encode_batch(
        [(1000, b"a", b"xyz"), (1003, None, b"", [("h", b"1")])],
        base_offset=5,
        partition_leader_epoch=3,
        compression=compression,
    )


# --- layout and golden bytes ------------------------------------------------------------------


def test_header_field_offsets_follow_the_layout() -> None:
    sizes = [8, 4, 4, 1, 4, 2, 4, 8, 8, 8, 2, 4, 4]
    offsets = [
        BASE_OFFSET_OFFSET,
        LENGTH_OFFSET,
        PARTITION_LEADER_EPOCH_OFFSET,
        MAGIC_OFFSET,
        CRC_OFFSET,
        ATTRIBUTES_OFFSET,
        LAST_OFFSET_DELTA_OFFSET,
        FIRST_TIMESTAMP_OFFSET,
        MAX_TIMESTAMP_OFFSET,
        PRODUCER_ID_OFFSET,
        PRODUCER_EPOCH_OFFSET,
        BASE_SEQUENCE_OFFSET,
        RECORDS_COUNT_OFFSET,
    ]
    running = [sum(sizes[:i]) for i in range(len(sizes))]
    assert offsets == running
    assert sum(sizes) == RECORD_BATCH_OVERHEAD == 61
    assert LOG_OVERHEAD == 12


def test_crc32c_check_value() -> None:
    # The CRC-32C "check" value from the CRC catalogue: crc32c(b"123456789") = 0xE3069283.
    buf = bytes(ATTRIBUTES_OFFSET) + b"123456789"
    assert compute_crc(buf, 0, len(buf)) == 0xE3069283


def test_encoder_matches_hand_assembled_batch() -> None:
    golden = _golden_bytes()
    assert len(golden) == 83
    assert _golden_encoded() == golden
    assert BatchHeader.parse(golden).crc == 0xB5ABF74E  # pinned: regression guard


def test_encoder_matches_a_batch_written_by_kafka() -> None:
    # A one-record batch that Kafka 3.x wrote to its __cluster_metadata log (published
    # byte-by-byte in a walkthrough of the log format): the `metadata.version` feature record.
    # It pins the CRC polynomial, the range the CRC covers and the record encoding against
    # Kafka's own writer.
    value = bytes.fromhex("010c0011") + b"metadata.version" + bytes.fromhex("001400")
    kafka_written = bytes.fromhex(
        "0000000000000000"  # baseOffset 0
        "0000004f"  # batchLength 79
        "00000001"  # partitionLeaderEpoch 1
        "02"  # magic
        "b069457c"  # crc, as Kafka computed it
        "0000"  # attributes
        "00000000"  # lastOffsetDelta
        "00000191e05af818"  # firstTimestamp 1726045943832
        "00000191e05af818"  # maxTimestamp
        "ffffffffffffffff"  # producerId
        "ffff"  # producerEpoch
        "ffffffff"  # baseSequence
        "00000001"  # recordsCount
        "3a"  # record length 29
        "00"  # attributes
        "00"  # timestampDelta 0
        "00"  # offsetDelta 0
        "01"  # null key
        "2e"  # valueLength 23
    )
    kafka_written += value + b"\x00"  # the value, then headerCount 0
    assert validate_batch(kafka_written).crc == 0xB069457C
    encoded = encode_batch([(1726045943832, None, value)], partition_leader_epoch=1)
    assert encoded == kafka_written


# --- round trips ------------------------------------------------------------------------------

timestamps = st.just(-1) | st.integers(0, INT64_MAX)
header_lists = st.lists(
    st.tuples(st.text(max_size=8), st.none() | st.binary(max_size=8)), max_size=3
)
record_tuples = st.tuples(
    timestamps,
    st.none() | st.binary(max_size=40),
    st.none() | st.binary(max_size=120),
    header_lists,
)


def _fits_int64(records: Sequence[RecordTuple]) -> bool:
    first = records[0][0]
    return all(-(1 << 63) <= ts - first < (1 << 63) for ts, *_ in records)


def _check_round_trip(
    records: Sequence[RecordTuple],
    *,
    base_offset: int = 0,
    compression: CompressionType = CompressionType.NONE,
    timestamp_type: TimestampType = TimestampType.CREATE_TIME,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    is_transactional: bool = False,
) -> bytes:
    data = encode_batch(
        records,
        base_offset=base_offset,
        compression=compression,
        timestamp_type=timestamp_type,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        is_transactional=is_transactional,
    )
    header, decoded = decode_batch(data)
    assert header.size_in_bytes == len(data)
    assert header.records_count == len(records) == len(decoded)
    assert header.base_offset == base_offset
    assert header.last_offset == base_offset + len(records) - 1
    assert header.next_offset == header.last_offset + 1
    assert header.compression == compression
    assert header.timestamp_type == timestamp_type
    assert header.is_transactional == is_transactional
    assert not header.is_control
    assert (header.producer_id, header.producer_epoch) == (producer_id, producer_epoch)
    assert header.base_sequence == base_sequence
    assert header.first_timestamp == records[0][0]
    assert header.max_timestamp == max(-1, *(r[0] for r in records))
    for i, (record, (ts, key, value, headers)) in enumerate(zip(decoded, records, strict=True)):
        assert record.offset == base_offset + i
        expected_ts = (
            header.max_timestamp if timestamp_type == TimestampType.LOG_APPEND_TIME else ts
        )
        assert record.timestamp == expected_ts
        assert (record.key, record.value) == (key, value)
        assert record.headers == tuple(Header(k, v) for k, v in headers)
        expected_seq = increment_sequence(base_sequence, i) if base_sequence >= 0 else -1
        assert record.sequence == expected_seq
    if compression == CompressionType.NONE:
        assert sum(r.size_in_bytes for r in decoded) == len(data) - RECORD_BATCH_OVERHEAD
    return data


@settings(deadline=None)
@given(
    records=st.lists(record_tuples, min_size=1, max_size=30),
    options=st.fixed_dictionaries(
        {
            "compression": st.sampled_from(list(CompressionType)),
            "timestamp_type": st.sampled_from(
                [TimestampType.CREATE_TIME, TimestampType.LOG_APPEND_TIME]
            ),
            "base_offset": st.integers(0, INT64_MAX - 100),
            "producer_id": st.integers(-1, INT64_MAX),
            "producer_epoch": st.integers(-1, INT16_MAX),
            "base_sequence": st.integers(-1, INT32_MAX),
            "is_transactional": st.booleans(),
        }
    ),
)
def test_round_trip(records: list[RecordTuple], options: dict[str, Any]) -> None:
    assume(_fits_int64(records))
    _check_round_trip(records, **options)


@pytest.mark.parametrize("compression", list(CompressionType))
def test_round_trip_of_many_records_and_large_fields(compression: CompressionType) -> None:
    # 10 000 offset deltas and 9 KB values leave the 1-2 byte varint fast paths; timestamps go
    # backwards as well as forwards.
    records: list[RecordTuple] = [
        (1_700_000_000_000 + (i * 7919) % 100_000 - 50_000, b"k%d" % i, b"v" * (i % 300), ())
        for i in range(10_000)
    ]
    records.append((0, b"x" * 9000, b"y" * 70_000, [("h" * 9000, b"z" * 9000)]))
    _check_round_trip(records, compression=compression, base_sequence=INT32_MAX - 5)


def test_empty_and_null_are_different() -> None:
    _, (empty, null) = decode_batch(encode_batch([(0, b"", b""), (0, None, None)]))
    assert (empty.key, empty.value) == (b"", b"")
    assert (null.key, null.value) == (None, None)


def test_timestamp_delta_overflow_is_a_value_error() -> None:
    builder = RecordBatchBuilder()
    builder.append(-1, None, None)
    with pytest.raises(ValueError, match="int64"):
        builder.append(INT64_MAX, None, None)


def test_record_size_upper_bound_bounds_the_encoded_size() -> None:
    key, value, headers = b"k" * 300, b"v" * 20_000, [("a", b"b"), ("c", None)]
    _, (record,) = decode_batch(encode_batch([(INT64_MAX, key, value, headers)]))
    assert record.size_in_bytes <= record_size_upper_bound(key, value, headers)


# --- header properties ------------------------------------------------------------------------


def test_timestamp_type_kafka_names() -> None:
    assert TimestampType.CREATE_TIME.kafka_name == "CreateTime"
    assert TimestampType.LOG_APPEND_TIME.kafka_name == "LogAppendTime"
    assert TimestampType.NO_TIMESTAMP_TYPE.kafka_name == "NoTimestampType"


@pytest.mark.parametrize(
    ("sequence", "increment", "expected"),
    [(0, 5, 5), (INT32_MAX - 1, 1, INT32_MAX), (INT32_MAX, 1, 0), (INT32_MAX - 1, 3, 1)],
)
def test_sequences_wrap_at_int32_max_to_zero(sequence: int, increment: int, expected: int) -> None:
    assert increment_sequence(sequence, increment) == expected


def test_last_sequence_and_producer_flags() -> None:
    data = encode_batch(
        [(0, None, None)] * 4, producer_id=42, producer_epoch=3, base_sequence=INT32_MAX - 1
    )
    header = BatchHeader.parse(data)
    assert header.has_producer_id
    assert header.last_sequence == 1  # INT32_MAX - 1 + 3 wraps
    assert not BatchHeader.parse(encode_batch([(0, None, None)])).has_producer_id
    assert BatchHeader.parse(encode_batch([(0, None, None)])).last_sequence == -1


def test_unknown_codec_id_in_a_header_is_corrupt() -> None:
    data = bytearray(encode_batch([(0, b"k", b"v")]))
    struct.pack_into(">h", data, ATTRIBUTES_OFFSET, 6)
    with pytest.raises(CorruptRecordError, match="compression type id 6"):
        _ = BatchHeader.parse(data).compression


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda b: b.__setitem__(MAGIC_OFFSET, 1), "has magic 1, expected 2"),
        (lambda b: struct.pack_into(">i", b, LENGTH_OFFSET, 48), "smaller than its header"),
        (lambda b: b.__delitem__(slice(60, None)), "truncated: 60 bytes left"),
    ],
    ids=["magic", "length", "short"],
)
def test_header_parse_rejects(mutate: object, message: str) -> None:
    data = bytearray(_golden_bytes())
    mutate(data)  # type: ignore[operator]
    with pytest.raises(CorruptRecordError, match=message):
        BatchHeader.parse(data)


def test_peek_magic_reads_byte_16_of_every_format() -> None:
    assert peek_magic(_golden_bytes()) == 2
    assert peek_magic(encode_legacy([(None, b"k", b"v")], magic=0)) == 0
    assert peek_magic(encode_legacy([(5, b"k", b"v")], magic=1)) == 1
    assert peek_magic(bytes(16) + b"\xff") == -1
    with pytest.raises(CorruptRecordError):
        peek_magic(bytes(16))


# --- validation: corruption and truncation ----------------------------------------------------


@pytest.mark.parametrize("compression", [CompressionType.NONE, CompressionType.LZ4])
def test_every_flipped_byte_is_caught_except_offset_and_leader_epoch(
    compression: CompressionType,
) -> None:
    # The CRC covers bytes [21, end): attributes to the last record. It does not cover
    # baseOffset (0-7), batchLength (8-11), partitionLeaderEpoch (12-15), magic (16) or the CRC
    # itself (17-20). Of those, a changed length is still caught (the batch no longer fits, or
    # the CRC is computed over a different range), magic by the magic check, the CRC field by
    # the comparison. A changed baseOffset or leader epoch goes unnoticed: that is how Kafka
    # lets the leader rewrite them without recomputing the CRC.
    original = _golden_encoded(compression)
    not_covered = set(range(0, 8)) | set(range(12, 16))
    for position in range(len(original)):
        for mask in (0x01, 0x80, 0xFF):
            flipped = bytearray(original)
            flipped[position] ^= mask
            if position in not_covered:
                _, records = decode_batch(flipped)
                assert len(records) == 2
                continue
            with pytest.raises(CorruptRecordError):
                validate_batch(flipped)
            with pytest.raises(CorruptRecordError):
                decode_batch(flipped)


@pytest.mark.parametrize("compression", [CompressionType.NONE, CompressionType.GZIP])
def test_every_truncation_is_corrupt(compression: CompressionType) -> None:
    data = _golden_encoded(compression)
    for cut in range(len(data)):
        prefix = data[:cut]
        with pytest.raises(CorruptRecordError):
            validate_batch(prefix)
        with pytest.raises(CorruptRecordError):
            decode_batch(prefix)
        with pytest.raises(CorruptRecordError):
            decode_batch(prefix, verify_crc=False)
        if cut:
            with pytest.raises(CorruptRecordError):
                list(iter_batches(prefix))


def test_validate_names_position_and_both_crcs() -> None:
    data = bytearray(bytes(10) + _golden_bytes())
    data[-1] ^= 0x01
    with pytest.raises(CorruptRecordError, match=r"position 10 has CRC 0xb5abf74e but .* 0x"):
        validate_batch(data, 10)


def test_validate_honours_available() -> None:
    data = _golden_bytes() + b"more bytes that belong to someone else"
    assert validate_batch(data, 0).records_count == 2
    with pytest.raises(CorruptRecordError, match="only 82 are available"):
        validate_batch(data, 0, available=82)


def _assemble(records: bytes, count: int, last_offset_delta: int, compression: int = 0) -> bytes:
    """A batch with a *valid* CRC around arbitrary record bytes: what a buggy producer sends."""
    buf = bytearray(
        struct.pack(
            ">qiibIhiqqqhii",
            0,
            RECORD_BATCH_OVERHEAD - LOG_OVERHEAD + len(records),
            -1,
            2,
            0,
            compression,
            last_offset_delta,
            0,
            0,
            -1,
            -1,
            -1,
            count,
        )
    )
    buf += records
    struct.pack_into(">I", buf, CRC_OFFSET, crc32c.crc32c(bytes(buf[21:])))
    return bytes(buf)


def _raw_record(offset_delta: int, body_tail: bytes = b"\x01\x01\x00", extra: int = 0) -> bytes:
    """attrs + ts delta 0 + offset delta + (by default) null key, null value, no headers."""
    body = b"\x00\x00" + encode_varint(offset_delta) + body_tail
    return encode_varint(len(body) + extra) + body


@pytest.mark.parametrize(
    ("records", "count", "last_delta", "message"),
    [
        (_raw_record(0), 2, 1, "premature end"),
        (_raw_record(0) + _raw_record(1), 1, 1, "remain after its 1 records"),
        (_raw_record(0) + _raw_record(0), 2, 1, "offset delta 0 after 0"),
        (_raw_record(1) + _raw_record(0), 2, 1, "offset delta 0 after 1"),
        (_raw_record(0) + _raw_record(5), 2, 1, "offset delta 5 after 0"),
        (_raw_record(0, extra=40), 1, 0, "declares 46 bytes, 6 remain"),
        (_raw_record(0, extra=1) + b"\x00", 1, 0, "declares 7 bytes but its fields take 6"),
        (_raw_record(0), -1, 0, "record count -1"),
        (_raw_record(0, b"\x01\x01\x03"), 1, 0, "number of record headers -2"),
        (_raw_record(0, b"\x01\x01\x02\x02\xff\x01"), 1, 0, "not UTF-8"),
        (_raw_record(0, b"\x01\x01\x02\x03\x01"), 1, 0, "header key size -2"),
        (b"\xff\xff\xff\xff\xff\xff", 1, 0, "varint is longer"),
    ],
)
def test_records_that_contradict_their_header_are_invalid(
    records: bytes, count: int, last_delta: int, message: str
) -> None:
    data = _assemble(records, count, last_delta)
    validate_batch(data)  # the CRC is fine: the producer wrote nonsense consistently
    with pytest.raises(InvalidRecordError, match=message):
        decode_batch(data)


def test_compacted_batch_with_offset_gaps_decodes() -> None:
    # Compaction removes records but keeps the batch's offset span: deltas 0 and 3 of 0..4.
    data = _assemble(_raw_record(0) + _raw_record(3), 2, 4)
    header, records = decode_batch(data)
    assert [r.offset for r in records] == [0, 3]
    assert header.last_offset == 4


@settings(deadline=None)
@given(records=st.binary(max_size=200), count=st.integers(-2, 20), codec=st.integers(0, 4))
def test_arbitrary_record_bytes_raise_only_kafka_errors(
    records: bytes, count: int, codec: int
) -> None:
    with contextlib.suppress(InvalidRecordError, CorruptRecordError):
        decode_batch(_assemble(records, count, 1000, codec))


# --- in-place rewrites ------------------------------------------------------------------------


def test_set_base_offset_and_leader_epoch_keep_the_crc() -> None:
    data = bytearray(_golden_bytes())
    crc_before = bytes(data[CRC_OFFSET : CRC_OFFSET + 4])
    set_base_offset(data, 0, 1_000_000)
    set_partition_leader_epoch(data, 0, 77)
    assert bytes(data[CRC_OFFSET : CRC_OFFSET + 4]) == crc_before
    header, records = decode_batch(data)
    assert (header.base_offset, header.partition_leader_epoch) == (1_000_000, 77)
    assert [r.offset for r in records] == [1_000_000, 1_000_001]


def test_set_last_offset_moves_the_base_offset() -> None:
    data = bytearray(_golden_bytes())
    set_last_offset(data, 0, 100)
    assert validate_batch(data).base_offset == 99


@pytest.mark.parametrize("compression", list(CompressionType))
def test_set_log_append_time_recomputes_the_crc_like_kafka(compression: CompressionType) -> None:
    data = bytearray(bytes(7) + _golden_encoded(compression))
    set_log_append_time(data, 7, 5_555)
    header, records = decode_batch(data, 7)
    assert header.timestamp_type == TimestampType.LOG_APPEND_TIME
    assert header.max_timestamp == 5_555
    assert header.first_timestamp == 1000  # the create time of the first record stays
    assert header.compression == compression
    assert [r.timestamp for r in records] == [5_555, 5_555]
    # And back to CreateTime: record timestamps are the producer's again.
    set_max_timestamp(data, 7, TimestampType.CREATE_TIME, 1003)
    _, records = decode_batch(data, 7)
    assert [r.timestamp for r in records] == [1000, 1003]


def test_set_log_append_time_writes_nothing_when_nothing_changes() -> None:
    data = bytearray(_golden_bytes())
    set_log_append_time(data, 0, 9)
    data[-1] ^= 0xFF  # corrupt the content: an unchanged rewrite must not launder it
    before = bytes(data)
    set_log_append_time(data, 0, 9)
    assert bytes(data) == before
    with pytest.raises(CorruptRecordError):
        validate_batch(data)


def test_set_max_timestamp_keeps_known_flags_and_drops_undefined_bits() -> None:
    data = bytearray(encode_batch([(0, None, None)], is_transactional=True))
    struct.pack_into(">h", data, ATTRIBUTES_OFFSET, 0x10 | 0x40 | 0x100)
    set_log_append_time(data, 0, 1)
    (attributes,) = struct.unpack_from(">h", data, ATTRIBUTES_OFFSET)
    assert attributes == 0x10 | 0x40 | 0x08
    validate_batch(data)


def test_rewrites_touch_only_their_batch() -> None:
    first, second = _golden_bytes(), _golden_encoded(CompressionType.SNAPPY)
    data = bytearray(first + second)
    set_log_append_time(data, len(first), 123)
    set_base_offset(data, len(first), 50)
    assert bytes(data[: len(first)]) == first
    positions = [pos for pos, _ in iter_batches(data, verify_crc=True)]
    assert positions == [0, len(first)]


# --- iterating concatenated batches -----------------------------------------------------------


def test_iter_batches_yields_each_position_and_header() -> None:
    batches = [_golden_encoded(c) for c in CompressionType] + [
        encode_empty_batch(base_offset=9, last_offset=9)
    ]
    data = b"".join(batches)
    found = list(iter_batches(data))
    expected_positions = [sum(len(b) for b in batches[:i]) for i in range(len(batches))]
    assert [pos for pos, _ in found] == expected_positions
    assert [h.compression for _, h in found[:5]] == list(CompressionType)
    assert list(iter_batches(b"")) == []


def test_iter_batches_stops_at_a_partial_batch_after_the_complete_ones() -> None:
    one = _golden_bytes()
    seen: list[int] = []
    with pytest.raises(CorruptRecordError, match="position 83"):
        for pos, _ in iter_batches(one + one[:70]):
            seen.append(pos)
    assert seen == [0]


def test_iter_batches_with_verify_crc_catches_a_bad_batch_in_the_middle() -> None:
    one = _golden_bytes()
    data = bytearray(one * 3)
    data[len(one) + 40] ^= 0x04
    assert len(list(iter_batches(data))) == 3
    with pytest.raises(CorruptRecordError, match="position 83 has CRC"):
        list(iter_batches(data, verify_crc=True))


# --- empty batches ----------------------------------------------------------------------------


def test_empty_builder_writes_kafkas_empty_header() -> None:
    # DefaultRecordBatch.writeEmptyHeader: codec none, firstTimestamp -1, count 0.
    data = RecordBatchBuilder(base_offset=3, compression=CompressionType.GZIP).build()
    assert len(data) == RECORD_BATCH_OVERHEAD
    header, records = decode_batch(data)
    assert records == []
    assert header.compression == CompressionType.NONE
    assert (header.first_timestamp, header.max_timestamp) == (-1, -1)
    assert (header.records_count, header.last_offset_delta, header.last_offset) == (0, 0, 3)


def test_empty_batch_after_compaction_keeps_offsets_sequence_and_max_timestamp() -> None:
    data = encode_empty_batch(
        base_offset=10,
        last_offset=14,
        max_timestamp=777,
        producer_id=5,
        producer_epoch=1,
        base_sequence=20,
        is_transactional=True,
    )
    expected = bytearray.fromhex(
        "000000000000000a"  # baseOffset 10
        "00000031"  # batchLength 49: header only
        "ffffffff"  # partitionLeaderEpoch
        "02"  # magic
        "00000000"  # crc, filled in below
        "0010"  # attributes: transactional, codec none
        "00000004"  # lastOffsetDelta 14 - 10
        "ffffffffffffffff"  # firstTimestamp -1
        "0000000000000309"  # maxTimestamp 777, kept
        "0000000000000005"  # producerId
        "0001"  # producerEpoch
        "00000014"  # baseSequence 20
        "00000000"  # recordsCount 0
    )
    struct.pack_into(">I", expected, CRC_OFFSET, crc32c.crc32c(bytes(expected[21:])))
    assert data == bytes(expected)
    header = validate_batch(data)
    assert (header.last_offset, header.last_sequence, header.max_timestamp) == (14, 24, 777)
    assert decode_batch(data)[1] == []


def test_empty_batch_rejects_a_last_offset_before_the_base() -> None:
    with pytest.raises(ValueError, match="last_offset - base_offset"):
        encode_empty_batch(base_offset=10, last_offset=9)


# --- builder ----------------------------------------------------------------------------------


def test_builder_appends_return_offset_deltas_and_sizes_are_exact() -> None:
    builder = RecordBatchBuilder(base_offset=100)
    assert builder.estimated_size_in_bytes() == RECORD_BATCH_OVERHEAD
    assert [builder.append(i, b"k", b"v" * i) for i in range(5)] == [0, 1, 2, 3, 4]
    assert builder.record_count == 5
    estimate = builder.estimated_size_in_bytes()
    data = builder.build()
    assert estimate == len(data)
    assert builder.build() is data
    with pytest.raises(RuntimeError, match="after build"):
        builder.append(0, None, None)


def test_builder_estimate_for_compressed_batches_becomes_exact_after_build() -> None:
    builder = RecordBatchBuilder(compression=CompressionType.ZSTD)
    for i in range(100):
        builder.append(i, None, b"same value" * 10)
    assert builder.estimated_size_in_bytes() > len(builder.build())
    assert builder.estimated_size_in_bytes() == len(builder.build())


def test_builder_keeps_explicit_offset_deltas_and_span_for_the_cleaner() -> None:
    # Kafka's appendWithOffset + overrideLastOffset: survivors of compaction keep their offsets
    # and the batch keeps its last offset (and so its last sequence).
    builder = RecordBatchBuilder(base_offset=100, producer_id=1, producer_epoch=0, base_sequence=0)
    assert builder.append(0, b"a", b"1", offset_delta=1) == 1
    assert builder.append(0, b"b", b"2", offset_delta=4) == 4
    assert builder.append(0, b"c", b"3") == 5
    header, records = decode_batch(builder.build(last_offset_delta=9))
    assert [r.offset for r in records] == [101, 104, 105]
    assert [r.sequence for r in records] == [1, 4, 5]
    assert (header.records_count, header.last_offset, header.last_sequence) == (3, 109, 9)


@pytest.mark.parametrize(
    ("deltas", "last", "message"),
    [
        ([3, 3], None, "offset delta 3 does not follow 3"),
        ([2, 1], None, "offset delta 1 does not follow 2"),
        ([-1], None, "offset delta -1 does not follow -1"),
        ([INT32_MAX + 1], None, "within int32"),
        ([0, 5], 4, "last offset delta 4 is below the last record's"),
    ],
)
def test_builder_rejects_offset_deltas_out_of_order(
    deltas: list[int], last: int | None, message: str
) -> None:
    builder = RecordBatchBuilder()
    with pytest.raises(ValueError, match=message):
        for delta in deltas:
            builder.append(0, None, None, offset_delta=delta)
        builder.build(last_offset_delta=last)


def test_empty_builder_with_a_span_is_an_empty_batch_covering_it() -> None:
    header = BatchHeader.parse(RecordBatchBuilder(base_offset=7).build(last_offset_delta=3))
    assert (header.records_count, header.base_offset, header.last_offset) == (0, 7, 10)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"timestamp_type": TimestampType.NO_TIMESTAMP_TYPE}, "CreateTime or LogAppendTime"),
        ({"producer_epoch": INT16_MAX + 1}, "producer_epoch"),
        ({"base_sequence": INT32_MAX + 1}, "base_sequence"),
        ({"partition_leader_epoch": -(1 << 31) - 1}, "partition_leader_epoch"),
        ({"base_offset": 1 << 63}, "base_offset"),
    ],
)
def test_builder_rejects_out_of_range_arguments(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        RecordBatchBuilder(**kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize("timestamp", [-2, -(1 << 40)])
def test_builder_rejects_negative_timestamps_other_than_no_timestamp(timestamp: int) -> None:
    with pytest.raises(ValueError, match="negative timestamp"):
        RecordBatchBuilder().append(timestamp, None, None)


# --- control batches --------------------------------------------------------------------------


def test_commit_marker_batch_layout() -> None:
    data = encode_control_batch(
        ControlRecordType.COMMIT,
        producer_id=9,
        producer_epoch=2,
        timestamp=1234,
        coordinator_epoch=7,
        base_offset=50,
    )
    header, (record,) = decode_batch(data)
    assert header.is_control and header.is_transactional
    assert header.attributes == 0x30
    assert header.compression == CompressionType.NONE
    assert header.base_sequence == -1
    assert (header.producer_id, header.producer_epoch) == (9, 2)
    assert record.key == b"\x00\x00\x00\x01"  # version 0, type 1 (commit)
    assert record.value == b"\x00\x00\x00\x00\x00\x07"  # version 0, coordinator epoch 7
    assert parse_control_key(record.key) == ControlRecordType.COMMIT
    marker = parse_end_transaction_marker(record.key, record.value)
    assert (marker.control_type, marker.coordinator_epoch) == (ControlRecordType.COMMIT, 7)


def test_abort_marker_round_trip() -> None:
    data = encode_control_batch(
        ControlRecordType.ABORT, producer_id=1, producer_epoch=0, timestamp=0
    )
    _, (record,) = decode_batch(data)
    assert parse_end_transaction_marker(record.key, record.value).control_type == (
        ControlRecordType.ABORT
    )


@pytest.mark.parametrize(
    ("key", "expected"),
    [
        (b"\x00\x00\x00\x00", ControlRecordType.ABORT),
        (b"\x00\x01\x00\x01", ControlRecordType.COMMIT),  # a newer key version still parses
        (b"\x00\x00\x00\x09", ControlRecordType.UNKNOWN),
        (b"\x00\x00\x00\x01extra", ControlRecordType.COMMIT),
    ],
)
def test_parse_control_key(key: bytes, expected: ControlRecordType) -> None:
    assert parse_control_key(key) == expected


@pytest.mark.parametrize(
    ("key", "message"),
    [(None, "-1 bytes"), (b"\x00\x00\x00", "3 bytes"), (b"\xff\xff\x00\x00", "version -1")],
)
def test_parse_control_key_rejects(key: bytes | None, message: str) -> None:
    with pytest.raises(InvalidRecordError, match=message):
        parse_control_key(key)


def test_end_transaction_marker_needs_six_bytes_of_value() -> None:
    with pytest.raises(InvalidRecordError, match="5 bytes"):
        parse_end_transaction_marker(b"\x00\x00\x00\x01", b"\x00" * 5)


def test_control_batch_rejects_non_marker_types() -> None:
    with pytest.raises(ValueError, match="not an end-transaction marker"):
        encode_control_batch(
            ControlRecordType.UNKNOWN, producer_id=1, producer_epoch=0, timestamp=0
        )


def test_rebuild_batch_keeps_identity_and_offsets_of_kept_records() -> None:
    """Compaction thins a batch: offsets, last offset delta and producer fields survive."""
    from kafkasim.storage.records.batch import rebuild_batch, set_partition_leader_epoch

    builder = RecordBatchBuilder(
        base_offset=100,
        producer_id=7,
        producer_epoch=2,
        base_sequence=40,
        compression=CompressionType.GZIP,
    )
    for i in range(5):
        builder.append(1_000 + i, b"k%d" % i, b"v%d" % i)
    raw = bytearray(builder.build())
    set_partition_leader_epoch(raw, 0, 9)
    header, records = decode_batch(bytes(raw))
    kept = [records[1], records[3]]
    rebuilt_header, rebuilt = decode_batch(rebuild_batch(header, kept))
    assert [r.offset for r in rebuilt] == [101, 103]
    assert rebuilt_header.last_offset == 104
    assert (rebuilt_header.producer_id, rebuilt_header.producer_epoch) == (7, 2)
    assert (rebuilt_header.base_sequence, rebuilt_header.last_sequence) == (40, 44)
    assert rebuilt_header.partition_leader_epoch == 9
    assert rebuilt_header.compression is CompressionType.GZIP
    recompressed, _ = decode_batch(rebuild_batch(header, records, compression=CompressionType.ZSTD))
    assert recompressed.compression is CompressionType.ZSTD


def test_rebuild_batch_keeps_log_append_time() -> None:
    from kafkasim.storage.records.batch import rebuild_batch, set_log_append_time

    raw = bytearray(encode_batch([(5, b"a", b"1"), (6, b"b", b"2")]))
    set_log_append_time(raw, 0, 123_456)
    header, records = decode_batch(bytes(raw))
    rebuilt_header, rebuilt = decode_batch(rebuild_batch(header, records[:1]))
    assert rebuilt_header.timestamp_type is TimestampType.LOG_APPEND_TIME
    assert rebuilt_header.max_timestamp == 123_456
    assert [r.timestamp for r in rebuilt] == [123_456]


# --- the same answers from every buffer type ----------------------------------------------------


@pytest.mark.parametrize("compression", [CompressionType.NONE, CompressionType.GZIP])
def test_decode_and_crc_answer_the_same_for_bytes_bytearray_and_memoryview(
    compression: CompressionType,
) -> None:
    # A read's bytes take shortcuts (no view to release, no decompression to ask for): the
    # same header, records and CRC as a bytearray or a view of the same batches, at any position.
    first = RecordBatchBuilder(base_offset=5, compression=compression)
    first.append(1, b"k", b"v1")
    second = RecordBatchBuilder(base_offset=6, compression=compression)
    second.append(2, None, b"v2")
    second.append(3, b"k3", None)
    data = first.build() + second.build()
    pos = len(first.build())
    size = len(data) - pos
    answers = []
    for buf in (data, bytearray(data), memoryview(data)):
        header, records = decode_batch(buf, pos)
        answers.append((header, records, compute_crc(buf, pos, size)))
        if isinstance(buf, bytearray):
            buf.extend(b"\0")  # no view of it was left behind
    assert answers[0] == answers[1] == answers[2]
    header, records, crc = answers[0]
    assert crc == header.crc
    assert [(r.offset, r.key, r.value) for r in records] == [(6, None, b"v2"), (7, b"k3", None)]
    assert all(type(r.value) is bytes for r in records if r.value is not None)


def test_a_truncated_batch_in_bytes_is_corrupt_as_in_a_bytearray() -> None:
    builder = RecordBatchBuilder()
    builder.append(1, b"k", b"value")
    data = builder.build()[:-1]
    for buf in (data, bytearray(data)):
        with pytest.raises(CorruptRecordError, match="only"):
            decode_batch(buf)
