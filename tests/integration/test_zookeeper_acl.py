"""zookeeper.set.acl=true on real processes: LocalCluster makes the brokers' ZooKeeper
credentials (a 0600 JAAS file), the brokers authenticate with them and create Kafka's ACLs;
the cluster produces and consumes; an anonymous plain-kazoo client reads the public znodes,
cannot write, create or delete any of them, and cannot read the sensitive ones. (Kafka leaves
ZooKeeper's root open and advises a chroot; LocalCluster, owning its ZooKeeper, closes the
root too, so the top-level znodes cannot be deleted or squatted.)"""

from __future__ import annotations

import asyncio
import stat
from pathlib import Path

import pytest
from kazoo import exceptions as kz
from kazoo.client import KazooClient

from kafkasim.client.simple import MinimalClient
from kafkasim.cluster import compose_secure
from kafkasim.cluster.local import ZOOKEEPER_JAAS_FILE
from kafkasim.common.clock import SystemClock
from kafkasim.common.rpc_grpc_client import GrpcTransport
from kafkasim.common.types import TopicPartition
from kafkasim.common.zk_acl import digest_id, read_jaas_client
from kafkasim.controller import zk_data
from kafkasim.controller.zk_process import ZooKeeperProcess
from tests.cli_run import local_cluster

TP = TopicPartition("guarded", 0)


async def _produce_and_consume(bootstrap: list[str]) -> None:
    client = MinimalClient(GrpcTransport(), bootstrap, SystemClock())
    try:
        await client.create_topic("guarded", 1, 3, {})
        await client.wait_for_leaders("guarded", 1)
        assert (await client.produce(TP, [b"one", b"two"])).ok
        assert [r.value for r in await client.read_all(TP)] == [b"one", b"two"]
    finally:
        await client.transport.close()


def test_a_cluster_with_zookeeper_acls_works_and_anonymous_clients_cannot_write(
    tmp_path: Path,
) -> None:
    with local_cluster(tmp_path, brokers=3, broker_props={"zookeeper.set.acl": "true"}) as c:
        jaas = tmp_path / ZOOKEEPER_JAAS_FILE
        assert stat.S_IMODE(jaas.stat().st_mode) == 0o600
        for broker in c.brokers.values():
            assert stat.S_IMODE(broker.config_path.stat().st_mode) == 0o600
            assert "password" not in broker.config_path.read_text()
        asyncio.run(_produce_and_consume(c.bootstrap))

        anonymous = KazooClient(hosts=c.zookeeper.connect_string, timeout=6)
        anonymous.start(timeout=15)
        try:
            topic = zk_data.topic_path("guarded")
            data, _ = anonymous.get(topic)
            acls, _ = anonymous.get_acls(topic)
            assert sorted((a.id.scheme, a.perms) for a in acls) == [("digest", 31), ("world", 1)]
            for attempt in (
                lambda: anonymous.set(topic, b"{}"),
                lambda: anonymous.delete(zk_data.partition_path(TP) + "/state"),
                lambda: anonymous.delete(topic, recursive=True),
                lambda: anonymous.create(zk_data.DELETE_TOPICS + "/guarded"),
                lambda: anonymous.create(zk_data.broker_path(99), b"{}", ephemeral=True),
                lambda: anonymous.delete(zk_data.CONTROLLER),  # LocalCluster closed the root
                lambda: anonymous.delete(zk_data.CONTROLLER_EPOCH),
                lambda: anonymous.create("/squatter"),
                lambda: anonymous.set(zk_data.CONTROLLER_EPOCH, b"999999"),
                lambda: anonymous.create(zk_data.CONFIG_CHANGES + "/config_change_", b"{}"),
                lambda: anonymous.get_children("/config/brokers"),
                lambda: anonymous.get("/config/users"),
            ):
                with pytest.raises(kz.NoAuthError):
                    attempt()
            assert anonymous.get(topic)[0] == data
            assert anonymous.exists(zk_data.DELETE_TOPICS + "/guarded") is None
        finally:
            anonymous.stop()
            anonymous.close()
        asyncio.run(_produce_and_consume_more(c.bootstrap))


async def _produce_and_consume_more(bootstrap: list[str]) -> None:
    client = MinimalClient(GrpcTransport(), bootstrap, SystemClock())
    try:
        assert (await client.produce(TP, [b"three"])).ok
        assert [r.value for r in await client.read_all(TP)][-1] == b"three"
    finally:
        await client.transport.close()


def test_the_compose_zookeeper_acl_service_locks_the_root_to_the_brokers_identity(
    tmp_path: Path,
) -> None:
    """What the secured compose cluster's one-shot ``zookeeper-acl`` service runs (python -m
    kafkasim.cluster.compose_secure CONNECT JAAS), here against a ZooKeeper on loopback: the
    root then lets only the JAAS identity create top-level znodes; a second run (the project
    started again) succeeds too."""
    secured = compose_secure.prepare(tmp_path / "secured")
    auth = read_jaas_client(secured.jaas)
    with ZooKeeperProcess(tmp_path / "zookeeper") as zookeeper:
        connect = zookeeper.connect_string
        assert compose_secure.main([connect, str(secured.jaas)]) == 0
        anonymous = KazooClient(hosts=connect, timeout=6)
        broker = KazooClient(hosts=connect, timeout=6, auth_data=[(auth.scheme, auth.credential)])
        anonymous.start(timeout=15)
        broker.start(timeout=15)
        try:
            acls, _ = anonymous.get_acls("/")  # ZooKeeper 3.8 shows a digest's user only
            assert sorted((a.id.scheme, a.id.id.split(":")[0], a.perms) for a in acls) == [
                ("digest", digest_id(auth.credential).split(":")[0], 31),
                ("world", "anyone", 1),
            ]
            with pytest.raises(kz.NoAuthError):
                anonymous.create("/squatter")
            broker.create(zk_data.BROKER_IDS, makepath=True)
            assert compose_secure.main([connect, str(secured.jaas)]) == 0
            with pytest.raises(kz.NoAuthError):
                anonymous.create("/squatter")
        finally:
            for client in (anonymous, broker):
                client.stop()
                client.close()
