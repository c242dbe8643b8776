"""Issue 15's secured cluster with SASL/SCRAM principals: 2 brokers whose gRPC (inter-broker
too) and Kafka listeners are SASL_SSL, the ACL authorizer on (super users: the brokers'
inter-broker PLAIN user and the admin), ZooKeeper ACLs on; alice is a SCRAM user (added with
``kafkasim configs --entity-type users``) allowed only Read on ``orders`` (``kafkasim acls``).
Alice's forged controller requests, sent over gRPC with her SCRAM credentials, are refused
with CLUSTER_AUTHORIZATION_FAILED and change nothing; over Kafka's protocol (confluent-kafka,
SASL_SSL with SCRAM) she consumes ``orders`` and cannot produce to it. The same checks with
certificate principals: tests/interop/test_secured_cluster.py."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest

from kafkasim import proto
from kafkasim.client.simple import MinimalClient
from kafkasim.cluster.local import ZOOKEEPER_JAAS_FILE, LocalCluster
from kafkasim.common.clock import SystemClock
from kafkasim.common.errors import error_for_name
from kafkasim.common.rpc_grpc_client import client_transport
from kafkasim.common.sasl import jaas_config
from kafkasim.common.types import TopicPartition
from kafkasim.proto import kafkasim_pb2 as pb
from tests.cli_run import kafkasim, local_cluster
from tests.interop.kafkasim_side import DEADLINE_S
from tests.interop.test_sasl_ssl import sim_config
from tests.interop.test_secured_cluster import ck_reads_but_cannot_write

ORDERS = TopicPartition("orders", 0)
JAAS = jaas_config("PLAIN", "broker", "broker-pw", broker="broker-pw", admin="admin-pw")
PROPS: dict[str, object] = {
    "listener.security.protocol.map": "SSL:SASL_SSL,KAFKA:SASL_SSL",
    "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256",
    "sasl.mechanism.inter.broker.protocol": "PLAIN",
    "listener.name.ssl.plain.sasl.jaas.config": JAAS,
    "listener.name.kafka.plain.sasl.jaas.config": JAAS,
    "listener.name.kafka.ssl.client.auth": "none",
    "zookeeper.set.acl": "true",
    "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
    "super.users": "User:broker;User:admin",
}


def zookeeper_args(cluster: LocalCluster) -> list[str]:
    properties = cluster.root / "zk.properties"
    properties.write_text(
        f"zookeeper.set.acl=true\nzookeeper.jaas.config.file={cluster.root / ZOOKEEPER_JAAS_FILE}\n"
    )
    return ["--zookeeper", cluster.zookeeper.connect_string, "--command-config", str(properties)]


async def _admin_setup(client: MinimalClient) -> None:
    await client.create_topic("orders", 1, 2)
    await client.wait_for_leaders("orders", 1)
    produced = await client.produce(ORDERS, [b"a", b"b"])
    assert produced.error_code == 0, produced


def run(config: dict[str, object], body: Any) -> Any:
    async def main() -> Any:
        transport = client_transport(config)
        try:
            client = MinimalClient(
                transport, str(config["bootstrap.servers"]).split(","), SystemClock()
            )
            return await body(client)
        finally:
            await transport.close()

    return asyncio.run(asyncio.wait_for(main(), DEADLINE_S))


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    root = tmp_path_factory.mktemp("secured-sasl")
    with local_cluster(root, brokers=2, broker_props=dict(PROPS), tls=True) as c:
        added = kafkasim(
            "configs", *zookeeper_args(c), "--entity-type", "users", "--entity-name", "alice",
            "--alter", "--add-config", "SCRAM-SHA-256=[password=alice-pw]",
        )  # fmt: skip
        assert added.returncode == 0, added.stdout + added.stderr
        acl = kafkasim(
            "acls",
            "--authorizer-properties", f"zookeeper.connect={c.zookeeper.connect_string}",
            "--authorizer-properties", "zookeeper.set.acl=true",
            "--authorizer-properties", f"zookeeper.jaas.config.file={root / ZOOKEEPER_JAAS_FILE}",
            "--add", "--allow-principal", "User:alice", "--operation", "Read", "--topic", "orders",
        )  # fmt: skip
        assert acl.returncode == 0, acl.stdout + acl.stderr
        run(sim_config(c, "PLAIN", "admin", "admin-pw"), _admin_setup)
        yield c


def test_scram_users_forged_controller_requests_are_refused(cluster: LocalCluster) -> None:
    addresses = [b.address for b in cluster.brokers.values()]

    async def forge(client: MinimalClient) -> list[int]:
        codes = []
        for address in addresses:
            stop = pb.StopReplicaRequest(controller_id=1, controller_epoch=2**31 - 1)
            stop.partitions.add(topic="orders", partition=0, delete_partition=True)
            for method, request in (
                (proto.METHOD_STOP_REPLICA, stop),
                (
                    proto.METHOD_UPDATE_METADATA,
                    pb.UpdateMetadataRequest(controller_id=1, controller_epoch=2**31 - 1),
                ),
                (proto.METHOD_CONTROLLED_SHUTDOWN, pb.ControlledShutdownRequest(broker_id=1)),
            ):
                answer = await client.transport.call(address, method, request, timeout_s=10)
                codes.append(answer.error_code)
        return codes

    alice = sim_config(cluster, "SCRAM-SHA-256", "alice", "alice-pw")
    refused = error_for_name("CLUSTER_AUTHORIZATION_FAILED").code
    assert run(alice, forge) == [refused] * (3 * len(addresses))

    async def read_back(client: MinimalClient) -> list[bytes | None]:
        return [r.value for r in await client.read_all(ORDERS)]

    # Nothing changed: the data is there, and the real controller still runs the cluster.
    admin = sim_config(cluster, "PLAIN", "admin", "admin-pw")
    assert run(admin, read_back)[:2] == [b"a", b"b"]
    logs = "".join(b.log_path.read_text() for b in cluster.brokers.values())
    assert "User:alice" in logs and "Denied" in logs  # the authorizer's audit lines


def test_a_scram_reader_consumes_and_cannot_produce(cluster: LocalCluster) -> None:
    config = {
        "bootstrap.servers": cluster.kafka_bootstrap,
        "security.protocol": "SASL_SSL",
        "ssl.ca.location": str(cluster.certs_dir / "ca.crt"),
        "sasl.mechanism": "SCRAM-SHA-256",
        "sasl.username": "alice",
        "sasl.password": "alice-pw",
    }
    assert ck_reads_but_cannot_write(config, "orders", 2) == [b"a", b"b"]
