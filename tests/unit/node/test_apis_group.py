"""The gRPC front door of the group coordinator: each protobuf request becomes the domain
value it means and each domain result the response a client reads (pure functions, no
broker), and the handler table joins them to a coordinator."""

from __future__ import annotations

import asyncio
import random

from kafkasim import proto
from kafkasim.common.clock import ManualClock
from kafkasim.common.errors import error_for_name
from kafkasim.common.types import TopicPartition
from kafkasim.node import apis_group as apis
from kafkasim.node.acl_authorizer import AclAuthorizer
from kafkasim.node.authz_groups import AuthorizedGroups
from kafkasim.node.group_coordinator import GroupCoordinator
from kafkasim.node.group_types import (
    CommittedOffset,
    DeletedGroup,
    DeleteGroupsParams,
    DeleteGroupsResult,
    DescribedGroup,
    DescribedMember,
    DescribeGroupsParams,
    DescribeGroupsResult,
    GroupProtocol,
    GroupState,
    HeartbeatParams,
    HeartbeatResult,
    JoinedMember,
    JoinGroupParams,
    JoinGroupResult,
    LeaveGroupParams,
    LeaveGroupResult,
    ListedGroup,
    ListGroupsParams,
    ListGroupsResult,
    MemberAssignment,
    MemberLeft,
    OffsetCommitEntry,
    OffsetCommitParams,
    OffsetCommitResult,
    OffsetFetchParams,
    OffsetFetchResult,
    PartitionOutcome,
    SyncGroupParams,
    SyncGroupResult,
)
from kafkasim.proto import kafkasim_pb2 as pb
from tests.unit.node.test_group_coordinator import MemoryOffsetsTopic, config

TP = TopicPartition("t", 2)


class Unsecured:
    """A broker without an authorizer (``authorizer.class.name`` empty)."""

    authorizer: AclAuthorizer | None = None


def code(name: str) -> int:
    return error_for_name(name).code


def test_join_group_request_keeps_every_field_and_the_protocol_order() -> None:
    request = pb.JoinGroupRequest(
        group_id="g",
        session_timeout_ms=6000,
        rebalance_timeout_ms=9000,
        member_id="m",
        protocol_type="consumer",
        client_id="c",
        client_host="/10.0.0.1",
    )
    request.protocols.add(name="roundrobin", metadata=b"rr")
    request.protocols.add(name="range", metadata=b"r")
    assert apis.join_group_request(request) == JoinGroupParams(
        group_id="g",
        member_id="m",
        client_id="c",
        client_host="/10.0.0.1",
        session_timeout_ms=6000,
        rebalance_timeout_ms=9000,
        protocol_type="consumer",
        protocols=(GroupProtocol("roundrobin", b"rr"), GroupProtocol("range", b"r")),
    )


def test_join_group_response_carries_the_generation_and_the_leaders_member_list() -> None:
    result = JoinGroupResult(
        member_id="a",
        generation_id=3,
        protocol_type="consumer",
        protocol_name="range",
        leader_id="a",
        members=(JoinedMember("a", b"1"), JoinedMember("b", b"2")),
    )
    response = apis.join_group_response(result)
    assert (response.error_code, response.generation_id, response.leader) == (0, 3, "a")
    assert (response.protocol_type, response.protocol_name, response.member_id) == (
        "consumer",
        "range",
        "a",
    )
    assert [(m.member_id, m.metadata) for m in response.members] == [("a", b"1"), ("b", b"2")]
    refused = apis.join_group_response(
        JoinGroupResult(error=error_for_name("UNKNOWN_MEMBER_ID"), member_id="x")
    )
    assert (refused.error_code, refused.member_id) == (code("UNKNOWN_MEMBER_ID"), "x")
    assert refused.generation_id == -1 and not refused.members


