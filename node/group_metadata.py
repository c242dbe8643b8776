"""One consumer group as its coordinator holds it: members, generation, state, offsets.

The state machine is Kafka's (``GroupMetadata.scala``)::

    Empty ──join──► PreparingRebalance ──all joined / rebalance timeout──► CompletingRebalance
      ▲                 ▲        │                                              │
      │                 │        └─ no member left ─► Empty                     │ leader's
      │                 └──── join / leave / member expired ◄──── Stable ◄──────┘ SyncGroup
      └── last member leaves or expires (a rebalance with nobody completes to Empty)
    any state ──group deleted / coordinator moves──► Dead

Everything here is pure bookkeeping on values: no clock reads (times come in as arguments), no
IO. A member holds the futures that answer its waiting JoinGroup and SyncGroup (completed with
domain results, ``node.group_types``); the coordinator (``node.group_membership``) decides when
to answer them and when to write to ``__consumer_offsets``.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from kafkasim.common.errors import KafkaError
from kafkasim.common.group_protocol import PROTOCOL_TYPE, decode_subscription
from kafkasim.node.group_offset_cache import OffsetCache
from kafkasim.node.group_records import GroupValue, MemberValue
from kafkasim.node.group_types import GroupProtocol, GroupState, JoinGroupResult, SyncGroupResult


@dataclass
class Member:
    member_id: str
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: tuple[GroupProtocol, ...]
    assignment: bytes = b""
    # The member's session ends when no heartbeat (or join/sync) came before this time.
    heartbeat_deadline_ms: int = 0
    # A static member's group.instance.id: only a group loaded from a log written by a broker
    # with static membership has one (kafkasim's JoinGroup does not create them).
    group_instance_id: str | None = None
    join_future: asyncio.Future[JoinGroupResult] | None = None
    sync_future: asyncio.Future[SyncGroupResult] | None = None

    @property
    def awaiting_join(self) -> bool:
        return self.join_future is not None and not self.join_future.done()

    @property
    def awaiting_sync(self) -> bool:
        return self.sync_future is not None and not self.sync_future.done()

    def metadata_for(self, protocol: str) -> bytes:
        for p in self.protocols:
            if p.name == protocol:
                return p.metadata
        raise KeyError(f"member {self.member_id} does not support protocol {protocol}")

    def same_protocols(self, protocols: tuple[GroupProtocol, ...]) -> bool:
        return self.protocols == protocols

    def fail(self, error: type[KafkaError]) -> None:
        """Answer a waiting JoinGroup and SyncGroup with ``error``."""
        if self.join_future is not None and not self.join_future.done():
            self.join_future.set_result(JoinGroupResult(error=error, member_id=self.member_id))
        self.join_future = None
        self.fail_sync(error)

    def fail_sync(self, error: type[KafkaError]) -> None:
        """Answer a waiting SyncGroup with ``error``."""
        if self.sync_future is not None and not self.sync_future.done():
            self.sync_future.set_result(SyncGroupResult(error=error))
        self.sync_future = None


@dataclass
class Group:
    group_id: str
    state: GroupState = GroupState.EMPTY
    generation: int = 0
    protocol_type: str | None = None
    protocol: str | None = None
    leader_id: str | None = None
    members: dict[str, Member] = field(default_factory=dict)
    # Member ids given with MEMBER_ID_REQUIRED, not yet joined: id -> end of their session.
    pending_members: dict[str, int] = field(default_factory=dict)
    # The topics the members of this generation consume (consumer protocol groups; None when
    # unknown): an OffsetDelete of their partitions is refused (Kafka's subscribedTopics).
    subscribed_topics: frozenset[str] | None = None
    # Committed offsets and the commits still pending (``node.group_offset_cache``).
    offsets: OffsetCache = field(default_factory=OffsetCache)
    # PreparingRebalance: the join phase ends by this time even if some members never rejoin.
    rebalance_deadline_ms: int = 0
    # An Empty group's first join waits group.initial.rebalance.delay.ms for others to come.
    initial_delay_deadline_ms: int = 0
    state_timestamp_ms: int = -1

    # -- protocol selection -------------------------------------------------------------

    def supports_protocols(self, protocol_type: str, protocols: tuple[GroupProtocol, ...]) -> bool:
        """A joining member fits when the type matches and it shares one protocol with all."""
        if not protocols:
            return False
        if not self.members:
            return bool(protocol_type)
        if protocol_type != self.protocol_type:
            return False
        names = {p.name for p in protocols}
        return bool(names & self.candidate_protocols())

    def candidate_protocols(self) -> set[str]:
        """Protocols every member supports."""
        sets = [{p.name for p in m.protocols} for m in self.members.values()]
        return set.intersection(*sets) if sets else set()

    def select_protocol(self) -> str:
        """Kafka's vote: each member votes for its most preferred candidate; most votes win
        (ties go to the protocol named first by the earliest member)."""
        candidates = self.candidate_protocols()
        votes: dict[str, int] = {}
        order: list[str] = []
        for member in self.members.values():
            for p in member.protocols:
                if p.name in candidates:
                    votes[p.name] = votes.get(p.name, 0) + 1
                    if p.name not in order:
                        order.append(p.name)
                    break
        return max(order, key=lambda name: (votes[name], -order.index(name)))

    # -- membership ---------------------------------------------------------------------

    def all_members_joined(self) -> bool:
        """Every member rejoined and no member id handed out is still to come."""
        return not self.pending_members and all(m.awaiting_join for m in self.members.values())

    def not_yet_rejoined(self) -> list[Member]:
        return [m for m in self.members.values() if not m.awaiting_join]

    def max_rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def static_member_id(self, group_instance_id: str) -> str | None:
        """The member id of the static member ``group_instance_id`` (Kafka's
        ``currentStaticMemberId``), or None."""
        for member in self.members.values():
            if member.group_instance_id == group_instance_id:
                return member.member_id
        return None

    def add_member(self, member: Member) -> None:
        if not self.members:
            self.protocol_type = member.protocol_type
        self.members[member.member_id] = member
        if self.leader_id is None:
            self.leader_id = member.member_id

    def remove_member(self, member_id: str) -> Member | None:
        member = self.members.pop(member_id, None)
        if member is not None and self.leader_id == member_id:
            self.leader_id = next(iter(self.members), None)
        return member

    def compute_subscribed_topics(self) -> frozenset[str] | None:
        """The topics the members' subscriptions for the chosen protocol name (Kafka computes
        them when a generation forms or a group is loaded); None for a group of another
        protocol type or a subscription that does not parse."""
        if self.protocol_type != PROTOCOL_TYPE:
            return None
        if not self.members:
            return frozenset()
        if self.protocol is None:
            return None
        try:
            return frozenset(
                topic
                for m in self.members.values()
                for topic in decode_subscription(m.metadata_for(self.protocol)).topics
            )
        except (KafkaError, KeyError):
            return None

    def transition(self, state: GroupState, now_ms: int) -> None:
        self.state = state
        self.state_timestamp_ms = now_ms

    # -- persistence --------------------------------------------------------------------

    def to_value(self, now_ms: int) -> GroupValue:
        members = tuple(
            MemberValue(
                member_id=m.member_id,
                group_instance_id=m.group_instance_id,
                client_id=m.client_id,
                client_host=m.client_host,
                rebalance_timeout_ms=m.rebalance_timeout_ms,
                session_timeout_ms=m.session_timeout_ms,
                subscription=m.metadata_for(self.protocol) if self.protocol else b"",
                assignment=m.assignment,
            )
            for m in self.members.values()
        )
        return GroupValue(
            protocol_type=self.protocol_type or "",
            generation=self.generation,
            protocol=self.protocol,
            leader=self.leader_id,
            current_state_timestamp=now_ms,
            members=members,
        )

    @classmethod
    def from_value(cls, group_id: str, value: GroupValue, now_ms: int) -> Group:
        """A group loaded from the log: Stable with its members (who must heartbeat within
        their session timeout from now) or Empty."""
        group = cls(
            group_id,
            generation=value.generation,
            protocol_type=value.protocol_type or None,
            protocol=value.protocol,
            leader_id=value.leader,
        )
        for m in value.members:
            protocol = value.protocol or ""
            group.members[m.member_id] = Member(
                member_id=m.member_id,
                client_id=m.client_id,
                client_host=m.client_host,
                session_timeout_ms=m.session_timeout_ms,
                rebalance_timeout_ms=m.rebalance_timeout_ms,
                protocol_type=value.protocol_type,
                protocols=(GroupProtocol(protocol, m.subscription),),
                assignment=m.assignment,
                heartbeat_deadline_ms=now_ms + m.session_timeout_ms,
                group_instance_id=m.group_instance_id,
            )
        if group.leader_id not in group.members:
            group.leader_id = next(iter(group.members), None)
        group.transition(GroupState.STABLE if group.members else GroupState.EMPTY, now_ms)
        group.subscribed_topics = group.compute_subscribed_topics()
        return group
