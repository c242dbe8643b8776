"""The records of ``__consumer_offsets``, byte for byte as Kafka's ``GroupMetadataManager``
writes them, and the choice of the partition that holds a group.

Pure: values in, values out.

The topic is compacted, so each record's *key* names what it is about and its *value* is the
latest state (a null value, a tombstone, deletes it). The key's int16 version says which kind
of record it is (Kafka's ``OffsetCommitKey.json`` and ``GroupMetadataKey.json``)::

    key version 0, 1  offset commit   group:string topic:string partition:int32
    key version 2     group metadata  group:string

An offset commit's value (``OffsetCommitValue.json``), by value version::

    0  offset:int64                    metadata:string commit_timestamp:int64
    1  offset:int64                    metadata:string commit_timestamp:int64 expire_timestamp:int64
    2  offset:int64                    metadata:string commit_timestamp:int64
    3  offset:int64 leader_epoch:int32 metadata:string commit_timestamp:int64

A group's value (``GroupMetadataValue.json``)::

    protocol_type:string generation:int32 protocol:nullable string leader:nullable string
    current_state_timestamp:int64                                   version 2+
    members:[member_id:string
             group_instance_id:nullable string                      version 3+
             client_id:string client_host:string
             rebalance_timeout:int32                                version 1+
             session_timeout:int32 subscription:bytes assignment:bytes]

Everything is big-endian; a string is an int16 length and UTF-8 (-1 for null where nullable),
bytes an int32 length, an array an int32 count. Fields a version lacks decode to Kafka's
defaults: leader epoch, expire timestamp and current-state timestamp -1, group instance id
null, and (version 0) the rebalance timeout equal to the session timeout. Keys are written as
version 1 and 2, offset values as version 3 (version 1 when an expire timestamp is set, as
Kafka does for commits that carry a retention time), group values as version 3.

Errors: truncated or garbage bytes, unknown versions, a null where the format has none,
invalid UTF-8 and trailing bytes raise ``CORRUPT_MESSAGE`` naming what was wrong. Encoding a
value the format cannot hold raises ``ValueError`` (our own misuse). The primitives are read
and written by ``common.wire_format``.

Which partition of ``__consumer_offsets`` holds a group: :func:`partition_for`, Kafka's
``Utils.abs(groupId.hashCode) % partitions`` over Java's ``String.hashCode``.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from kafkasim.common.wire_format import WireReader, WireWriter

OFFSETS_TOPIC = "__consumer_offsets"

OFFSET_KEY_VERSION = 1
GROUP_KEY_VERSION = 2
OFFSET_VALUE_VERSION = 3
OFFSET_VALUE_VERSION_WITH_EXPIRE = 1
GROUP_VALUE_VERSION = 3
NO_LEADER_EPOCH = -1
NO_TIMESTAMP = -1


@dataclass(frozen=True)
class OffsetKey:
    """Key of a committed offset: a group's position in one partition."""

    group: str
    topic: str
    partition: int


@dataclass(frozen=True)
class GroupKey:
    """Key of a group's metadata (generation, leader, members)."""

    group: str


@dataclass(frozen=True)
class OffsetValue:
    """A committed offset. ``leader_epoch`` -1 is unknown; ``expire_timestamp`` -1 is none
    (only value version 1 stores one)."""

    offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp: int
    expire_timestamp: int = NO_TIMESTAMP


@dataclass(frozen=True)
class MemberValue:
    """One member of a stored group; ``subscription`` and ``assignment`` are the protocol's
    opaque bytes (the consumer protocol for ``protocol_type`` ``consumer``)."""

    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    subscription: bytes
    assignment: bytes


@dataclass(frozen=True)
class GroupValue:
    """A group as stored after each rebalance. ``protocol`` and ``leader`` are null for an
    empty group; ``current_state_timestamp`` -1 is unknown."""

    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    current_state_timestamp: int
    members: tuple[MemberValue, ...]


# --- keys -----------------------------------------------------------------------------------


