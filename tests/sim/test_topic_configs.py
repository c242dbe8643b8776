"""IncrementalAlterConfigs for topics against an in-process cluster on the virtual clock.

What a Kafka user relies on: a changed topic config takes effect on every broker without a
restart (min.insync.replicas on the next acks=all produce, retention.ms on the next retention
pass, cleanup.policy for DeleteRecords), DELETE brings the broker default back, the change is
in ZooKeeper exactly as Kafka writes it (``/config/topics/<t>`` plus a
``/config/changes/config_change_<seq>`` notification), bad requests are refused with Kafka's
error classes naming the key, and a broker that missed notifications (a dropped connection,
an expired session, a restart) still ends up with the new config.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kafkasim import proto
from kafkasim.client.admin import AdminClient
from kafkasim.common.errors import InvalidConfigError, UnknownTopicOrPartitionError, error_for_name
from kafkasim.common.types import TopicPartition
from kafkasim.controller import zk_data
from kafkasim.node import topic_config_admin
from kafkasim.proto import kafkasim_pb2 as pb
from kafkasim.sim.cluster import SimCluster, broker_address
from kafkasim.sim.zookeeper import SimZooKeeperClient
from tests.sim.helpers import create, leader_of, partition_on, produce_all, simulate

NotEnoughReplicasError = error_for_name("NOT_ENOUGH_REPLICAS")
PolicyViolationError = error_for_name("POLICY_VIOLATION")
InvalidRequestError = error_for_name("INVALID_REQUEST")

TOPIC = "events"
TP = TopicPartition(TOPIC, 0)


def admin_for(cluster: SimCluster) -> AdminClient:
    client = cluster.client("admin")
    return AdminClient(client.bootstrap, transport=client.transport, clock=client.clock)


async def applied_everywhere(
    cluster: SimCluster, tp: TopicPartition, key: str, value: object
) -> None:
    """Until every running broker's log of ``tp`` has ``key`` (as a LogConfig field) = value."""
    field = key.replace(".", "_")

    def everywhere() -> bool:
        return all(
            getattr(partition_on(cluster, b, tp).log.config, field) == value
            for b in cluster.brokers
        )

    await cluster.wait_for(everywhere, timeout_s=10, what=f"{key}={value} on every broker")


def test_min_insync_replicas_change_takes_effect_on_every_broker_without_restart(
    tmp_path: Path,
) -> None:
    """With a follower down (ISR of 2), min.insync.replicas=3 refuses acks=all produces with
    NOT_ENOUGH_REPLICAS; deleting the override (default 1) lets them through again."""

    async def scenario(cluster: SimCluster) -> None:
        client = await create(cluster, TOPIC)
        leader = leader_of(cluster, TP)
        follower = next(b for b in cluster.broker_ids if b != leader)
        await cluster.crash(follower)
        await cluster.wait_for(
            lambda: len(partition_on(cluster, leader, TP).isr) == 2, what="the ISR to shrink"
        )
        admin = admin_for(cluster)

        await admin.alter_topic_configs(TOPIC, set={"min.insync.replicas": "3"})
        await applied_everywhere(cluster, TP, "min.insync.replicas", 3)
        refused = await client.produce(TP, [b"x"], acks=-1, retry=False)
        assert refused.error_code == NotEnoughReplicasError.code, refused
        assert (await client.produce(TP, [b"y"], acks=1)).ok  # acks=1 does not check it

        await admin.alter_topic_configs(TOPIC, delete=["min.insync.replicas"])
        await applied_everywhere(cluster, TP, "min.insync.replicas", 1)
        assert (await client.produce(TP, [b"z"], acks=-1)).ok

        await cluster.start_broker(follower)  # a restarted broker reads the current config
        await cluster.wait_for(lambda: TP in cluster.brokers[follower].replica_manager.partitions)
        assert partition_on(cluster, follower, TP).log.config.min_insync_replicas == 1

    simulate(tmp_path, scenario)


