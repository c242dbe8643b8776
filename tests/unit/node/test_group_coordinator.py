"""The group coordinator over domain values, without a broker: an in-memory
``__consumer_offsets`` stands in for the replica manager, a manual clock for time. What is
checked: the rebalance protocol's answers, errors as ``common.errors`` classes, what a commit
writes and a new coordinator loads back, and the partition count groups are mapped over."""

from __future__ import annotations

import ast
import asyncio
import random
from collections.abc import Callable, Coroutine, Sequence
from pathlib import Path
from typing import Any

import pytest

from kafkasim.common.clock import ManualClock
from kafkasim.common.errors import KafkaError, UnknownTopicOrPartitionError, error_for_name
from kafkasim.common.types import TopicPartition
from kafkasim.node.config import BrokerConfig
from kafkasim.node.group_coordinator import GroupCoordinator
from kafkasim.node.group_manager import Appended
from kafkasim.node.group_records import GroupKey, OffsetKey, decode_key, partition_for
from kafkasim.node.group_types import (
    CommittedOffset,
    DeleteGroupsParams,
    DescribeGroupsParams,
    GroupProtocol,
    GroupState,
    HeartbeatParams,
    JoinGroupParams,
    JoinGroupResult,
    LeaveGroupParams,
    ListGroupsParams,
    MemberAssignment,
    OffsetCommitEntry,
    OffsetCommitParams,
    OffsetFetchParams,
    SyncGroupParams,
)
from kafkasim.storage.records.batch import BatchHeader, Record, decode_batch, set_base_offset

GROUP = "g1"
PARTITIONS = 5
TP = TopicPartition("t", 0)
ROOT = Path(__file__).resolve().parents[3]


class MemoryOffsetsTopic:
    """``__consumer_offsets`` as a list of batches per partition, given consecutive offsets
    as a log would; ``fail_with`` makes every append answer that error, as the replica
    manager would."""

    def __init__(self) -> None:
        self.logs: dict[int, list[bytes]] = {}
        self.fail_with: KafkaError | None = None

    def batches(self, partition: int) -> list[tuple[BatchHeader, Sequence[Record]]]:
        if partition not in self.logs:
            raise UnknownTopicOrPartitionError(f"__consumer_offsets-{partition}")
        return [decode_batch(batch) for batch in self.logs[partition]]

    def end_offset(self, partition: int) -> int:
        return max((h.next_offset for h, _ in self.batches(partition)), default=0)

    def write(self, partition: int, batch: bytes) -> int:
        """Append ``batch`` at the log end; its base offset."""
        base_offset = self.end_offset(partition) if partition in self.logs else 0
        data = bytearray(batch)
        set_base_offset(data, 0, base_offset)
        self.logs.setdefault(partition, []).append(bytes(data))
        return base_offset

    async def append(self, partition: int, batch: bytes, timeout_ms: int) -> Appended:
        if self.fail_with is not None:
            return Appended(self.fail_with)
        return Appended(None, self.write(partition, batch))

    def keys(self, partition: int) -> list[object]:
        return [
            decode_key(r.key)
            for _, records in self.batches(partition)
            for r in records
            if r.key is not None
        ]


def config(**props: object) -> BrokerConfig:
    base: dict[str, object] = {
        "broker.id": 1,
        "log.dirs": "/nonexistent",
        "zookeeper.connect": "sim",
        "offsets.topic.num.partitions": PARTITIONS,
        "group.initial.rebalance.delay.ms": 0,
    }
    return BrokerConfig.from_props({**base, **props})


def coordinator(
    topic: MemoryOffsetsTopic | None = None,
    clock: ManualClock | None = None,
    props: dict[str, object] | None = None,
) -> GroupCoordinator:
    return GroupCoordinator(
        1,
        config(**(props or {})),
        topic or MemoryOffsetsTopic(),
        clock or ManualClock(),
        random.Random(0),
    )


