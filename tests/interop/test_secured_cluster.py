"""A secured cluster on real processes, as issue 15 asks: 3 brokers with mutual TLS on every
listener (gRPC, Kafka's protocol, inter-broker and controller traffic), Kafka's ACL
authorizer (the super users: the brokers' certificate principals and the admin tool's),
``zookeeper.set.acl=true``; clients alice and bob with their own certificates.

Each forged request of issue 15, sent over gRPC by alice with her (valid) certificate, is
refused with Kafka's error and changes nothing: StopReplica (the partition's data stays),
ControlledShutdown (leadership stays), UpdateMetadata and LeaderAndIsr with the largest
controller epoch (the real controller is obeyed afterwards), a follower fetch claiming a
broker's replica id (the high watermark stays), DeleteTopics and DeleteRecords. Anonymous
ZooKeeper writes are refused. Alice, allowed only Read on a topic by ``kafkasim acls``,
consumes it and cannot produce to it, with kafkasim's client and with confluent-kafka; bob,
allowed nothing, sees no topic. A plaintext client on the TLS port and a certificate of
another authority are refused with a clear error, and the brokers keep serving.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer
from confluent_kafka import TopicPartition as CkPartition
from confluent_kafka.admin import AdminClient as CkAdmin
from kazoo import exceptions as kz
from kazoo.client import KazooClient

from kafkasim import proto
from kafkasim.client.simple import MinimalClient
from kafkasim.cluster.certs import create_certs
from kafkasim.cluster.local import ZOOKEEPER_JAAS_FILE, LocalCluster
from kafkasim.common.clock import SystemClock
from kafkasim.common.errors import error_for_name
from kafkasim.common.rpc_grpc_client import client_transport
from kafkasim.common.types import TopicPartition
from kafkasim.controller import zk_data
from kafkasim.proto import kafkasim_pb2 as pb
from tests.cli_run import kafkasim, local_cluster
from tests.interop.kafkasim_side import DEADLINE_S
from tests.interop.test_tls import ck_metadata_error, ssl_config

T = TypeVar("T")
ORDERS = TopicPartition("orders", 0)
TIMEOUT_S = 10.0
ALICE = "User:CN=alice,OU=kafkasim"
SUPER_USERS = ";".join(
    [f"User:CN=broker-{b},OU=kafkasim" for b in (1, 2, 3)] + ["User:CN=admin,OU=kafkasim"]
)
CODE = {
    n: error_for_name(n).code
    for n in ("TOPIC_AUTHORIZATION_FAILED", "CLUSTER_AUTHORIZATION_FAILED")
}


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    props: dict[str, object] = {
        "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
        "super.users": SUPER_USERS,
        "zookeeper.set.acl": "true",
    }
    root = tmp_path_factory.mktemp("secured")
    with local_cluster(root, brokers=3, broker_props=props, tls=True) as cluster:
        made = kafkasim(
            "certs",
            "create",
            "--dir",
            str(cluster.certs_dir),
            "--brokers",
            "0",
            "--clients",
            "alice,bob",
        )
        assert made.returncode == 0, made.stdout + made.stderr
        run(cluster, "admin", _orders_with_two_records)
        # A follower learns the high watermark from its next fetch; a test comparing replica
        # states before and after must start once every replica knows it (CI caught a
        # follower at 0 before and at 2 after).
        wait_until(
            lambda: all(
                (r.high_watermark, r.log_end_offset) == (2, 2)
                for r in run(cluster, "admin", replicas).values()
            ),
            "every replica of orders-0 to know the high watermark 2",
        )
        added = kafkasim(
            "acls",
            "--authorizer-properties", f"zookeeper.connect={cluster.zookeeper.connect_string}",
            "--authorizer-properties", "zookeeper.set.acl=true",
            "--authorizer-properties",
            f"zookeeper.jaas.config.file={cluster.root / ZOOKEEPER_JAAS_FILE}",
            "--add", "--allow-principal", ALICE, "--operation", "Read", "--topic", "orders",
        )  # fmt: skip
        assert added.returncode == 0, added.stdout + added.stderr
        yield cluster


def run(
    cluster: LocalCluster, who: str, body: Callable[[MinimalClient, LocalCluster], Awaitable[T]]
) -> T:
    """``body`` with a kafkasim client authenticated by ``who``'s certificate."""

    async def main() -> T:
        transport = client_transport(cluster.client_properties(who))
        try:
            client = MinimalClient(transport, cluster.bootstrap, SystemClock())
            return await body(client, cluster)
        finally:
            await transport.close()

    return asyncio.run(asyncio.wait_for(main(), DEADLINE_S))


async def _orders_with_two_records(client: MinimalClient, cluster: LocalCluster) -> None:
    await client.create_topic("orders", 1, 3)
    await client.wait_for_leaders("orders", 1)
    assert (await client.produce(ORDERS, [b"a", b"b"])).ok


