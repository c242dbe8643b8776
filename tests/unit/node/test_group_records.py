"""The records of ``__consumer_offsets`` byte for byte as Kafka writes them, every version
Kafka has written, garbage that must fail as CORRUPT_MESSAGE, and the group's partition."""

from __future__ import annotations

import contextlib
import struct
from collections.abc import Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kafkasim.common.errors import CorruptRecordError
from kafkasim.node.group_records import (
    OFFSETS_TOPIC,
    GroupKey,
    GroupValue,
    MemberValue,
    OffsetKey,
    OffsetValue,
    decode_group_value,
    decode_key,
    decode_offset_value,
    encode_group_key,
    encode_group_value,
    encode_offset_key,
    encode_offset_value,
    java_string_hash,
    partition_for,
)

# Hand-assembled Kafka primitives, independent of the module under test.


def i16(n: int) -> bytes:
    return struct.pack(">h", n)


def i32(n: int) -> bytes:
    return struct.pack(">i", n)


def i64(n: int) -> bytes:
    return struct.pack(">q", n)


def s(text: str | None) -> bytes:
    if text is None:
        return i16(-1)
    data = text.encode()
    return i16(len(data)) + data


def b(data: bytes) -> bytes:
    return i32(len(data)) + data


def test_the_topic_is_kafkas() -> None:
    assert OFFSETS_TOPIC == "__consumer_offsets"


# --- keys -----------------------------------------------------------------------------------


def test_offset_key_is_version_1_group_topic_partition() -> None:
    assert encode_offset_key(OffsetKey("g", "t", 3)) == i16(1) + s("g") + s("t") + i32(3)


def test_group_key_is_version_2_group() -> None:
    assert encode_group_key(GroupKey("grp")) == i16(2) + s("grp")


@pytest.mark.parametrize(
    ("data", "key"),
    [
        (i16(0) + s("g") + s("t") + i32(0), OffsetKey("g", "t", 0)),
        (i16(1) + s("g") + s("t") + i32(7), OffsetKey("g", "t", 7)),
        (i16(2) + s("g"), GroupKey("g")),
    ],
)
def test_the_key_version_says_what_the_record_is(data: bytes, key: OffsetKey | GroupKey) -> None:
    assert decode_key(data) == key


# --- offset values --------------------------------------------------------------------------


def test_offset_value_is_version_3() -> None:
    value = OffsetValue(offset=5, leader_epoch=2, metadata="m", commit_timestamp=1000)
    assert encode_offset_value(value) == i16(3) + i64(5) + i32(2) + s("m") + i64(1000)


def test_offset_value_with_an_expire_timestamp_is_version_1() -> None:
    """Kafka writes version 1, the only one with the field, when a commit sets a retention."""
    value = OffsetValue(5, -1, "", 1000, expire_timestamp=9000)
    assert encode_offset_value(value) == i16(1) + i64(5) + s("") + i64(1000) + i64(9000)


def test_an_expire_timestamp_with_a_leader_epoch_is_refused() -> None:
    with pytest.raises(ValueError, match="no leader epoch; got leader_epoch 4"):
        encode_offset_value(OffsetValue(5, 4, "", 1000, expire_timestamp=9000))


@pytest.mark.parametrize(
    ("data", "value"),
    [
        (i16(0) + i64(5) + s("m") + i64(10), OffsetValue(5, -1, "m", 10, -1)),
        (i16(1) + i64(5) + s("m") + i64(10) + i64(20), OffsetValue(5, -1, "m", 10, 20)),
        (i16(2) + i64(5) + s("") + i64(10), OffsetValue(5, -1, "", 10, -1)),
        (i16(3) + i64(5) + i32(8) + s("m") + i64(10), OffsetValue(5, 8, "m", 10, -1)),
    ],
    ids=["v0", "v1", "v2", "v3"],
)
def test_every_offset_value_version_decodes(data: bytes, value: OffsetValue) -> None:
    assert decode_offset_value(data) == value


# --- group values ---------------------------------------------------------------------------

