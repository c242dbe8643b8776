"""The group coordinator as both front doors call it, with Kafka's authorization in front
(``KafkaApis``' group handlers): :class:`AuthorizedGroups` has the coordinator's request
methods, asks the caller's rights first and answers a refusal without calling the
coordinator (so a refused request changes nothing).

* JoinGroup, SyncGroup, Heartbeat, LeaveGroup: READ on the group (GROUP_AUTHORIZATION_FAILED);
* OffsetCommit: READ on the group (every partition GROUP_AUTHORIZATION_FAILED), READ on each
  topic (TOPIC_AUTHORIZATION_FAILED); TxnOffsetCommit: WRITE on the transactional id first
  (TRANSACTIONAL_ID_AUTHORIZATION_FAILED), then the same;
* OffsetFetch: DESCRIBE on the group; DESCRIBE on each topic named (TOPIC_AUTHORIZATION_FAILED),
  and a fetch of every committed offset leaves out the topics refused;
* OffsetDelete: DELETE on the group (the request's error), READ on each topic;
* ListGroups: DESCRIBE on the cluster lists every group, else only the groups allowed
  DESCRIBE; DescribeGroups: DESCRIBE, DeleteGroups: DELETE on each group; a described group's
  authorized operations are the caller's (:meth:`AuthorizedGroups.group_operations`).

The commits and OffsetDelete take the door's ``known`` (whether the metadata cache knows a
partition; None: not checked): as Kafka, a partition is UNKNOWN_TOPIC_OR_PARTITION only once
its topic is authorized, so a caller learns nothing of the topics it may not read.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from kafkasim.common.errors import UnknownTopicOrPartitionError
from kafkasim.common.types import TopicPartition
from kafkasim.node.acl import AclOperation, ResourceType
from kafkasim.node.authz import (
    GroupAuthorizationFailed,
    HasAuthorizer,
    RequestAuth,
    TopicAuthorizationFailed,
    TransactionalIdAuthorizationFailed,
    request_auth,
)
from kafkasim.node.group_coordinator import GroupCoordinator
from kafkasim.node.group_types import (
    CommittedOffset,
    DeletedGroup,
    DeleteGroupsParams,
    DeleteGroupsResult,
    DescribedGroup,
    DescribeGroupsParams,
    DescribeGroupsResult,
    Error,
    HeartbeatParams,
    HeartbeatResult,
    JoinGroupParams,
    JoinGroupResult,
    LeaveGroupParams,
    LeaveGroupResult,
    ListGroupsParams,
    ListGroupsResult,
    OffsetCommitEntry,
    OffsetCommitParams,
    OffsetCommitResult,
    OffsetDeleteParams,
    OffsetDeleteResult,
    OffsetFetchParams,
    OffsetFetchResult,
    PartitionOutcome,
    SyncGroupParams,
    SyncGroupResult,
    TxnOffsetCommitParams,
)


def _topic_refusals(
    auth: RequestAuth, operation: AclOperation, tps: Iterable[TopicPartition]
) -> dict[TopicPartition, Error]:
    tps = list(tps)
    if not auth.enabled:
        return {}
    allowed = auth.allowed_names(operation, ResourceType.TOPIC, (tp.topic for tp in tps))
    return {tp: TopicAuthorizationFailed for tp in tps if tp.topic not in allowed}


Known = Callable[[TopicPartition], bool] | None


def _partition_refusals(
    auth: RequestAuth, tps: Sequence[TopicPartition], known: Known
) -> dict[TopicPartition, Error]:
    """TOPIC_AUTHORIZATION_FAILED for the topics the caller may not READ, then
    UNKNOWN_TOPIC_OR_PARTITION for the partitions ``known`` does not know."""
    refused = _topic_refusals(auth, AclOperation.READ, tps)
    if known is not None:
        refused.update(
            {tp: UnknownTopicOrPartitionError for tp in tps if tp not in refused and not known(tp)}
        )
    return refused


def _merged(
    entries: Sequence[OffsetCommitEntry],
    refused: dict[TopicPartition, Error],
    done: Sequence[PartitionOutcome],
) -> OffsetCommitResult:
    by_tp = {p.tp: p for p in done}
    return OffsetCommitResult(
        tuple(
            PartitionOutcome(e.tp, refused[e.tp]) if e.tp in refused else by_tp[e.tp]
            for e in entries
        )
    )


class AuthorizedGroups:
    """``coordinator`` behind the authorization of ``broker``'s authorizer."""

    def __init__(self, coordinator: GroupCoordinator, broker: HasAuthorizer) -> None:
        self.coordinator = coordinator
        self.broker = broker

    def _auth(self, api: str) -> RequestAuth:
        return request_auth(self.broker, api)

    def _group(self, api: str, operation: AclOperation, group_id: str) -> bool:
        return self._auth(api).allowed(operation, ResourceType.GROUP, group_id)

    async def join_group(self, params: JoinGroupParams) -> JoinGroupResult:
        if not self._group("JoinGroup", AclOperation.READ, params.group_id):
            return JoinGroupResult(GroupAuthorizationFailed)
        return await self.coordinator.join_group(params)

    async def sync_group(self, params: SyncGroupParams) -> SyncGroupResult:
        if not self._group("SyncGroup", AclOperation.READ, params.group_id):
            return SyncGroupResult(GroupAuthorizationFailed)
        return await self.coordinator.sync_group(params)

    def heartbeat(self, params: HeartbeatParams) -> HeartbeatResult:
        if not self._group("Heartbeat", AclOperation.READ, params.group_id):
            return HeartbeatResult(GroupAuthorizationFailed)
        return self.coordinator.heartbeat(params)

    def leave_group(self, params: LeaveGroupParams) -> LeaveGroupResult:
        if not self._group("LeaveGroup", AclOperation.READ, params.group_id):
            return LeaveGroupResult(GroupAuthorizationFailed)
        return self.coordinator.leave_group(params)

    async def offset_commit(
        self, params: OffsetCommitParams, known: Known = None
    ) -> OffsetCommitResult:
        auth = self._auth("OffsetCommit")
        tps = [e.tp for e in params.offsets]
        if not auth.allowed(AclOperation.READ, ResourceType.GROUP, params.group_id):
            refused: dict[TopicPartition, Error] = dict.fromkeys(tps, GroupAuthorizationFailed)
        else:
            refused = _partition_refusals(auth, tps, known)
        if not refused:
            return await self.coordinator.offset_commit(params)
        rest = tuple(e for e in params.offsets if e.tp not in refused)
        done = (
            (
                await self.coordinator.offset_commit(
                    OffsetCommitParams(
                        params.group_id, params.generation_id, params.member_id, rest
                    )
                )
            ).partitions
            if rest
            else ()
        )
        return _merged(params.offsets, refused, done)

    async def txn_offset_commit(
        self, params: TxnOffsetCommitParams, known: Known = None
    ) -> OffsetCommitResult:
        auth = self._auth("TxnOffsetCommit")
        tps = [e.tp for e in params.offsets]
        refused: dict[TopicPartition, Error]
        if not auth.allowed(
            AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, params.transactional_id
        ):
            refused = dict.fromkeys(tps, TransactionalIdAuthorizationFailed)
        elif not auth.allowed(AclOperation.READ, ResourceType.GROUP, params.group_id):
            refused = dict.fromkeys(tps, GroupAuthorizationFailed)
        else:
            refused = _partition_refusals(auth, tps, known)
        if not refused:
            return await self.coordinator.txn_offset_commit(params)
        rest = tuple(e for e in params.offsets if e.tp not in refused)
        done = (
            (
                await self.coordinator.txn_offset_commit(
                    TxnOffsetCommitParams(
                        params.transactional_id,
                        params.group_id,
                        params.producer_id,
                        params.producer_epoch,
                        rest,
                        params.generation_id,
                        params.member_id,
                        params.group_instance_id,
                    )
                )
            ).partitions
            if rest
            else ()
        )
        return _merged(params.offsets, refused, done)

    def offset_fetch(self, params: OffsetFetchParams) -> OffsetFetchResult:
        auth = self._auth("OffsetFetch")
        if not auth.allowed(AclOperation.DESCRIBE, ResourceType.GROUP, params.group_id):
            return OffsetFetchResult(GroupAuthorizationFailed)
        if not auth.enabled:
            return self.coordinator.offset_fetch(params)
        if params.partitions is None:
            result = self.coordinator.offset_fetch(params)
            shown = auth.allowed_names(
                AclOperation.DESCRIBE,
                ResourceType.TOPIC,
                (c.tp.topic for c in result.partitions),
                log_if_denied=False,
            )
            return OffsetFetchResult(
                result.error, tuple(c for c in result.partitions if c.tp.topic in shown)
            )
        refused = _topic_refusals(auth, AclOperation.DESCRIBE, params.partitions)
        rest = tuple(tp for tp in params.partitions if tp not in refused)
        result = self.coordinator.offset_fetch(
            OffsetFetchParams(params.group_id, rest, params.require_stable)
        )
        by_tp = {c.tp: c for c in result.partitions}
        return OffsetFetchResult(
            result.error,
            tuple(
                CommittedOffset(tp, error=refused[tp]) if tp in refused else by_tp[tp]
                for tp in params.partitions
                if tp in refused or tp in by_tp
            ),
        )

    async def offset_delete(
        self, params: OffsetDeleteParams, known: Known = None
    ) -> OffsetDeleteResult:
        auth = self._auth("OffsetDelete")
        if not auth.allowed(AclOperation.DELETE, ResourceType.GROUP, params.group_id):
            return OffsetDeleteResult(GroupAuthorizationFailed)
        refused = _partition_refusals(auth, params.partitions, known)
        if not refused:
            return await self.coordinator.offset_delete(params)
        rest = tuple(tp for tp in params.partitions if tp not in refused)
        result = await self.coordinator.offset_delete(OffsetDeleteParams(params.group_id, rest))
        if result.error is not None:
            return result
        by_tp = {p.tp: p for p in result.partitions}
        return OffsetDeleteResult(
            None,
            tuple(
                PartitionOutcome(tp, refused[tp]) if tp in refused else by_tp[tp]
                for tp in params.partitions
            ),
        )

    def list_groups(self, params: ListGroupsParams) -> ListGroupsResult:
        auth = self._auth("ListGroups")
        result = self.coordinator.list_groups(params)
        if auth.cluster(AclOperation.DESCRIBE, log_if_denied=False):
            return result
        shown = auth.allowed_names(
            AclOperation.DESCRIBE,
            ResourceType.GROUP,
            (g.group_id for g in result.groups),
            log_if_denied=False,
        )
        return ListGroupsResult(
            result.error, tuple(g for g in result.groups if g.group_id in shown)
        )

    def describe_groups(self, params: DescribeGroupsParams) -> DescribeGroupsResult:
        auth = self._auth("DescribeGroups")
        allowed = auth.allowed_names(AclOperation.DESCRIBE, ResourceType.GROUP, params.group_ids)
        described = {
            g.group_id: g
            for g in self.coordinator.describe_groups(
                DescribeGroupsParams(tuple(g for g in params.group_ids if g in allowed))
            ).groups
        }
        return DescribeGroupsResult(
            tuple(
                described[g] if g in allowed else DescribedGroup(g, GroupAuthorizationFailed)
                for g in params.group_ids
            )
        )

    def group_operations(self, group_id: str) -> int:
        """The caller's authorized operations on group ``group_id`` (Kafka's bit field)."""
        return self._auth("DescribeGroups").operations(ResourceType.GROUP, group_id)

    async def delete_groups(self, params: DeleteGroupsParams) -> DeleteGroupsResult:
        auth = self._auth("DeleteGroups")
        allowed = auth.allowed_names(AclOperation.DELETE, ResourceType.GROUP, params.group_ids)
        wanted = tuple(g for g in params.group_ids if g in allowed)
        deleted = (
            {
                g.group_id: g
                for g in (await self.coordinator.delete_groups(DeleteGroupsParams(wanted))).groups
            }
            if wanted
            else {}
        )
        return DeleteGroupsResult(
            tuple(
                deleted[g] if g in allowed else DeletedGroup(g, GroupAuthorizationFailed)
                for g in params.group_ids
            )
        )
