"""Legacy message formats v0 and v1: layout, CRC32, wrapper messages, offsets and timestamps."""

from __future__ import annotations

import struct
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kafkasim.common.errors import (
    CorruptRecordError,
    InvalidRecordError,
    UnsupportedCompressionTypeError,
)
from kafkasim.common.sentinels import INT64_MAX
from kafkasim.storage.records.batch import TimestampType, encode_batch
from kafkasim.storage.records.compression import CompressionType, compress, xxh32
from kafkasim.storage.records.legacy import (
    LOG_OVERHEAD_V0,
    LOG_OVERHEAD_V1,
    LegacyRecord,
    decode_legacy,
    encode_legacy,
)

LEGACY_CODECS = [c for c in CompressionType if c != CompressionType.ZSTD]


def _message(offset: int, body: bytes) -> bytes:
    """offset + size + CRC32(body) + body, assembled independently of the encoder."""
    return struct.pack(">qiI", offset, len(body) + 4, zlib.crc32(body)) + body


# --- golden bytes -----------------------------------------------------------------------------


def test_v0_message_matches_hand_assembled_bytes() -> None:
    body = bytes.fromhex(
        "00"  # magic 0
        "00"  # attributes: no codec
        "00000001"  # key length 1
        "6b"  # "k"
        "00000003"  # value length 3
        "76616c"  # "val"
    )
    expected = _message(7, body)
    assert encode_legacy([(None, b"k", b"val")], magic=0, base_offset=7) == expected
    assert len(expected) == LOG_OVERHEAD_V0 + 4
    (record,) = decode_legacy(expected)
    assert record == LegacyRecord(
        offset=7,
        magic=0,
        attributes=0,
        timestamp=None,
        timestamp_type=TimestampType.NO_TIMESTAMP_TYPE,
        key=b"k",
        value=b"val",
        crc=zlib.crc32(body),
        size_in_bytes=len(expected),
        compression=CompressionType.NONE,
    )


def test_v1_message_matches_hand_assembled_bytes() -> None:
    body = bytes.fromhex(
        "01"  # magic 1
        "08"  # attributes: LogAppendTime
        "00000000000004d2"  # timestamp 1234
        "ffffffff"  # null key
        "00000000"  # empty value
    )
    expected = _message(0, body)
    encoded = encode_legacy(
        [(1234, None, b"")], magic=1, timestamp_type=TimestampType.LOG_APPEND_TIME
    )
    assert encoded == expected
    assert len(expected) == LOG_OVERHEAD_V1
    (record,) = decode_legacy(expected)
    assert (record.timestamp, record.timestamp_type) == (1234, TimestampType.LOG_APPEND_TIME)
    assert (record.key, record.value) == (None, b"")


def test_v1_gzip_wrapper_matches_hand_assembled_bytes() -> None:
    # magic 1, attributes 0, timestamp, null key, value length 1, value
    inner = _message(0, bytes.fromhex("0100" + "000000000000000a" + "ffffffff" + "0000000161"))
    inner += _message(1, bytes.fromhex("0100" + "0000000000000014" + "ffffffff" + "0000000162"))
    payload = compress(CompressionType.GZIP, inner)
    wrapper_body = (
        # magic 1, gzip, timestamp = max inner timestamp 20, null key, then the value
        bytes.fromhex("0101" + "0000000000000014" + "ffffffff")
        + struct.pack(">i", len(payload))
        + payload
    )
    expected = _message(101, wrapper_body)  # wrapper offset = absolute offset of the last inner
    encoded = encode_legacy(
        [(10, None, b"a"), (20, None, b"b")],
        magic=1,
        base_offset=100,
        compression=CompressionType.GZIP,
    )
    assert encoded == expected


# --- round trips ------------------------------------------------------------------------------

record_tuples = st.tuples(
    st.none() | st.integers(0, INT64_MAX),
    st.none() | st.binary(max_size=40),
    st.none() | st.binary(max_size=120),
)


