"""A cluster with mutual TLS on every listener (``cluster up --tls``: gRPC, Kafka's protocol and
inter-broker replication and controller traffic): kafkasim's producer, consumer and tools,
confluent-kafka and kafka-python produce and consume over it with client certificates; a
plaintext client on a TLS port, a client without a certificate, with an untrusted and with an
expired one are refused with a clear error, and the brokers go on serving the others."""

from __future__ import annotations

import asyncio
import datetime
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, Producer
from confluent_kafka import TopicPartition as CkPartition
from confluent_kafka.admin import AdminClient as CkAdmin
from kafka import KafkaConsumer, KafkaProducer
from kafka import TopicPartition as KpPartition

from kafkasim.client.consumer import Consumer as SimConsumer
from kafkasim.client.producer import Producer as SimProducer
from kafkasim.client.simple import MinimalClient
from kafkasim.cluster.certs import create_certs, load_or_create_ca
from kafkasim.cluster.local import LocalCluster
from kafkasim.common.clock import SystemClock
from kafkasim.common.rpc import RpcError, RpcStatus
from kafkasim.common.rpc_grpc_client import GrpcTransport, client_transport
from kafkasim.common.types import TopicPartition
from tests.cli_run import kafkasim, local_cluster
from tests.interop.kafkasim_side import DEADLINE_S

COUNT = 20


@pytest.fixture(scope="module")
def tls_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with local_cluster(tmp_path_factory.mktemp("tls"), brokers=3, tls=True) as cluster:
        yield cluster


def ssl_config(cluster: LocalCluster, client: str | None = "alice") -> dict[str, str]:
    """librdkafka's TLS settings: the cluster's CA, and ``client``'s certificate (mTLS)."""
    certs = cluster.certs_dir
    cluster.client_properties(client or "admin")  # makes the client's certificate
    config = {"security.protocol": "SSL", "ssl.ca.location": str(certs / "ca.crt")}
    if client is not None:
        config["ssl.certificate.location"] = str(certs / f"{client}.crt")
        config["ssl.key.location"] = str(certs / f"{client}.key")
    return config


def create_topic(cluster: LocalCluster, name: str) -> None:
    async def main() -> None:
        transport = client_transport(cluster.client_properties())
        try:
            client = MinimalClient(transport, cluster.bootstrap, SystemClock())
            await client.create_topic(name, 1, 3)
            await client.wait_for_leaders(name, 1)
        finally:
            await transport.close()

    asyncio.run(asyncio.wait_for(main(), DEADLINE_S))


def test_kafkasims_clients_produce_and_consume_over_mutual_tls(tls_cluster: LocalCluster) -> None:
    """The topic is replicated 3 ways (replica fetches, LeaderAndIsr: inter-broker mTLS) and
    acks=all needs every follower."""
    create_topic(tls_cluster, "sim-tls")
    tp = TopicPartition("sim-tls", 0)
    config = {
        "bootstrap.servers": ",".join(tls_cluster.bootstrap),
        **tls_cluster.client_properties(),
    }

    async def main() -> list[bytes | None]:
        transport = client_transport(config)
        try:
            producer = SimProducer(
                {**config, "acks": "all"}, transport=transport, clock=SystemClock()
            )
            futures = [producer.send("sim-tls", b"v%d" % i, partition=0) for i in range(COUNT)]
            await producer.flush()
            for future in futures:
                await future
            await producer.close()
            consumer_config = {**config, "auto.offset.reset": "earliest"}
            async with SimConsumer(consumer_config, transport=transport, clock=SystemClock()) as c:
                c.assign([tp])
                got: list[bytes | None] = []
                deadline = time.monotonic() + DEADLINE_S
                while len(got) < COUNT and time.monotonic() < deadline:
                    got.extend(r.value for r in await c.poll(500))
                return got
        finally:
            await transport.close()

    assert asyncio.run(main()) == [b"v%d" % i for i in range(COUNT)]


def test_the_tools_connect_with_command_config(tls_cluster: LocalCluster, tmp_path: Path) -> None:
    properties = tmp_path / "client.properties"
    properties.write_text("".join(f"{k}={v}\n" for k, v in tls_cluster.client_properties().items()))
    bootstrap = ",".join(tls_cluster.bootstrap)
    created = kafkasim(
        "topics", "--bootstrap-server", bootstrap, "--command-config", str(properties),
        "--create", "--topic", "tool-tls", "--partitions", "1", "--replication-factor", "3",
    )  # fmt: skip
    assert created.returncode == 0, created.stdout + created.stderr
    plain = kafkasim("topics", "--bootstrap-server", bootstrap, "--list", timeout=120)
    assert plain.returncode != 0
    listed = kafkasim(
        "topics", "--bootstrap-server", bootstrap, "--command-config", str(properties), "--list"
    )
    assert "tool-tls" in listed.stdout.split(), listed.stdout + listed.stderr