def test_sync_group_translations() -> None:
    request = pb.SyncGroupRequest(
        group_id="g", generation_id=2, member_id="a", protocol_type="consumer", protocol_name="r"
    )
    request.assignments.add(member_id="a", assignment=b"A")
    request.assignments.add(member_id="b", assignment=b"B")
    assert apis.sync_group_request(request) == SyncGroupParams(
        "g", 2, "a", "consumer", "r", (MemberAssignment("a", b"A"), MemberAssignment("b", b"B"))
    )
    response = apis.sync_group_response(SyncGroupResult(None, "consumer", "r", b"A"))
    assert (response.error_code, response.protocol_type, response.protocol_name) == (
        0,
        "consumer",
        "r",
    )
    assert response.assignment == b"A"
    failed = apis.sync_group_response(SyncGroupResult(error_for_name("REBALANCE_IN_PROGRESS")))
    assert failed.error_code == code("REBALANCE_IN_PROGRESS")


def test_heartbeat_and_leave_group_translations() -> None:
    assert apis.heartbeat_request(
        pb.HeartbeatRequest(group_id="g", generation_id=4, member_id="a")
    ) == HeartbeatParams("g", 4, "a")
    assert apis.heartbeat_response(HeartbeatResult()).error_code == 0
    assert apis.leave_group_request(
        pb.LeaveGroupRequest(group_id="g", member_ids=["a", "b"])
    ) == LeaveGroupParams("g", ("a", "b"))
    unknown = error_for_name("UNKNOWN_MEMBER_ID")
    response = apis.leave_group_response(
        LeaveGroupResult(members=(MemberLeft("a"), MemberLeft("b", unknown)))
    )
    assert response.error_code == 0
    assert [(m.member_id, m.error_code) for m in response.members] == [
        ("a", 0),
        ("b", unknown.code),
    ]


def test_offset_commit_translations_keep_the_partitions_order() -> None:
    request = pb.OffsetCommitRequest(group_id="g", generation_id=-1)
    request.partitions.add(
        topic="t",
        partition=2,
        committed_offset=10,
        committed_leader_epoch=4,
        committed_metadata="m",
    )
    request.partitions.add(topic="t", partition=0, committed_offset=5, committed_leader_epoch=-1)
    assert apis.offset_commit_request(request) == OffsetCommitParams(
        "g",
        -1,
        "",
        (OffsetCommitEntry(TP, 10, 4, "m"), OffsetCommitEntry(TopicPartition("t", 0), 5, -1, "")),
    )
    too_large = error_for_name("OFFSET_METADATA_TOO_LARGE")
    response = apis.offset_commit_response(
        OffsetCommitResult(
            (PartitionOutcome(TP, too_large), PartitionOutcome(TopicPartition("t", 0)))
        )
    )
    assert [(p.topic, p.partition, p.error_code) for p in response.partitions] == [
        ("t", 2, too_large.code),
        ("t", 0, 0),
    ]


def test_offset_fetch_with_no_partitions_asks_for_every_committed_one() -> None:
    assert apis.offset_fetch_request(pb.OffsetFetchRequest(group_id="g")) == OffsetFetchParams(
        "g", None
    )
    some = pb.OffsetFetchRequest(group_id="g")
    some.partitions.add(topic="t", partition=2)
    assert apis.offset_fetch_request(some) == OffsetFetchParams("g", (TP,))
    response = apis.offset_fetch_response(
        OffsetFetchResult(
            partitions=(CommittedOffset(TP, 10, 4, "m"), CommittedOffset(TopicPartition("u", 0)))
        )
    )
    assert response.error_code == 0
    assert [
        (p.topic, p.partition, p.committed_offset, p.committed_leader_epoch, p.metadata)
        for p in response.partitions
    ] == [("t", 2, 10, 4, "m"), ("u", 0, -1, -1, "")]
    refused = apis.offset_fetch_response(OffsetFetchResult(error_for_name("NOT_COORDINATOR")))
    assert refused.error_code == code("NOT_COORDINATOR") and not refused.partitions


