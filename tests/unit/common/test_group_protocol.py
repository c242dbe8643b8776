"""Kafka's consumer protocol: the exact bytes of subscriptions and assignments, the versions a
member of another Kafka release may send, and garbage that must fail as CORRUPT_MESSAGE."""

from __future__ import annotations

import contextlib
import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kafkasim.common.errors import CorruptRecordError
from kafkasim.common.group_protocol import (
    PROTOCOL_TYPE,
    Assignment,
    Subscription,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
)
from kafkasim.common.types import TopicPartition

# Hand-assembled Kafka primitives, independent of the module under test.


def i16(n: int) -> bytes:
    return struct.pack(">h", n)


def i32(n: int) -> bytes:
    return struct.pack(">i", n)


def s(text: str) -> bytes:
    data = text.encode()
    return i16(len(data)) + data


def b(data: bytes | None) -> bytes:
    return i32(-1) if data is None else i32(len(data)) + data


def ints(*values: int) -> bytes:
    return i32(len(values)) + b"".join(i32(v) for v in values)


def test_protocol_type_is_kafkas() -> None:
    assert PROTOCOL_TYPE == "consumer"


def test_subscription_without_owned_partitions_is_version_0() -> None:
    encoded = encode_subscription(Subscription(("t0", "t1")))
    assert encoded == i16(0) + i32(2) + s("t0") + s("t1") + b(None)


def test_subscription_with_owned_partitions_is_version_1_grouped_by_sorted_topic() -> None:
    """Owned partitions are written per topic, topics sorted and partitions ascending, so the
    same set always gives the same bytes."""
    sub = Subscription(
        ("b", "a"),
        user_data=b"\x01\x02",
        owned_partitions=(TopicPartition("b", 1), TopicPartition("a", 2), TopicPartition("b", 0)),
    )
    assert encode_subscription(sub) == (
        i16(1)
        + i32(2)
        + s("b")
        + s("a")
        + b(b"\x01\x02")
        + i32(2)
        + s("a")
        + ints(2)
        + s("b")
        + ints(0, 1)
    )


def test_assignment_is_version_0_grouped_by_sorted_topic() -> None:
    assignment = Assignment(
        (TopicPartition("t1", 2), TopicPartition("t0", 1), TopicPartition("t0", 0)), b""
    )
    assert encode_assignment(assignment) == (
        i16(0) + i32(2) + s("t0") + ints(0, 1) + s("t1") + ints(2) + b(b"")
    )


def test_null_and_empty_user_data_stay_distinct() -> None:
    """-1 and 0 are different lengths on the wire; an assignor may rely on the difference."""
    assert decode_assignment(encode_assignment(Assignment((), None))).user_data is None
    assert decode_assignment(encode_assignment(Assignment((), b""))).user_data == b""
    assert decode_subscription(encode_subscription(Subscription((), b""))).user_data == b""


def test_subscription_version_2_is_read_with_version_1_fields() -> None:
    """Version 2 appends a generation id; a member that knows version 1 reads the rest."""
    data = i16(2) + i32(1) + s("t") + b(None) + i32(1) + s("t") + ints(3) + i32(7)
    assert decode_subscription(data) == Subscription(("t",), None, (TopicPartition("t", 3),))


def test_a_future_subscription_version_is_read_with_the_fields_known_here() -> None:
    data = i16(9) + i32(1) + s("t") + b(b"u") + i32(0) + b"any later fields"
    assert decode_subscription(data) == Subscription(("t",), b"u", ())


@pytest.mark.parametrize("version", [1, 2, 7])
def test_later_assignment_versions_share_version_0_fields(version: int) -> None:
    body = i32(1) + s("t") + ints(0, 1) + b(None)
    extra = b"\x00\x01" if version > 2 else b""
    assert decode_assignment(i16(version) + body + extra) == Assignment(
        (TopicPartition("t", 0), TopicPartition("t", 1))
    )


def test_decoding_keeps_the_wire_order_of_partitions() -> None:
    data = i16(0) + i32(2) + s("z") + ints(5, 1) + s("a") + ints(0) + b(None)
    assert decode_assignment(data).partitions == (
        TopicPartition("z", 5),
        TopicPartition("z", 1),
        TopicPartition("a", 0),
    )


# --- properties -----------------------------------------------------------------------------

names = st.text(min_size=0, max_size=20)
topic_partitions = st.builds(TopicPartition, names, st.integers(-(2**31), 2**31 - 1))
user_data = st.none() | st.binary(max_size=40)
subscriptions = st.builds(
    Subscription,
    st.lists(names, max_size=6).map(tuple),
    user_data,
    st.lists(topic_partitions, max_size=8).map(tuple),
)
assignments = st.builds(Assignment, st.lists(topic_partitions, max_size=8).map(tuple), user_data)