def test_confluent_kafka_produces_and_consumes_over_mutual_tls(tls_cluster: LocalCluster) -> None:
    create_topic(tls_cluster, "ck-tls")
    bootstrap = tls_cluster.kafka_bootstrap
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", **ssl_config(tls_cluster)})
    errors: list[object] = []
    for i in range(COUNT):
        producer.produce(
            "ck-tls", b"c%d" % i, partition=0, on_delivery=lambda e, _m: e and errors.append(e)
        )
    assert producer.flush(DEADLINE_S) == 0 and errors == []
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "tls",
            "enable.auto.commit": False,
            **ssl_config(tls_cluster),
        }
    )
    try:
        consumer.assign([CkPartition("ck-tls", 0, OFFSET_BEGINNING)])
        got: list[bytes] = []
        deadline = time.monotonic() + DEADLINE_S
        while len(got) < COUNT and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error():
                raise KafkaException(msg.error())
            got.append(msg.value())
    finally:
        consumer.close()
    assert got == [b"c%d" % i for i in range(COUNT)]


def test_kafka_python_produces_and_consumes_over_mutual_tls(tls_cluster: LocalCluster) -> None:
    create_topic(tls_cluster, "kp-tls")
    certs = tls_cluster.certs_dir
    tls_cluster.client_properties("alice")
    ssl_args = {
        "security_protocol": "SSL",
        "ssl_cafile": str(certs / "ca.crt"),
        "ssl_certfile": str(certs / "alice.crt"),
        "ssl_keyfile": str(certs / "alice.key"),
    }
    producer = KafkaProducer(bootstrap_servers=tls_cluster.kafka_bootstrap, acks="all", **ssl_args)
    try:
        for i in range(COUNT):
            producer.send("kp-tls", b"p%d" % i, partition=0)
        producer.flush(DEADLINE_S)
    finally:
        producer.close()
    consumer = KafkaConsumer(
        bootstrap_servers=tls_cluster.kafka_bootstrap, enable_auto_commit=False, **ssl_args
    )
    try:
        tp = KpPartition("kp-tls", 0)
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        got: list[bytes] = []
        deadline = time.monotonic() + DEADLINE_S
        while len(got) < COUNT and time.monotonic() < deadline:
            for batch in consumer.poll(timeout_ms=500).values():
                got.extend(r.value for r in batch)
    finally:
        consumer.close()
    assert got == [b"p%d" % i for i in range(COUNT)]


def ck_metadata_error(config: dict[str, str]) -> str:
    """What confluent-kafka's admin says when asked for metadata with ``config`` ("" if it
    got an answer)."""
    admin = CkAdmin({**config, "socket.timeout.ms": 3000})
    try:
        admin.list_topics(timeout=5)
    except KafkaException as e:
        return str(e)
    return ""


def test_bad_clients_are_refused_and_the_brokers_keep_serving(
    tls_cluster: LocalCluster, tmp_path: Path
) -> None:
    bootstrap = tls_cluster.kafka_bootstrap
    good = ssl_config(tls_cluster)
    assert ck_metadata_error({"bootstrap.servers": bootstrap, **good}) == ""
    # A plaintext client on the TLS port, a client without a certificate (client auth is
    # required), one with another authority's certificate, one with an expired certificate.
    _, _, other = create_certs(tmp_path / "other", brokers=0, clients=("mallory",))
    ca = load_or_create_ca(tls_cluster.certs_dir)
    past = datetime.datetime.now(datetime.UTC) - datetime.timedelta(days=2)
    old = ca.issue(
        "old", not_before=past, not_after=past + datetime.timedelta(days=1), directory=tmp_path
    )
    refused = {
        "plaintext": {"bootstrap.servers": bootstrap},
        "no certificate": {"bootstrap.servers": bootstrap, **ssl_config(tls_cluster, None)},
        "untrusted": {
            "bootstrap.servers": bootstrap,
            **good,
            "ssl.certificate.location": str(other["mallory"].certificate),
            "ssl.key.location": str(other["mallory"].key),
        },
        "expired": {
            "bootstrap.servers": bootstrap,
            **good,
            "ssl.certificate.location": str(old.certificate),
            "ssl.key.location": str(old.key),
        },
    }
    for name, config in refused.items():
        assert ck_metadata_error(config) != "", name

    async def plaintext_grpc() -> RpcStatus:
        transport = GrpcTransport()
        try:
            client = MinimalClient(
                transport, tls_cluster.bootstrap, SystemClock(), request_timeout_ms=5000
            )
            await client.refresh_metadata(["ck-tls"])
        except RpcError as e:
            return e.status
        finally:
            await transport.close()
        raise AssertionError("a plaintext gRPC client was served on a TLS port")

    assert asyncio.run(plaintext_grpc()) == RpcStatus.UNAVAILABLE
    # The brokers log each refusal as Kafka does, and serve a good client afterwards.
    logs = "".join(b.log_path.read_text() for b in tls_cluster.brokers.values())
    assert "Failed authentication with" in logs
    assert "certificate has expired" in logs
    assert "WRONG_VERSION_NUMBER" in logs
    assert ck_metadata_error({"bootstrap.servers": bootstrap, **good}) == ""
    assert all(b.running for b in tls_cluster.brokers.values())
