"""Zig-zag varints: Protobuf's sint32/sint64 wire encoding, as Kafka's v2 records use it."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kafkasim.common.errors import InvalidRecordError
from kafkasim.common.sentinels import INT32_MAX, INT32_MIN, INT64_MAX, INT64_MIN
from kafkasim.storage.records.varint import (
    NULL_VARINT,
    SMALL_VARINT_LIMIT,
    SMALL_VARINTS,
    UINT32_MAX,
    decode_unsigned_varint,
    decode_varint,
    decode_varlong,
    encode_unsigned_varint,
    encode_varint,
    encode_varlong,
    raw_varint,
    size_of_unsigned_varint,
    size_of_varint,
    size_of_varlong,
)


@pytest.mark.parametrize(
    ("value", "encoded"),
    [
        # Zig-zag pairs from Protobuf's encoding guide: 0->0, -1->1, 1->2, -2->3, ...
        (0, "00"),
        (-1, "01"),
        (1, "02"),
        (-2, "03"),
        (63, "7e"),
        (-64, "7f"),
        (64, "8001"),
        (300, "d804"),
        (INT32_MAX, "feffffff0f"),  # zig-zag 4294967294
        (INT32_MIN, "ffffffff0f"),  # zig-zag 4294967295
    ],
)
def test_varint_known_encodings(value: int, encoded: str) -> None:
    assert encode_varint(value).hex() == encoded
    assert decode_varint(bytes.fromhex(encoded)) == (value, len(encoded) // 2)
    assert size_of_varint(value) == len(encoded) // 2


@pytest.mark.parametrize(
    ("value", "encoded"),
    [
        (INT64_MAX, "feffffffffffffffff01"),
        (INT64_MIN, "ffffffffffffffffff01"),
        (-(1 << 31) - 1, "8180808010"),  # just below int32: needs a varlong
    ],
)
def test_varlong_known_encodings(value: int, encoded: str) -> None:
    assert encode_varlong(value).hex() == encoded
    assert decode_varlong(bytes.fromhex(encoded)) == (value, len(encoded) // 2)
    assert size_of_varlong(value) == len(encoded) // 2


def test_null_length_is_the_encoding_of_minus_one() -> None:
    assert encode_varint(-1) == NULL_VARINT == b"\x01"


def test_small_table_matches_the_general_encoder() -> None:
    # The table is a cache of the loop; both must agree everywhere the table is used.
    from kafkasim.storage.records.varint import _zigzag_bytes

    assert len(SMALL_VARINTS) == SMALL_VARINT_LIMIT
    for n in (0, 1, 63, 64, 127, 128, 4095, 4096, SMALL_VARINT_LIMIT - 1):
        assert SMALL_VARINTS[n] == _zigzag_bytes(n << 1)


@given(st.integers(INT32_MIN, INT32_MAX))
def test_varint_round_trip(value: int) -> None:
    encoded = encode_varint(value)
    assert len(encoded) == size_of_varint(value) <= 5
    assert decode_varint(b"\xaa" + encoded + b"\xff", 1) == (value, 1 + len(encoded))


@given(st.integers(INT64_MIN, INT64_MAX))
def test_varlong_round_trip(value: int) -> None:
    encoded = encode_varlong(value)
    assert len(encoded) == size_of_varlong(value) <= 10
    assert decode_varlong(encoded) == (value, len(encoded))


@given(st.integers(0, UINT32_MAX))
def test_unsigned_varint_round_trip(value: int) -> None:
    encoded = encode_unsigned_varint(value)
    assert len(encoded) == size_of_unsigned_varint(value) <= 5
    assert decode_unsigned_varint(encoded) == (value, len(encoded))


@pytest.mark.parametrize(
    ("encoder", "value"),
    [
        (encode_varint, INT32_MAX + 1),
        (encode_varint, INT32_MIN - 1),
        (encode_varlong, INT64_MAX + 1),
        (encode_varlong, INT64_MIN - 1),
        (encode_unsigned_varint, -1),
        (encode_unsigned_varint, UINT32_MAX + 1),
    ],
)
def test_encoders_reject_values_outside_their_type(encoder: object, value: int) -> None:
    with pytest.raises(ValueError, match="outside"):
        encoder(value)  # type: ignore[operator]


@pytest.mark.parametrize(
    ("decoder", "data", "why"),
    [
        (decode_varint, b"", "past the end"),
        (decode_varint, b"\x80", "past the end"),
        (decode_varint, b"\xff\xff\xff\xff\xff\x01", "longer than 5"),
        (decode_varint, b"\xff\xff\xff\xff\x7f", "does not fit in 32 bits"),
        (decode_varlong, b"\xff" * 10 + b"\x01", "longer than 10"),
        (decode_varlong, b"\xff" * 9 + b"\x7f", "does not fit in 64 bits"),
        (decode_unsigned_varint, b"\xff\xff\xff\xff\x1f", "does not fit in 32 bits"),
    ],
)
def test_decoders_reject_malformed_varints_with_invalid_record(
    decoder: object, data: bytes, why: str
) -> None:
    # Inside a record a bad varint is Kafka's InvalidRecordException, never an IndexError.
    with pytest.raises(InvalidRecordError, match=why):
        decoder(data)  # type: ignore[operator]


@given(st.integers(INT64_MIN, INT64_MAX))
def test_raw_varint_is_the_still_zigzagged_value(value: int) -> None:
    buf = encode_varlong(value)
    raw, pos = raw_varint(buf, 0, 10)
    assert ((raw >> 1) ^ -(raw & 1), pos) == (value, len(buf))
    if INT32_MIN <= value <= INT32_MAX:
        assert raw_varint(encode_varint(value), 0, 5) == (raw, len(buf))


def test_raw_varint_keeps_the_width_of_a_varint() -> None:
    with pytest.raises(InvalidRecordError, match="longer than 5 bytes"):
        raw_varint(encode_varlong(2**40), 0, 5)