async def replicas(client: MinimalClient, cluster: LocalCluster) -> dict[int, Any]:
    """Each broker's replica of orders-0, as the admin sees it (DescribeReplicas)."""
    asked = pb.DescribeReplicasRequest()
    asked.partitions.add(topic="orders", partition=0)
    found = {}
    for broker in cluster.brokers.values():
        answer = await client.transport.call(
            broker.address, proto.METHOD_DESCRIBE_REPLICAS, asked, timeout_s=TIMEOUT_S
        )
        (replica,) = answer.replicas
        found[broker.broker_id] = replica
    return found


def state(replica: Any) -> tuple[Any, ...]:
    return (
        replica.is_leader,
        replica.leader,
        replica.leader_epoch,
        replica.high_watermark,
        replica.log_end_offset,
        replica.log_start_offset,
        tuple(replica.isr),
    )


def wait_until(check: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.2)


def test_forged_controller_and_replica_requests_are_refused_and_change_nothing(
    secured: LocalCluster,
) -> None:
    before = run(secured, "admin", replicas)
    (leader,) = [b for b, r in before.items() if r.is_leader]
    follower = next(b for b in before if b != leader)
    addresses = {b.broker_id: b.address for b in secured.brokers.values()}

    async def forge(client: MinimalClient, cluster: LocalCluster) -> dict[str, list[int]]:
        async def call(broker_id: int, method: str, request: Any) -> Any:
            return await client.transport.call(
                addresses[broker_id], method, request, timeout_s=TIMEOUT_S
            )

        answers: dict[str, list[int]] = {}
        for broker_id in addresses:
            stop = pb.StopReplicaRequest(controller_id=1, controller_epoch=2**31 - 1)
            stop.partitions.add(topic="orders", partition=0, delete_partition=True)
            poison = pb.UpdateMetadataRequest(controller_id=1, controller_epoch=2**31 - 1)
            lai = pb.LeaderAndIsrRequest(controller_id=1, controller_epoch=2**31 - 1)
            shutdown = pb.ControlledShutdownRequest(broker_id=leader)
            for name, method, request in (
                ("StopReplica", proto.METHOD_STOP_REPLICA, stop),
                ("UpdateMetadata", proto.METHOD_UPDATE_METADATA, poison),
                ("LeaderAndIsr", proto.METHOD_LEADER_AND_ISR, lai),
                ("ControlledShutdown", proto.METHOD_CONTROLLED_SHUTDOWN, shutdown),
            ):
                answers.setdefault(name, []).append(
                    (await call(broker_id, method, request)).error_code
                )
        # A follower fetch claiming to be the follower, asking past the log end: it would
        # move the high watermark if it were believed.
        spoof = pb.FetchRequest(replica_id=follower, max_bytes=1 << 20)
        spoof.partitions.add(
            topic="orders", partition=0, fetch_offset=1000, partition_max_bytes=1 << 20
        )
        fetched = await call(leader, proto.METHOD_FETCH, spoof)
        answers["Fetch"] = [p.error_code for p in fetched.partitions]
        deleted = await call(
            leader,
            proto.METHOD_DELETE_TOPICS,
            pb.DeleteTopicsRequest(topic_names=["orders"], timeout_ms=5000),
        )
        answers["DeleteTopics"] = [t.error_code for t in deleted.topics]
        purge = pb.DeleteRecordsRequest(timeout_ms=5000)
        purge.partitions.add(topic="orders", partition=0, offset=2)
        purged = await call(leader, proto.METHOD_DELETE_RECORDS, purge)
        answers["DeleteRecords"] = [p.error_code for p in purged.partitions]
        return answers

    answers = run(secured, "alice", forge)
    cluster_refused, topic_refused = (
        CODE["CLUSTER_AUTHORIZATION_FAILED"],
        CODE["TOPIC_AUTHORIZATION_FAILED"],
    )
    assert answers == {
        "StopReplica": [cluster_refused] * 3,
        "UpdateMetadata": [cluster_refused] * 3,
        "LeaderAndIsr": [cluster_refused] * 3,
        "ControlledShutdown": [cluster_refused] * 3,
        "Fetch": [topic_refused],
        "DeleteTopics": [topic_refused],
        "DeleteRecords": [topic_refused],
    }
    # Nothing changed: every replica as before, its data on disk.
    after = run(secured, "admin", replicas)
    assert {b: state(r) for b, r in after.items()} == {b: state(r) for b, r in before.items()}
    for broker in secured.brokers.values():
        assert (broker.data_dir / "logs" / "orders-0").is_dir()
    logs = "".join(b.log_path.read_text() for b in secured.brokers.values())
    assert f"Principal = {ALICE} is Denied Operation = ClusterAction" in logs

    # The real controller is obeyed afterwards: a new topic reaches every broker's metadata
    # (its UpdateMetadata carries the real epoch, below the forged one).
    async def new_topic(client: MinimalClient, cluster: LocalCluster) -> None:
        await client.create_topic("after-forgery", 1, 3)
        await client.wait_for_leaders("after-forgery", 1)
        for broker in cluster.brokers.values():
            answer = await client.transport.call(
                broker.address,
                proto.METHOD_METADATA,
                pb.MetadataRequest(topics=["after-forgery"]),
                timeout_s=TIMEOUT_S,
            )
            assert [t.error_code for t in answer.topics] == [0], broker.broker_id
        assert (await client.produce(ORDERS, [b"c"])).ok
        assert [r.value for r in await client.read_all(ORDERS)] == [b"a", b"b", b"c"]

    run(secured, "admin", new_topic)