MEMBER = MemberValue(
    member_id="consumer-1-abc",
    group_instance_id="instance-1",
    client_id="consumer-1",
    client_host="/127.0.0.1",
    rebalance_timeout_ms=300_000,
    session_timeout_ms=10_000,
    subscription=b"sub",
    assignment=b"asg",
)
GROUP = GroupValue(
    protocol_type="consumer",
    generation=4,
    protocol="range",
    leader="consumer-1-abc",
    current_state_timestamp=1_700_000_000_000,
    members=(MEMBER,),
)


def test_group_value_is_version_3() -> None:
    assert encode_group_value(GROUP) == (
        i16(3)
        + s("consumer")
        + i32(4)
        + s("range")
        + s("consumer-1-abc")
        + i64(1_700_000_000_000)
        + i32(1)
        + s("consumer-1-abc")
        + s("instance-1")
        + s("consumer-1")
        + s("/127.0.0.1")
        + i32(300_000)
        + i32(10_000)
        + b(b"sub")
        + b(b"asg")
    )


def test_an_empty_group_has_null_protocol_and_leader() -> None:
    empty = GroupValue("consumer", 5, None, None, -1, ())
    encoded = encode_group_value(empty)
    assert encoded == i16(3) + s("consumer") + i32(5) + s(None) + s(None) + i64(-1) + i32(0)
    assert decode_group_value(encoded) == empty


def _group_bytes(version: int) -> bytes:
    """The GROUP above as Kafka would have written it with ``version``."""
    head = s("consumer") + i32(4) + s("range") + s("consumer-1-abc")
    if version >= 2:
        head += i64(1_700_000_000_000)
    member = s("consumer-1-abc")
    if version >= 3:
        member += s("instance-1")
    member += s("consumer-1") + s("/127.0.0.1")
    if version >= 1:
        member += i32(300_000)
    member += i32(10_000) + b(b"sub") + b(b"asg")
    return i16(version) + head + i32(1) + member


@pytest.mark.parametrize(
    ("version", "expected"),
    [
        # Version 0 predates the rebalance timeout: Kafka loads the session timeout in its place.
        (
            0,
            GroupValue(
                "consumer",
                4,
                "range",
                "consumer-1-abc",
                -1,
                (
                    MemberValue(
                        "consumer-1-abc", None, "consumer-1", "/127.0.0.1", 10_000, 10_000, b"sub",
                        b"asg",
                    ),
                ),
            ),
        ),
        (
            1,
            GroupValue(
                "consumer",
                4,
                "range",
                "consumer-1-abc",
                -1,
                (
                    MemberValue(
                        "consumer-1-abc", None, "consumer-1", "/127.0.0.1", 300_000, 10_000,
                        b"sub", b"asg",
                    ),
                ),
            ),
        ),
        (
            2,
            GroupValue(
                "consumer",
                4,
                "range",
                "consumer-1-abc",
                1_700_000_000_000,
                (
                    MemberValue(
                        "consumer-1-abc", None, "consumer-1", "/127.0.0.1", 300_000, 10_000,
                        b"sub", b"asg",
                    ),
                ),
            ),
        ),
        (3, GROUP),
    ],
)  # fmt: skip
def test_every_group_value_version_decodes(version: int, expected: GroupValue) -> None:
    assert decode_group_value(_group_bytes(version)) == expected


# --- properties -----------------------------------------------------------------------------

text = st.text(max_size=20)
int32s = st.integers(-(2**31), 2**31 - 1)
int64s = st.integers(-(2**63), 2**63 - 1)
offset_keys = st.builds(OffsetKey, text, text, int32s)
group_keys = st.builds(GroupKey, text)
offset_values = st.one_of(
    st.builds(OffsetValue, int64s, int32s, text, int64s, st.just(-1)),
    st.builds(OffsetValue, int64s, st.just(-1), text, int64s, int64s),
)
members = st.builds(
    MemberValue,
    text,
    st.none() | text,
    text,
    text,
    int32s,
    int32s,
    st.binary(max_size=20),
    st.binary(max_size=20),
)
group_values = st.builds(
    GroupValue,
    text,
    int32s,
    st.none() | text,
    st.none() | text,
    int64s,
    st.lists(members, max_size=4).map(tuple),
)


