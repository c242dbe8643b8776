"""Group membership and the rebalance protocol (the JoinGroup, SyncGroup, Heartbeat and
LeaveGroup half of Kafka's ``GroupCoordinator``, classic protocol), over domain values.

JoinGroup requests wait until every known member has rejoined (or the rebalance timeout
passes; members that did not rejoin are removed), then each gets the new generation and the
leader gets everyone's metadata. The leader's SyncGroup carries the assignment; it is written to
``__consumer_offsets``, then every member's SyncGroup is answered with its part. Heartbeats keep
a member's session alive; a member silent for its ``session.timeout.ms`` is removed and the
group rebalances (:meth:`GroupMembership.expire`, run by the coordinator's timer). The states
and their transitions are drawn in ``node.group_metadata``.

A first JoinGroup with no member id is answered MEMBER_ID_REQUIRED with a new id when the
request asks for it (Kafka's JoinGroup v4+): the id is pending — it holds up the join phase
like a member that has not rejoined — until the member comes back with it, leaves, or stays
away for its session timeout. Otherwise (JoinGroup v0-v3, kafkasim's gRPC clients) the first
join is given its id and joins at once.

Deviation from Kafka, deliberate: no static membership (``group.instance.id``); the Kafka
front door answers a request naming one as a broker with inter.broker.protocol.version < 2.3.
"""

from __future__ import annotations

import asyncio
import logging
import random
import uuid

from kafkasim.common.clock import Clock
from kafkasim.common.errors import error_for_name
from kafkasim.node.config import BrokerConfig
from kafkasim.node.group_manager import GroupMetadataManager
from kafkasim.node.group_metadata import Group, Member
from kafkasim.node.group_types import (
    Error,
    GroupState,
    HeartbeatParams,
    HeartbeatResult,
    JoinedMember,
    JoinGroupParams,
    JoinGroupResult,
    LeaveGroupParams,
    LeaveGroupResult,
    MemberLeft,
    SyncGroupParams,
    SyncGroupResult,
)

logger = logging.getLogger(__name__)


