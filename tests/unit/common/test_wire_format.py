"""The shared Kafka primitives: what the writer writes the reader reads back, nulls where the
field allows them, and every cut or malformed input as CORRUPT_MESSAGE naming the field."""

from __future__ import annotations

import struct
from collections.abc import Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kafkasim.common.errors import CorruptRecordError
from kafkasim.common.wire_format import WireReader, WireWriter

Fields = tuple[int, int, int, str, str | None, bytes, bytes | None, int]


def _write_all(values: Fields) -> bytes:
    i16, i32, i64, s, ns, b, nb, n = values
    w = WireWriter()
    w.int16(i16, "a")
    w.int32(i32, "b")
    w.int64(i64, "c")
    w.string(s, "d")
    w.nullable_string(ns, "e")
    w.bytes_(b, "f")
    w.nullable_bytes(nb, "g")
    w.count(n, "h")
    for i in range(n):
        w.int32(i, "h[]")
    return w.getvalue()


fields = st.tuples(
    st.integers(-(2**15), 2**15 - 1),
    st.integers(-(2**31), 2**31 - 1),
    st.integers(-(2**63), 2**63 - 1),
    st.text(max_size=8),
    st.none() | st.text(max_size=8),
    st.binary(max_size=8),
    st.none() | st.binary(max_size=8),
    st.integers(0, 3),
)


@given(fields)
def test_what_is_written_reads_back(values: Fields) -> None:
    r = WireReader(_write_all(values), "test record")
    n = values[-1]
    got = (
        r.int16("a"),
        r.int32("b"),
        r.int64("c"),
        r.string("d"),
        r.nullable_string("e"),
        r.bytes_("f"),
        r.nullable_bytes("g"),
        r.count("h", 4),
    )
    assert [r.int32("h[]") for _ in range(n)] == list(range(n))
    r.done()
    assert got == values


@given(fields, st.data())
def test_every_cut_is_corrupt(values: Fields, data: st.DataObject) -> None:
    encoded = _write_all(values)
    cut = data.draw(st.integers(0, len(encoded) - 1))
    r = WireReader(encoded[:cut], "test record")
    with pytest.raises(CorruptRecordError, match=r"^CORRUPT_MESSAGE: test record: truncated at "):
        r.int16("a")
        r.int32("b")
        r.int64("c")
        r.string("d")
        r.nullable_string("e")
        r.bytes_("f")
        r.nullable_bytes("g")
        for _ in range(r.count("h", 0)):
            r.int32("h[]")


def test_truncation_names_the_field_and_the_position() -> None:
    r = WireReader(b"\x00\x01\x00", "rec")
    assert r.int16("version") == 1
    with pytest.raises(CorruptRecordError, match="rec: truncated at x: needs 4 bytes at byte 2"):
        r.int32("x")


def test_nulls_where_the_field_allows_them() -> None:
    w = WireWriter()
    w.nullable_string(None, "s")
    w.nullable_bytes(None, "b")
    data = w.getvalue()
    assert data == struct.pack(">hi", -1, -1)
    r = WireReader(data, "rec")
    assert r.nullable_string("s") is None
    assert r.nullable_bytes("b") is None
    r.done()


@pytest.mark.parametrize(
    ("data", "read", "problem"),
    [
        (struct.pack(">h", -1), WireReader.string, "rec: s has length -1; it cannot be null"),
        (struct.pack(">h", -2), WireReader.nullable_string, "rec: s has length -2$"),
        (struct.pack(">i", -1), WireReader.bytes_, "rec: s has length -1; it cannot be null"),
        (struct.pack(">i", -2), WireReader.nullable_bytes, "rec: s has length -2$"),
        (struct.pack(">h", 1) + b"\xff", WireReader.string, "rec: s is not valid UTF-8"),
    ],
)
def test_a_null_or_negative_length_where_the_field_has_none_is_corrupt(
    data: bytes, read: Callable[[WireReader, str], object], problem: str
) -> None:
    r = WireReader(data, "rec")
    with pytest.raises(CorruptRecordError, match=problem):
        read(r, "s")


def test_counts_are_checked_against_the_bytes_left() -> None:
    with pytest.raises(CorruptRecordError, match="rec: xs has count -1; it cannot be null"):
        WireReader(struct.pack(">i", -1), "rec").count("xs", 4)
    with pytest.raises(CorruptRecordError, match="rec: xs claims 3 entries but only 8 bytes"):
        WireReader(struct.pack(">iii", 3, 0, 0), "rec").count("xs", 4)


def test_trailing_bytes_are_corrupt() -> None:
    r = WireReader(b"\x00\x00\x07", "rec")
    r.int16("version")
    with pytest.raises(CorruptRecordError, match="rec: 1 unexpected bytes after the last field"):
        r.done()


def test_corrupt_is_kafkas_corrupt_message() -> None:
    error = WireReader(b"", "rec").corrupt("bad")
    assert isinstance(error, CorruptRecordError)
    assert error.error_name == "CORRUPT_MESSAGE"
    assert error.message == "rec: bad"


@pytest.mark.parametrize(
    ("write", "problem"),
    [
        (lambda w: w.int16(2**15, "v"), "v 32768 does not fit in an int16"),
        (lambda w: w.int32(-(2**31) - 1, "v"), "v -2147483649 does not fit in an int32"),
        (lambda w: w.int64(2**63, "v"), "v 9223372036854775808 does not fit in an int64"),
        (lambda w: w.count(2**31, "xs"), "xs has 2147483648 entries"),
        (lambda w: w.string("x" * 40_000, "s"), "s is 40000 UTF-8 bytes, more than 32767"),
    ],
)
def test_writing_what_a_type_cannot_hold_is_a_value_error(
    write: Callable[[WireWriter], None], problem: str
) -> None:
    with pytest.raises(ValueError, match=problem):
        write(WireWriter())
