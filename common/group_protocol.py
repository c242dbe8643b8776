"""Kafka's consumer protocol: the subscription and the assignment that the members of a
consumer group exchange, as opaque bytes, through the group coordinator.

A member sends its :class:`Subscription` as the metadata of each protocol (assignor) it
offers in JoinGroup; the leader runs the chosen assignor and sends one :class:`Assignment`
per member in SyncGroup. The coordinator stores both byte strings in ``__consumer_offsets``
(see ``node.group_records``) and reads only the subscribed topics, as Kafka's does (an
OffsetDelete of a topic the group consumes is refused). The group's ``protocol_type`` is
:data:`PROTOCOL_TYPE`. Shared by the clients and the broker, hence in ``common``.

Byte format (Kafka's ``ConsumerProtocolSubscription.json`` and
``ConsumerProtocolAssignment.json``; big-endian, not flexible)::

    Subscription => version:int16
                    topics:[string]
                    user_data:nullable bytes
                    owned_partitions:[topic:string partitions:[int32]]   version 1+
                    generation_id:int32                                  version 2+ (not read)
    Assignment   => version:int16
                    assigned_partitions:[topic:string partitions:[int32]]
                    user_data:nullable bytes

    string = int16 length + UTF-8 (never null here); bytes = int32 length, -1 for null;
    [x] = int32 count + the entries (never null here). The primitives are read and written by
    ``common.wire_format``.

Versions, as Kafka's ``ConsumerProtocol`` handles them: :func:`encode_subscription` writes
version 0, or version 1 when there are owned partitions (the field version 0 lacks);
:func:`encode_assignment` writes version 0 (versions 1 and 2 carry the same fields). Decoding
accepts any version >= 0 and reads a version above the highest it knows with the fields of the
highest it knows: later versions only ever append fields, so an old member still understands a
new one. Partitions are written grouped by topic, topics in sorted order and partitions
ascending, so equal values always encode to equal bytes.

Errors: bytes that are truncated, negative lengths or counts, a null where the format has no
null, invalid UTF-8 or trailing bytes after a version this module knows all raise
``CORRUPT_MESSAGE`` naming the field. Encoding a value the format cannot hold (a string over
32767 UTF-8 bytes, a partition outside int32) raises ``ValueError``: that is our own misuse.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from dataclasses import dataclass

from kafkasim.common.types import TopicPartition
from kafkasim.common.wire_format import WireReader, WireWriter

PROTOCOL_TYPE = "consumer"

SUBSCRIPTION_VERSION_MAX = 1
"""The highest subscription version read field by field (version 2 appends a generation id
that the assignors here do not use)."""
ASSIGNMENT_VERSION_MAX = 2
"""The highest assignment version Kafka has defined; versions 1 and 2 add no fields."""


@dataclass(frozen=True)
class Subscription:
    """What a member wants: its topics, the partitions it owns now (cooperative rebalancing,
    version 1) and opaque assignor ``user_data``."""

    topics: tuple[str, ...]
    user_data: bytes | None = None
    owned_partitions: tuple[TopicPartition, ...] = ()


@dataclass(frozen=True)
class Assignment:
    """What the group leader gave a member: its partitions and opaque assignor ``user_data``."""

    partitions: tuple[TopicPartition, ...]
    user_data: bytes | None = None


# --- encoding -------------------------------------------------------------------------------


def encode_subscription(subscription: Subscription) -> bytes:
    """The subscription as Kafka's consumer protocol bytes: version 0, or 1 with owned
    partitions."""
    version = 1 if subscription.owned_partitions else 0
    w = WireWriter()
    w.int16(version, "version")
    w.count(len(subscription.topics), "topics")
    for topic in subscription.topics:
        w.string(topic, "topics[]")
    w.nullable_bytes(subscription.user_data, "user_data")
    if version >= 1:
        _write_topic_partitions(w, subscription.owned_partitions, "owned_partitions")
    return w.getvalue()


def encode_assignment(assignment: Assignment) -> bytes:
    """The assignment as Kafka's consumer protocol bytes, version 0."""
    w = WireWriter()
    w.int16(0, "version")
    _write_topic_partitions(w, assignment.partitions, "assigned_partitions")
    w.nullable_bytes(assignment.user_data, "user_data")
    return w.getvalue()


def _write_topic_partitions(
    w: WireWriter, partitions: Iterable[TopicPartition], field: str
) -> None:
    by_topic = [
        (topic, [tp.partition for tp in group])
        for topic, group in itertools.groupby(sorted(partitions), key=lambda tp: tp.topic)
    ]
    w.count(len(by_topic), field)
    for topic, numbers in by_topic:
        w.string(topic, f"{field}[].topic")
        w.count(len(numbers), f"{field}[{topic}].partitions")
        for number in numbers:
            if not -(2**31) <= number < 2**31:
                raise ValueError(f"{field}: partition {number} of {topic!r} is not an int32")
            w.int32(number, f"{field}[{topic}].partitions[]")


# --- decoding -------------------------------------------------------------------------------


def decode_subscription(data: bytes) -> Subscription:
    """Parse a subscription of any version >= 0 (above 1, the version-1 fields are read)."""
    reader = WireReader(data, "consumer protocol subscription")
    version = reader.int16("version")
    if version < 0:
        raise reader.corrupt(f"unsupported version {version}")
    topics = tuple(
        reader.string(f"topics[{i}]") for i in range(reader.count("topics", _STRING_MIN))
    )
    user_data = reader.nullable_bytes("user_data")
    owned = _read_topic_partitions(reader, "owned_partitions") if version >= 1 else ()
    if version <= SUBSCRIPTION_VERSION_MAX:
        reader.done()
    return Subscription(topics, user_data, owned)


def decode_assignment(data: bytes) -> Assignment:
    """Parse an assignment of any version >= 0 (all known versions share version 0's fields)."""
    reader = WireReader(data, "consumer protocol assignment")
    version = reader.int16("version")
    if version < 0:
        raise reader.corrupt(f"unsupported version {version}")
    partitions = _read_topic_partitions(reader, "assigned_partitions")
    user_data = reader.nullable_bytes("user_data")
    if version <= ASSIGNMENT_VERSION_MAX:
        reader.done()
    return Assignment(partitions, user_data)


_STRING_MIN = 2  # bytes of the shortest string (its int16 length)
_TOPIC_PARTITIONS_MIN = _STRING_MIN + 4  # a topic and an empty partition array


def _read_topic_partitions(reader: WireReader, field: str) -> tuple[TopicPartition, ...]:
    result: list[TopicPartition] = []
    for i in range(reader.count(field, _TOPIC_PARTITIONS_MIN)):
        topic = reader.string(f"{field}[{i}].topic")
        n = reader.count(f"{field}[{i}].partitions", 4)
        result.extend(
            TopicPartition(topic, reader.int32(f"{field}[{i}].partitions[{j}]")) for j in range(n)
        )
    return tuple(result)
