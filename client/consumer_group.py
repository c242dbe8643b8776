"""The group protocol of a consumer (Kafka's ``AbstractCoordinator`` with the offset calls of
its ``ConsumerCoordinator``): finding the group coordinator, joining and syncing, heartbeats,
leaving, and committing and fetching offsets. When the consumer uses them on ``poll`` is
:mod:`client.consumer_coordinator`'s.

Theory of operation
-------------------
1. **Coordinator.** FindCoordinator to any broker names the leader of the group's
   ``__consumer_offsets`` partition. NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE, a broken
   connection or a timeout forget it; the next call looks it up again (after
   ``retry.backoff.ms``).
2. **Joining.** :meth:`GroupMembership.join` sends JoinGroup with one protocol per configured
   assignor (``partition.assignment.strategy``, in order of preference), each carrying the
   member's :class:`~common.group_protocol.Subscription`. The coordinator answers once every
   member has rejoined; the leader then runs the chosen assignor over the partition counts it
   reads from the metadata and sends everyone's :class:`~common.group_protocol.Assignment` in
   SyncGroup; every member gets its own from SyncGroup. UNKNOWN_MEMBER_ID (our member id is
   gone: the session expired) starts again with no member id; REBALANCE_IN_PROGRESS and
   ILLEGAL_GENERATION join again.
3. **Heartbeats** go every ``heartbeat.interval.ms`` from a background task while the member
   has a generation. REBALANCE_IN_PROGRESS, ILLEGAL_GENERATION or UNKNOWN_MEMBER_ID mark the
   member as needing to rejoin, which the consumer's next ``poll`` does (after committing, with
   auto commit, and telling the rebalance listener). A consumer that does not poll for
   ``max.poll.interval.ms`` leaves the group from the heartbeat task, as Kafka's does.
4. **Offsets.** OffsetCommit carries the generation and member id, so the coordinator refuses
   a commit from a member whose partitions may already belong to someone else (ILLEGAL_GENERATION
   / UNKNOWN_MEMBER_ID / REBALANCE_IN_PROGRESS → :class:`CommitFailedError`). A consumer with
   ``group.id`` but manual assignment commits with generation -1 and no member id. Coordinator
   errors and timeouts retry until ``default.api.timeout.ms``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from tenacity import AsyncRetrying

from kafkasim import proto
from kafkasim.client.assignors import AbstractPartitionAssignor
from kafkasim.client.consumer_types import CommitFailedError
from kafkasim.client.network import NetworkClient
from kafkasim.common.clock import Clock
from kafkasim.common.errors import (
    CoordinatorNotAvailableError,
    KafkaError,
    UnstableOffsetCommitError,
    error_for_code,
    error_for_name,
)
from kafkasim.common.group_protocol import (
    PROTOCOL_TYPE,
    Assignment,
    Subscription,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
)
from kafkasim.common.rpc import RpcError
from kafkasim.common.types import TopicPartition
from kafkasim.proto import kafkasim_pb2 as pb

logger = logging.getLogger(__name__)


def _code(name: str) -> int:
    return error_for_name(name).code


NONE = 0
COORDINATOR_ERRORS = frozenset(
    _code(name)
    for name in (
        "COORDINATOR_NOT_AVAILABLE",
        "NOT_COORDINATOR",
        "COORDINATOR_LOAD_IN_PROGRESS",
        "REQUEST_TIMED_OUT",
    )
)
REJOIN_ERRORS = frozenset(
    _code(name) for name in ("REBALANCE_IN_PROGRESS", "ILLEGAL_GENERATION", "UNKNOWN_MEMBER_ID")
)
UNKNOWN_MEMBER_ID = _code("UNKNOWN_MEMBER_ID")


async def find_coordinator(
    client: NetworkClient, group_id: str, *, key_type: int = 0
) -> tuple[int, str]:
    """(broker id, address) of ``group_id``'s coordinator, asking any broker; ``key_type`` 1
    looks up a transactional id's transaction coordinator instead (Kafka's CoordinatorType).

    A retriable COORDINATOR_NOT_AVAILABLE (or the like) while ``__consumer_offsets`` is being
    created or has no leader, or when no broker answers; other errors as Kafka names them."""
    what = "transactional id" if key_type else "group"
    try:
        response = await client.call_any(
            proto.METHOD_FIND_COORDINATOR,
            pb.FindCoordinatorRequest(key=group_id, key_type=key_type),
        )
    except RpcError as e:
        raise CoordinatorNotAvailableError(f"FindCoordinator for {what} {group_id}: {e}") from e
    assert isinstance(response, pb.FindCoordinatorResponse)
    if response.error_code:
        raise error_for_code(response.error_code)(response.error_message or f"{what} {group_id}")
    return response.node_id, f"{response.host}:{response.port}"


def offset_commit_request(
    group_id: str,
    offsets: Mapping[TopicPartition, int],
    *,
    generation: int = -1,
    member_id: str = "",
    metadata: str = "",
) -> pb.OffsetCommitRequest:
    """An OffsetCommit of ``offsets``; generation -1 and no member id commit from outside the
    group (tools, assign-mode consumers), which the coordinator allows while it is empty."""
    request = pb.OffsetCommitRequest(
        group_id=group_id, generation_id=generation, member_id=member_id
    )
    for tp in sorted(offsets):
        request.partitions.add(
            topic=tp.topic,
            partition=tp.partition,
            committed_offset=offsets[tp],
            committed_leader_epoch=-1,
            committed_metadata=metadata,
        )
    return request


@dataclass(frozen=True, slots=True)
class GroupSettings:
    group_id: str
    client_id: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    heartbeat_interval_ms: int
    retry_backoff_ms: int
    request_timeout_ms: int
    assignors: tuple[AbstractPartitionAssignor, ...]
    # isolation.level=read_committed: OffsetFetch asks for stable offsets (KIP-447).
    require_stable: bool = False


class GroupMembership:
    """One consumer's membership of ``settings.group_id``; see the module doc."""

    def __init__(self, settings: GroupSettings, client: NetworkClient, clock: Clock) -> None:
        self.settings = settings
        self._client = client
        self._clock = clock
        self.member_id = ""
        self.generation = -1
        self.protocol: str | None = None
        self.leader_id = ""
        self.need_rejoin = True
        self._coordinator: str | None = None
        self._heartbeat: asyncio.Task[None] | None = None
        self.last_poll_ms = clock.monotonic_ms()
        # The leader remembers the partition counts it assigned, to notice topic changes.
        self.assigned_counts: dict[str, int] = {}

    @property
    def is_leader(self) -> bool:
        return bool(self.member_id) and self.member_id == self.leader_id

    @property
    def in_generation(self) -> bool:
        return self.generation >= 0 and not self.need_rejoin

    # -- coordinator ----------------------------------------------------------------------

    async def _coordinator_address(self) -> str:
        if self._coordinator is not None:
            return self._coordinator
        node_id, self._coordinator = await find_coordinator(self._client, self.settings.group_id)
        logger.info(
            "%s: group %s's coordinator is broker %d (%s)",
            self.settings.client_id,
            self.settings.group_id,
            node_id,
            self._coordinator,
        )
        return self._coordinator

    def coordinator_unknown(self) -> None:
        self._coordinator = None

    async def _call(self, method: str, request: object, *, timeout_ms: int | None = None) -> object:
        """One call to the coordinator; COORDINATOR_NOT_AVAILABLE when unreachable."""
        address = await self._coordinator_address()
        timeout_s = (timeout_ms or self.settings.request_timeout_ms) / 1000
        try:
            return await self._client.transport.call(
                address,
                method,
                request,  # type: ignore[arg-type]
                timeout_s=timeout_s,
            )
        except RpcError as e:
            self.coordinator_unknown()
            raise CoordinatorNotAvailableError(f"coordinator {address}: {e}") from e

    def _retrying(self, *, retry_unstable: bool = True) -> AsyncRetrying:
        """The client's retry policy; an error naming the coordinator forgets it first.
        ``retry_unstable`` False: UNSTABLE_OFFSET_COMMIT is raised at once."""

        def retriable(e: BaseException) -> bool:
            if isinstance(e, KafkaError) and e.code in COORDINATOR_ERRORS:
                self.coordinator_unknown()
            if not retry_unstable and isinstance(e, UnstableOffsetCommitError):
                return False
            return isinstance(e, (RpcError, KafkaError)) and e.retriable

        return self._client.retrying(retry_on=retriable)

    def _check_coordinator_code(self, code: int, what: str) -> None:
        if code in COORDINATOR_ERRORS:
            self.coordinator_unknown()
            raise error_for_code(code)(f"{what} to group {self.settings.group_id}")

    # -- join / sync ----------------------------------------------------------------------

    async def join(
        self,
        topics: Sequence[str],
        partition_counts: Callable[[Sequence[str]], Awaitable[dict[str, int]]],
    ) -> list[TopicPartition]:
        """Join (or rejoin) the group and return this member's new assignment."""
        subscription = encode_subscription(Subscription(tuple(sorted(topics))))
        while True:
            try:
                assignment = await self._join_once(subscription, partition_counts)
            except KafkaError as e:
                if e.code not in COORDINATOR_ERRORS:
                    raise
                self.coordinator_unknown()
                logger.info("%s: %s; looking up the coordinator again", self.settings.client_id, e)
                await asyncio.sleep(self.settings.retry_backoff_ms / 1000)
                continue
            if assignment is not None:
                self.need_rejoin = False
                self._start_heartbeats()
                return sorted(assignment.partitions)
            await asyncio.sleep(self.settings.retry_backoff_ms / 1000)

    async def _join_once(
        self,
        subscription: bytes,
        partition_counts: Callable[[Sequence[str]], Awaitable[dict[str, int]]],
    ) -> Assignment | None:
        s = self.settings
        request = pb.JoinGroupRequest(
            group_id=s.group_id,
            session_timeout_ms=s.session_timeout_ms,
            rebalance_timeout_ms=s.rebalance_timeout_ms,
            member_id=self.member_id,
            protocol_type=PROTOCOL_TYPE,
            client_id=s.client_id,
            client_host="/127.0.0.1",
        )
        for assignor in s.assignors:
            request.protocols.add(name=assignor.name, metadata=subscription)
        # A join may wait for every member to rejoin: up to the rebalance timeout.
        response = await self._call(
            proto.METHOD_JOIN_GROUP,
            request,
            timeout_ms=s.rebalance_timeout_ms + s.request_timeout_ms,
        )
        assert isinstance(response, pb.JoinGroupResponse)
        code = response.error_code
        self._check_coordinator_code(code, "JoinGroup")
        if code == UNKNOWN_MEMBER_ID:
            logger.info("%s: member id %s unknown; joining anew", s.client_id, self.member_id)
            self.member_id = ""
            return None
        if code in REJOIN_ERRORS:
            return None
        if code:
            raise error_for_code(code)(f"JoinGroup to group {s.group_id}")
        self.member_id = response.member_id
        self.generation = response.generation_id
        self.protocol = response.protocol_name
        self.leader_id = response.leader
        sync = pb.SyncGroupRequest(
            group_id=s.group_id,
            generation_id=self.generation,
            member_id=self.member_id,
            protocol_type=PROTOCOL_TYPE,
            protocol_name=self.protocol,
        )
        if self.is_leader:
            for member_id, assignment in (await self._assign(response, partition_counts)).items():
                sync.assignments.add(member_id=member_id, assignment=encode_assignment(assignment))
        sync_response = await self._call(
            proto.METHOD_SYNC_GROUP,
            sync,
            timeout_ms=s.rebalance_timeout_ms + s.request_timeout_ms,
        )
        assert isinstance(sync_response, pb.SyncGroupResponse)
        code = sync_response.error_code
        self._check_coordinator_code(code, "SyncGroup")
        if code == UNKNOWN_MEMBER_ID:
            self.member_id = ""
            return None
        if code in REJOIN_ERRORS:
            return None
        if code:
            raise error_for_code(code)(f"SyncGroup to group {s.group_id}")
        assignment = (
            decode_assignment(sync_response.assignment)
            if sync_response.assignment
            else (Assignment(()))
        )
        logger.info(
            "%s: joined group %s generation %d as %s%s, assigned %s",
            s.client_id,
            s.group_id,
            self.generation,
            self.member_id,
            " (leader)" if self.is_leader else "",
            ", ".join(str(tp) for tp in sorted(assignment.partitions)) or "nothing",
        )
        return assignment

    async def _assign(
        self,
        response: pb.JoinGroupResponse,
        partition_counts: Callable[[Sequence[str]], Awaitable[dict[str, int]]],
    ) -> dict[str, Assignment]:
        subscriptions = {m.member_id: decode_subscription(m.metadata) for m in response.members}
        topics = sorted({t for sub in subscriptions.values() for t in sub.topics})
        counts = await partition_counts(topics)
        self.assigned_counts = dict(counts)
        assignor = next(a for a in self.settings.assignors if a.name == response.protocol_name)
        return assignor.assign(counts, subscriptions)

    # -- heartbeats -----------------------------------------------------------------------

    def _start_heartbeats(self) -> None:
        if self._heartbeat is None or self._heartbeat.done():
            self._heartbeat = asyncio.get_running_loop().create_task(
                self._heartbeat_loop(), name=f"{self.settings.client_id}-heartbeat"
            )

    async def _heartbeat_loop(self) -> None:
        s = self.settings
        poll_interval_ms = s.rebalance_timeout_ms
        while True:
            await asyncio.sleep(s.heartbeat_interval_ms / 1000)
            if self.need_rejoin or self.generation < 0:
                continue
            if self._clock.monotonic_ms() - self.last_poll_ms > poll_interval_ms:
                logger.warning(
                    "%s: consumer poll timeout has expired (max.poll.interval.ms %d): "
                    "leaving group %s",
                    s.client_id,
                    poll_interval_ms,
                    s.group_id,
                )
                await self.leave()
                continue
            try:
                response = await self._call(
                    proto.METHOD_HEARTBEAT,
                    pb.HeartbeatRequest(
                        group_id=s.group_id, generation_id=self.generation, member_id=self.member_id
                    ),
                )
            except KafkaError as e:
                logger.info("%s: heartbeat failed: %s", s.client_id, e)
                continue
            assert isinstance(response, pb.HeartbeatResponse)
            code = response.error_code
            if code in COORDINATOR_ERRORS:
                self.coordinator_unknown()
            elif code in REJOIN_ERRORS:
                logger.info(
                    "%s: heartbeat says %s: rejoining group %s",
                    s.client_id,
                    error_for_code(code).error_name,
                    s.group_id,
                )
                if code == UNKNOWN_MEMBER_ID:
                    self.member_id = ""
                    self.generation = -1
                self.need_rejoin = True

    async def stop_heartbeats(self) -> None:
        if self._heartbeat is not None:
            self._heartbeat.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._heartbeat
            self._heartbeat = None

    # -- leave ----------------------------------------------------------------------------

    async def leave(self) -> None:
        """LeaveGroup (best effort): the group rebalances without waiting for our session."""
        if self.member_id:
            try:
                await self._call(
                    proto.METHOD_LEAVE_GROUP,
                    pb.LeaveGroupRequest(
                        group_id=self.settings.group_id, member_ids=[self.member_id]
                    ),
                )
            except KafkaError as e:
                logger.info("%s: LeaveGroup failed: %s", self.settings.client_id, e)
        self.member_id = ""
        self.generation = -1
        self.need_rejoin = True

    # -- offsets --------------------------------------------------------------------------

    async def commit(self, offsets: Mapping[TopicPartition, int], metadata: str = "") -> None:
        """Commit ``offsets`` (the next offset to read, per partition)."""
        s = self.settings
        async for attempt in self._retrying():
            with attempt:
                request = offset_commit_request(
                    s.group_id,
                    offsets,
                    generation=self.generation if self.member_id else -1,
                    member_id=self.member_id,
                    metadata=metadata,
                )
                response = await self._call(proto.METHOD_OFFSET_COMMIT, request)
                assert isinstance(response, pb.OffsetCommitResponse)
                for part in response.partitions:
                    code = part.error_code
                    if not code:
                        continue
                    self._check_coordinator_code(code, "OffsetCommit")
                    if code in REJOIN_ERRORS:
                        if code == UNKNOWN_MEMBER_ID:
                            self.member_id = ""
                            self.generation = -1
                        self.need_rejoin = True
                        raise CommitFailedError(
                            "Commit cannot be completed since the group has already rebalanced "
                            "and assigned the partitions to another member "
                            f"({error_for_code(code).error_name} for "
                            f"{part.topic}-{part.partition})"
                        )
                    raise error_for_code(code)(
                        f"OffsetCommit of {part.topic}-{part.partition} for group {s.group_id}"
                    )
                return
        raise AssertionError("unreachable")  # pragma: no cover

    async def committed(
        self, partitions: Iterable[TopicPartition], *, wait_for_stable: bool = True
    ) -> dict[TopicPartition, int | None]:
        """The committed offset of each partition (None where the group has none). With
        ``require_stable`` (read_committed) a partition whose transactional offset commit is
        still pending is answered UNSTABLE_OFFSET_COMMIT: retried until
        ``default.api.timeout.ms`` (then raised), or, with ``wait_for_stable`` False, raised
        at once (the positions' caller, ``poll``, tries again on its next round)."""
        wanted = sorted(set(partitions))
        async for attempt in self._retrying(retry_unstable=wait_for_stable):
            with attempt:
                request = pb.OffsetFetchRequest(
                    group_id=self.settings.group_id, require_stable=self.settings.require_stable
                )
                for tp in wanted:
                    request.partitions.add(topic=tp.topic, partition=tp.partition)
                response = await self._call(proto.METHOD_OFFSET_FETCH, request)
                assert isinstance(response, pb.OffsetFetchResponse)
                self._check_coordinator_code(response.error_code, "OffsetFetch")
                if response.error_code:
                    raise error_for_code(response.error_code)(
                        f"OffsetFetch for group {self.settings.group_id}"
                    )
                result: dict[TopicPartition, int | None] = dict.fromkeys(wanted)
                for part in response.partitions:
                    self._check_coordinator_code(part.error_code, "OffsetFetch")
                    if part.error_code:
                        raise error_for_code(part.error_code)(
                            f"OffsetFetch of {part.topic}-{part.partition}"
                        )
                    tp = TopicPartition(part.topic, part.partition)
                    result[tp] = part.committed_offset if part.committed_offset >= 0 else None
                return result
        raise AssertionError("unreachable")  # pragma: no cover