@given(offset_keys | group_keys)
def test_keys_round_trip(key: OffsetKey | GroupKey) -> None:
    encoded = encode_offset_key(key) if isinstance(key, OffsetKey) else encode_group_key(key)
    assert decode_key(encoded) == key


@given(offset_values)
def test_offset_values_round_trip(value: OffsetValue) -> None:
    assert decode_offset_value(encode_offset_value(value)) == value


@given(group_values)
def test_group_values_round_trip(value: GroupValue) -> None:
    assert decode_group_value(encode_group_value(value)) == value


# A cut shows either as a field running past the end or as a count bigger than what is left.
TRUNCATED = r"(truncated at |.* claims \d+ entries but only)"


def _cases() -> st.SearchStrategy[tuple[Callable[[bytes], object], bytes]]:
    return st.one_of(
        offset_keys.map(lambda k: (decode_key, encode_offset_key(k))),
        group_keys.map(lambda k: (decode_key, encode_group_key(k))),
        offset_values.map(lambda v: (decode_offset_value, encode_offset_value(v))),
        group_values.map(lambda v: (decode_group_value, encode_group_value(v))),
    )


@given(_cases(), st.data())
def test_every_truncated_record_is_corrupt(
    case: tuple[Callable[[bytes], object], bytes], data: st.DataObject
) -> None:
    decode, encoded = case
    cut = data.draw(st.integers(0, len(encoded) - 1))
    with pytest.raises(CorruptRecordError, match=TRUNCATED):
        decode(encoded[:cut])


@given(_cases(), st.binary(min_size=1, max_size=8))
def test_trailing_bytes_are_corrupt(
    case: tuple[Callable[[bytes], object], bytes], extra: bytes
) -> None:
    decode, encoded = case
    with pytest.raises(CorruptRecordError, match=f"{len(extra)} unexpected bytes"):
        decode(encoded + extra)


@given(st.binary(max_size=64))
def test_garbage_decodes_or_is_corrupt_never_another_error(garbage: bytes) -> None:
    for decode in (decode_key, decode_offset_value, decode_group_value):
        with contextlib.suppress(CorruptRecordError):
            decode(garbage)


# --- bad input, one by one ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("decode", "data", "problem"),
    [
        (decode_key, b"", "key: truncated at version"),
        (decode_key, i16(3) + s("g"), "unknown group metadata message version 3"),
        (decode_key, i16(-1) + s("g"), "unknown group metadata message version -1"),
        (decode_key, i16(2) + s(None), "group is null"),
        (decode_key, i16(1) + s("g") + s("t") + b"\x00", "truncated at partition: needs 4"),
        (decode_key, i16(2) + i16(1) + b"\xc3", "group is not valid UTF-8"),
        (decode_key, i16(2) + i16(-7), "group has length -7"),
        (decode_offset_value, i16(4) + i64(0), "unknown offset message version 4"),
        (decode_offset_value, i16(-1), "unknown offset message version -1"),
        (decode_offset_value, i16(3) + i64(1) + i32(0) + s(None) + i64(0), "metadata is null"),
        (decode_offset_value, i16(1) + i64(1) + s("") + i64(0), "truncated at expire_timestamp"),
        (decode_group_value, i16(4), "unknown group metadata message version 4"),
        (decode_group_value, i16(0) + s(None), "protocol_type is null"),
        (
            decode_group_value,
            i16(0) + s("c") + i32(1) + s(None) + s(None) + i32(-1),
            "members has count -1",
        ),
        (
            decode_group_value,
            i16(0) + s("c") + i32(1) + s(None) + s(None) + i32(1_000_000),
            "members claims 1000000 entries",
        ),
        (
            decode_group_value,
            i16(0) + s("c") + i32(1) + s(None) + s(None) + i32(1)
            + s("m") + s("c") + s("h") + i32(1) + i32(-1) + b(b""),
            r"members\[0\].subscription has length -1; it cannot be null",
        ),
    ],
)  # fmt: skip
def test_bad_records_name_what_is_wrong(
    decode: Callable[[bytes], object], data: bytes, problem: str
) -> None:
    with pytest.raises(CorruptRecordError, match=problem):
        decode(data)