def encode_offset_key(key: OffsetKey) -> bytes:
    """An offset commit's key, version 1."""
    w = WireWriter()
    w.int16(OFFSET_KEY_VERSION, "version")
    w.string(key.group, "group")
    w.string(key.topic, "topic")
    w.int32(key.partition, "partition")
    return w.getvalue()


def encode_group_key(key: GroupKey) -> bytes:
    """A group metadata record's key, version 2."""
    w = WireWriter()
    w.int16(GROUP_KEY_VERSION, "version")
    w.string(key.group, "group")
    return w.getvalue()


def decode_key(data: bytes) -> OffsetKey | GroupKey:
    """Parse a ``__consumer_offsets`` key: versions 0 and 1 are offset commits, 2 a group."""
    r = _Reader(data, "__consumer_offsets key")
    version = r.int16("version")
    key: OffsetKey | GroupKey
    if version in (0, 1):
        key = OffsetKey(r.string("group"), r.string("topic"), r.int32("partition"))
    elif version == GROUP_KEY_VERSION:
        key = GroupKey(r.string("group"))
    else:
        raise r.corrupt(f"unknown group metadata message version {version}")
    r.done()
    return key


# --- offset values --------------------------------------------------------------------------


def encode_offset_value(value: OffsetValue) -> bytes:
    """An offset commit's value: version 3, or version 1 when it has an expire timestamp."""
    w = WireWriter()
    if value.expire_timestamp != NO_TIMESTAMP:
        if value.leader_epoch != NO_LEADER_EPOCH:
            # Version 1 is the only one with an expire timestamp and it has no leader epoch;
            # Kafka would drop the epoch silently, which hides a caller's mistake.
            raise ValueError(
                "an offset value with an expire timestamp is written as version 1, which has "
                f"no leader epoch; got leader_epoch {value.leader_epoch}"
            )
        w.int16(OFFSET_VALUE_VERSION_WITH_EXPIRE, "version")
        w.int64(value.offset, "offset")
        w.string(value.metadata, "metadata")
        w.int64(value.commit_timestamp, "commit_timestamp")
        w.int64(value.expire_timestamp, "expire_timestamp")
        return w.getvalue()
    w.int16(OFFSET_VALUE_VERSION, "version")
    w.int64(value.offset, "offset")
    w.int32(value.leader_epoch, "leader_epoch")
    w.string(value.metadata, "metadata")
    w.int64(value.commit_timestamp, "commit_timestamp")
    return w.getvalue()


def decode_offset_value(data: bytes) -> OffsetValue:
    """Parse an offset commit's value, versions 0 to 3."""
    r = _Reader(data, "__consumer_offsets offset commit value")
    version = r.int16("version")
    if not 0 <= version <= OFFSET_VALUE_VERSION:
        raise r.corrupt(f"unknown offset message version {version}")
    offset = r.int64("offset")
    leader_epoch = r.int32("leader_epoch") if version >= 3 else NO_LEADER_EPOCH
    metadata = r.string("metadata")
    commit_timestamp = r.int64("commit_timestamp")
    expire_timestamp = r.int64("expire_timestamp") if version == 1 else NO_TIMESTAMP
    r.done()
    return OffsetValue(offset, leader_epoch, metadata, commit_timestamp, expire_timestamp)


# --- group values ---------------------------------------------------------------------------


def encode_group_value(value: GroupValue) -> bytes:
    """A group's value, version 3."""
    w = WireWriter()
    w.int16(GROUP_VALUE_VERSION, "version")
    w.string(value.protocol_type, "protocol_type")
    w.int32(value.generation, "generation")
    w.nullable_string(value.protocol, "protocol")
    w.nullable_string(value.leader, "leader")
    w.int64(value.current_state_timestamp, "current_state_timestamp")
    w.count(len(value.members), "members")
    for i, m in enumerate(value.members):
        field = f"members[{i}]"
        w.string(m.member_id, f"{field}.member_id")
        w.nullable_string(m.group_instance_id, f"{field}.group_instance_id")
        w.string(m.client_id, f"{field}.client_id")
        w.string(m.client_host, f"{field}.client_host")
        w.int32(m.rebalance_timeout_ms, f"{field}.rebalance_timeout")
        w.int32(m.session_timeout_ms, f"{field}.session_timeout")
        w.bytes_(m.subscription, f"{field}.subscription")
        w.bytes_(m.assignment, f"{field}.assignment")
    return w.getvalue()