@settings(deadline=None)
@given(
    records=st.lists(record_tuples, min_size=1, max_size=30),
    magic=st.sampled_from([0, 1]),
    compression=st.sampled_from(LEGACY_CODECS),
    timestamp_type=st.sampled_from([TimestampType.CREATE_TIME, TimestampType.LOG_APPEND_TIME]),
    base_offset=st.integers(0, INT64_MAX - 100),
)
def test_round_trip(
    records: list[tuple[int | None, bytes | None, bytes | None]],
    magic: int,
    compression: CompressionType,
    timestamp_type: TimestampType,
    base_offset: int,
) -> None:
    data = encode_legacy(
        records,
        magic=magic,
        base_offset=base_offset,
        compression=compression,
        timestamp_type=timestamp_type,
    )
    deep = decode_legacy(data)
    assert [r.offset for r in deep] == [base_offset + i for i in range(len(records))]
    assert [(r.key, r.value) for r in deep] == [(k, v) for _, k, v in records]
    assert all(r.magic == magic and r.compression == CompressionType.NONE for r in deep)
    timestamps = [-1 if ts is None else ts for ts, _, _ in records]
    log_append = magic == 1 and timestamp_type == TimestampType.LOG_APPEND_TIME
    if magic == 0:
        assert all(r.timestamp is None for r in deep)
        assert all(r.timestamp_type == TimestampType.NO_TIMESTAMP_TYPE for r in deep)
    elif log_append and compression != CompressionType.NONE:
        # Inner messages report the wrapper's (broker) timestamp.
        assert all(r.timestamp == max(timestamps) for r in deep)
        assert all(r.timestamp_type == TimestampType.LOG_APPEND_TIME for r in deep)
    else:
        assert [r.timestamp for r in deep] == timestamps
        expected_type = TimestampType.LOG_APPEND_TIME if log_append else TimestampType.CREATE_TIME
        assert all(r.timestamp_type == expected_type for r in deep)

    shallow = decode_legacy(data, deep=False)
    if compression == CompressionType.NONE:
        assert shallow == deep
        assert sum(r.size_in_bytes for r in shallow) == len(data)
    else:
        (wrapper,) = shallow
        assert wrapper.offset == base_offset + len(records) - 1
        assert wrapper.key is None
        assert wrapper.compression == compression
        assert wrapper.size_in_bytes == len(data)
        assert wrapper.timestamp == (max(timestamps) if magic == 1 else None)


def test_v1_inner_offsets_are_relative_and_v0_absolute() -> None:
    for magic, expected in ((1, [0, 1, 2]), (0, [40, 41, 42])):
        data = encode_legacy(
            [(1, b"a", b"b")] * 3, magic=magic, base_offset=40, compression=CompressionType.GZIP
        )
        (wrapper,) = decode_legacy(data, deep=False)
        assert wrapper.value is not None
        inner = decode_legacy(zlib.decompress(wrapper.value, 31))
        assert [r.offset for r in inner] == expected


def test_empty_input_is_an_empty_message_set() -> None:
    assert encode_legacy([], magic=1, compression=CompressionType.GZIP) == b""
    assert decode_legacy(b"") == []


def test_zstd_is_not_a_legacy_codec() -> None:
    with pytest.raises(UnsupportedCompressionTypeError, match="zstd"):
        encode_legacy([(0, b"k", b"v")], magic=1, compression=CompressionType.ZSTD)
    wrapper = _message(0, b"\x01\x04" + bytes(8) + b"\xff\xff\xff\xff" + b"\x00\x00\x00\x00")
    with pytest.raises(UnsupportedCompressionTypeError, match="zstd"):
        decode_legacy(wrapper)


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"magic": 2}, ValueError, "0 or 1"),
        ({"magic": 1, "timestamp_type": TimestampType.NO_TIMESTAMP_TYPE}, ValueError, "CreateTime"),
    ],
)
def test_encode_rejects(kwargs: dict[str, object], error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=message):
        encode_legacy([(0, None, None)], **kwargs)  # type: ignore[arg-type]


def test_v1_rejects_negative_timestamps_but_ignores_them_in_v0() -> None:
    with pytest.raises(ValueError, match="negative timestamp -5"):
        encode_legacy([(-5, None, None)], magic=1)
    assert decode_legacy(encode_legacy([(-5, None, None)], magic=0))[0].timestamp is None


# --- lz4 and KAFKA-3160 -----------------------------------------------------------------------


@pytest.mark.parametrize("magic", [0, 1])
def test_lz4_wrapper_header_checksum_per_magic(magic: int) -> None:
    data = encode_legacy(
        [(5, b"key", b"value" * 50)] * 4, magic=magic, compression=CompressionType.LZ4
    )
    (wrapper,) = decode_legacy(data, deep=False)
    assert wrapper.value is not None
    frame = wrapper.value
    hashed = frame[0:6] if magic == 0 else frame[4:6]  # v0: Kafka's broken checksum
    assert frame[6] == (xxh32(hashed) >> 8) & 0xFF
    assert [r.value for r in decode_legacy(data)] == [b"value" * 50] * 4


# --- corruption -------------------------------------------------------------------------------


