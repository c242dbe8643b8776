"""The group coordinator's answers to raw group requests, on the simulated cluster: the error
a wrong request gets (by Kafka's name), the rebalance protocol step by step, and what is
written to ``__consumer_offsets``."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from kafkasim import proto
from kafkasim.client.simple import MinimalClient
from kafkasim.common.errors import error_for_name
from kafkasim.common.group_protocol import (
    Assignment,
    Subscription,
    encode_assignment,
    encode_subscription,
)
from kafkasim.common.types import TopicPartition
from kafkasim.node.group_records import (
    OFFSETS_TOPIC,
    GroupKey,
    OffsetKey,
    decode_key,
    partition_for,
)
from kafkasim.proto import kafkasim_pb2 as pb
from kafkasim.sim.cluster import SimCluster, broker_address
from kafkasim.storage.records.batch import decode_batch, iter_batches
from tests.sim.helpers import create, leader_of, simulate

GROUP = "g1"
PARTITIONS = 5
SETTINGS = {"group.initial.rebalance.delay.ms": 0, "offsets.topic.num.partitions": PARTITIONS}
SUB = encode_subscription(Subscription(("t",)))


def code(name: str) -> int:
    return error_for_name(name).code


async def coordinator(cluster: SimCluster, client: MinimalClient, group: str = GROUP) -> str:
    for _ in range(50):
        response = await client.call_any(
            proto.METHOD_FIND_COORDINATOR, pb.FindCoordinatorRequest(key=group)
        )
        assert isinstance(response, pb.FindCoordinatorResponse)
        if response.error_code == 0:
            return f"{response.host}:{response.port}"
        assert response.error_code == code("COORDINATOR_NOT_AVAILABLE"), response
        await cluster.sleep(0.5)
    raise AssertionError("no coordinator")


async def call(client: MinimalClient, address: str, method: str, request: Any) -> Any:
    return await client.transport.call(address, method, request, timeout_s=60)


def join(member_id: str = "", session_ms: int = 6000, **kw: Any) -> pb.JoinGroupRequest:
    request = pb.JoinGroupRequest(
        group_id=kw.pop("group_id", GROUP),
        session_timeout_ms=session_ms,
        rebalance_timeout_ms=kw.pop("rebalance_ms", 10_000),
        member_id=member_id,
        protocol_type=kw.pop("protocol_type", "consumer"),
        client_id="c",
    )
    for name in kw.pop("protocols", ("range",)):
        request.protocols.add(name=name, metadata=SUB)
    return request


def test_find_coordinator_creates_the_offsets_topic_then_names_its_leader(
    tmp_path: Path,
) -> None:
    async def scenario(cluster: SimCluster) -> None:
        client = cluster.client()
        first = await client.call_any(
            proto.METHOD_FIND_COORDINATOR, pb.FindCoordinatorRequest(key=GROUP)
        )
        assert isinstance(first, pb.FindCoordinatorResponse)
        assert first.error_code == code("COORDINATOR_NOT_AVAILABLE")
        address = await coordinator(cluster, client)
        tp = TopicPartition(OFFSETS_TOPIC, partition_for(GROUP, PARTITIONS))
        assert address == broker_address(leader_of(cluster, tp))
        metadata = await client.refresh_metadata([OFFSETS_TOPIC])
        [topic] = metadata.topics
        assert topic.is_internal and len(topic.partitions) == PARTITIONS
        assert all(len(p.replicas) == 3 for p in topic.partitions)
        log = cluster.brokers[leader_of(cluster, tp)].replica_manager.partitions[tp].log
        assert tuple(log.config.cleanup_policy) == ("compact",)
        # Bad keys are refused by name.
        for request, error in (
            (pb.FindCoordinatorRequest(key=""), "INVALID_GROUP_ID"),
            (pb.FindCoordinatorRequest(key="", key_type=1), "INVALID_REQUEST"),
            (pb.FindCoordinatorRequest(key="x", key_type=2), "INVALID_REQUEST"),
        ):
            answer = await client.call_any(proto.METHOD_FIND_COORDINATOR, request)
            assert answer.error_code == code(error)  # type: ignore[attr-defined]

    simulate(tmp_path, scenario, **SETTINGS)


def test_the_rebalance_protocol_step_by_step(tmp_path: Path) -> None:
    async def scenario(cluster: SimCluster) -> None:
        client = cluster.client()
        address = await coordinator(cluster, client)
        # The first member: a generation of its own at once (no initial delay here).
        a = await call(client, address, proto.METHOD_JOIN_GROUP, join())
        assert (a.error_code, a.generation_id, a.leader) == (0, 1, a.member_id)
        assert [m.member_id for m in a.members] == [a.member_id]
        # A second member's join waits until the first rejoins.
        b_join = asyncio.ensure_future(call(client, address, proto.METHOD_JOIN_GROUP, join()))
        await cluster.sleep(0.5)
        assert not b_join.done()
        beat = await call(
            client,
            address,
            proto.METHOD_HEARTBEAT,
            pb.HeartbeatRequest(group_id=GROUP, generation_id=1, member_id=a.member_id),
        )
        assert beat.error_code == code("REBALANCE_IN_PROGRESS")
        a2 = await call(client, address, proto.METHOD_JOIN_GROUP, join(a.member_id))
        b = await b_join
        assert a2.generation_id == b.generation_id == 2
        assert a2.leader == a.member_id and len(a2.members) == 2 and not b.members
        # The follower's SyncGroup waits for the leader's, then gets its part.
        b_sync = asyncio.ensure_future(
            call(
                client,
                address,
                proto.METHOD_SYNC_GROUP,
                pb.SyncGroupRequest(group_id=GROUP, generation_id=2, member_id=b.member_id),
            )
        )
        await cluster.sleep(0.2)
        assert not b_sync.done()
        mine = encode_assignment(Assignment((TopicPartition("t", 0),)))
        theirs = encode_assignment(Assignment((TopicPartition("t", 1),)))
        sync = pb.SyncGroupRequest(group_id=GROUP, generation_id=2, member_id=a.member_id)
        sync.assignments.add(member_id=a.member_id, assignment=mine)
        sync.assignments.add(member_id=b.member_id, assignment=theirs)
        a_sync = await call(client, address, proto.METHOD_SYNC_GROUP, sync)
        assert (a_sync.error_code, a_sync.assignment) == (0, mine)
        assert (await b_sync).assignment == theirs
        # Stale generation and unknown members are refused by name.
        stale = await call(
            client,
            address,
            proto.METHOD_HEARTBEAT,
            pb.HeartbeatRequest(group_id=GROUP, generation_id=1, member_id=a.member_id),
        )
        assert stale.error_code == code("ILLEGAL_GENERATION")
        stranger = await call(
            client,
            address,
            proto.METHOD_HEARTBEAT,
            pb.HeartbeatRequest(group_id=GROUP, generation_id=2, member_id="nobody"),
        )
        assert stranger.error_code == code("UNKNOWN_MEMBER_ID")
        commit = pb.OffsetCommitRequest(group_id=GROUP, generation_id=1, member_id=a.member_id)
        commit.partitions.add(topic="t", partition=0, committed_offset=5)
        refused = await call(client, address, proto.METHOD_OFFSET_COMMIT, commit)
        assert refused.partitions[0].error_code == code("ILLEGAL_GENERATION")
        outsider = pb.OffsetCommitRequest(group_id=GROUP, generation_id=-1)
        outsider.partitions.add(topic="t", partition=0, committed_offset=5)
        refused = await call(client, address, proto.METHOD_OFFSET_COMMIT, outsider)
        assert refused.partitions[0].error_code == code("UNKNOWN_MEMBER_ID")
        # A group with members cannot be deleted.
        deleted = await call(
            client,
            address,
            proto.METHOD_DELETE_GROUPS,
            pb.DeleteGroupsRequest(groups_names=[GROUP]),
        )
        assert deleted.results[0].error_code == code("NON_EMPTY_GROUP")
        described = await call(
            client, address, proto.METHOD_DESCRIBE_GROUPS, pb.DescribeGroupsRequest(groups=[GROUP])
        )
        [g] = described.groups
        assert (g.group_state, g.protocol_data, len(g.members)) == ("Stable", "range", 2)
        # Both leave: the group is empty, then deletable.
        left = await call(
            client,
            address,
            proto.METHOD_LEAVE_GROUP,
            pb.LeaveGroupRequest(group_id=GROUP, member_ids=[a.member_id, b.member_id, "x"]),
        )
        assert [m.error_code for m in left.members] == [0, 0, code("UNKNOWN_MEMBER_ID")]
        described = await call(
            client, address, proto.METHOD_DESCRIBE_GROUPS, pb.DescribeGroupsRequest(groups=[GROUP])
        )
        assert described.groups[0].group_state == "Empty"
        deleted = await call(
            client,
            address,
            proto.METHOD_DELETE_GROUPS,
            pb.DeleteGroupsRequest(groups_names=[GROUP]),
        )
        assert deleted.results[0].error_code == 0
        gone = await call(
            client,
            address,
            proto.METHOD_DELETE_GROUPS,
            pb.DeleteGroupsRequest(groups_names=[GROUP]),
        )
        assert gone.results[0].error_code == code("GROUP_ID_NOT_FOUND")

    simulate(tmp_path, scenario, **SETTINGS)


def test_bad_group_requests_get_kafkas_errors(tmp_path: Path) -> None:
    async def scenario(cluster: SimCluster) -> None:
        client = cluster.client()
        address = await coordinator(cluster, client)
        for request, error in (
            (join(session_ms=10), "INVALID_SESSION_TIMEOUT"),
            (join(group_id=""), "INVALID_GROUP_ID"),
            (join(protocols=()), "INCONSISTENT_GROUP_PROTOCOL"),
            (join(member_id="ghost"), "UNKNOWN_MEMBER_ID"),
        ):
            answer = await call(client, address, proto.METHOD_JOIN_GROUP, request)
            assert answer.error_code == code(error), (request, answer)
        first = await call(client, address, proto.METHOD_JOIN_GROUP, join())
        assert first.error_code == 0
        other = await call(client, address, proto.METHOD_JOIN_GROUP, join(protocols=("other",)))
        assert other.error_code == code("INCONSISTENT_GROUP_PROTOCOL")
        # Metadata over offset.metadata.max.bytes; the other partition is still committed.
        commit = pb.OffsetCommitRequest(group_id="solo", generation_id=-1)
        commit.partitions.add(topic="t", partition=0, committed_offset=1, committed_metadata="x")
        commit.partitions.add(
            topic="t", partition=1, committed_offset=2, committed_metadata="y" * 5000
        )
        solo = await coordinator(cluster, client, "solo")
        answer = await call(client, solo, proto.METHOD_OFFSET_COMMIT, commit)
        assert [p.error_code for p in answer.partitions] == [0, code("OFFSET_METADATA_TOO_LARGE")]
        fetched = await call(
            client, solo, proto.METHOD_OFFSET_FETCH, pb.OffsetFetchRequest(group_id="solo")
        )
        assert [(p.partition, p.committed_offset, p.metadata) for p in fetched.partitions] == [
            (0, 1, "x")
        ]
        # A broker that does not coordinate the group says so.
        wrong = next(broker_address(b) for b in cluster.broker_ids if broker_address(b) != address)
        answer = await call(client, wrong, proto.METHOD_JOIN_GROUP, join())
        assert answer.error_code == code("NOT_COORDINATOR")

    simulate(tmp_path, scenario, **SETTINGS)


def test_commits_and_group_metadata_are_records_of_the_offsets_partition(
    tmp_path: Path,
) -> None:
    async def scenario(cluster: SimCluster) -> None:
        await create(cluster, "t", partitions=1)
        client = cluster.client()
        address = await coordinator(cluster, client)
        commit = pb.OffsetCommitRequest(group_id=GROUP, generation_id=-1)
        commit.partitions.add(topic="t", partition=0, committed_offset=42)
        answer = await call(client, address, proto.METHOD_OFFSET_COMMIT, commit)
        assert answer.partitions[0].error_code == 0
        joined = await call(client, address, proto.METHOD_JOIN_GROUP, join())
        sync = pb.SyncGroupRequest(
            group_id=GROUP, generation_id=joined.generation_id, member_id=joined.member_id
        )
        await call(client, address, proto.METHOD_SYNC_GROUP, sync)
        tp = TopicPartition(OFFSETS_TOPIC, partition_for(GROUP, PARTITIONS))
        log = cluster.brokers[leader_of(cluster, tp)].replica_manager.partitions[tp].log
        data = log.read(0, 1 << 20).records
        keys = [
            decode_key(r.key)
            for pos, _ in iter_batches(data)
            for r in decode_batch(data, pos)[1]
            if r.key is not None
        ]
        assert keys == [OffsetKey(GROUP, "t", 0), GroupKey(GROUP)]

    simulate(tmp_path, scenario, **SETTINGS)


def test_metadata_creates_unknown_topics_only_when_allowed(tmp_path: Path) -> None:
    """auto.create.topics.enable (on by default): a Metadata request that allows it creates
    the topic with num.partitions / default.replication.factor and answers
    LEADER_NOT_AVAILABLE until it has leaders; one that does not allow it does not."""

    async def scenario(cluster: SimCluster) -> None:
        client = cluster.client()
        plain = await client.refresh_metadata(["quiet"])
        assert plain.topics[0].error_code == code("UNKNOWN_TOPIC_OR_PARTITION")
        first = await client.refresh_metadata(["auto"], allow_auto_topic_creation=True)
        assert first.topics[0].error_code == code("LEADER_NOT_AVAILABLE")
        await client.wait_for_leaders("auto", 2)
        described = await client.refresh_metadata(["auto", "quiet"])
        auto, quiet = described.topics
        assert [len(p.replicas) for p in auto.partitions] == [2, 2]
        assert quiet.error_code == code("UNKNOWN_TOPIC_OR_PARTITION")
        bad = await client.refresh_metadata(["bad name!"], allow_auto_topic_creation=True)
        assert bad.topics[0].error_code == code("INVALID_TOPIC_EXCEPTION")

    simulate(tmp_path, scenario, **{"num.partitions": 2, "default.replication.factor": 2})


def test_auto_creation_can_be_switched_off(tmp_path: Path) -> None:
    async def scenario(cluster: SimCluster) -> None:
        client = cluster.client()
        for _ in range(3):
            answer = await client.refresh_metadata(["auto"], allow_auto_topic_creation=True)
            assert answer.topics[0].error_code == code("UNKNOWN_TOPIC_OR_PARTITION")
            await cluster.sleep(1)

    simulate(tmp_path, scenario, **{"auto.create.topics.enable": False})


def test_clients_cannot_create_internal_topics_and_every_group_gets_a_coordinator(
    tmp_path: Path,
) -> None:
    """Issue 20 item 2: a client's one-partition __consumer_offsets used to be created, and
    every group not hashing to partition 0 had no coordinator. CreateTopics of an internal
    topic is refused (INVALID_REQUEST, nothing written); the brokers still create
    __consumer_offsets themselves, with offsets.topic.num.partitions partitions."""

    async def scenario(cluster: SimCluster) -> None:
        client = cluster.client()
        for name in (OFFSETS_TOPIC, "__transaction_state"):
            response = await client.controller_call(
                proto.METHOD_CREATE_TOPICS,
                pb.CreateTopicsRequest(
                    topics=[pb.CreatableTopic(name=name, num_partitions=1, replication_factor=1)],
                    timeout_ms=5000,
                ),
            )
            assert isinstance(response, pb.CreateTopicsResponse)
            [result] = response.topics
            assert result.error_code == code("INVALID_REQUEST")
            assert result.error_message == f"Creation of internal topic {name} is prohibited."
        metadata = await client.refresh_metadata([OFFSETS_TOPIC])
        assert metadata.topics[0].error_code == code("UNKNOWN_TOPIC_OR_PARTITION")
        groups = [f"group-{i}" for i in range(8)]
        assert len({partition_for(g, PARTITIONS) for g in groups}) > 1
        for group in groups:
            address = await coordinator(cluster, client, group)
            tp = TopicPartition(OFFSETS_TOPIC, partition_for(group, PARTITIONS))
            assert address == broker_address(leader_of(cluster, tp))
        metadata = await client.refresh_metadata([OFFSETS_TOPIC])
        assert len(metadata.topics[0].partitions) == PARTITIONS

    simulate(tmp_path, scenario, **SETTINGS)


def test_an_offsets_topic_an_older_run_made_smaller_still_places_every_group(
    tmp_path: Path,
) -> None:
    """``__consumer_offsets`` was made with 3 partitions; the brokers restart saying 50. As
    Kafka's ZooKeeper-mode brokers do, each maps groups over the topic's actual count (read
    from ZooKeeper at start), so every group still has a coordinator and keeps its commits
    (over 50, most of these groups would map to partitions that do not exist)."""
    groups = [f"group-{i}" for i in range(8)]
    assert sum(partition_for(g, 50) >= 3 for g in groups) >= 4

    async def fetch_all(cluster: SimCluster, client: MinimalClient) -> dict[str, int]:
        """Each group's committed offset, looking the coordinator up again while leadership
        settles after the restarts (as a client does on NOT_COORDINATOR)."""
        fetched = {}
        for group in groups:
            for _ in range(50):
                address = await coordinator(cluster, client, group)
                fetch = pb.OffsetFetchRequest(group_id=group)
                answer = await call(client, address, proto.METHOD_OFFSET_FETCH, fetch)
                if answer.error_code == 0:
                    break
                assert answer.error_code in (
                    code("NOT_COORDINATOR"),
                    code("COORDINATOR_LOAD_IN_PROGRESS"),
                ), (group, answer)
                await cluster.sleep(0.5)
            assert answer.error_code == 0, (group, answer)
            fetched[group] = answer.partitions[0].committed_offset if answer.partitions else -1
        return fetched

    async def scenario(cluster: SimCluster) -> None:
        client = cluster.client()
        for i, group in enumerate(groups):
            address = await coordinator(cluster, client, group)
            commit = pb.OffsetCommitRequest(group_id=group, generation_id=-1)
            commit.partitions.add(topic="t", partition=0, committed_offset=100 + i)
            answer = await call(client, address, proto.METHOD_OFFSET_COMMIT, commit)
            assert answer.partitions[0].error_code == 0, (group, answer)
        cluster.broker_props["offsets.topic.num.partitions"] = 50
        for broker_id in cluster.broker_ids:
            await cluster.stop_broker(broker_id)
            await cluster.start_broker(broker_id)
        assert await fetch_all(cluster, client) == {
            group: 100 + i for i, group in enumerate(groups)
        }
        assert [b.groups.partition_count for b in cluster.brokers.values()] == [3, 3, 3]

    simulate(tmp_path, scenario, **{**SETTINGS, "offsets.topic.num.partitions": 3})


def test_a_new_leader_epoch_of_the_same_leader_does_not_reload_the_group(
    tmp_path: Path,
) -> None:
    """A follower of the group's __consumer_offsets partition dies: the controller shrinks the
    ISR with a new leader epoch, the leader stays. As Kafka (onElection only for a broker that
    newly leads), the coordinator keeps its group: the member's heartbeat is answered, not
    NOT_COORDINATOR, and the group is not loaded again."""

    async def scenario(cluster: SimCluster) -> None:
        client = cluster.client()
        address = await coordinator(cluster, client)
        tp = TopicPartition(OFFSETS_TOPIC, partition_for(GROUP, PARTITIONS))
        leader = leader_of(cluster, tp)
        # A session long enough to outlive the follower's detection without heartbeats.
        a = await call(client, address, proto.METHOD_JOIN_GROUP, join(session_ms=60_000))
        sync = pb.SyncGroupRequest(group_id=GROUP, generation_id=1, member_id=a.member_id)
        assert (await call(client, address, proto.METHOD_SYNC_GROUP, sync)).error_code == 0
        partition = cluster.brokers[leader].replica_manager.partitions[tp]
        epoch = partition.leader_epoch
        loads: list[int] = []
        groups = cluster.brokers[leader].groups
        original = groups.elect

        def counting_elect(p: int, leader_epoch: int) -> Any:
            if p == tp.partition:  # others may move here from the crashed broker
                loads.append(leader_epoch)
            return original(p, leader_epoch)

        groups.elect = counting_elect  # type: ignore[method-assign]
        follower = next(b for b in partition.isr if b != leader)
        await cluster.crash(follower)
        await cluster.wait_for(
            lambda: partition.leader_epoch > epoch and follower not in partition.isr,
            what="the ISR shrunk with a new leader epoch",
        )
        assert leader_of(cluster, tp) == leader
        beat = await call(
            client,
            address,
            proto.METHOD_HEARTBEAT,
            pb.HeartbeatRequest(group_id=GROUP, generation_id=1, member_id=a.member_id),
        )
        assert beat.error_code == 0
        assert loads == []

    simulate(tmp_path, scenario, **SETTINGS)
