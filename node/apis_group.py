"""The gRPC front door of the group coordinator: protobuf requests into the domain values of
``node.group_types``, domain results into protobuf responses (the group part of Kafka's
``KafkaApis``).

The translations are pure, free-standing functions — ``<request>_request(pb) -> Params`` and
``<request>_response(Result) -> pb`` — so that another front door (Kafka's binary protocol)
reuses the coordinator unchanged and the request layer can route them as it likes.
:func:`group_handlers` joins them to a coordinator for the broker's handler table (routed to
by ``node.apis``, which keeps the group requests here: they are a family of their own with
their own domain module, ``node.group_types``, and the request layer stays under its size).

Wire conventions kept here and nowhere else: an empty ``member_id`` is a first join; an empty
``partitions`` list in OffsetFetch means every committed partition; an empty
``group_instance_id`` in TxnOffsetCommit is none; an error travels as its Kafka code (0 for
none); a described group with an error has an empty state.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from typing import Any, TypeVar

from kafkasim import proto
from kafkasim.common.types import TopicPartition
from kafkasim.node.apis_replica import error_code
from kafkasim.node.authz_groups import AuthorizedGroups
from kafkasim.node.group_types import (
    DeleteGroupsParams,
    DeleteGroupsResult,
    DescribeGroupsParams,
    DescribeGroupsResult,
    GroupProtocol,
    HeartbeatParams,
    HeartbeatResult,
    JoinGroupParams,
    JoinGroupResult,
    LeaveGroupParams,
    LeaveGroupResult,
    ListGroupsParams,
    ListGroupsResult,
    MemberAssignment,
    OffsetCommitEntry,
    OffsetCommitParams,
    OffsetCommitResult,
    OffsetDeleteParams,
    OffsetFetchParams,
    OffsetFetchResult,
    SyncGroupParams,
    SyncGroupResult,
    TxnOffsetCommitParams,
)
from kafkasim.proto import kafkasim_pb2 as pb

# -- JoinGroup, SyncGroup ------------------------------------------------------------------------


def join_group_request(request: pb.JoinGroupRequest) -> JoinGroupParams:
    return JoinGroupParams(
        group_id=request.group_id,
        member_id=request.member_id,
        client_id=request.client_id,
        client_host=request.client_host,
        session_timeout_ms=request.session_timeout_ms,
        rebalance_timeout_ms=request.rebalance_timeout_ms,
        protocol_type=request.protocol_type,
        protocols=tuple(GroupProtocol(p.name, bytes(p.metadata)) for p in request.protocols),
    )


def join_group_response(result: JoinGroupResult) -> pb.JoinGroupResponse:
    return pb.JoinGroupResponse(
        error_code=error_code(result.error),
        generation_id=result.generation_id,
        protocol_type=result.protocol_type,
        protocol_name=result.protocol_name,
        leader=result.leader_id,
        member_id=result.member_id,
        members=[
            pb.JoinGroupMember(member_id=m.member_id, metadata=m.metadata) for m in result.members
        ],
    )


def sync_group_request(request: pb.SyncGroupRequest) -> SyncGroupParams:
    return SyncGroupParams(
        group_id=request.group_id,
        generation_id=request.generation_id,
        member_id=request.member_id,
        protocol_type=request.protocol_type,
        protocol_name=request.protocol_name,
        assignments=tuple(
            MemberAssignment(a.member_id, bytes(a.assignment)) for a in request.assignments
        ),
    )


def sync_group_response(result: SyncGroupResult) -> pb.SyncGroupResponse:
    return pb.SyncGroupResponse(
        error_code=error_code(result.error),
        protocol_type=result.protocol_type,
        protocol_name=result.protocol_name,
        assignment=result.assignment,
    )


# -- Heartbeat, LeaveGroup -----------------------------------------------------------------------


def heartbeat_request(request: pb.HeartbeatRequest) -> HeartbeatParams:
    return HeartbeatParams(request.group_id, request.generation_id, request.member_id)


def heartbeat_response(result: HeartbeatResult) -> pb.HeartbeatResponse:
    return pb.HeartbeatResponse(error_code=error_code(result.error))


def leave_group_request(request: pb.LeaveGroupRequest) -> LeaveGroupParams:
    return LeaveGroupParams(request.group_id, tuple(request.member_ids))


def leave_group_response(result: LeaveGroupResult) -> pb.LeaveGroupResponse:
    return pb.LeaveGroupResponse(
        error_code=error_code(result.error),
        members=[
            pb.LeaveGroupMemberResponse(member_id=m.member_id, error_code=error_code(m.error))
            for m in result.members
        ],
    )


# -- OffsetCommit, OffsetFetch ------------------------------------------------------------------


def _commit_entries(
    partitions: Iterable[pb.OffsetCommitPartition],
) -> tuple[OffsetCommitEntry, ...]:
    return tuple(
        OffsetCommitEntry(
            TopicPartition(p.topic, p.partition),
            offset=p.committed_offset,
            leader_epoch=p.committed_leader_epoch,
            metadata=p.committed_metadata,
        )
        for p in partitions
    )


def offset_commit_request(request: pb.OffsetCommitRequest) -> OffsetCommitParams:
    return OffsetCommitParams(
        group_id=request.group_id,
        generation_id=request.generation_id,
        member_id=request.member_id,
        offsets=_commit_entries(request.partitions),
    )


def offset_commit_response(result: OffsetCommitResult) -> pb.OffsetCommitResponse:
    return pb.OffsetCommitResponse(
        partitions=[
            pb.PartitionError(
                topic=p.tp.topic, partition=p.tp.partition, error_code=error_code(p.error)
            )
            for p in result.partitions
        ]
    )


def offset_fetch_request(request: pb.OffsetFetchRequest) -> OffsetFetchParams:
    partitions = tuple(TopicPartition(p.topic, p.partition) for p in request.partitions)
    return OffsetFetchParams(request.group_id, partitions or None, request.require_stable)


def offset_fetch_response(result: OffsetFetchResult) -> pb.OffsetFetchResponse:
    return pb.OffsetFetchResponse(
        error_code=error_code(result.error),
        partitions=[
            pb.OffsetFetchPartition(
                topic=p.tp.topic,
                partition=p.tp.partition,
                committed_offset=p.offset,
                committed_leader_epoch=p.leader_epoch,
                metadata=p.metadata,
                error_code=error_code(p.error),
            )
            for p in result.partitions
        ],
    )


# -- TxnOffsetCommit ---------------------------------------------------------------------------


def txn_offset_commit_request(request: pb.TxnOffsetCommitRequest) -> TxnOffsetCommitParams:
    return TxnOffsetCommitParams(
        transactional_id=request.transactional_id,
        group_id=request.group_id,
        producer_id=request.producer_id,
        producer_epoch=request.producer_epoch,
        offsets=_commit_entries(request.partitions),
        generation_id=request.generation_id,
        member_id=request.member_id,
        group_instance_id=request.group_instance_id or None,
    )


def txn_offset_commit_response(result: OffsetCommitResult) -> pb.TxnOffsetCommitResponse:
    return pb.TxnOffsetCommitResponse(partitions=offset_commit_response(result).partitions)


# -- ListGroups, DescribeGroups, DeleteGroups ---------------------------------------------------


def list_groups_request(request: pb.ListGroupsRequest) -> ListGroupsParams:
    return ListGroupsParams(frozenset(request.states_filter))


def list_groups_response(result: ListGroupsResult) -> pb.ListGroupsResponse:
    return pb.ListGroupsResponse(
        error_code=error_code(result.error),
        groups=[
            pb.ListedGroup(
                group_id=g.group_id, protocol_type=g.protocol_type, group_state=g.state.value
            )
            for g in result.groups
        ],
    )


def describe_groups_request(request: pb.DescribeGroupsRequest) -> DescribeGroupsParams:
    return DescribeGroupsParams(tuple(request.groups))


def describe_groups_response(result: DescribeGroupsResult) -> pb.DescribeGroupsResponse:
    return pb.DescribeGroupsResponse(
        groups=[
            pb.DescribedGroup(
                error_code=error_code(g.error),
                group_id=g.group_id,
                group_state=g.state.value if g.state is not None else "",
                protocol_type=g.protocol_type,
                protocol_data=g.protocol,
                members=[
                    pb.DescribedGroupMember(
                        member_id=m.member_id,
                        client_id=m.client_id,
                        client_host=m.client_host,
                        member_metadata=m.metadata,
                        member_assignment=m.assignment,
                    )
                    for m in g.members
                ],
            )
            for g in result.groups
        ]
    )


def delete_groups_request(request: pb.DeleteGroupsRequest) -> DeleteGroupsParams:
    return DeleteGroupsParams(tuple(request.groups_names))


def delete_groups_response(result: DeleteGroupsResult) -> pb.DeleteGroupsResponse:
    return pb.DeleteGroupsResponse(
        results=[
            pb.DeletableGroupResult(group_id=g.group_id, error_code=error_code(g.error))
            for g in result.groups
        ]
    )


# -- OffsetDelete --------------------------------------------------------------------------------


def offset_delete_handler(
    coordinator: AuthorizedGroups, known: Callable[[TopicPartition], bool]
) -> Callable[[pb.OffsetDeleteRequest], Awaitable[pb.OffsetDeleteResponse]]:
    """OffsetDelete as Kafka's KafkaApis answers it: a partition the metadata does not know
    (``known``) is UNKNOWN_TOPIC_OR_PARTITION (once authorized), the others go to the
    coordinator; a group-level error comes without partitions."""

    async def handler(request: pb.OffsetDeleteRequest) -> pb.OffsetDeleteResponse:
        asked = [TopicPartition(p.topic, p.partition) for p in request.partitions]
        result = await coordinator.offset_delete(
            OffsetDeleteParams(request.group_id, tuple(asked)), known
        )
        if result.error is not None:
            return pb.OffsetDeleteResponse(error_code=error_code(result.error))
        errors = {p.tp: error_code(p.error) for p in result.partitions}
        return pb.OffsetDeleteResponse(
            partitions=[
                pb.PartitionError(topic=tp.topic, partition=tp.partition, error_code=errors[tp])
                for tp in asked
            ]
        )

    return handler


# -- the handler table -------------------------------------------------------------------------

Req = TypeVar("Req")
Params = TypeVar("Params")
Result = TypeVar("Result")
Resp = TypeVar("Resp")


def _awaited(
    to_params: Callable[[Req], Params],
    call: Callable[[Params], Awaitable[Result]],
    to_response: Callable[[Result], Resp],
) -> Callable[[Req], Awaitable[Resp]]:
    async def handler(request: Req) -> Resp:
        return to_response(await call(to_params(request)))

    return handler


def _immediate(
    to_params: Callable[[Req], Params],
    call: Callable[[Params], Result],
    to_response: Callable[[Result], Resp],
) -> Callable[[Req], Awaitable[Resp]]:
    async def handler(request: Req) -> Resp:
        return to_response(call(to_params(request)))

    return handler


def group_handlers(
    coordinator: AuthorizedGroups, known: Callable[[TopicPartition], bool]
) -> dict[str, Callable[[Any], Awaitable[Any]]]:
    """The gRPC methods the coordinator answers, by method name (``known``: whether the
    metadata cache knows a partition)."""
    c = coordinator
    return {
        proto.METHOD_JOIN_GROUP: _awaited(join_group_request, c.join_group, join_group_response),
        proto.METHOD_SYNC_GROUP: _awaited(sync_group_request, c.sync_group, sync_group_response),
        proto.METHOD_HEARTBEAT: _immediate(heartbeat_request, c.heartbeat, heartbeat_response),
        proto.METHOD_LEAVE_GROUP: _immediate(
            leave_group_request, c.leave_group, leave_group_response
        ),
        proto.METHOD_OFFSET_COMMIT: _awaited(
            offset_commit_request, c.offset_commit, offset_commit_response
        ),
        proto.METHOD_OFFSET_FETCH: _immediate(
            offset_fetch_request, c.offset_fetch, offset_fetch_response
        ),
        proto.METHOD_LIST_GROUPS: _immediate(
            list_groups_request, c.list_groups, list_groups_response
        ),
        proto.METHOD_DESCRIBE_GROUPS: _immediate(
            describe_groups_request, c.describe_groups, describe_groups_response
        ),
        proto.METHOD_DELETE_GROUPS: _awaited(
            delete_groups_request, c.delete_groups, delete_groups_response
        ),
        proto.METHOD_TXN_OFFSET_COMMIT: _awaited(
            txn_offset_commit_request, c.txn_offset_commit, txn_offset_commit_response
        ),
        proto.METHOD_OFFSET_DELETE: offset_delete_handler(c, known),
    }
