"""The group coordinator's domain values: what each group request asks (``*Params``) and what
it answers (``*Result``), free of any wire format.

The front doors (``node.apis_group`` for gRPC; Kafka's binary protocol next) translate their
requests into these and these into their responses; the coordinator (``node.group_coordinator``
and its parts) takes and returns nothing else. An ``error`` is the class of a Kafka error from
``common.errors`` (``None``: no error); its ``code`` is what goes on a wire.

Member metadata and assignments are opaque bytes to the coordinator: the client encodes them
(Kafka's ``ConsumerProtocol`` for ``protocol_type`` ``consumer``).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from kafkasim.common.errors import KafkaError
from kafkasim.common.types import TopicPartition

# A request's or a partition's outcome: an error class of ``common.errors``, or None for success.
Error = type[KafkaError] | None

NO_GENERATION = -1
NO_OFFSET = -1
NO_LEADER_EPOCH = -1


class GroupState(enum.Enum):
    """Kafka's group states; the values are the names Kafka's tools show."""

    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


@dataclass(frozen=True, slots=True)
class GroupProtocol:
    """One protocol a member supports (an assignor such as ``range``) with its metadata."""

    name: str
    metadata: bytes


# -- JoinGroup ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class JoinGroupParams:
    """A member (re)joining; ``member_id`` is empty on its first join. ``protocols`` are in
    the member's order of preference. ``require_known_member_id`` (Kafka's JoinGroup v4+): a
    first join is answered MEMBER_ID_REQUIRED with a new member id, and the member joins when
    it comes back with that id; else the first join is given its id and joins at once."""

    group_id: str
    member_id: str
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: tuple[GroupProtocol, ...]
    require_known_member_id: bool = False


@dataclass(frozen=True, slots=True)
class JoinedMember:
    """A member of the new generation with its metadata for the chosen protocol."""

    member_id: str
    metadata: bytes


@dataclass(frozen=True, slots=True)
class JoinGroupResult:
    """The new generation as a member sees it; ``members`` only for the leader."""

    error: Error = None
    member_id: str = ""
    generation_id: int = NO_GENERATION
    protocol_type: str = ""
    protocol_name: str = ""
    leader_id: str = ""
    members: tuple[JoinedMember, ...] = ()


# -- SyncGroup ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class MemberAssignment:
    member_id: str
    assignment: bytes


@dataclass(frozen=True, slots=True)
class SyncGroupParams:
    """A member asking for its assignment; only the leader's carries ``assignments``."""

    group_id: str
    generation_id: int
    member_id: str
    protocol_type: str = ""
    protocol_name: str = ""
    assignments: tuple[MemberAssignment, ...] = ()


@dataclass(frozen=True, slots=True)
class SyncGroupResult:
    error: Error = None
    protocol_type: str = ""
    protocol_name: str = ""
    assignment: bytes = b""


# -- Heartbeat, LeaveGroup ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class HeartbeatParams:
    group_id: str
    generation_id: int
    member_id: str


@dataclass(frozen=True, slots=True)
class HeartbeatResult:
    error: Error = None


@dataclass(frozen=True, slots=True)
class LeaveGroupParams:
    group_id: str
    member_ids: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class MemberLeft:
    member_id: str
    error: Error = None


@dataclass(frozen=True, slots=True)
class LeaveGroupResult:
    """``error`` is the group's (not this coordinator, ...), or the one member's error when
    a single member left (as Kafka answers LeaveGroup v0-v2)."""

    error: Error = None
    members: tuple[MemberLeft, ...] = ()


# -- OffsetCommit, OffsetFetch -----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class OffsetCommitEntry:
    """One partition's position to commit; ``leader_epoch`` -1 is unknown."""

    tp: TopicPartition
    offset: int
    leader_epoch: int = NO_LEADER_EPOCH
    metadata: str = ""


@dataclass(frozen=True, slots=True)
class OffsetCommitParams:
    """A commit; ``generation_id`` -1 with an empty ``member_id`` commits from outside any
    generation (assign-mode consumers, tools), allowed while the group has no members."""

    group_id: str
    generation_id: int
    member_id: str
    offsets: tuple[OffsetCommitEntry, ...]