def leading(c: GroupCoordinator, group: str = GROUP) -> int:
    """Make ``c`` the leader of ``group``'s partition (an empty log unless one exists)."""
    partition = c.partition_of(group)
    topic = c.manager._offsets_topic
    assert isinstance(topic, MemoryOffsetsTopic)
    topic.logs.setdefault(partition, [])
    c.elect(partition, leader_epoch=0)
    return partition


def join(member_id: str = "", *protocols: str, session_ms: int = 6000) -> JoinGroupParams:
    return JoinGroupParams(
        group_id=GROUP,
        member_id=member_id,
        client_id="c",
        client_host="/h",
        session_timeout_ms=session_ms,
        rebalance_timeout_ms=10_000,
        protocol_type="consumer",
        protocols=tuple(GroupProtocol(p, p.encode()) for p in protocols or ("range",)),
    )


def run(body: Callable[[], Coroutine[Any, Any, None]]) -> None:
    asyncio.run(body())


def error(name: str) -> type[KafkaError]:
    return error_for_name(name)


def test_a_member_forms_a_generation_syncs_and_commits() -> None:
    async def body() -> None:
        topic = MemoryOffsetsTopic()
        c = coordinator(topic)
        partition = leading(c)
        joined = await c.join_group(join())
        assert joined.error is None and joined.generation_id == 1
        assert joined.leader_id == joined.member_id and joined.protocol_name == "range"
        assert [(m.member_id, m.metadata) for m in joined.members] == [(joined.member_id, b"range")]
        synced = await c.sync_group(
            SyncGroupParams(
                GROUP, 1, joined.member_id, assignments=(MemberAssignment(joined.member_id, b"A"),)
            )
        )
        assert (synced.error, synced.assignment, synced.protocol_name) == (None, b"A", "range")
        assert c.heartbeat(HeartbeatParams(GROUP, 1, joined.member_id)).error is None
        committed = await c.offset_commit(
            OffsetCommitParams(GROUP, 1, joined.member_id, (OffsetCommitEntry(TP, 42, 3, "m"),))
        )
        assert [(p.tp, p.error) for p in committed.partitions] == [(TP, None)]
        fetched = c.offset_fetch(OffsetFetchParams(GROUP))
        assert fetched.partitions == (CommittedOffset(TP, 42, 3, "m"),)
        # The group's record after the sync, then the commit, in the group's partition.
        assert topic.keys(partition) == [GroupKey(GROUP), OffsetKey(GROUP, "t", 0)]

    run(body)


@pytest.mark.parametrize(
    ("params", "expected"),
    [
        (join(), "NOT_COORDINATOR"),
        (JoinGroupParams("", "", "c", "/h", 6000, 10_000, "consumer", ()), "INVALID_GROUP_ID"),
    ],
)
def test_a_group_this_broker_does_not_lead_is_refused_by_name(
    params: JoinGroupParams, expected: str
) -> None:
    async def body() -> None:
        answer = await coordinator().join_group(params)
        assert answer.error is error(expected)

    run(body)


