"""The group coordinator: consumer groups and their committed offsets (Kafka's
``GroupCoordinator``, classic protocol, ZooKeeper mode), over domain values.

It takes the ``*Params`` and returns the ``*Result`` values of ``node.group_types``; the front
doors translate their wire formats into those (``node.apis_group`` for gRPC). Its parts:

* ``node.group_manager`` — which ``__consumer_offsets`` partition holds a group, the partitions
  this broker leads and has loaded (``elect``/``resign``), and the acks=all writes;
* ``node.group_loader`` — the groups and offsets a partition's records describe;
* ``node.group_membership`` — JoinGroup, SyncGroup, Heartbeat, LeaveGroup and the session
  and rebalance timers (the rebalance state machine; its states in ``node.group_metadata``);
* ``node.group_offsets`` — OffsetCommit, OffsetFetch and OffsetDelete;
* ``node.group_txn_offsets`` — TxnOffsetCommit, whose offsets stay pending until the
  transaction's marker is written (:meth:`GroupCoordinator.on_txn_markers_written`);
* this module — the lifecycle, the timer tick, and the admin paths: ListGroups,
  DescribeGroups, DeleteGroups.

Every change a client must be able to rely on — a commit, a completed rebalance, a group
becoming empty or deleted — is appended to the group's partition with acks=all before it is
answered. Loading a partition reads the local log in one step (small logs);
COORDINATOR_LOAD_IN_PROGRESS is still answered for a partition while it loads, which only a
yielding load would show.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import Iterable

from kafkasim.common.clock import Clock
from kafkasim.common.errors import error_for_name
from kafkasim.common.types import TopicPartition
from kafkasim.node.config import BrokerConfig
from kafkasim.node.group_manager import GroupMetadataManager, OffsetsTopic
from kafkasim.node.group_membership import GroupMembership
from kafkasim.node.group_metadata import Group
from kafkasim.node.group_offsets import GroupOffsets
from kafkasim.node.group_records import (
    OFFSETS_TOPIC,
    GroupKey,
    OffsetKey,
    encode_group_key,
    encode_offset_key,
)
from kafkasim.node.group_txn_offsets import GroupTxnOffsets
from kafkasim.node.group_types import (
    DeletedGroup,
    DeleteGroupsParams,
    DeleteGroupsResult,
    DescribedGroup,
    DescribedMember,
    DescribeGroupsParams,
    DescribeGroupsResult,
    Error,
    GroupState,
    HeartbeatParams,
    HeartbeatResult,
    JoinGroupParams,
    JoinGroupResult,
    LeaveGroupParams,
    LeaveGroupResult,
    ListedGroup,
    ListGroupsParams,
    ListGroupsResult,
    OffsetCommitParams,
    OffsetCommitResult,
    OffsetDeleteParams,
    OffsetDeleteResult,
    OffsetFetchParams,
    OffsetFetchResult,
    SyncGroupParams,
    SyncGroupResult,
    TxnOffsetCommitParams,
)
from kafkasim.storage.records.batch import ControlRecordType

logger = logging.getLogger(__name__)

TICK_MS = 100


class GroupCoordinator:
    def __init__(
        self,
        broker_id: int,
        config: BrokerConfig,
        offsets_topic: OffsetsTopic,
        clock: Clock,
        rng: random.Random,
    ) -> None:
        self.broker_id = broker_id
        self._clock = clock
        self.manager = GroupMetadataManager(broker_id, config, offsets_topic, clock)
        self.membership = GroupMembership(self.manager, config, clock, rng)
        self.offsets = GroupOffsets(self.manager, config, clock)
        self.txn_offsets = GroupTxnOffsets(self.manager, self.offsets, clock)
        self._task: asyncio.Task[None] | None = None

    @property
    def groups(self) -> dict[str, Group]:
        return self.manager.groups

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
        self.manager.resign_all()

    async def _run_timers(self) -> None:
        while True:
            await asyncio.sleep(TICK_MS / 1000)
            try:
                self.expire(self._clock.monotonic_ms())
            except Exception:
                logger.exception("broker %d: group timers failed", self.broker_id)

    def expire(self, now: int) -> None:
        """Remove members whose session ended; end join phases whose time is up."""
        self.membership.expire(now)

    # -- leadership of __consumer_offsets -----------------------------------------------

    @property
    def partition_count(self) -> int:
        """How many partitions of ``__consumer_offsets`` groups are spread over."""
        return self.manager.partition_count

    def set_partition_count(self, count: int) -> None:
        self.manager.set_partition_count(count)

    def partition_of(self, group_id: str) -> int:
        return self.manager.partition_of(group_id)

    def elect(self, partition: int, leader_epoch: int) -> None:
        """This broker now leads ``__consumer_offsets`` ``partition``: load its groups."""
        self.manager.elect(partition, leader_epoch)

    def resign(self, partition: int) -> None:
        """No longer the leader: forget the partition's groups; waiting members look again."""
        self.manager.resign(partition)

    # -- membership and offsets ---------------------------------------------------------

    async def join_group(self, params: JoinGroupParams) -> JoinGroupResult:
        return await self.membership.join_group(params)

    async def sync_group(self, params: SyncGroupParams) -> SyncGroupResult:
        return await self.membership.sync_group(params)

    def heartbeat(self, params: HeartbeatParams) -> HeartbeatResult:
        return self.membership.heartbeat(params)

    def leave_group(self, params: LeaveGroupParams) -> LeaveGroupResult:
        return self.membership.leave_group(params)

    async def offset_commit(self, params: OffsetCommitParams) -> OffsetCommitResult:
        return await self.offsets.offset_commit(params)

    def offset_fetch(self, params: OffsetFetchParams) -> OffsetFetchResult:
        return self.offsets.offset_fetch(params)

    async def offset_delete(self, params: OffsetDeleteParams) -> OffsetDeleteResult:
        return await self.offsets.offset_delete(params)

    # -- transactional offsets ------------------------------------------------------------

    async def txn_offset_commit(self, params: TxnOffsetCommitParams) -> OffsetCommitResult:
        return await self.txn_offsets.txn_offset_commit(params)

    def on_txn_markers_written(
        self, producer_id: int, result: ControlRecordType, partitions: Iterable[TopicPartition]
    ) -> None:
        """``producer_id``'s COMMIT or ABORT marker was written (acks=all) to ``partitions``:
        those of ``__consumer_offsets`` complete its pending transactional offsets (Kafka's
        ``onTransactionCompleted`` from ``handleWriteTxnMarkersRequest``)."""
        offsets_partitions = [tp.partition for tp in partitions if tp.topic == OFFSETS_TOPIC]
        if offsets_partitions:
            self.manager.handle_txn_completion(
                producer_id, offsets_partitions, result is ControlRecordType.COMMIT
            )

    # -- listing, describing, deleting ---------------------------------------------------

    def list_groups(self, params: ListGroupsParams) -> ListGroupsResult:
        wanted = {s.lower() for s in params.states}
        listed = tuple(
            ListedGroup(group_id, group.protocol_type or "", group.state)
            for group_id, group in sorted(self.groups.items())
            if not wanted or group.state.value.lower() in wanted
        )
        return ListGroupsResult(groups=listed)

    def describe_groups(self, params: DescribeGroupsParams) -> DescribeGroupsResult:
        return DescribeGroupsResult(tuple(self._describe(g) for g in params.group_ids))

    def _describe(self, group_id: str) -> DescribedGroup:
        error = self.manager.check(group_id)
        if error is not None:
            return DescribedGroup(group_id, error)
        group = self.groups.get(group_id)
        if group is None:
            return DescribedGroup(group_id, state=GroupState.DEAD)
        stable = group.state is GroupState.STABLE
        protocol = group.protocol if stable else None
        members = tuple(
            DescribedMember(
                member_id=m.member_id,
                client_id=m.client_id,
                client_host=m.client_host,
                metadata=m.metadata_for(protocol) if protocol else b"",
                assignment=m.assignment if stable else b"",
            )
            for m in group.members.values()
        )
        return DescribedGroup(
            group_id,
            state=group.state,
            protocol_type=group.protocol_type or "",
            protocol=protocol or "",
            members=members,
        )

    async def delete_groups(self, params: DeleteGroupsParams) -> DeleteGroupsResult:
        deleted = []
        for group_id in params.group_ids:
            deleted.append(DeletedGroup(group_id, await self._delete(group_id)))
        return DeleteGroupsResult(tuple(deleted))

    async def _delete(self, group_id: str) -> Error:
        """Tombstones for the group's offsets and metadata; only an Empty group goes."""
        error = self.manager.check(group_id)
        if error is not None:
            return error
        group = self.groups.get(group_id)
        if group is None:
            return error_for_name("GROUP_ID_NOT_FOUND")
        if group.state is not GroupState.EMPTY:
            return error_for_name("NON_EMPTY_GROUP")
        tombstones: list[tuple[bytes, bytes | None]] = [
            (encode_offset_key(OffsetKey(group_id, tp.topic, tp.partition)), None)
            for tp in sorted(group.offsets)
        ]
        tombstones.append((encode_group_key(GroupKey(group_id)), None))
        error = await self.manager.write(group_id, tombstones)
        if error is None and self.groups.get(group_id) is group:
            group.transition(GroupState.DEAD, self._clock.monotonic_ms())
            del self.groups[group_id]
        return error
