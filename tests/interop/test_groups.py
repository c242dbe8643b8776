"""Consumer groups of real Kafka clients over the Kafka listener: librdkafka (confluent-kafka)
consumers sharing a topic and rebalancing when one leaves and when partitions are added,
committed offsets read back and surviving a SIGKILL of the group's coordinator, kafka-python
and aiokafka consumers in a group, and the AdminClient's group operations."""

from __future__ import annotations

import asyncio
import time
import warnings
from collections.abc import Callable, Iterable

import pytest
from aiokafka import AIOKafkaConsumer
from aiokafka import TopicPartition as AioTopicPartition
from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from kafkasim.cluster.local import LocalCluster
from tests.cli_run import kafkasim

DEADLINE_S = 90.0


def topics(cluster: LocalCluster, *args: str) -> None:
    """``kafkasim topics ARGS`` against the cluster (topics are made with kafkasim's tool)."""
    done = kafkasim("topics", "--bootstrap-server", ",".join(cluster.bootstrap), *args)
    assert done.returncode == 0, done.stdout + done.stderr


def create_topic(cluster: LocalCluster, name: str, partitions: int) -> None:
    topics(
        cluster,
        *("--create", "--topic", name, "--partitions", str(partitions)),
        *("--replication-factor", "3"),
    )


def grow_topic(cluster: LocalCluster, name: str, partitions: int) -> None:
    topics(cluster, "--alter", "--topic", name, "--partitions", str(partitions))


def produce(cluster: LocalCluster, topic: str, partitions: int, per_partition: int) -> None:
    producer = Producer({"bootstrap.servers": cluster.kafka_bootstrap, "acks": "all"})
    for i in range(per_partition):
        for p in range(partitions):
            producer.produce(topic, f"{p}-{i}".encode(), partition=p)
    assert producer.flush(60) == 0


def consumer(cluster: LocalCluster, group: str, **extra: object) -> Consumer:
    return Consumer(
        {
            "bootstrap.servers": cluster.kafka_bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "session.timeout.ms": 6000,
            "heartbeat.interval.ms": 500,
            "topic.metadata.refresh.interval.ms": 1000,
            **extra,
        }
    )


def poll_until(consumers: Iterable[Consumer], done: Callable[[], bool], what: str) -> None:
    """Poll every consumer (their rebalance callbacks run inside poll) until ``done``."""
    members = list(consumers)
    deadline = time.monotonic() + DEADLINE_S
    while not done():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        for c in members:
            message = c.poll(0.1)
            assert message is None or message.error() is None or not message.error().fatal()


def shares(consumers: Iterable[Consumer], topic: str, partitions: int) -> Callable[[], bool]:
    """True when the consumers' assignments are disjoint, cover every partition and each
    consumer has a share (the group has formed with all of them)."""
    members = list(consumers)

    def check() -> bool:
        shares = [[tp.partition for tp in c.assignment() if tp.topic == topic] for c in members]
        owned = sorted(p for share in shares for p in share)
        return owned == list(range(partitions)) and all(shares)

    return check


def test_three_consumers_share_a_topic_and_rebalance_on_leave_and_new_partitions(
    kafka_cluster: LocalCluster,
) -> None:
    topic, group = "shared", "rebalancing"
    create_topic(kafka_cluster, topic, 6)
    members = [consumer(kafka_cluster, group) for _ in range(3)]
    try:
        for c in members:
            c.subscribe([topic])
        poll_until(members, shares(members, topic, 6), "6 partitions over 3 consumers")

        leaving, staying = members[0], members[1:]
        leaving.close()
        members = staying
        poll_until(staying, shares(staying, topic, 6), "the two survivors to take over")

        grow_topic(kafka_cluster, topic, 8)
        poll_until(staying, shares(staying, topic, 8), "the new partitions to be assigned")
    finally:
        for c in members:
            c.close()


def test_kafka_python_consumer_joins_consumes_and_commits(kafka_cluster: LocalCluster) -> None:
    with warnings.catch_warnings():
        # kafka-python 3.0 reads its schemas with a deprecated importlib call.
        warnings.simplefilter("ignore", DeprecationWarning)
        from kafka import KafkaConsumer
        from kafka import TopicPartition as KafkaPythonTopicPartition

    topic, group = "kafka-python", "kafka-python-group"
    create_topic(kafka_cluster, topic, 2)
    produce(kafka_cluster, topic, 2, 5)
    client = KafkaConsumer(
        topic,
        bootstrap_servers=kafka_cluster.kafka_bootstrap.split(","),
        group_id=group,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        consumer_timeout_ms=int(DEADLINE_S * 1000),
    )
    try:
        got = []
        for record in client:
            got.append(record.value)
            if len(got) == 10:
                break
        assert sorted(got) == sorted(f"{p}-{i}".encode() for p in range(2) for i in range(5))
        client.commit()
        for p in range(2):
            assert client.committed(KafkaPythonTopicPartition(topic, p)) == 5
    finally:
        client.close()