def test_wrong_requests_get_kafkas_errors() -> None:
    async def body() -> None:
        c = coordinator(props={"offset.metadata.max.bytes": 4})
        leading(c)
        assert (await c.join_group(join(session_ms=1))).error is error("INVALID_SESSION_TIMEOUT")
        assert (await c.join_group(join("ghost"))).error is error("UNKNOWN_MEMBER_ID")
        a = await c.join_group(join("", "range"))
        other = await c.join_group(join("", "roundrobin"))
        assert other.error is error("INCONSISTENT_GROUP_PROTOCOL")
        assert c.heartbeat(HeartbeatParams(GROUP, 7, a.member_id)).error is error(
            "ILLEGAL_GENERATION"
        )
        left = c.leave_group(LeaveGroupParams(GROUP, ("nobody",)))
        assert left.error is error("UNKNOWN_MEMBER_ID")
        early = await c.offset_commit(
            OffsetCommitParams(GROUP, a.generation_id, a.member_id, (OffsetCommitEntry(TP, 1),))
        )
        assert early.partitions[0].error is error("REBALANCE_IN_PROGRESS")  # not synced yet
        await c.sync_group(SyncGroupParams(GROUP, a.generation_id, a.member_id))
        # Too much metadata is refused for that partition alone; the rest commits.
        big = await c.offset_commit(
            OffsetCommitParams(
                GROUP,
                a.generation_id,
                a.member_id,
                (
                    OffsetCommitEntry(TP, 1, metadata="12345"),
                    OffsetCommitEntry(TP._replace(partition=1), 2),
                ),
            )
        )
        assert [p.error for p in big.partitions] == [error("OFFSET_METADATA_TOO_LARGE"), None]
        outsider = await c.offset_commit(
            OffsetCommitParams(GROUP, -1, "", (OffsetCommitEntry(TP, 1),))
        )
        assert outsider.partitions[0].error is error("UNKNOWN_MEMBER_ID")

    run(body)


@pytest.mark.parametrize(
    ("append_error", "answered"),
    [
        ("NOT_ENOUGH_REPLICAS", "COORDINATOR_NOT_AVAILABLE"),
        ("REQUEST_TIMED_OUT", "COORDINATOR_NOT_AVAILABLE"),
        ("NOT_LEADER_OR_FOLLOWER", "NOT_COORDINATOR"),
        ("MESSAGE_TOO_LARGE", "INVALID_COMMIT_OFFSET_SIZE"),
        ("INVALID_REQUEST", "INVALID_REQUEST"),
    ],
)
def test_a_failed_write_is_answered_as_kafka_maps_it(append_error: str, answered: str) -> None:
    async def body() -> None:
        topic = MemoryOffsetsTopic()
        c = coordinator(topic)
        leading(c)
        topic.fail_with = error(append_error)("append refused")
        commit = await c.offset_commit(
            OffsetCommitParams(GROUP, -1, "", (OffsetCommitEntry(TP, 1),))
        )
        assert commit.partitions[0].error is error(answered)
        assert c.offset_fetch(OffsetFetchParams(GROUP, (TP,))).partitions == (CommittedOffset(TP),)

    run(body)


def test_a_new_leader_loads_the_group_and_offsets_the_old_one_wrote() -> None:
    async def body() -> None:
        topic = MemoryOffsetsTopic()
        old = coordinator(topic)
        partition = leading(old)
        a = await old.join_group(join())
        await old.sync_group(
            SyncGroupParams(
                GROUP, 1, a.member_id, assignments=(MemberAssignment(a.member_id, b"A"),)
            )
        )
        await old.offset_commit(
            OffsetCommitParams(GROUP, 1, a.member_id, (OffsetCommitEntry(TP, 7),))
        )
        old.resign(partition)
        assert old.groups == {}
        new = coordinator(topic)
        new.elect(partition, leader_epoch=1)
        group = new.groups[GROUP]
        assert (group.state, group.generation, group.leader_id) == (
            GroupState.STABLE,
            1,
            a.member_id,
        )
        assert new.offset_fetch(OffsetFetchParams(GROUP)).partitions == (CommittedOffset(TP, 7),)
        # The member carries on with the new coordinator.
        assert new.heartbeat(HeartbeatParams(GROUP, 1, a.member_id)).error is None

    run(body)


def test_resigning_answers_waiting_members_not_coordinator() -> None:
    async def body() -> None:
        c = coordinator()
        partition = leading(c)
        a = await c.join_group(join())
        waiting = asyncio.ensure_future(c.join_group(join()))  # waits for a to rejoin
        await asyncio.sleep(0)
        assert not waiting.done()
        c.resign(partition)
        answer: JoinGroupResult = await waiting
        assert answer.error is error("NOT_COORDINATOR") and answer.member_id
        assert c.heartbeat(HeartbeatParams(GROUP, 1, a.member_id)).error is error("NOT_COORDINATOR")

    run(body)