def test_list_describe_and_delete_translations() -> None:
    listed = pb.ListGroupsRequest(states_filter=["Stable", "empty"])
    assert apis.list_groups_request(listed) == ListGroupsParams(frozenset({"Stable", "empty"}))
    response = apis.list_groups_response(
        ListGroupsResult(groups=(ListedGroup("g", "consumer", GroupState.PREPARING_REBALANCE),))
    )
    assert [(g.group_id, g.protocol_type, g.group_state) for g in response.groups] == [
        ("g", "consumer", "PreparingRebalance")
    ]
    assert apis.describe_groups_request(
        pb.DescribeGroupsRequest(groups=["g", "h"])
    ) == DescribeGroupsParams(("g", "h"))
    described = apis.describe_groups_response(
        DescribeGroupsResult(
            (
                DescribedGroup(
                    "g",
                    state=GroupState.STABLE,
                    protocol_type="consumer",
                    protocol="range",
                    members=(DescribedMember("a", "c", "/h", b"sub", b"asg"),),
                ),
                DescribedGroup("h", error_for_name("NOT_COORDINATOR")),
            )
        )
    )
    g, h = described.groups
    assert (g.error_code, g.group_state, g.protocol_type, g.protocol_data) == (
        0,
        "Stable",
        "consumer",
        "range",
    )
    [m] = g.members
    assert (m.member_id, m.client_id, m.client_host, m.member_metadata, m.member_assignment) == (
        "a",
        "c",
        "/h",
        b"sub",
        b"asg",
    )
    assert (h.error_code, h.group_state) == (code("NOT_COORDINATOR"), "")
    assert apis.delete_groups_request(
        pb.DeleteGroupsRequest(groups_names=["g"])
    ) == DeleteGroupsParams(("g",))
    deleted = apis.delete_groups_response(
        DeleteGroupsResult(
            (DeletedGroup("g"), DeletedGroup("h", error_for_name("NON_EMPTY_GROUP")))
        )
    )
    assert [(r.group_id, r.error_code) for r in deleted.results] == [
        ("g", 0),
        ("h", code("NON_EMPTY_GROUP")),
    ]


def test_the_handler_table_answers_every_group_method_through_the_coordinator() -> None:
    async def body() -> None:
        coordinator = GroupCoordinator(
            1, config(), MemoryOffsetsTopic(), ManualClock(), random.Random(0)
        )
        handlers = apis.group_handlers(
            AuthorizedGroups(coordinator, Unsecured()), lambda tp: tp.topic == "known"
        )
        assert set(handlers) == {
            proto.METHOD_JOIN_GROUP,
            proto.METHOD_SYNC_GROUP,
            proto.METHOD_HEARTBEAT,
            proto.METHOD_LEAVE_GROUP,
            proto.METHOD_OFFSET_COMMIT,
            proto.METHOD_OFFSET_FETCH,
            proto.METHOD_LIST_GROUPS,
            proto.METHOD_DESCRIBE_GROUPS,
            proto.METHOD_DELETE_GROUPS,
            proto.METHOD_TXN_OFFSET_COMMIT,
            proto.METHOD_OFFSET_DELETE,
        }
        # This coordinator leads no partition: each group request is answered NOT_COORDINATOR.
        not_coordinator = code("NOT_COORDINATOR")
        join = pb.JoinGroupRequest(group_id="g", session_timeout_ms=6000, protocol_type="consumer")
        answer = await handlers[proto.METHOD_JOIN_GROUP](join)
        assert isinstance(answer, pb.JoinGroupResponse) and answer.error_code == not_coordinator
        beat = await handlers[proto.METHOD_HEARTBEAT](pb.HeartbeatRequest(group_id="g"))
        assert isinstance(beat, pb.HeartbeatResponse) and beat.error_code == not_coordinator
        fetch = await handlers[proto.METHOD_OFFSET_FETCH](pb.OffsetFetchRequest(group_id="g"))
        assert isinstance(fetch, pb.OffsetFetchResponse) and fetch.error_code == not_coordinator
        listed = await handlers[proto.METHOD_LIST_GROUPS](pb.ListGroupsRequest())
        assert isinstance(listed, pb.ListGroupsResponse) and not listed.groups
        delete = pb.OffsetDeleteRequest(group_id="g")
        delete.partitions.add(topic="known", partition=0)
        deleted = await handlers[proto.METHOD_OFFSET_DELETE](delete)
        assert isinstance(deleted, pb.OffsetDeleteResponse)
        assert (deleted.error_code, list(deleted.partitions)) == (not_coordinator, [])

    asyncio.run(body())