def test_a_broker_that_is_not_the_controller_serves_a_config_change(tmp_path: Path) -> None:
    """As Kafka's ZkAdminManager: a broker that is not the controller writes the change to
    ZooKeeper itself (the Java AdminClient sends config changes to any broker), and every
    broker applies it. A bad value is INVALID_CONFIG there too, and writes nothing."""

    async def scenario(cluster: SimCluster) -> None:
        await create(cluster, TOPIC)
        client = cluster.client("raw-admin")
        controller = cluster.controller_id()
        others = [b for b in cluster.broker_ids if b != controller]
        for value, broker_id in enumerate(others, start=1):
            request = pb.IncrementalAlterConfigsRequest()
            resource = request.resources.add(resource_type=2, resource_name=TOPIC)
            resource.configs.add(name="retention.ms", config_operation=0, value=str(value * 1000))
            response = await client.transport.call(
                broker_address(broker_id),
                proto.METHOD_INCREMENTAL_ALTER_CONFIGS,
                request,
                timeout_s=30,
            )
            assert isinstance(response, pb.IncrementalAlterConfigsResponse)
            assert [(r.resource_name, r.error_code) for r in response.responses] == [(TOPIC, 0)]
            await applied_everywhere(cluster, TP, "retention.ms", value * 1000)

        bad = pb.IncrementalAlterConfigsRequest()
        resource = bad.resources.add(resource_type=2, resource_name=TOPIC)
        resource.configs.add(name="retention.ms", config_operation=0, value="soon")
        response = await client.transport.call(
            broker_address(others[0]), proto.METHOD_INCREMENTAL_ALTER_CONFIGS, bad, timeout_s=30
        )
        assert isinstance(response, pb.IncrementalAlterConfigsResponse)
        assert response.responses[0].error_code == InvalidConfigError.code
        changes = [p for p in cluster.zk_server.snapshot() if "config_change_" in p]
        assert len(changes) == len(others), changes

    simulate(tmp_path, scenario)


def test_retention_ms_change_deletes_old_segments_on_every_replica(tmp_path: Path) -> None:
    async def scenario(cluster: SimCluster) -> None:
        client = await create(cluster, TOPIC, segment_bytes="300")
        await produce_all(client, TP, [f"old-{i}".encode() for i in range(20)])
        await cluster.sleep(30)  # the records are now 30 s old (virtual time)
        await produce_all(client, TP, [b"new"])
        assert all(partition_on(cluster, b, TP).log.log_start_offset == 0 for b in cluster.brokers)

        await admin_for(cluster).alter_topic_configs(TOPIC, set={"retention.ms": "10000"})
        await applied_everywhere(cluster, TP, "retention.ms", 10_000)
        await cluster.wait_for(
            lambda: all(
                partition_on(cluster, b, TP).log.log_start_offset > 0 for b in cluster.brokers
            ),
            timeout_s=10,
            what="retention on every replica",
        )
        for b in cluster.brokers:
            log = partition_on(cluster, b, TP).log
            assert log.log_end_offset == 21 and log.log_start_offset <= 20

    simulate(tmp_path, scenario, **{"log.retention.check.interval.ms": 1_000})


def test_cleanup_policy_change_makes_delete_records_a_policy_violation(tmp_path: Path) -> None:
    async def scenario(cluster: SimCluster) -> None:
        client = await create(cluster, TOPIC)
        await produce_all(client, TP, [b"a", b"b"])
        admin = admin_for(cluster)
        await admin.alter_topic_configs(TOPIC, set={"cleanup.policy": "compact"})
        await applied_everywhere(cluster, TP, "cleanup.policy", ("compact",))
        with pytest.raises(PolicyViolationError, match="events-0"):
            await admin.delete_records({TP: 1})
        await admin.alter_topic_configs(TOPIC, set={"cleanup.policy": "compact,delete"})
        await applied_everywhere(cluster, TP, "cleanup.policy", ("compact", "delete"))
        assert await admin.delete_records({TP: 1}) == {TP: 1}

    simulate(tmp_path, scenario)


def test_the_change_is_written_as_kafka_writes_it_and_described(tmp_path: Path) -> None:
    async def scenario(cluster: SimCluster) -> None:
        await create(cluster, TOPIC, min_insync_replicas="2")
        admin = admin_for(cluster)
        await admin.alter_topic_configs(
            TOPIC, set={"retention.ms": "60000"}, delete=["min.insync.replicas"]
        )
        tree = cluster.zk_server.snapshot()
        data, _ = tree[zk_data.topic_config_path(TOPIC)]
        assert json.loads(data) == {"version": 1, "config": {"retention.ms": "60000"}}
        changes = sorted(p for p in tree if p.startswith("/config/changes/config_change_"))
        assert len(changes) == 1 and changes[0].endswith("_0000000000"), changes
        assert json.loads(tree[changes[0]][0]) == {"version": 2, "entity_path": "topics/events"}

        configs = {c.name: c for c in await admin.describe_configs(TOPIC)}
        assert (configs["retention.ms"].value, configs["retention.ms"].is_default) == (
            "60000",
            False,
        )
        assert configs["min.insync.replicas"].is_default

    simulate(tmp_path, scenario)