def test_aiokafka_consumer_joins_consumes_and_commits(kafka_cluster: LocalCluster) -> None:
    topic, group = "aiokafka", "aiokafka-group"
    create_topic(kafka_cluster, topic, 2)
    produce(kafka_cluster, topic, 2, 5)

    async def run() -> None:
        client = AIOKafkaConsumer(
            topic,
            bootstrap_servers=kafka_cluster.kafka_bootstrap,
            group_id=group,
            auto_offset_reset="earliest",
            enable_auto_commit=False,
        )
        await client.start()
        try:
            got: list[bytes] = []
            async with asyncio.timeout(DEADLINE_S):
                async for record in client:
                    assert record.value is not None
                    got.append(record.value)
                    if len(got) == 10:
                        break
            assert sorted(got) == sorted(f"{p}-{i}".encode() for p in range(2) for i in range(5))
            await client.commit()
            for p in range(2):
                assert await client.committed(AioTopicPartition(topic, p)) == 5
        finally:
            await client.stop()

    asyncio.run(run())


def test_admin_lists_describes_alters_and_deletes_groups(kafka_cluster: LocalCluster) -> None:
    topic, group = "admin-groups", "admin-group"
    create_topic(kafka_cluster, topic, 2)
    admin = AdminClient({"bootstrap.servers": kafka_cluster.kafka_bootstrap})
    member = consumer(kafka_cluster, group)
    try:
        member.subscribe([topic])
        poll_until([member], shares([member], topic, 2), "the one member's assignment")
        listed = admin.list_consumer_groups(request_timeout=30).result()
        assert group in {g.group_id for g in listed.valid}
        (described,) = admin.describe_consumer_groups([group], request_timeout=30).values()
        description = described.result()
        assert description.state.name == "STABLE"
        assert len(description.members) == 1
        assert {tp.partition for tp in description.members[0].assignment.topic_partitions} == {
            0,
            1,
        }
        deleting = admin.delete_consumer_groups([group], request_timeout=30)[group]
        with pytest.raises(Exception, match="NON_EMPTY_GROUP"):
            deleting.result()
    finally:
        member.close()
    offsets = [TopicPartition(topic, 0, 7), TopicPartition(topic, 1, 3)]
    altered = admin.alter_consumer_group_offsets([ConsumerGroupTopicPartitions(group, offsets)])
    altered[group].result()
    fetched = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])
    got = fetched[group].result()
    assert sorted((tp.partition, tp.offset) for tp in got.topic_partitions) == [(0, 7), (1, 3)]
    admin.delete_consumer_groups([group], request_timeout=30)[group].result()
    listed = admin.list_consumer_groups(request_timeout=30).result()
    assert group not in {g.group_id for g in listed.valid}


def test_committed_offsets_survive_a_sigkill_of_the_coordinator(
    kafka_cluster: LocalCluster,
) -> None:
    topic, group = "committed", "committing"
    create_topic(kafka_cluster, topic, 3)
    produce(kafka_cluster, topic, 3, 10)
    first = consumer(kafka_cluster, group)
    try:
        first.subscribe([topic])
        poll_until([first], shares([first], topic, 3), "the member's assignment")
        wanted = [TopicPartition(topic, p, 4 + p) for p in range(3)]
        first.commit(offsets=wanted, asynchronous=False)
        committed = first.committed([TopicPartition(topic, p) for p in range(3)], timeout=30)
        assert [(tp.partition, tp.offset) for tp in committed] == [(0, 4), (1, 5), (2, 6)]
    finally:
        first.close()

    admin = AdminClient({"bootstrap.servers": kafka_cluster.kafka_bootstrap})
    (described,) = admin.describe_consumer_groups([group], request_timeout=30).values()
    coordinator = described.result().coordinator.id
    kafka_cluster.kill(coordinator)
    try:
        second = consumer(kafka_cluster, group)
        try:
            second.subscribe([topic])
            first_offsets: dict[int, int] = {}
            deadline = time.monotonic() + DEADLINE_S
            while len(first_offsets) < 3:
                assert time.monotonic() < deadline, "the new member did not resume"
                message = second.poll(0.2)
                if message is None or message.error() is not None:
                    continue
                first_offsets.setdefault(message.partition(), message.offset())
            assert first_offsets == {0: 4, 1: 5, 2: 6}
            committed = second.committed([TopicPartition(topic, p) for p in range(3)], timeout=30)
            assert [(tp.partition, tp.offset) for tp in committed] == [(0, 4), (1, 5), (2, 6)]
        finally:
            second.close()
    finally:
        kafka_cluster.start_broker(coordinator)
        kafka_cluster.wait_serving(coordinator)
