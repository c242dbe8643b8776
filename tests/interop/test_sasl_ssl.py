"""SASL_SSL with real processes: a 2-broker TLS cluster whose gRPC listener (inter-broker too)
and Kafka listener are both SASL_SSL, with ZooKeeper ACLs on. confluent-kafka and kafka-python
use SCRAM over TLS; kafkasim's own clients send SASL credentials in gRPC call metadata over
TLS (PLAIN from the listener's JAAS users, SCRAM against the credentials in ZooKeeper); the
brokers authenticate to each other with sasl.mechanism.inter.broker.protocol. A call without
credentials or with a wrong password is refused (UNAUTHENTICATED) with a clear message, and
/config/users stays unreadable to an anonymous ZooKeeper client."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import kazoo.exceptions as kz
import pytest
from kazoo.client import KazooClient

from kafkasim.client.consumer import Consumer as SimConsumer
from kafkasim.client.producer import Producer as SimProducer
from kafkasim.client.simple import MinimalClient
from kafkasim.cluster.local import ZOOKEEPER_JAAS_FILE, LocalCluster
from kafkasim.common.clock import SystemClock
from kafkasim.common.rpc import RpcError, RpcStatus
from kafkasim.common.rpc_grpc_client import client_transport
from kafkasim.common.sasl import jaas_config
from kafkasim.common.types import TopicPartition
from tests.cli_run import kafkasim, local_cluster
from tests.interop.kafkasim_side import DEADLINE_S
from tests.interop.test_sasl import ck_metadata_error, ck_round_trip, kp_round_trip

COUNT = 10
JAAS = jaas_config("PLAIN", "broker", "broker-pw", broker="broker-pw", admin="admin-pw")
PROPS: dict[str, object] = {
    "listener.security.protocol.map": "SSL:SASL_SSL,KAFKA:SASL_SSL",
    "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
    "sasl.mechanism.inter.broker.protocol": "PLAIN",
    "listener.name.ssl.plain.sasl.jaas.config": JAAS,
    "listener.name.kafka.plain.sasl.jaas.config": JAAS,
    "listener.name.kafka.ssl.client.auth": "none",
    "zookeeper.set.acl": "true",
}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    root = tmp_path_factory.mktemp("sasl-ssl")
    with local_cluster(root, brokers=2, broker_props=dict(PROPS), tls=True) as c:
        zk_props = root / "zk.properties"
        zk_props.write_text(
            f"zookeeper.set.acl=true\nzookeeper.jaas.config.file={root / ZOOKEEPER_JAAS_FILE}\n"
        )
        done = kafkasim(
            "configs", "--zookeeper", c.zookeeper.connect_string, "--command-config",
            str(zk_props), "--entity-type", "users", "--entity-name", "carol", "--alter",
            "--add-config", "SCRAM-SHA-256=[password=carol-pw],SCRAM-SHA-512=[password=carol-pw]",
        )  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr
        yield c


def sim_config(cluster: LocalCluster, mechanism: str, user: str, pw: str) -> dict[str, object]:
    return {
        "bootstrap.servers": ",".join(cluster.bootstrap),
        **cluster.client_properties(),
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": mechanism,
        "sasl.username": user,
        "sasl.password": pw,
    }


def create_topic(config: dict[str, object], name: str) -> None:
    async def main() -> None:
        transport = client_transport(config)
        try:
            client = MinimalClient(
                transport, str(config["bootstrap.servers"]).split(","), SystemClock()
            )
            await client.create_topic(name, 1, 2)
            await client.wait_for_leaders(name, 1)
        finally:
            await transport.close()

    asyncio.run(asyncio.wait_for(main(), DEADLINE_S))


def test_kafkasims_clients_send_credentials_over_tls_grpc(cluster: LocalCluster) -> None:
    """Replicated twice (inter-broker SASL_SSL); PLAIN and SCRAM users both served."""
    admin = sim_config(cluster, "PLAIN", "admin", "admin-pw")
    create_topic(admin, "sim-sasl")
    carol = sim_config(cluster, "SCRAM-SHA-512", "carol", "carol-pw")

    async def main() -> list[bytes | None]:
        producer = SimProducer({**carol, "acks": "all"})
        futures = [producer.send("sim-sasl", b"v%d" % i, partition=0) for i in range(COUNT)]
        await producer.flush()
        for future in futures:
            await future
        await producer.close()
        async with SimConsumer({**admin, "auto.offset.reset": "earliest"}) as consumer:
            consumer.assign([TopicPartition("sim-sasl", 0)])
            got: list[bytes | None] = []
            deadline = time.monotonic() + DEADLINE_S
            while len(got) < COUNT and time.monotonic() < deadline:
                got.extend(r.value for r in await consumer.poll(500))
            return got

    assert asyncio.run(main()) == [b"v%d" % i for i in range(COUNT)]


def refusal(config: dict[str, object]) -> RpcError:
    async def main() -> RpcError:
        transport = client_transport(config)
        try:
            client = MinimalClient(
                transport, cluster_bootstrap(config), SystemClock(), request_timeout_ms=5000
            )
            await client.refresh_metadata(["sim-sasl"])
        except RpcError as e:
            return e
        finally:
            await transport.close()
        raise AssertionError("served")

    return asyncio.run(main())


def cluster_bootstrap(config: dict[str, object]) -> list[str]:
    return str(config["bootstrap.servers"]).split(",")


def test_grpc_calls_without_good_credentials_are_refused(cluster: LocalCluster) -> None:
    wrong = refusal(sim_config(cluster, "SCRAM-SHA-256", "carol", "not-carols"))
    assert wrong.status == RpcStatus.UNAUTHENTICATED
    assert "Invalid username or password" in wrong.message
    none = refusal(
        {"bootstrap.servers": ",".join(cluster.bootstrap), **cluster.client_properties()}
    )
    assert none.status == RpcStatus.UNAUTHENTICATED
    assert "carries no SASL credentials" in none.message
    logs = "".join(b.log_path.read_text() for b in cluster.brokers.values())
    assert "Failed authentication with /127.0.0.1" in logs
    assert all(b.running for b in cluster.brokers.values())


def test_kafkas_clients_use_scram_over_sasl_ssl(cluster: LocalCluster) -> None:
    create_topic(sim_config(cluster, "PLAIN", "admin", "admin-pw"), "ck-ssl")
    create_topic(sim_config(cluster, "PLAIN", "admin", "admin-pw"), "kp-ssl")
    ca = str(cluster.certs_dir / "ca.crt")
    ck = {
        "bootstrap.servers": cluster.kafka_bootstrap,
        "security.protocol": "SASL_SSL",
        "ssl.ca.location": ca,
        "sasl.mechanism": "SCRAM-SHA-256",
        "sasl.username": "carol",
        "sasl.password": "carol-pw",
    }
    assert ck_round_trip(ck, "ck-ssl") == [b"c%d" % i for i in range(COUNT)]
    assert ck_metadata_error({**ck, "sasl.password": "wrong"}) != ""
    kp: dict[str, object] = {
        "bootstrap_servers": cluster.kafka_bootstrap,
        "security_protocol": "SASL_SSL",
        "ssl_cafile": ca,
        "sasl_mechanism": "SCRAM-SHA-512",
        "sasl_plain_username": "carol",
        "sasl_plain_password": "carol-pw",
    }
    assert kp_round_trip(kp, "kp-ssl") == [b"p%d" % i for i in range(COUNT)]


def test_scram_credentials_stay_private_in_zookeeper(cluster: LocalCluster) -> None:
    anonymous = KazooClient(hosts=cluster.zookeeper.connect_string, timeout=6)
    anonymous.start(timeout=10)
    try:
        with pytest.raises(kz.NoAuthError):  # not even which users exist
            anonymous.get_children("/config/users")
        with pytest.raises(kz.NoAuthError):
            anonymous.get("/config/users/carol")
        with pytest.raises(kz.NoAuthError):
            anonymous.set("/config/users/carol", b"{}")
    finally:
        anonymous.stop()
        anonymous.close()
    # Without the brokers' ZooKeeper credentials the tool cannot write either.
    done = kafkasim(
        "configs", "--zookeeper", cluster.zookeeper.connect_string, "--entity-type", "users",
        "--entity-name", "carol", "--alter", "--add-config", "SCRAM-SHA-256=[password=x]",
    )  # fmt: skip
    assert done.returncode != 0