@pytest.mark.parametrize(
    ("encode", "problem"),
    [
        (lambda: encode_offset_key(OffsetKey("g" * 40_000, "t", 0)), "group is 40000 UTF-8"),
        (lambda: encode_offset_key(OffsetKey("g", "t", 2**31)), "partition 2147483648"),
        (lambda: encode_offset_value(OffsetValue(2**63, -1, "", 0)), "offset .* int64"),
        (
            lambda: encode_group_value(GroupValue("c", 2**31, None, None, -1, ())),
            "generation .* int32",
        ),
    ],
)
def test_encoding_what_the_format_cannot_hold_is_a_value_error(
    encode: Callable[[], bytes], problem: str
) -> None:
    with pytest.raises(ValueError, match=problem):
        encode()


# --- the group's partition ------------------------------------------------------------------

INT_MIN = -(2**31)


@pytest.mark.parametrize(
    ("string", "hash_code"),
    [
        ("", 0),
        ("a", 97),
        ("hello", 99162322),
        # Aa and BB: the textbook String.hashCode collision.
        ("Aa", 2112),
        ("BB", 2112),
        ("polygenelubricants", INT_MIN),
        # U+1F600 is the surrogate pair D83D DE00 in UTF-16: 0xD83D * 31 + 0xDE00.
        ("\U0001f600", 0xD83D * 31 + 0xDE00),
        ("\u00e9", 0xE9),  # one UTF-16 unit, though two UTF-8 bytes
    ],
)
def test_java_string_hash_matches_java(string: str, hash_code: int) -> None:
    assert java_string_hash(string) == hash_code


def test_a_non_bmp_character_hashes_as_its_surrogates_not_its_code_point() -> None:
    assert java_string_hash("\U0001f600") == java_string_hash("\ud83d\ude00")
    assert java_string_hash("\U0001f600") != 0x1F600


@given(st.text(max_size=30))
def test_java_string_hash_is_the_closed_form_sum(string: str) -> None:
    """s[0]*31^(n-1) + ... + s[n-1] over UTF-16 units, wrapped to a signed int32."""
    units = string.encode("utf-16-be")
    codes = [int.from_bytes(units[i : i + 2], "big") for i in range(0, len(units), 2)]
    n = len(codes)
    total = sum(c * 31 ** (n - 1 - i) for i, c in enumerate(codes)) % 2**32
    assert java_string_hash(string) == (total - 2**32 if total >= 2**31 else total)


@pytest.mark.parametrize(
    ("group", "partitions", "expected"),
    [
        ("", 50, 0),
        ("a", 50, 47),  # 97 % 50
        ("hello", 50, 22),  # 99162322 % 50
        # Math.abs(Integer.MIN_VALUE) is negative; Kafka's Utils.abs makes it 0.
        ("polygenelubricants", 50, 0),
        ("polygenelubricants", 7, 0),
    ],
)
def test_partition_for_is_kafkas(group: str, partitions: int, expected: int) -> None:
    assert partition_for(group, partitions) == expected


def test_partition_for_a_negative_hash_uses_its_absolute_value() -> None:
    """Utils.abs, not the producer's sign-bit mask (which would give 36 here)."""
    assert java_string_hash("my-group") == -1906497762
    assert partition_for("my-group", 50) == 1906497762 % 50 == 12


@given(st.text(max_size=30), st.integers(1, 200))
def test_partition_for_is_in_range(group: str, partitions: int) -> None:
    assert 0 <= partition_for(group, partitions) < partitions


@pytest.mark.parametrize("partitions", [0, -1])
def test_partition_for_needs_a_partition(partitions: int) -> None:
    with pytest.raises(ValueError, match="at least one partition"):
        partition_for("g", partitions)
