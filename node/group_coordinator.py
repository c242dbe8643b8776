"""The group coordinator: consumer groups and their committed offsets (Kafka's
``GroupCoordinator`` + ``GroupMetadataManager``, classic protocol, ZooKeeper mode).

A broker coordinates the groups whose ``partition_for(group_id)`` partition of
``__consumer_offsets`` it leads. When it becomes that partition's leader it loads the partition
from its own log (offset commits and group metadata records, tombstones removing them); when it
stops leading, it drops those groups and answers waiting members NOT_COORDINATOR, so they look
the coordinator up again. Every change a client must be able to rely on — a commit, a completed
rebalance, a group becoming empty or deleted — is appended to that partition with acks=all
before it is answered, which is why committed offsets survive a coordinator failover.

Rebalance protocol (``node.group_metadata`` has the states): JoinGroup requests wait until
every known member has rejoined (or the rebalance timeout passes; members that did not rejoin
are removed), then each gets the new generation and the leader gets everyone's metadata. The
leader's SyncGroup carries the assignment; it is written, then every member's SyncGroup is
answered with its part. Heartbeats keep a member's session alive; a member silent for its
``session.timeout.ms`` is removed and the group rebalances.

Deviations from Kafka, deliberate:

* a first JoinGroup with no member id is given its id at once (Kafka ≥ 2.2 first answers
  MEMBER_ID_REQUIRED and waits for a second join carrying it: a guard against clients that
  lose the first answer, which our clients do not need);
* no static membership (``group.instance.id``), no offset expiry (``offsets.retention.minutes``;
  retention of committed offsets is left to compaction), no transactional offset commits;
* loading a partition reads the local log in one step (small logs); COORDINATOR_LOAD_IN_PROGRESS
  is still answered for a partition while it loads, which only a yielding load would show.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import uuid
from collections.abc import Coroutine, Iterable, Sequence
from typing import Any

from kafkasim.common.clock import Clock
from kafkasim.common.errors import KafkaError, error_for_name
from kafkasim.common.types import TopicPartition
from kafkasim.node.config import BrokerConfig
from kafkasim.node.group_metadata import Group, GroupState, Member
from kafkasim.node.group_records import (
    OFFSETS_TOPIC,
    GroupKey,
    OffsetKey,
    OffsetValue,
    decode_group_value,
    decode_key,
    decode_offset_value,
    encode_group_key,
    encode_group_value,
    encode_offset_key,
    encode_offset_value,
    partition_for,
)
from kafkasim.node.replica_manager import ReplicaManager
from kafkasim.proto import kafkasim_pb2 as pb
from kafkasim.storage.records.batch import encode_batch

logger = logging.getLogger(__name__)

NONE = 0


def _code(name: str) -> int:
    return error_for_name(name).code


# How a failed write to __consumer_offsets is reported to the client (as Kafka maps them).
_WRITE_ERRORS = {
    _code("UNKNOWN_TOPIC_OR_PARTITION"): _code("COORDINATOR_NOT_AVAILABLE"),
    _code("NOT_ENOUGH_REPLICAS"): _code("COORDINATOR_NOT_AVAILABLE"),
    _code("NOT_ENOUGH_REPLICAS_AFTER_APPEND"): _code("COORDINATOR_NOT_AVAILABLE"),
    _code("REQUEST_TIMED_OUT"): _code("COORDINATOR_NOT_AVAILABLE"),
    _code("NOT_LEADER_OR_FOLLOWER"): _code("NOT_COORDINATOR"),
    _code("KAFKA_STORAGE_ERROR"): _code("NOT_COORDINATOR"),
    _code("MESSAGE_TOO_LARGE"): _code("INVALID_COMMIT_OFFSET_SIZE"),
    _code("RECORD_LIST_TOO_LARGE"): _code("INVALID_COMMIT_OFFSET_SIZE"),
}

TICK_MS = 100


class GroupCoordinator:
    def __init__(
        self,
        broker_id: int,
        config: BrokerConfig,
        replica_manager: ReplicaManager,
        clock: Clock,
        rng: random.Random,
    ) -> None:
        self.broker_id = broker_id
        self._replica_manager = replica_manager
        self._clock = clock
        self._rng = rng
        self.num_partitions: int = config["offsets.topic.num.partitions"]
        self._min_session_ms: int = config["group.min.session.timeout.ms"]
        self._max_session_ms: int = config["group.max.session.timeout.ms"]
        self._initial_delay_ms: int = config["group.initial.rebalance.delay.ms"]
        self._commit_timeout_ms: int = config["offsets.commit.timeout.ms"]
        self._max_metadata_bytes: int = config["offset.metadata.max.bytes"]
        self.groups: dict[str, Group] = {}
        # __consumer_offsets partitions this broker leads and has loaded → their leader epoch.
        self._owned: dict[int, int] = {}
        self._loading: set[int] = set()
        self._task: asyncio.Task[None] | None = None
        self._background: set[asyncio.Task[None]] = set()

    # -- lifecycle ----------------------------------------------------------------------

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(
            self._run_timers(), name=f"broker-{self.broker_id}-group-coordinator"
        )

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        for partition in sorted(self._owned):
            self.resign(partition)

    async def _run_timers(self) -> None:
        while True:
            await asyncio.sleep(TICK_MS / 1000)
            try:
                self.expire(self._clock.monotonic_ms())
            except Exception:
                logger.exception("broker %d: group timers failed", self.broker_id)

    # -- leadership of __consumer_offsets -----------------------------------------------

    def partition_of(self, group_id: str) -> int:
        return partition_for(group_id, self.num_partitions)

    def elect(self, partition: int, leader_epoch: int) -> None:
        """This broker now leads ``__consumer_offsets`` ``partition``: load its groups."""
        if self._owned.get(partition) == leader_epoch:
            return
        self.resign(partition)
        self._loading.add(partition)
        try:
            self._load(partition)
        except KafkaError as e:
            logger.error(
                "broker %d: could not load %s-%d: %s", self.broker_id, OFFSETS_TOPIC, partition, e
            )
            return
        finally:
            self._loading.discard(partition)
        self._owned[partition] = leader_epoch
        logger.info(
            "broker %d: coordinator for %s-%d (epoch %d), %d groups loaded",
            self.broker_id,
            OFFSETS_TOPIC,
            partition,
            leader_epoch,
            sum(1 for g in self.groups if self.partition_of(g) == partition),
        )

    def resign(self, partition: int) -> None:
        """No longer the leader: forget the partition's groups; waiting members look again."""
        self._owned.pop(partition, None)
        for group_id in [g for g in self.groups if self.partition_of(g) == partition]:
            group = self.groups.pop(group_id)
            group.transition(GroupState.DEAD, self._clock.monotonic_ms())
            for member in group.members.values():
                self._fail_member(member, _code("NOT_COORDINATOR"))

    def _load(self, partition: int) -> None:
        log = self._replica_manager.partition(TopicPartition(OFFSETS_TOPIC, partition)).log
        now = self._clock.monotonic_ms()
        offsets: dict[str, dict[TopicPartition, OffsetValue | None]] = {}
        groups: dict[str, Group | None] = {}
        for header, records in log.batches():
            if header.is_control:
                continue
            for record in records:
                if record.key is None:
                    continue
                key = decode_key(record.key)
                if isinstance(key, OffsetKey):
                    tp = TopicPartition(key.topic, key.partition)
                    value = decode_offset_value(record.value) if record.value else None
                    offsets.setdefault(key.group, {})[tp] = value
                elif isinstance(key, GroupKey):
                    groups[key.group] = (
                        Group.from_value(key.group, decode_group_value(record.value), now)
                        if record.value
                        else None
                    )
        for group_id in sorted(set(groups) | set(offsets)):
            group = groups.get(group_id)
            committed = {tp: v for tp, v in offsets.get(group_id, {}).items() if v is not None}
            if group is None:
                if not committed:
                    continue
                group = Group(group_id)
                group.transition(GroupState.EMPTY, now)
            group.offsets = committed
            self.groups[group_id] = group

    # -- request checks -----------------------------------------------------------------

    def _check(self, group_id: str) -> int:
        """NONE when this broker may serve ``group_id`` now, else the error code."""
        if not group_id:
            return _code("INVALID_GROUP_ID")
        partition = self.partition_of(group_id)
        if partition in self._loading:
            return _code("COORDINATOR_LOAD_IN_PROGRESS")
        if partition not in self._owned:
            return _code("NOT_COORDINATOR")
        return NONE

    def _member_of(
        self, group_id: str, member_id: str, generation: int
    ) -> tuple[int, Group | None, Member | None]:
        """The group and member a SyncGroup or Heartbeat speaks for, with its session renewed;
        else the error: not this coordinator, UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION."""
        code = self._check(group_id)
        if code:
            return code, None, None
        group = self.groups.get(group_id)
        member = group.members.get(member_id) if group is not None else None
        if group is None or member is None:
            return _code("UNKNOWN_MEMBER_ID"), None, None
        if generation != group.generation:
            return _code("ILLEGAL_GENERATION"), None, None
        member.heartbeat_deadline_ms = self._clock.monotonic_ms() + member.session_timeout_ms
        return NONE, group, member

    # -- JoinGroup ----------------------------------------------------------------------

    async def join_group(self, request: pb.JoinGroupRequest) -> pb.JoinGroupResponse:
        code = self._check(request.group_id)
        if code == NONE and not (
            self._min_session_ms <= request.session_timeout_ms <= self._max_session_ms
        ):
            code = _code("INVALID_SESSION_TIMEOUT")
        if code:
            return pb.JoinGroupResponse(error_code=code, member_id=request.member_id)
        now = self._clock.monotonic_ms()
        protocols = tuple((p.name, bytes(p.metadata)) for p in request.protocols)
        group = self.groups.get(request.group_id)
        if group is None:
            if request.member_id:
                return pb.JoinGroupResponse(
                    error_code=_code("UNKNOWN_MEMBER_ID"), member_id=request.member_id
                )
            group = Group(request.group_id)
            group.transition(GroupState.EMPTY, now)
            self.groups[request.group_id] = group
        if group.state is GroupState.DEAD:
            return pb.JoinGroupResponse(
                error_code=_code("COORDINATOR_NOT_AVAILABLE"), member_id=request.member_id
            )
        if not group.supports_protocols(request.protocol_type, protocols):
            return pb.JoinGroupResponse(
                error_code=_code("INCONSISTENT_GROUP_PROTOCOL"), member_id=request.member_id
            )
        future: asyncio.Future[pb.JoinGroupResponse] = asyncio.get_running_loop().create_future()
        if not request.member_id:
            member_id = self._new_member_id(request.client_id)
            member = Member(
                member_id=member_id,
                client_id=request.client_id,
                client_host=request.client_host,
                session_timeout_ms=request.session_timeout_ms,
                rebalance_timeout_ms=request.rebalance_timeout_ms,
                protocol_type=request.protocol_type,
                protocols=protocols,
                heartbeat_deadline_ms=now + request.session_timeout_ms,
                join_future=future,
            )
            group.add_member(member)
            if group.state is GroupState.PREPARING_REBALANCE:
                self._maybe_extend_initial_delay(group, now)
                self._maybe_complete_join(group, now)
            else:
                self._prepare_rebalance(group, now, f"new member {member_id} joined")
            return await future
        known = group.members.get(request.member_id)
        if known is None:
            return pb.JoinGroupResponse(
                error_code=_code("UNKNOWN_MEMBER_ID"), member_id=request.member_id
            )
        member = known
        member.heartbeat_deadline_ms = now + member.session_timeout_ms
        if group.state is GroupState.PREPARING_REBALANCE:
            self._update_member(member, request, protocols, future)
            self._maybe_complete_join(group, now)
        elif group.state is GroupState.COMPLETING_REBALANCE:
            if member.same_protocols(protocols):
                # A resent join for the generation just formed: answer it again.
                return self._join_response(group, member)
            self._update_member(member, request, protocols, future)
            self._prepare_rebalance(group, now, f"member {member.member_id} changed metadata")
        elif group.state is GroupState.STABLE:
            if member.member_id == group.leader_id or not member.same_protocols(protocols):
                # The leader rejoins when it sees the subscribed topics change (Kafka's way
                # of asking for a new assignment); anyone rejoins when its subscription does.
                self._update_member(member, request, protocols, future)
                self._prepare_rebalance(group, now, f"member {member.member_id} rejoined")
            else:
                return self._join_response(group, member)
        else:
            return pb.JoinGroupResponse(
                error_code=_code("UNKNOWN_MEMBER_ID"), member_id=request.member_id
            )
        return await future

    def _new_member_id(self, client_id: str) -> str:
        """``<client.id>-<uuid>`` as Kafka; the uuid from the broker's (seedable) rng."""
        return f"{client_id or 'consumer'}-{uuid.UUID(int=self._rng.getrandbits(128), version=4)}"

    @staticmethod
    def _update_member(
        member: Member,
        request: pb.JoinGroupRequest,
        protocols: tuple[tuple[str, bytes], ...],
        future: asyncio.Future[pb.JoinGroupResponse],
    ) -> None:
        member.protocols = protocols
        member.session_timeout_ms = request.session_timeout_ms
        member.rebalance_timeout_ms = request.rebalance_timeout_ms
        if member.join_future is not None and not member.join_future.done():
            # A resent join replaces the one still waiting; the old caller has gone.
            member.join_future.cancel()
        member.join_future = future

    def _join_response(self, group: Group, member: Member) -> pb.JoinGroupResponse:
        response = pb.JoinGroupResponse(
            generation_id=group.generation,
            protocol_type=group.protocol_type or "",
            protocol_name=group.protocol or "",
            leader=group.leader_id or "",
            member_id=member.member_id,
        )
        if member.member_id == group.leader_id and group.protocol is not None:
            for other in group.members.values():
                response.members.add(
                    member_id=other.member_id, metadata=other.metadata_for(group.protocol)
                )
        return response

    def _prepare_rebalance(self, group: Group, now: int, reason: str) -> None:
        if group.state is GroupState.COMPLETING_REBALANCE:
            # The assignment being synced is void: members must rejoin.
            for member in group.members.values():
                member.assignment = b""
                self._fail_sync(member, _code("REBALANCE_IN_PROGRESS"))
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
            self._fail_member(member, _code("UNKNOWN_MEMBER_ID"))
        group.generation += 1
        if not group.members:
            group.protocol = None
            group.leader_id = None
            group.transition(GroupState.EMPTY, now)
            self._spawn(self._store_group(group, group.generation))
            return
        group.protocol = group.select_protocol()
        group.transition(GroupState.COMPLETING_REBALANCE, now)
        for member in group.members.values():
            member.heartbeat_deadline_ms = now + member.session_timeout_ms
            if member.join_future is not None and not member.join_future.done():
                member.join_future.set_result(self._join_response(group, member))
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

    async def sync_group(self, request: pb.SyncGroupRequest) -> pb.SyncGroupResponse:
        code, group, member = self._member_of(
            request.group_id, request.member_id, request.generation_id
        )
        if code or group is None or member is None:
            return pb.SyncGroupResponse(error_code=code)
        if group.state is GroupState.PREPARING_REBALANCE:
            return pb.SyncGroupResponse(error_code=_code("REBALANCE_IN_PROGRESS"))
        if group.state is GroupState.STABLE:
            return self._sync_response(group, member)
        if group.state is not GroupState.COMPLETING_REBALANCE:
            return pb.SyncGroupResponse(error_code=_code("UNKNOWN_MEMBER_ID"))
        future: asyncio.Future[pb.SyncGroupResponse] = asyncio.get_running_loop().create_future()
        self._fail_sync(member, _code("REBALANCE_IN_PROGRESS"))
        member.sync_future = future
        if member.member_id == group.leader_id:
            assignments = {a.member_id: bytes(a.assignment) for a in request.assignments}
            for m in group.members.values():
                m.assignment = assignments.get(m.member_id, b"")
            generation = group.generation
            code = await self._write(
                group.group_id,
                [(encode_group_key(GroupKey(group.group_id)), self._group_value(group))],
            )
            if group.state is not GroupState.COMPLETING_REBALANCE or (
                group.generation != generation
            ):
                pass  # a rebalance started meanwhile; its members were told
            elif code:
                for m in group.members.values():
                    m.assignment = b""
                    self._fail_sync(m, code)
                self._prepare_rebalance(group, self._clock.monotonic_ms(), "sync write failed")
            else:
                group.transition(GroupState.STABLE, self._clock.monotonic_ms())
                for m in group.members.values():
                    if m.sync_future is not None and not m.sync_future.done():
                        m.sync_future.set_result(self._sync_response(group, m))
                    m.sync_future = None
        return await future

    def _group_value(self, group: Group) -> bytes:
        return encode_group_value(group.to_value(self._clock.time_ms()))

    @staticmethod
    def _sync_response(group: Group, member: Member) -> pb.SyncGroupResponse:
        return pb.SyncGroupResponse(
            protocol_type=group.protocol_type or "",
            protocol_name=group.protocol or "",
            assignment=member.assignment,
        )

    # -- Heartbeat / LeaveGroup ---------------------------------------------------------

    async def heartbeat(self, request: pb.HeartbeatRequest) -> pb.HeartbeatResponse:
        code, group, _ = self._member_of(request.group_id, request.member_id, request.generation_id)
        if code or group is None:
            return pb.HeartbeatResponse(error_code=code)
        if group.state is GroupState.PREPARING_REBALANCE:
            return pb.HeartbeatResponse(error_code=_code("REBALANCE_IN_PROGRESS"))
        return pb.HeartbeatResponse()

    async def leave_group(self, request: pb.LeaveGroupRequest) -> pb.LeaveGroupResponse:
        code = self._check(request.group_id)
        response = pb.LeaveGroupResponse(error_code=code)
        if code:
            return response
        group = self.groups.get(request.group_id)
        now = self._clock.monotonic_ms()
        left = []
        for member_id in request.member_ids:
            member = group.members.get(member_id) if group is not None else None
            if group is None or member is None:
                response.members.add(member_id=member_id, error_code=_code("UNKNOWN_MEMBER_ID"))
                continue
            response.members.add(member_id=member_id)
            group.remove_member(member_id)
            self._fail_member(member, _code("UNKNOWN_MEMBER_ID"))
            left.append(member_id)
        if group is not None and left:
            self._after_removal(group, now, f"members {', '.join(left)} left")
        if len(request.member_ids) == 1 and response.members[0].error_code:
            response.error_code = response.members[0].error_code
        return response

    def _after_removal(self, group: Group, now: int, reason: str) -> None:
        if group.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self._prepare_rebalance(group, now, reason)
        else:
            self._maybe_complete_join(group, now)

    # -- timers -------------------------------------------------------------------------

    def expire(self, now: int) -> None:
        """Remove members whose session ended; end join phases whose time is up."""
        for group in list(self.groups.values()):
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
                self._fail_member(member, _code("UNKNOWN_MEMBER_ID"))
            if expired:
                self._after_removal(group, now, "member session expired")
            else:
                self._maybe_complete_join(group, now)

    # -- offsets ------------------------------------------------------------------------

    async def offset_commit(self, request: pb.OffsetCommitRequest) -> pb.OffsetCommitResponse:
        response = pb.OffsetCommitResponse()

        def answer_all(code: int) -> pb.OffsetCommitResponse:
            for p in request.partitions:
                response.partitions.add(topic=p.topic, partition=p.partition, error_code=code)
            return response

        code = self._check(request.group_id)
        if code:
            return answer_all(code)
        now = self._clock.monotonic_ms()
        group = self.groups.get(request.group_id)
        if request.generation_id < 0 and not request.member_id:
            # A commit from outside any group's generation (assign-mode consumers, tools):
            # allowed while the group has no members, as in Kafka.
            if group is None:
                group = Group(request.group_id)
                group.transition(GroupState.EMPTY, now)
                self.groups[request.group_id] = group
            elif group.state is not GroupState.EMPTY:
                return answer_all(_code("UNKNOWN_MEMBER_ID"))
        else:
            member = group.members.get(request.member_id) if group is not None else None
            if group is None or member is None:
                return answer_all(_code("UNKNOWN_MEMBER_ID"))
            if request.generation_id != group.generation:
                return answer_all(_code("ILLEGAL_GENERATION"))
            if group.state is GroupState.COMPLETING_REBALANCE:
                return answer_all(_code("REBALANCE_IN_PROGRESS"))
            member.heartbeat_deadline_ms = now + member.session_timeout_ms
        commit_ms = self._clock.time_ms()
        records: list[tuple[bytes, bytes]] = []
        accepted: dict[TopicPartition, OffsetValue] = {}
        too_large: set[TopicPartition] = set()
        for p in request.partitions:
            tp = TopicPartition(p.topic, p.partition)
            if len(p.committed_metadata.encode()) > self._max_metadata_bytes:
                too_large.add(tp)
                continue
            value = OffsetValue(
                offset=p.committed_offset,
                leader_epoch=p.committed_leader_epoch,
                metadata=p.committed_metadata,
                commit_timestamp=commit_ms,
            )
            accepted[tp] = value
            records.append(
                (
                    encode_offset_key(OffsetKey(request.group_id, p.topic, p.partition)),
                    encode_offset_value(value),
                )
            )
        code = await self._write(request.group_id, records) if records else NONE
        if code == NONE and self.groups.get(request.group_id) is group:
            group.offsets.update(accepted)
        for p in request.partitions:
            tp = TopicPartition(p.topic, p.partition)
            response.partitions.add(
                topic=p.topic,
                partition=p.partition,
                error_code=_code("OFFSET_METADATA_TOO_LARGE") if tp in too_large else code,
            )
        return response

    async def offset_fetch(self, request: pb.OffsetFetchRequest) -> pb.OffsetFetchResponse:
        code = self._check(request.group_id)
        response = pb.OffsetFetchResponse(error_code=code)
        if code:
            return response
        group = self.groups.get(request.group_id)
        committed = group.offsets if group is not None else {}
        wanted: Iterable[TopicPartition] = (
            [TopicPartition(p.topic, p.partition) for p in request.partitions]
            if request.partitions
            else sorted(committed)
        )
        for tp in wanted:
            value = committed.get(tp)
            response.partitions.add(
                topic=tp.topic,
                partition=tp.partition,
                committed_offset=value.offset if value else -1,
                committed_leader_epoch=value.leader_epoch if value else -1,
                metadata=value.metadata if value else "",
            )
        return response

    # -- listing, describing, deleting ---------------------------------------------------

    async def list_groups(self, request: pb.ListGroupsRequest) -> pb.ListGroupsResponse:
        response = pb.ListGroupsResponse()
        wanted = {s.lower() for s in request.states_filter}
        for group_id in sorted(self.groups):
            group = self.groups[group_id]
            if wanted and group.state.value.lower() not in wanted:
                continue
            response.groups.add(
                group_id=group_id,
                protocol_type=group.protocol_type or "",
                group_state=group.state.value,
            )
        return response

    async def describe_groups(self, request: pb.DescribeGroupsRequest) -> pb.DescribeGroupsResponse:
        response = pb.DescribeGroupsResponse()
        for group_id in request.groups:
            code = self._check(group_id)
            described = response.groups.add(group_id=group_id, error_code=code)
            if code:
                continue
            group = self.groups.get(group_id)
            if group is None:
                described.group_state = GroupState.DEAD.value
                continue
            described.group_state = group.state.value
            described.protocol_type = group.protocol_type or ""
            stable = group.state is GroupState.STABLE
            described.protocol_data = (group.protocol or "") if stable else ""
            for member in group.members.values():
                described.members.add(
                    member_id=member.member_id,
                    client_id=member.client_id,
                    client_host=member.client_host,
                    member_metadata=member.metadata_for(group.protocol)
                    if stable and group.protocol
                    else b"",
                    member_assignment=member.assignment if stable else b"",
                )
        return response

    async def delete_groups(self, request: pb.DeleteGroupsRequest) -> pb.DeleteGroupsResponse:
        response = pb.DeleteGroupsResponse()
        for group_id in request.groups_names:
            code = self._check(group_id)
            group = self.groups.get(group_id) if code == NONE else None
            if code == NONE and group is None:
                code = _code("GROUP_ID_NOT_FOUND")
            elif group is not None and group.state is not GroupState.EMPTY:
                code = _code("NON_EMPTY_GROUP")
            elif group is not None:
                tombstones: list[tuple[bytes, bytes | None]] = [
                    (encode_offset_key(OffsetKey(group_id, tp.topic, tp.partition)), None)
                    for tp in sorted(group.offsets)
                ]
                tombstones.append((encode_group_key(GroupKey(group_id)), None))
                code = await self._write(group_id, tombstones)
                if code == NONE and self.groups.get(group_id) is group:
                    group.transition(GroupState.DEAD, self._clock.monotonic_ms())
                    del self.groups[group_id]
            response.results.add(group_id=group_id, error_code=code)
        return response

    # -- writing to __consumer_offsets ---------------------------------------------------

    async def _store_group(self, group: Group, generation: int) -> None:
        code = await self._write(
            group.group_id, [(encode_group_key(GroupKey(group.group_id)), self._group_value(group))]
        )
        if code:
            logger.warning(
                "broker %d: could not store group %s generation %d: error %d",
                self.broker_id,
                group.group_id,
                generation,
                code,
            )

    async def _write(self, group_id: str, records: Sequence[tuple[bytes, bytes | None]]) -> int:
        """Append ``records`` to the group's partition with acks=all; NONE or the error code
        to answer (Kafka's mapping of append errors for coordinator writes)."""
        now = self._clock.time_ms()
        batch = encode_batch([(now, key, value) for key, value in records])
        request = pb.ProduceRequest(acks=-1, timeout_ms=self._commit_timeout_ms)
        request.partitions.add(
            topic=OFFSETS_TOPIC, partition=self.partition_of(group_id), records=batch
        )
        response = await self._replica_manager.produce(request)
        code = response.partitions[0].error_code
        if code:
            logger.info(
                "broker %d: write for group %s failed: %s",
                self.broker_id,
                group_id,
                response.partitions[0].error_message,
            )
        return _WRITE_ERRORS.get(code, code)

    # -- plumbing -----------------------------------------------------------------------

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    def _fail_member(self, member: Member, code: int) -> None:
        if member.join_future is not None and not member.join_future.done():
            member.join_future.set_result(
                pb.JoinGroupResponse(error_code=code, member_id=member.member_id)
            )
        member.join_future = None
        self._fail_sync(member, code)

    @staticmethod
    def _fail_sync(member: Member, code: int) -> None:
        if member.sync_future is not None and not member.sync_future.done():
            member.sync_future.set_result(pb.SyncGroupResponse(error_code=code))
        member.sync_future = None