@pytest.mark.parametrize("magic", [0, 1])
@pytest.mark.parametrize("compression", [CompressionType.NONE, CompressionType.SNAPPY])
def test_every_flipped_byte_is_caught_except_the_offset(
    magic: int, compression: CompressionType
) -> None:
    # Each message's CRC32 covers magic to the end of the value (bytes 16 onwards). The offset
    # (0-7) is outside it and a flip there goes unnoticed (for a wrapper it shifts every inner
    # offset); a flipped size (8-11) makes the message overrun the buffer or end early, which
    # the CRC or the size checks catch; a flipped CRC (12-15) no longer matches.
    original = encode_legacy(
        [(3, b"k", b"v"), (4, None, b"value")], magic=magic, compression=compression
    )
    offset_fields = set(range(8))
    if compression == CompressionType.NONE:
        second = _second(original)
        offset_fields |= set(range(second, second + 8))
    for position in range(len(original)):
        for mask in (0x01, 0x80, 0xFF):
            flipped = bytearray(original)
            flipped[position] ^= mask
            if position in offset_fields:
                assert len(decode_legacy(flipped)) == 2
                continue
            with pytest.raises(CorruptRecordError):
                decode_legacy(flipped)


def _second(data: bytes) -> int:
    """Position of the second message of an uncompressed message set."""
    (size,) = struct.unpack_from(">i", data, 8)
    return 12 + int(size)


@pytest.mark.parametrize("magic", [0, 1])
@pytest.mark.parametrize("compression", LEGACY_CODECS)
def test_every_truncation_is_corrupt(magic: int, compression: CompressionType) -> None:
    data = encode_legacy(
        [(3, b"k", b"v"), (4, None, b"value")], magic=magic, compression=compression
    )
    for cut in range(1, len(data)):
        if compression == CompressionType.NONE and cut == _second(data):
            assert len(decode_legacy(data[:cut])) == 1  # a whole first message: valid
            continue
        with pytest.raises(CorruptRecordError):
            decode_legacy(data[:cut])


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"\x02\x00" + b"\xff\xff\xff\xff" * 3, "magic 2"),
        (b"\x01\x00" + b"\xff\xff\xff\xff" * 3, "below the v1 minimum 22"),
        (b"\x00\x00" + b"\x00\x00\x00\x05" + b"\xff\xff\xff\xff", "invalid key length 5"),
        (b"\x00\x00" + b"\xff\xff\xff\xff" + b"\x00\x00\x00\x09", "invalid value length 9"),
        (b"\x00\x00" + b"\xff\xff\xff\xff" * 2 + b"xx", "2 bytes after its value"),
        (b"\x00\x00" + b"\x00\x00\x00\x04" + b"abcd", "no room for its value length"),
        (b"\x00\x07" + b"\xff\xff\xff\xff" * 2, "compression type id 7"),
    ],
)
def test_malformed_messages_with_valid_crc_are_corrupt(body: bytes, message: str) -> None:
    with pytest.raises(CorruptRecordError, match=message):
        decode_legacy(_message(0, body))


def test_size_below_the_minimum_is_corrupt() -> None:
    with pytest.raises(CorruptRecordError, match="below the minimum 14"):
        decode_legacy(struct.pack(">qiI", 0, 13, 0) + bytes(9))


def test_a_v2_batch_is_not_a_legacy_message() -> None:
    with pytest.raises(CorruptRecordError, match="magic 2"):
        decode_legacy(encode_batch([(0, b"k", b"v")]))


def _wrapper(magic: int, inner: bytes, offset: int = 0) -> bytes:
    payload = compress(CompressionType.GZIP, inner)
    ts = bytes(8) if magic == 1 else b""
    body = bytes([magic, 1]) + ts + b"\xff\xff\xff\xff" + struct.pack(">i", len(payload)) + payload
    return _message(offset, body)


def test_nested_compression_is_invalid() -> None:
    nested = _wrapper(1, encode_legacy([(0, b"k", b"v")], magic=1))
    with pytest.raises(InvalidRecordError, match="nests another compressed"):
        decode_legacy(_wrapper(1, nested))


def test_inner_magic_must_match_the_wrapper() -> None:
    with pytest.raises(InvalidRecordError, match="inner message has magic 0"):
        decode_legacy(_wrapper(1, encode_legacy([(0, b"k", b"v")], magic=0)))


def test_wrapper_with_null_value_is_invalid() -> None:
    body = b"\x01\x01" + bytes(8) + b"\xff\xff\xff\xff" * 2
    with pytest.raises(InvalidRecordError, match="null value"):
        decode_legacy(_message(0, body))


def test_corrupt_compressed_payload_is_corrupt() -> None:
    body = b"\x01\x01" + bytes(8) + b"\xff\xff\xff\xff" + b"\x00\x00\x00\x03" + b"abc"
    with pytest.raises(CorruptRecordError, match="gzip"):
        decode_legacy(_message(0, body))