def test_anonymous_zookeeper_writes_are_refused(secured: LocalCluster) -> None:
    anonymous = KazooClient(hosts=secured.zookeeper.connect_string, timeout=6)
    anonymous.start(timeout=15)
    try:
        topic = zk_data.topic_path("orders")
        data, _ = anonymous.get(topic)
        for attempt in (
            lambda: anonymous.set(topic, b"{}"),
            lambda: anonymous.create(zk_data.DELETE_TOPICS + "/orders"),
            lambda: anonymous.set(zk_data.CONTROLLER_EPOCH, b"999999"),
            lambda: anonymous.create("/kafka-acl/Topic/squatter", b"{}"),
            lambda: anonymous.create("/squatter"),
        ):
            with pytest.raises(kz.NoAuthError):
                attempt()
        assert anonymous.get(topic)[0] == data
    finally:
        anonymous.stop()
        anonymous.close()


def ck_reads_but_cannot_write(config: dict[str, Any], topic: str, count: int) -> list[bytes]:
    """The first ``count`` records of partition 0 of ``topic`` as confluent-kafka reads them
    with ``config``; its produce to the topic must be refused TOPIC_AUTHORIZATION_FAILED."""
    consumer = Consumer({**config, "group.id": f"reads-{topic}", "enable.auto.commit": False})
    got: list[bytes] = []
    try:
        consumer.assign([CkPartition(topic, 0, OFFSET_BEGINNING)])
        deadline = time.monotonic() + DEADLINE_S
        while len(got) < count and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                got.append(message.value())
    finally:
        consumer.close()
    errors: list[KafkaError] = []
    producer = Producer({**config, "acks": "all", "retries": 0})
    producer.produce(topic, b"forged", on_delivery=lambda err, _msg: errors.append(err))
    producer.flush(DEADLINE_S)
    assert [e.code() for e in errors] == [KafkaError.TOPIC_AUTHORIZATION_FAILED]
    return got[:count]


def test_a_reader_consumes_but_cannot_produce_and_bob_sees_nothing(secured: LocalCluster) -> None:
    async def alice(client: MinimalClient, cluster: LocalCluster) -> tuple[list[bytes], int]:
        values = [r.value or b"" for r in await client.read_all(ORDERS)]
        refused = await client.produce(ORDERS, [b"forged"], retry=False)
        return values, refused.error_code

    values, refused = run(secured, "alice", alice)
    assert values[:2] == [b"a", b"b"]
    assert refused == CODE["TOPIC_AUTHORIZATION_FAILED"]

    # confluent-kafka over SSL with alice's certificate.
    bootstrap = secured.kafka_bootstrap
    config = {"bootstrap.servers": bootstrap, **ssl_config(secured, "alice")}
    assert ck_reads_but_cannot_write(config, "orders", 2) == [b"a", b"b"]
    assert run(secured, "admin", lambda c, _: c.read_all(ORDERS))[-1].value != b"forged"

    # bob: no ACL, no topic in Metadata (both doors).
    async def bob(client: MinimalClient, cluster: LocalCluster) -> list[str]:
        answer = await client.transport.call(
            cluster.bootstrap[0],
            proto.METHOD_METADATA,
            pb.MetadataRequest(all_topics=True),
            timeout_s=TIMEOUT_S,
        )
        return [t.name for t in answer.topics]

    assert run(secured, "bob", bob) == []
    admin = CkAdmin({"bootstrap.servers": bootstrap, **ssl_config(secured, "bob")})
    assert admin.list_topics(timeout=DEADLINE_S).topics == {}


def test_plaintext_and_untrusted_clients_are_refused_and_the_brokers_keep_serving(
    secured: LocalCluster, tmp_path: Path
) -> None:
    bootstrap = secured.kafka_bootstrap
    _, _, other = create_certs(tmp_path / "other", brokers=0, clients=("mallory",))
    untrusted = {
        "bootstrap.servers": bootstrap,
        **ssl_config(secured, "alice"),
        "ssl.certificate.location": str(other["mallory"].certificate),
        "ssl.key.location": str(other["mallory"].key),
    }
    plaintext_error = ck_metadata_error({"bootstrap.servers": bootstrap})
    untrusted_error = ck_metadata_error(untrusted)
    assert "Timed out" in plaintext_error or "Broker transport failure" in plaintext_error
    assert untrusted_error != ""
    logs = "".join(b.log_path.read_text() for b in secured.brokers.values())
    assert "Failed authentication with" in logs
    assert "WRONG_VERSION_NUMBER" in logs
    assert all(b.running for b in secured.brokers.values())
    assert ck_metadata_error({"bootstrap.servers": bootstrap, **ssl_config(secured)}) == ""