def test_a_silent_member_is_removed_and_the_empty_group_is_stored() -> None:
    async def body() -> None:
        topic = MemoryOffsetsTopic()
        clock = ManualClock()
        c = coordinator(topic, clock)
        partition = leading(c)
        a = await c.join_group(join(session_ms=6000))
        await c.sync_group(SyncGroupParams(GROUP, 1, a.member_id))
        clock.advance(5999)
        c.expire(clock.monotonic_ms())
        assert a.member_id in c.groups[GROUP].members
        clock.advance(1)
        c.expire(clock.monotonic_ms())
        group = c.groups[GROUP]
        assert (group.state, group.generation, group.members) == (GroupState.EMPTY, 2, {})
        await asyncio.sleep(0)  # the background write of the empty group
        assert topic.keys(partition) == [GroupKey(GROUP), GroupKey(GROUP)]

    run(body)


def test_list_describe_and_delete() -> None:
    async def body() -> None:
        c = coordinator()
        leading(c)
        a = await c.join_group(join())
        await c.sync_group(
            SyncGroupParams(
                GROUP, 1, a.member_id, assignments=(MemberAssignment(a.member_id, b"A"),)
            )
        )
        [listed] = c.list_groups(ListGroupsParams()).groups
        assert (listed.group_id, listed.protocol_type, listed.state) == (
            GROUP,
            "consumer",
            GroupState.STABLE,
        )
        assert c.list_groups(ListGroupsParams(frozenset({"empty"}))).groups == ()
        assert c.list_groups(ListGroupsParams(frozenset({"STABLE"}))).groups == (listed,)
        elsewhere = next(
            g for g in (f"x{i}" for i in range(100)) if c.partition_of(g) != c.partition_of(GROUP)
        )
        described, unknown = c.describe_groups(DescribeGroupsParams((GROUP, elsewhere))).groups
        assert (described.state, described.protocol) == (GroupState.STABLE, "range")
        assert [(m.member_id, m.metadata, m.assignment) for m in described.members] == [
            (a.member_id, b"range", b"A")
        ]
        assert (unknown.state, unknown.error) == (None, error("NOT_COORDINATOR"))
        [busy] = (await c.delete_groups(DeleteGroupsParams((GROUP,)))).groups
        assert busy.error is error("NON_EMPTY_GROUP")
        c.leave_group(LeaveGroupParams(GROUP, (a.member_id,)))
        [gone] = (await c.delete_groups(DeleteGroupsParams((GROUP,)))).groups
        assert gone.error is None and GROUP not in c.groups
        [again] = (await c.delete_groups(DeleteGroupsParams((GROUP,)))).groups
        assert again.error is error("GROUP_ID_NOT_FOUND")

    run(body)


def test_groups_map_over_the_partition_count_set_before_serving() -> None:
    c = coordinator()
    assert c.partition_count == PARTITIONS
    c.set_partition_count(3)
    assert c.partition_of(GROUP) == partition_for(GROUP, 3)
    with pytest.raises(ValueError, match="at least one partition"):
        c.set_partition_count(0)
    leading(c)
    # Remapping while coordinating would strand the loaded groups: refused by name.
    with pytest.raises(RuntimeError, match="cannot remap groups over 7 partitions"):
        c.set_partition_count(7)
    c.set_partition_count(3)  # the same count is no remap


@pytest.mark.parametrize(
    "module",
    [
        "group_coordinator",
        "group_manager",
        "group_membership",
        "group_offsets",
        "group_loader",
        "group_metadata",
        "group_types",
        "group_records",
    ],
)
def test_the_coordinator_never_sees_protobuf(module: str) -> None:
    tree = ast.parse((ROOT / "node" / f"{module}.py").read_text())
    imported = {
        node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
    } | {
        alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for alias in node.names
    }
    assert not {m for m in imported if m.startswith(("kafkasim.proto", "kafkasim.node.apis_group"))}