@given(subscriptions)
def test_subscription_round_trips(sub: Subscription) -> None:
    decoded = decode_subscription(encode_subscription(sub))
    assert decoded == Subscription(sub.topics, sub.user_data, tuple(sorted(sub.owned_partitions)))
    assert encode_subscription(decoded) == encode_subscription(sub)


@given(assignments)
def test_assignment_round_trips(assignment: Assignment) -> None:
    decoded = decode_assignment(encode_assignment(assignment))
    assert decoded == Assignment(tuple(sorted(assignment.partitions)), assignment.user_data)
    assert encode_assignment(decoded) == encode_assignment(assignment)


# A cut shows either as a field running past the end or as a count bigger than what is left.
TRUNCATED = r"(truncated at |.* claims \d+ entries but only)"


@given(subscriptions, st.data())
def test_every_truncated_subscription_is_corrupt(sub: Subscription, data: st.DataObject) -> None:
    encoded = encode_subscription(sub)
    cut = data.draw(st.integers(0, len(encoded) - 1))
    with pytest.raises(CorruptRecordError, match=f"subscription: {TRUNCATED}"):
        decode_subscription(encoded[:cut])


@given(assignments, st.data())
def test_every_truncated_assignment_is_corrupt(assignment: Assignment, data: st.DataObject) -> None:
    encoded = encode_assignment(assignment)
    cut = data.draw(st.integers(0, len(encoded) - 1))
    with pytest.raises(CorruptRecordError, match=f"assignment: {TRUNCATED}"):
        decode_assignment(encoded[:cut])


@given(st.binary(max_size=64))
def test_garbage_decodes_or_is_corrupt_never_another_error(garbage: bytes) -> None:
    for decode in (decode_subscription, decode_assignment):
        with contextlib.suppress(CorruptRecordError):
            decode(garbage)


# --- bad input, one by one ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        (b"", "truncated at version"),
        (i16(-1) + i32(0) + b(None), "unsupported version -1"),
        (i16(0) + i32(-1) + b(None), "topics has count -1; it cannot be null"),
        (i16(0) + i32(1) + i16(-1) + b(None), r"topics\[0\] has length -1; it cannot be null"),
        (i16(0) + i32(1) + i16(5) + b"ab", r"truncated at topics\[0\]: needs 5 bytes"),
        (i16(0) + i32(1) + i16(1) + b"\xff" + b(None), r"topics\[0\] is not valid UTF-8"),
        (i16(0) + i32(2_000_000_000) + b(None), "topics claims 2000000000 entries"),
        (i16(0) + i32(0) + i32(-2), "user_data has length -2"),
        (i16(0) + i32(0) + i32(10) + b"abc", "truncated at user_data: needs 10 bytes"),
        (i16(0) + i32(0) + b(None) + b"x", "1 unexpected bytes after the last field"),
        (i16(1) + i32(0) + b(None), "truncated at owned_partitions count"),
        (
            i16(1) + i32(0) + b(None) + i32(1) + s("t") + i32(3) + i32(0),
            r"owned_partitions\[0\].partitions claims 3 entries",
        ),
    ],
)
def test_bad_subscription_names_what_is_wrong(data: bytes, problem: str) -> None:
    with pytest.raises(CorruptRecordError, match=problem):
        decode_subscription(data)


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        (b"\x00", "truncated at version: needs 2 bytes at byte 0, 1 left"),
        (i16(-3) + i32(0) + b(None), "unsupported version -3"),
        (i16(0) + i32(-1) + b(None), "assigned_partitions has count -1"),
        (i16(0) + i32(1) + s("t") + i32(-1) + b(None), r"assigned_partitions\[0\].partitions"),
        (i16(0) + i32(1) + s("t") + i32(1) + b"\x00\x00", r"assigned_partitions\[0\]"),
        (i16(0) + i32(0), "truncated at user_data length"),
        (i16(2) + i32(0) + b(None) + b"\x00", "1 unexpected bytes"),
    ],
)
def test_bad_assignment_names_what_is_wrong(data: bytes, problem: str) -> None:
    with pytest.raises(CorruptRecordError, match=problem):
        decode_assignment(data)


def test_corrupt_input_is_kafkas_corrupt_message_error() -> None:
    with pytest.raises(CorruptRecordError) as info:
        decode_assignment(b"")
    assert info.value.error_name == "CORRUPT_MESSAGE"


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        (Subscription(("x" * 40_000,)), "topics.* is 40000 UTF-8 bytes"),
        (Subscription((), None, (TopicPartition("t", 2**31),)), "partition 2147483648"),
    ],
)
def test_encoding_what_the_format_cannot_hold_is_a_value_error(
    value: Subscription, problem: str
) -> None:
    with pytest.raises(ValueError, match=problem):
        encode_subscription(value)
