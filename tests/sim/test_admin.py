"""The admin client against an in-process cluster on the virtual clock.

Each test names the admin call and what a Kafka user relies on it for: topics created as
asked (counts, manual assignment, config overrides), errors of Kafka's classes that name the
topic, partitions added, the cluster described, and preferred leaders restored by an election.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from kafkasim.client.admin import AdminClient, NewTopic, TopicDescription
from kafkasim.common.errors import KafkaError, UnknownTopicOrPartitionError, error_for_name
from kafkasim.common.types import TopicPartition
from kafkasim.sim.cluster import SimCluster
from tests.sim.helpers import leader_of, simulate

TopicAlreadyExistsError = error_for_name("TOPIC_ALREADY_EXISTS")
InvalidPartitionsError = error_for_name("INVALID_PARTITIONS")
ElectionNotNeededError = error_for_name("ELECTION_NOT_NEEDED")


def admin_for(cluster: SimCluster) -> AdminClient:
    client = cluster.client("admin")
    return AdminClient(client.bootstrap, transport=client.transport, clock=client.clock)


async def described(
    admin: AdminClient, topic: str, partitions: int, *, attempts: int = 100
) -> TopicDescription:
    """The topic once the brokers' metadata shows every partition with a leader."""
    for _ in range(attempts):
        try:
            (description,) = await admin.describe_topics([topic])
        except UnknownTopicOrPartitionError:
            await asyncio.sleep(0.1)
            continue
        ready = len(description.partitions) == partitions and all(
            p.leader >= 0 for p in description.partitions
        )
        if ready:
            return description
        await asyncio.sleep(0.1)
    raise TimeoutError(f"{topic} not described with {partitions} led partitions")


def test_create_topics_then_describe_shows_leader_replicas_isr_and_overrides(
    tmp_path: Path,
) -> None:
    async def scenario(cluster: SimCluster) -> None:
        admin = admin_for(cluster)
        await admin.create_topics([NewTopic("events", 3, 3, configs={"min.insync.replicas": "2"})])
        description = await described(admin, "events", 3)
        assert description.replication_factor == 3
        for p in description.partitions:
            assert len(p.replicas) == 3 and p.leader == p.replicas[0]
            assert sorted(p.isr) == sorted(p.replicas) and p.leader_epoch >= 0
            assert not p.offline_replicas and not p.under_replicated
        assert "events" in await admin.list_topics()
        configs = {c.name: c for c in await admin.describe_configs("events")}
        assert configs["min.insync.replicas"].value == "2"
        assert not configs["min.insync.replicas"].is_default
        assert configs["retention.ms"].is_default

    simulate(tmp_path, scenario)


def test_create_existing_topic_raises_topic_already_exists_naming_it(tmp_path: Path) -> None:
    async def scenario(cluster: SimCluster) -> None:
        admin = admin_for(cluster)
        await admin.create_topics([NewTopic("dup", 1, 1)])
        with pytest.raises(TopicAlreadyExistsError, match="'dup' already exists"):
            await admin.create_topics([NewTopic("dup", 1, 1)])

    simulate(tmp_path, scenario)


def test_validate_only_checks_without_creating(tmp_path: Path) -> None:
    async def scenario(cluster: SimCluster) -> None:
        admin = admin_for(cluster)
        await admin.create_topics([NewTopic("dry", 2, 3)], validate_only=True)
        with pytest.raises(KafkaError):
            await admin.create_topics([NewTopic("too-wide", 1, 4)], validate_only=True)
        await asyncio.sleep(1.0)
        assert "dry" not in await admin.list_topics()

    simulate(tmp_path, scenario)


def test_manual_assignment_places_replicas_as_given(tmp_path: Path) -> None:
    async def scenario(cluster: SimCluster) -> None:
        admin = admin_for(cluster)
        await admin.create_topics([NewTopic("placed", assignment={0: [3, 1], 1: [2, 3]})])
        description = await described(admin, "placed", 2)
        assert [p.replicas for p in description.partitions] == [(3, 1), (2, 3)]
        assert [p.leader for p in description.partitions] == [3, 2]

    simulate(tmp_path, scenario)