# The shortest member (version 0): three empty strings, an int32 and two empty byte strings.
_MEMBER_SIZE_MIN = 3 * 2 + 4 + 2 * 4


def decode_group_value(data: bytes) -> GroupValue:
    """Parse a group's value, versions 0 to 3."""
    r = _Reader(data, "__consumer_offsets group metadata value")
    version = r.int16("version")
    if not 0 <= version <= GROUP_VALUE_VERSION:
        raise r.corrupt(f"unknown group metadata message version {version}")
    protocol_type = r.string("protocol_type")
    generation = r.int32("generation")
    protocol = r.nullable_string("protocol")
    leader = r.nullable_string("leader")
    current_state_timestamp = r.int64("current_state_timestamp") if version >= 2 else -1
    members: list[MemberValue] = []
    for i in range(r.count("members", _MEMBER_SIZE_MIN)):
        field = f"members[{i}]"
        member_id = r.string(f"{field}.member_id")
        instance_id = r.nullable_string(f"{field}.group_instance_id") if version >= 3 else None
        client_id = r.string(f"{field}.client_id")
        client_host = r.string(f"{field}.client_host")
        rebalance_timeout = r.int32(f"{field}.rebalance_timeout") if version >= 1 else None
        session_timeout = r.int32(f"{field}.session_timeout")
        members.append(
            MemberValue(
                member_id=member_id,
                group_instance_id=instance_id,
                client_id=client_id,
                client_host=client_host,
                # Version 0 predates the rebalance timeout; Kafka loads it as the session's.
                rebalance_timeout_ms=(
                    session_timeout if rebalance_timeout is None else rebalance_timeout
                ),
                session_timeout_ms=session_timeout,
                subscription=r.bytes_(f"{field}.subscription"),
                assignment=r.bytes_(f"{field}.assignment"),
            )
        )
    r.done()
    return GroupValue(
        protocol_type, generation, protocol, leader, current_state_timestamp, tuple(members)
    )


# --- the group's partition ------------------------------------------------------------------


def java_string_hash(s: str) -> int:
    """Java's ``String.hashCode``: ``h = 31 * h + c`` over the UTF-16 code units (a character
    outside the BMP counts as its two surrogates), as a signed 32-bit int."""
    units = s.encode("utf-16-be", "surrogatepass")
    h = 0
    for (unit,) in struct.iter_unpack(">H", units):
        h = (31 * h + unit) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for(group_id: str, partitions: int, topic: str = OFFSETS_TOPIC) -> int:
    """The ``__consumer_offsets`` partition of a group: Kafka's
    ``Utils.abs(groupId.hashCode) % partitions``. ``__transaction_state`` places a
    transactional id the same way (``topic`` only names the topic in the error)."""
    if partitions <= 0:
        raise ValueError(f"{topic} must have at least one partition, not {partitions}")
    h = java_string_hash(group_id)
    # Kafka's Utils.abs maps Integer.MIN_VALUE, whose Math.abs is itself negative, to 0.
    return (0 if h == -(2**31) else abs(h)) % partitions


# --- primitives -----------------------------------------------------------------------------


class _Reader(WireReader):
    """The shared cursor, except that a string which cannot be null keeps this module's own
    messages: "<field> is null; it cannot be" for length -1, "<field> has length <n>" for any
    other negative length."""

    def string(self, field: str) -> str:
        value = self.nullable_string(field)
        if value is None:
            raise self.corrupt(f"{field} is null; it cannot be")
        return value