@dataclass(frozen=True, slots=True)
class TxnOffsetCommitParams:
    """A transactional commit (Kafka's TxnOffsetCommit, KIP-98): ``offsets`` become visible
    when the producer's transaction commits. KIP-447 (TxnOffsetCommit v3): a member of the
    group's generation names itself (``generation_id``, ``member_id``, ``group_instance_id``)
    and is checked as a plain commit's member is; -1 with an empty ``member_id`` and no
    instance id is not checked (v0-v2). Answered with an :class:`OffsetCommitResult`."""

    transactional_id: str
    group_id: str
    producer_id: int
    producer_epoch: int
    offsets: tuple[OffsetCommitEntry, ...]
    generation_id: int = NO_GENERATION
    member_id: str = ""
    group_instance_id: str | None = None


@dataclass(frozen=True, slots=True)
class PartitionOutcome:
    tp: TopicPartition
    error: Error = None


@dataclass(frozen=True, slots=True)
class OffsetCommitResult:
    """One outcome per committed partition, in the request's order."""

    partitions: tuple[PartitionOutcome, ...]


@dataclass(frozen=True, slots=True)
class OffsetDeleteParams:
    """Remove the group's committed offsets of ``partitions`` (Kafka's OffsetDelete)."""

    group_id: str
    partitions: tuple[TopicPartition, ...]


@dataclass(frozen=True, slots=True)
class OffsetDeleteResult:
    """``error`` is the group's (GROUP_ID_NOT_FOUND, NON_EMPTY_GROUP, not this coordinator,
    ...), with no partitions; else one outcome per partition, in the request's order
    (GROUP_SUBSCRIBED_TO_TOPIC for a topic the group's members consume)."""

    error: Error = None
    partitions: tuple[PartitionOutcome, ...] = ()


@dataclass(frozen=True, slots=True)
class OffsetFetchParams:
    """``partitions`` None: every partition the group has committed. ``require_stable``
    (OffsetFetch v7+, KIP-447): a partition with a commit still pending (an open transaction's,
    or one being written) is answered UNSTABLE_OFFSET_COMMIT instead of its last committed
    offset."""

    group_id: str
    partitions: tuple[TopicPartition, ...] | None = None
    require_stable: bool = False


@dataclass(frozen=True, slots=True)
class CommittedOffset:
    """A group's committed position; ``offset`` -1 when it has none for ``tp`` or when
    ``error`` is set (UNSTABLE_OFFSET_COMMIT)."""

    tp: TopicPartition
    offset: int = NO_OFFSET
    leader_epoch: int = NO_LEADER_EPOCH
    metadata: str = ""
    error: Error = None


@dataclass(frozen=True, slots=True)
class OffsetFetchResult:
    error: Error = None
    partitions: tuple[CommittedOffset, ...] = ()


# -- ListGroups, DescribeGroups, DeleteGroups ---------------------------------------------------


@dataclass(frozen=True, slots=True)
class ListGroupsParams:
    """``states`` empty: every group; else the groups in a state of one of these names
    (``GroupState`` values, compared case-insensitively; an unknown name matches nothing)."""

    states: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class ListedGroup:
    group_id: str
    protocol_type: str
    state: GroupState


@dataclass(frozen=True, slots=True)
class ListGroupsResult:
    error: Error = None
    groups: tuple[ListedGroup, ...] = ()


@dataclass(frozen=True, slots=True)
class DescribeGroupsParams:
    group_ids: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class DescribedMember:
    """A member; ``metadata`` and ``assignment`` are empty unless the group is Stable."""

    member_id: str
    client_id: str
    client_host: str
    metadata: bytes = b""
    assignment: bytes = b""


@dataclass(frozen=True, slots=True)
class DescribedGroup:
    """``state`` None when ``error`` is set; ``protocol`` is set only for a Stable group."""

    group_id: str
    error: Error = None
    state: GroupState | None = None
    protocol_type: str = ""
    protocol: str = ""
    members: tuple[DescribedMember, ...] = ()


@dataclass(frozen=True, slots=True)
class DescribeGroupsResult:
    groups: tuple[DescribedGroup, ...]


@dataclass(frozen=True, slots=True)
class DeleteGroupsParams:
    group_ids: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class DeletedGroup:
    group_id: str
    error: Error = None


@dataclass(frozen=True, slots=True)
class DeleteGroupsResult:
    groups: tuple[DeletedGroup, ...]
