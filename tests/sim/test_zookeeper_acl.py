"""zookeeper.set.acl=true in the simulation: brokers authenticate to SimZooKeeper with the
JAAS file's credentials and create every znode with Kafka's ACLs; the cluster still works, an
anonymous session can read the public znodes but change nothing, and cannot read the
sensitive ones. (The same rules are checked against a real ZooKeeper in
tests/unit/coordination/test_conformance_acl.py and tests/integration/test_zookeeper_acl.py.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from kafkasim.common.coordination import NoAuthError
from kafkasim.common.types import TopicPartition
from kafkasim.common.zk_acl import (
    CREATOR_ALL_ACL,
    DIGEST,
    READ_ACL_UNSAFE,
    Acl,
    Perm,
    digest_id,
    jaas_client_text,
)
from kafkasim.controller import zk_data
from kafkasim.sim.cluster import SimCluster
from kafkasim.sim.zookeeper import SimZooKeeperClient
from tests.sim.helpers import create, simulate


def test_brokers_with_zookeeper_acls_work_and_anonymous_sessions_cannot_write(
    tmp_path: Path,
) -> None:
    jaas = tmp_path / "zk.jaas"
    jaas.write_text(jaas_client_text("kafka", "s3cret"))
    broker_identity = ("digest", digest_id("kafka:s3cret"))
    tp = TopicPartition("orders", 0)

    async def scenario(cluster: SimCluster) -> None:
        client = await create(cluster, "orders")
        assert (await client.produce(tp, [b"a", b"b"])).ok
        assert [r.value for r in await client.read_all(tp)] == [b"a", b"b"]

        anonymous = SimZooKeeperClient(cluster.zk_server, 6_000, "anonymous")
        await anonymous.start()
        try:
            topic = zk_data.topic_path("orders")
            assert await anonymous.get_acls(topic) == [
                Acl(Perm.ALL, *broker_identity),
                *READ_ACL_UNSAFE,
            ]
            data, _ = await anonymous.get(topic)  # public: readable
            with pytest.raises(NoAuthError):
                await anonymous.set(topic, b"{}")
            with pytest.raises(NoAuthError):
                await anonymous.delete(zk_data.partition_path(tp) + "/state")
            with pytest.raises(NoAuthError):
                await anonymous.create(zk_data.DELETE_TOPICS + "/orders")
            with pytest.raises(NoAuthError):
                await anonymous.create(zk_data.broker_path(99), b"{}", ephemeral=True)
            with pytest.raises(NoAuthError):  # sensitive: the brokers only
                await anonymous.get_children("/config/brokers")
            assert await anonymous.get_acls("/config/brokers") == [Acl(Perm.ALL, *broker_identity)]
            assert await anonymous.get_acls(zk_data.CONSUMERS) == [Acl(Perm.ALL, "world", "anyone")]
            assert (await anonymous.get(topic))[0] == data
        finally:
            await anonymous.close()
        assert (await client.produce(tp, [b"c"])).ok

    simulate(
        tmp_path, scenario, **{"zookeeper.set.acl": True, "zookeeper.jaas.config.file": str(jaas)}
    )


def test_default_acls_are_kafkas() -> None:
    public = (*CREATOR_ALL_ACL, *READ_ACL_UNSAFE)
    assert zk_data.default_acls("/brokers/topics/t", secure=True) == public
    assert zk_data.default_acls("/kafka-acl/Topic/t", secure=True) == public
    for sensitive in ("/config/users", "/config/users/alice", "/config/brokers/1"):
        assert zk_data.default_acls(sensitive, secure=True) == CREATOR_ALL_ACL
    assert zk_data.default_acls("/delegation_token/tokens/x", secure=True) == CREATOR_ALL_ACL
    assert zk_data.default_acls("/consumers", secure=True)[0].scheme == "world"
    assert zk_data.default_acls("/config/users", secure=False)[0] == Acl(
        Perm.ALL, "world", "anyone"
    )
    assert DIGEST == "digest"