def test_create_partitions_grows_and_refuses_to_shrink(tmp_path: Path) -> None:
    async def scenario(cluster: SimCluster) -> None:
        admin = admin_for(cluster)
        await admin.create_topics([NewTopic("grow", 1, 2)])
        await described(admin, "grow", 1)
        await admin.create_partitions("grow", 3)
        assert len((await described(admin, "grow", 3)).partitions) == 3
        with pytest.raises(InvalidPartitionsError, match="grow"):
            await admin.create_partitions("grow", 2)

    simulate(tmp_path, scenario)


def test_delete_topics_removes_it_and_unknown_topics_raise_naming_them(tmp_path: Path) -> None:
    async def scenario(cluster: SimCluster) -> None:
        admin = admin_for(cluster)
        await admin.create_topics([NewTopic("gone", 1, 3)])
        await described(admin, "gone", 1)
        await admin.delete_topics(["gone"])
        for _ in range(100):
            if "gone" not in await admin.list_topics():
                break
            await asyncio.sleep(0.1)
        assert "gone" not in await admin.list_topics()
        with pytest.raises(UnknownTopicOrPartitionError, match="nowhere"):
            await admin.delete_topics(["nowhere"])
        with pytest.raises(UnknownTopicOrPartitionError, match="'nowhere' does not exist"):
            await admin.describe_topics(["nowhere"])
        with pytest.raises(UnknownTopicOrPartitionError, match="nowhere"):
            await admin.describe_configs("nowhere")

    simulate(tmp_path, scenario)


def test_deleting_a_topic_with_the_longest_legal_name_removes_it_from_every_disk(
    tmp_path: Path,
) -> None:
    """249 characters (Kafka's limit): the brokers' -delete renames fit the file-name limit,
    so the controller completes the deletion and no partition dir is left to load again."""
    topic = "x" * 249

    async def scenario(cluster: SimCluster) -> None:
        admin = admin_for(cluster)
        await admin.create_topics([NewTopic(topic, 2, 3)])
        await described(admin, topic, 2)
        await admin.delete_topics([topic])
        controller = cluster.brokers[cluster.controller_id()].controller
        assert controller is not None
        await cluster.wait_for(
            lambda: not any(tp.topic == topic for tp in controller.snapshot().partitions),
            what="the deletion to complete",
        )
        for broker_id in cluster.brokers:
            for d in cluster.log_dirs(broker_id):
                assert [p.name for p in d.iterdir() if p.is_dir() and "x" * 10 in p.name] == []
        restarted = await cluster.restart(1)
        assert not any(tp.topic == topic for tp in restarted.log_manager.logs)

    simulate(tmp_path, scenario)


def test_describe_cluster_lists_brokers_controller_and_cluster_id(tmp_path: Path) -> None:
    async def scenario(cluster: SimCluster) -> None:
        admin = admin_for(cluster)
        for _ in range(100):  # the answering broker learns of the others asynchronously
            description = await admin.describe_cluster()
            if len(description.brokers) == 3:
                break
            await asyncio.sleep(0.1)
        assert [b.node_id for b in description.brokers] == [1, 2, 3]
        assert description.controller_id == cluster.controller_id()
        assert description.cluster_id

    simulate(tmp_path, scenario)


def test_preferred_election_moves_leadership_back_to_the_first_replica(tmp_path: Path) -> None:
    """After the preferred leader returns it is only a follower; a preferred election makes
    it leader again, and a second election has nothing to do (ELECTION_NOT_NEEDED)."""
    tp = TopicPartition("pref", 0)

    async def scenario(cluster: SimCluster) -> None:
        admin = admin_for(cluster)
        await admin.create_topics([NewTopic("pref", assignment={0: [1, 2, 3]})])
        await described(admin, "pref", 1)
        await cluster.crash(1)
        await cluster.wait_for(lambda: leader_of(cluster, tp) in (2, 3), what="failover")
        await cluster.start_broker(1)

        async def back_in_isr() -> None:
            for _ in range(300):
                # A just-restarted broker may answer before it has learnt of the topic.
                description = await described(admin, "pref", 1)
                if 1 in description.partitions[0].isr:
                    return
                await asyncio.sleep(0.1)
            raise TimeoutError("broker 1 did not rejoin the ISR")

        await back_in_isr()
        assert await admin.elect_leaders(True, [tp]) == {tp: None}
        await cluster.wait_for(lambda: leader_of(cluster, tp) == 1, what="preferred leader")
        (again,) = (await admin.elect_leaders(True)).items()
        assert again[0] == tp and isinstance(again[1], ElectionNotNeededError)

    simulate(tmp_path, scenario)