@pytest.mark.parametrize(
    ("topic", "change", "error", "match"),
    [
        (TOPIC, ({"retention.mss": "1"}, []), InvalidConfigError, r"retention\.mss"),
        (TOPIC, ({}, ["no.such.key"]), InvalidConfigError, r"no\.such\.key"),
        (
            TOPIC, ({"retention.ms": "soon"}, []), InvalidConfigError,
            r"'soon' for configuration retention\.ms",
        ),
        (TOPIC, ({"min.insync.replicas": "0"}, []), InvalidConfigError, r"min\.insync\.replicas"),
        (TOPIC, ({"cleanup.policy": "shred"}, []), InvalidConfigError, r"cleanup\.policy"),
        ("nowhere", ({"retention.ms": "1"}, []), UnknownTopicOrPartitionError, "'nowhere'"),
        (
            TOPIC, ({"retention.ms": "1"}, ["retention.ms"]), InvalidRequestError,
            r"duplicate config keys: retention\.ms",
        ),
    ],
)  # fmt: skip
def test_bad_requests_are_refused_naming_the_key_and_change_nothing(
    tmp_path: Path,
    topic: str,
    change: tuple[dict[str, str], list[str]],
    error: type[Exception],
    match: str,
) -> None:
    async def scenario(cluster: SimCluster) -> None:
        await create(cluster, TOPIC, retention_ms="5000")
        admin = admin_for(cluster)
        set_, delete = change
        with pytest.raises(error, match=match):
            await admin.alter_topic_configs(topic, set=set_, delete=delete)
        configs = {c.name: c.value for c in await admin.describe_configs(TOPIC)}
        assert configs["retention.ms"] == "5000"
        assert not [p for p in cluster.zk_server.snapshot() if "config_change_" in p]

    simulate(tmp_path, scenario)


def test_a_broker_that_missed_notifications_catches_up(tmp_path: Path) -> None:
    """A dropped ZooKeeper connection drops the watch: on reconnection the broker re-reads
    the notifications it missed. An expired session may hide any change: the broker reloads
    every topic config it holds with its new session."""

    async def scenario(cluster: SimCluster) -> None:
        await create(cluster, TOPIC)
        admin = admin_for(cluster)
        controller = cluster.controller_id()
        quiet = next(b for b in cluster.broker_ids if b != controller)
        zk = cluster.brokers[quiet].zk
        assert isinstance(zk, SimZooKeeperClient)

        zk.disconnect()
        await admin.alter_topic_configs(TOPIC, set={"retention.ms": "111111"})
        await cluster.sleep(2)
        assert partition_on(cluster, quiet, TP).log.config.retention_ms != 111_111
        zk.reconnect()
        await applied_everywhere(cluster, TP, "retention.ms", 111_111)

        zk.disconnect()
        await admin.alter_topic_configs(TOPIC, set={"retention.ms": "222222"})
        await cluster.sleep(cluster.zk_session_timeout_ms / 1000 + 2)  # the session expires
        zk.reconnect()
        await applied_everywhere(cluster, TP, "retention.ms", 222_222)
        assert cluster.brokers[quiet].zk is not zk  # it did get a new session

    simulate(tmp_path, scenario)


def test_a_broker_whose_missed_notifications_were_purged_reloads_every_topic(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The writing broker keeps only the newest notifications; a broker that was away while the
    one naming its topic was purged finds its last handled notification gone too, and reloads
    every topic config it holds."""
    monkeypatch.setattr(topic_config_admin, "CONFIG_CHANGES_RETAINED", 2)

    async def scenario(cluster: SimCluster) -> None:
        await create(cluster, TOPIC)
        await create(cluster, "other")
        admin = admin_for(cluster)
        await admin.alter_topic_configs("other", set={"retention.ms": "1000"})
        controller = cluster.controller_id()
        quiet = next(b for b in cluster.broker_ids if b != controller)
        await applied_everywhere(cluster, TopicPartition("other", 0), "retention.ms", 1_000)
        zk = cluster.brokers[quiet].zk
        assert isinstance(zk, SimZooKeeperClient)

        zk.disconnect()
        await admin.alter_topic_configs(TOPIC, set={"retention.ms": "333333"})
        for ms in ("2000", "3000", "4000"):
            await admin.alter_topic_configs("other", set={"retention.ms": ms})
        changes = [p for p in cluster.zk_server.snapshot() if "config_change_" in p]
        assert len(changes) == 2, changes  # the one naming TOPIC is gone
        zk.reconnect()
        await applied_everywhere(cluster, TP, "retention.ms", 333_333)
        await applied_everywhere(cluster, TopicPartition("other", 0), "retention.ms", 4_000)
        assert cluster.brokers[quiet].zk is zk  # same session: found by the purge check

    simulate(tmp_path, scenario)