class GroupMembership:
    """The rebalance state machine of every group ``manager`` holds."""

    def __init__(
        self,
        manager: GroupMetadataManager,
        config: BrokerConfig,
        clock: Clock,
        rng: random.Random,
    ) -> None:
        self.broker_id = manager.broker_id
        self._manager = manager
        self._clock = clock
        self._rng = rng
        self._min_session_ms: int = config["group.min.session.timeout.ms"]
        self._max_session_ms: int = config["group.max.session.timeout.ms"]
        self._initial_delay_ms: int = config["group.initial.rebalance.delay.ms"]

    # -- JoinGroup ----------------------------------------------------------------------

    async def join_group(self, params: JoinGroupParams) -> JoinGroupResult:
        error = self._manager.check(params.group_id)
        if error is None and not (
            self._min_session_ms <= params.session_timeout_ms <= self._max_session_ms
        ):
            error = error_for_name("INVALID_SESSION_TIMEOUT")
        if error is not None:
            return JoinGroupResult(error=error, member_id=params.member_id)
        now = self._clock.monotonic_ms()
        group = self._manager.groups.get(params.group_id)
        if group is None:
            if params.member_id:
                return self._refused(params, "UNKNOWN_MEMBER_ID")
            group = self._manager.add_empty_group(params.group_id, now)
        if group.state is GroupState.DEAD:
            return self._refused(params, "COORDINATOR_NOT_AVAILABLE")
        if not group.supports_protocols(params.protocol_type, params.protocols):
            return self._refused(params, "INCONSISTENT_GROUP_PROTOCOL")
        future: asyncio.Future[JoinGroupResult] = asyncio.get_running_loop().create_future()
        if not params.member_id and params.require_known_member_id:
            member_id = self._new_member_id(params.client_id)
            group.pending_members[member_id] = now + params.session_timeout_ms
            return JoinGroupResult(error=error_for_name("MEMBER_ID_REQUIRED"), member_id=member_id)
        pending = group.pending_members.pop(params.member_id, None) is not None
        if not params.member_id or pending:
            member_id = params.member_id or self._new_member_id(params.client_id)
            member = Member(
                member_id=member_id,
                client_id=params.client_id,
                client_host=params.client_host,
                session_timeout_ms=params.session_timeout_ms,
                rebalance_timeout_ms=params.rebalance_timeout_ms,
                protocol_type=params.protocol_type,
                protocols=params.protocols,
                heartbeat_deadline_ms=now + params.session_timeout_ms,
                join_future=future,
            )
            group.add_member(member)
            if group.state is GroupState.PREPARING_REBALANCE:
                self._maybe_extend_initial_delay(group, now)
                self._maybe_complete_join(group, now)
            else:
                self._prepare_rebalance(group, now, f"new member {member_id} joined")
            return await future
        known = group.members.get(params.member_id)
        if known is None:
            return self._refused(params, "UNKNOWN_MEMBER_ID")
        member = known
        member.heartbeat_deadline_ms = now + member.session_timeout_ms
        if group.state is GroupState.PREPARING_REBALANCE:
            self._update_member(member, params, future)
            self._maybe_complete_join(group, now)
        elif group.state is GroupState.COMPLETING_REBALANCE:
            if member.same_protocols(params.protocols):
                # A resent join for the generation just formed: answer it again.
                return self._join_result(group, member)
            self._update_member(member, params, future)
            self._prepare_rebalance(group, now, f"member {member.member_id} changed metadata")
        elif group.state is GroupState.STABLE:
            if member.member_id == group.leader_id or not member.same_protocols(params.protocols):
                # The leader rejoins when it sees the subscribed topics change (Kafka's way
                # of asking for a new assignment); anyone rejoins when its subscription does.
                self._update_member(member, params, future)
                self._prepare_rebalance(group, now, f"member {member.member_id} rejoined")
            else:
                return self._join_result(group, member)
        else:
            return self._refused(params, "UNKNOWN_MEMBER_ID")
        return await future

    @staticmethod
    def _refused(params: JoinGroupParams, error_name: str) -> JoinGroupResult:
        return JoinGroupResult(error=error_for_name(error_name), member_id=params.member_id)

    def _new_member_id(self, client_id: str) -> str:
        """``<client.id>-<uuid>`` as Kafka; the uuid from the broker's (seedable) rng."""
        return f"{client_id or 'consumer'}-{uuid.UUID(int=self._rng.getrandbits(128), version=4)}"

    @staticmethod
    def _update_member(
        member: Member, params: JoinGroupParams, future: asyncio.Future[JoinGroupResult]
    ) -> None:
        member.protocols = params.protocols
        member.session_timeout_ms = params.session_timeout_ms
        member.rebalance_timeout_ms = params.rebalance_timeout_ms
        if member.join_future is not None and not member.join_future.done():
            # A resent join replaces the one still waiting; the old caller has gone.
            member.join_future.cancel()
        member.join_future = future

    @staticmethod
    def _join_result(group: Group, member: Member) -> JoinGroupResult:
        members: tuple[JoinedMember, ...] = ()
        if member.member_id == group.leader_id and group.protocol is not None:
            protocol = group.protocol
            members = tuple(
                JoinedMember(other.member_id, other.metadata_for(protocol))
                for other in group.members.values()
            )
        return JoinGroupResult(
            member_id=member.member_id,
            generation_id=group.generation,
            protocol_type=group.protocol_type or "",
            protocol_name=group.protocol or "",
            leader_id=group.leader_id or "",
            members=members,
        )

    def _prepare_rebalance(self, group: Group, now: int, reason: str) -> None:
        if group.state is GroupState.COMPLETING_REBALANCE:
            # The assignment being synced is void: members must rejoin.
            for member in group.members.values():
                member.assignment = b""
                member.fail_sync(error_for_name("REBALANCE_IN_PROGRESS"))
        was_empty = group.state is GroupState.EMPTY
        group.transition(GroupState.PREPARING_REBALANCE, now)
        group.rebalance_deadline_ms = now + group.max_rebalance_timeout_ms()
        group.initial_delay_deadline_ms = now + self._initial_delay_ms if was_empty else 0
        logger.info(
            "broker %d: preparing to rebalance group %s (generation %d): %s",
            self.broker_id,
            group.group_id,
            group.generation,
            reason,
        )
        self._maybe_complete_join(group, now)

    def _maybe_extend_initial_delay(self, group: Group, now: int) -> None:
        """Kafka's InitialDelayedJoin: each new member of a forming group buys the others
        another delay, up to the rebalance timeout."""
        if group.initial_delay_deadline_ms > now:
            group.initial_delay_deadline_ms = min(
                now + self._initial_delay_ms, group.rebalance_deadline_ms
            )

    def _maybe_complete_join(self, group: Group, now: int) -> None:
        if group.state is not GroupState.PREPARING_REBALANCE:
            return
        if group.initial_delay_deadline_ms > now:
            return
        if group.all_members_joined() or now >= group.rebalance_deadline_ms:
            self._complete_join(group, now)

    def _complete_join(self, group: Group, now: int) -> None:
        for member in group.not_yet_rejoined():
            logger.info(
                "broker %d: group %s: member %s did not rejoin in time; removed",
                self.broker_id,
                group.group_id,
                member.member_id,
            )
            group.remove_member(member.member_id)
            member.fail(error_for_name("UNKNOWN_MEMBER_ID"))
        group.generation += 1
        if not group.members:
            group.protocol = None
            group.leader_id = None
            group.subscribed_topics = group.compute_subscribed_topics()
            group.transition(GroupState.EMPTY, now)
            self._manager.store_group_later(group)
            return
        group.protocol = group.select_protocol()
        group.subscribed_topics = group.compute_subscribed_topics()
        group.transition(GroupState.COMPLETING_REBALANCE, now)
        for member in group.members.values():
            member.heartbeat_deadline_ms = now + member.session_timeout_ms
            if member.join_future is not None and not member.join_future.done():
                member.join_future.set_result(self._join_result(group, member))
            member.join_future = None
        logger.info(
            "broker %d: group %s formed generation %d with %d members (%s)",
            self.broker_id,
            group.group_id,
            group.generation,
            len(group.members),
            group.protocol,
        )

    # -- SyncGroup ----------------------------------------------------------------------

    def _member_of(
        self, group_id: str, member_id: str, generation: int
    ) -> tuple[Error, Group | None, Member | None]:
        """The group and member a SyncGroup or Heartbeat speaks for, with its session renewed;
        else the error: not this coordinator, UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION."""
        error = self._manager.check(group_id)
        if error is not None:
            return error, None, None
        group = self._manager.groups.get(group_id)
        member = group.members.get(member_id) if group is not None else None
        if group is None or member is None:
            return error_for_name("UNKNOWN_MEMBER_ID"), None, None
        if generation != group.generation:
            return error_for_name("ILLEGAL_GENERATION"), None, None
        member.heartbeat_deadline_ms = self._clock.monotonic_ms() + member.session_timeout_ms
        return None, group, member

    async def sync_group(self, params: SyncGroupParams) -> SyncGroupResult:
        error, group, member = self._member_of(
            params.group_id, params.member_id, params.generation_id
        )
        if error is not None or group is None or member is None:
            return SyncGroupResult(error=error)
        # SyncGroup v5+ names the protocol the member thinks it synced ("" not named).
        if (params.protocol_type and params.protocol_type != group.protocol_type) or (
            params.protocol_name and params.protocol_name != group.protocol
        ):
            return SyncGroupResult(error=error_for_name("INCONSISTENT_GROUP_PROTOCOL"))
        if group.state is GroupState.PREPARING_REBALANCE:
            return SyncGroupResult(error=error_for_name("REBALANCE_IN_PROGRESS"))
        if group.state is GroupState.STABLE:
            return self._sync_result(group, member)
        if group.state is not GroupState.COMPLETING_REBALANCE:
            return SyncGroupResult(error=error_for_name("UNKNOWN_MEMBER_ID"))
        future: asyncio.Future[SyncGroupResult] = asyncio.get_running_loop().create_future()
        member.fail_sync(error_for_name("REBALANCE_IN_PROGRESS"))
        member.sync_future = future
        if member.member_id == group.leader_id:
            await self._store_assignment(group, params)
        return await future

    async def _store_assignment(self, group: Group, params: SyncGroupParams) -> None:
        """The leader's assignment: written, then every waiting member is answered its part."""
        assignments = {a.member_id: a.assignment for a in params.assignments}
        for m in group.members.values():
            m.assignment = assignments.get(m.member_id, b"")
        generation = group.generation
        error = await self._manager.write(group.group_id, [self._manager.group_record(group)])
        if group.state is not GroupState.COMPLETING_REBALANCE or group.generation != generation:
            return  # a rebalance started meanwhile; its members were told
        if error is not None:
            for m in group.members.values():
                m.assignment = b""
                m.fail_sync(error)
            self._prepare_rebalance(group, self._clock.monotonic_ms(), "sync write failed")
            return
        group.transition(GroupState.STABLE, self._clock.monotonic_ms())
        for m in group.members.values():
            if m.sync_future is not None and not m.sync_future.done():
                m.sync_future.set_result(self._sync_result(group, m))
            m.sync_future = None

    @staticmethod
    def _sync_result(group: Group, member: Member) -> SyncGroupResult:
        return SyncGroupResult(
            protocol_type=group.protocol_type or "",
            protocol_name=group.protocol or "",
            assignment=member.assignment,
        )

    # -- Heartbeat / LeaveGroup ---------------------------------------------------------

    def heartbeat(self, params: HeartbeatParams) -> HeartbeatResult:
        error, group, _ = self._member_of(params.group_id, params.member_id, params.generation_id)
        if error is not None or group is None:
            return HeartbeatResult(error=error)
        if group.state is GroupState.PREPARING_REBALANCE:
            return HeartbeatResult(error=error_for_name("REBALANCE_IN_PROGRESS"))
        return HeartbeatResult()

    def leave_group(self, params: LeaveGroupParams) -> LeaveGroupResult:
        error = self._manager.check(params.group_id)
        if error is not None:
            return LeaveGroupResult(error=error)
        group = self._manager.groups.get(params.group_id)
        now = self._clock.monotonic_ms()
        results: list[MemberLeft] = []
        left = []
        for member_id in params.member_ids:
            if group is not None and group.pending_members.pop(member_id, None) is not None:
                # A member id handed out with MEMBER_ID_REQUIRED, never joined: it goes
                # without a rebalance (it may let a join phase complete, below).
                results.append(MemberLeft(member_id))
                continue
            member = group.members.get(member_id) if group is not None else None
            if group is None or member is None:
                results.append(MemberLeft(member_id, error_for_name("UNKNOWN_MEMBER_ID")))
                continue
            results.append(MemberLeft(member_id))
            group.remove_member(member_id)
            member.fail(error_for_name("UNKNOWN_MEMBER_ID"))
            left.append(member_id)
        if group is not None and left:
            self._after_removal(group, now, f"members {', '.join(left)} left")
        elif group is not None:
            self._maybe_complete_join(group, now)
        # One member leaving (LeaveGroup v0-v2's shape): its error is the request's.
        single = results[0].error if len(results) == 1 else None
        return LeaveGroupResult(error=single, members=tuple(results))

    def _after_removal(self, group: Group, now: int, reason: str) -> None:
        if group.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self._prepare_rebalance(group, now, reason)
        else:
            self._maybe_complete_join(group, now)

    # -- timers -------------------------------------------------------------------------

    def expire(self, now: int) -> None:
        """Remove members whose session ended; end join phases whose time is up."""
        for group in list(self._manager.groups.values()):
            for member_id, deadline in list(group.pending_members.items()):
                if now >= deadline:
                    # Handed an id with MEMBER_ID_REQUIRED but never came back with it.
                    del group.pending_members[member_id]
            expired = [
                m
                for m in group.members.values()
                if not m.awaiting_join and not m.awaiting_sync and now >= m.heartbeat_deadline_ms
            ]
            for member in expired:
                logger.info(
                    "broker %d: group %s: member %s's session expired (%d ms)",
                    self.broker_id,
                    group.group_id,
                    member.member_id,
                    member.session_timeout_ms,
                )
                group.remove_member(member.member_id)
                member.fail(error_for_name("UNKNOWN_MEMBER_ID"))
            if expired:
                self._after_removal(group, now, "member session expired")
            else:
                self._maybe_complete_join(group, now)
