"""Kafka's request authorization on both front doors, against simulated brokers whose ACL
authorizer runs on the in-memory ZooKeeper twin.

Brokers call each other as ``User:broker-<id>`` (the sim transport's principal) and are the
super users; a test calls a handler itself in a task whose caller it sets
(``common.security.CALLER``), as the listeners do for a connection. Why: Kafka's clients and
forged requests must meet Kafka's errors (TOPIC_/GROUP_/CLUSTER_/TRANSACTIONAL_ID_
AUTHORIZATION_FAILED), unauthorized topics must not leak through Metadata, and a refused
request must change nothing — the forged StopReplica, ControlledShutdown, UpdateMetadata and
follower fetch of issue 15 included.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest
from kio.index import load_request_schema

from kafkasim import proto
from kafkasim.common.errors import error_for_name
from kafkasim.common.security import CALLER, Caller
from kafkasim.common.types import TopicPartition
from kafkasim.node.acl import (
    CLUSTER_NAME,
    AccessControlEntry,
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from kafkasim.node.broker import Broker
from kafkasim.node.kafka_apis import KafkaProtocolApis, kafka_handler_tables
from kafkasim.node.kafka_codec import KafkaRequest, build, encode_response
from kafkasim.proto import kafkasim_pb2 as pb
from kafkasim.sim.cluster import SimCluster
from tests.sim.helpers import leo_of, simulate

T = TypeVar("T")
CODE = {
    n: error_for_name(n).code
    for n in (
        "TOPIC_AUTHORIZATION_FAILED",
        "GROUP_AUTHORIZATION_FAILED",
        "CLUSTER_AUTHORIZATION_FAILED",
        "TRANSACTIONAL_ID_AUTHORIZATION_FAILED",
        "UNKNOWN_TOPIC_OR_PARTITION",
    )
}
SECURE = {
    "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
    "super.users": "User:broker-1;User:broker-2;User:broker-3;User:admin",
}
ALICE = Caller("User:alice", "10.0.0.9", "PLAINTEXT")
MALLORY = Caller("User:mallory", "10.0.0.66", "PLAINTEXT")
ORDERS = TopicPartition("orders", 0)


def allow(principal: str, operation: AclOperation, rtype: ResourceType, name: str) -> AclBinding:
    return AclBinding(
        ResourcePattern(rtype, name, PatternType.LITERAL),
        AccessControlEntry(principal, "*", operation, AclPermissionType.ALLOW),
    )


async def as_caller(caller: Caller, call: Callable[[], Awaitable[T]]) -> T:
    """``call()`` in this task with ``caller`` as the request's caller (as the listeners set
    it), restored afterwards."""
    token = CALLER.set(caller)
    try:
        return await call()
    finally:
        CALLER.reset(token)


def grpc(broker: Broker, method: str) -> Callable[[Any], Awaitable[Any]]:
    """The broker's handler of ``method``, its answer read as a transport hands it over
    (parsed from its wire bytes: a Fetch is answered already encoded)."""
    handler = broker.apis.unary_handlers("PLAINTEXT")[method]
    spec = proto.METHODS[method]

    async def call(request: Any) -> Any:
        answer = spec.check_response(await handler(request))
        return spec.response_cls.FromString(answer.SerializeToString())

    return call


async def kafka(broker: Broker, api_key: int, version: int, **values: Any) -> Any:
    apis = KafkaProtocolApis(broker, "PLAINTEXT", kafka_handler_tables(broker, "PLAINTEXT"))
    request = KafkaRequest(
        api_key, version, 1, "test", build(load_request_schema(api_key, version), values)
    )
    response = await apis.handle(request)
    encode_response(request, response)  # every answer must be writable at its version
    return response


async def describe_all_acls(broker: Broker) -> Any:
    """DescribeAcls v3 matching every binding."""
    return await kafka(
        broker,
        29,
        3,
        resource_type_filter=1,
        resource_name_filter=None,
        pattern_type_filter=1,
        principal_filter=None,
        host_filter=None,
        operation=1,
        permission_type=1,
    )


def secured(tmp_path: Path, scenario: Callable[[SimCluster], Awaitable[Any]], **kw: Any) -> Any:
    return simulate(tmp_path, scenario, **{**SECURE, **kw})


async def orders_with_alice_reading(cluster: SimCluster, brokers: int = 1) -> Broker:
    """Topic orders (one record) and secret; alice may Read orders (and so Describe it)."""
    admin = cluster.client("admin", principal="User:admin")
    for topic in ("orders", "secret"):
        await admin.create_topic(topic, 1, brokers)
        await admin.wait_for_leaders(topic, 1)
    assert (await admin.produce(ORDERS, [b"v0"])).ok
    broker = cluster.brokers[1]
    authorizer = broker.authorizer
    assert authorizer is not None
    await authorizer.create_acls(
        [allow("User:alice", AclOperation.READ, ResourceType.TOPIC, "orders")]
    )
    return broker


# -- partitions -----------------------------------------------------------------------------------


def test_read_only_principal_fetches_but_cannot_produce_delete_or_see_other_topics(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async def scenario(cluster: SimCluster) -> None:
        broker = await orders_with_alice_reading(cluster)
        caplog.set_level(logging.INFO, logger="kafka.authorizer.logger")

        produce = pb.ProduceRequest(acks=-1, timeout_ms=1000)
        produce.partitions.add(topic="orders", partition=0, records=b"")
        answer = await as_caller(ALICE, lambda: grpc(broker, proto.METHOD_PRODUCE)(produce))
        assert answer.partitions[0].error_code == CODE["TOPIC_AUTHORIZATION_FAILED"]
        assert leo_of(cluster, 1, ORDERS) == 1  # nothing appended
        assert (
            "Principal = User:alice is Denied Operation = Write from host = 10.0.0.9 on "
            "resource = Topic:LITERAL:orders for request = Produce" in caplog.text
        )

        fetch = pb.FetchRequest(replica_id=-1, max_bytes=1 << 20)
        fetch.partitions.add(topic="orders", partition=0, partition_max_bytes=1 << 20)
        fetch.partitions.add(topic="secret", partition=0, partition_max_bytes=1 << 20)
        fetched = await as_caller(ALICE, lambda: grpc(broker, proto.METHOD_FETCH)(fetch))
        codes = {p.topic: p.error_code for p in fetched.partitions}
        assert codes == {"orders": 0, "secret": CODE["TOPIC_AUTHORIZATION_FAILED"]}
        assert fetched.partitions[0].records  # the record is read

        deleted = await as_caller(
            ALICE,
            lambda: grpc(broker, proto.METHOD_DELETE_TOPICS)(
                pb.DeleteTopicsRequest(topic_names=["orders"], timeout_ms=1000)
            ),
        )
        assert deleted.topics[0].error_code == CODE["TOPIC_AUTHORIZATION_FAILED"]
        records = pb.DeleteRecordsRequest(timeout_ms=1000)
        records.partitions.add(topic="orders", partition=0, offset=1)
        purged = await as_caller(ALICE, lambda: grpc(broker, proto.METHOD_DELETE_RECORDS)(records))
        assert purged.partitions[0].error_code == CODE["TOPIC_AUTHORIZATION_FAILED"]
        assert broker.replica_manager.partitions[ORDERS].log.log_start_offset == 0
        assert "orders" in broker.metadata.topics()

        # Kafka's protocol: the same decisions (they are shared).
        everything = await as_caller(
            ALICE,
            lambda: kafka(
                broker,
                3,
                12,
                topics=None,
                allow_auto_topic_creation=True,
                include_topic_authorized_operations=True,
            ),
        )
        assert [t.name for t in everything.topics] == ["orders"]
        ops = everything.topics[0].topic_authorized_operations
        assert ops == (1 << AclOperation.READ) | (1 << AclOperation.DESCRIBE)
        named = await as_caller(
            ALICE,
            lambda: kafka(
                broker,
                3,
                12,
                topics=[{"topic_id": None, "name": "secret"}, {"topic_id": None, "name": "orders"}],
                allow_auto_topic_creation=True,
                include_topic_authorized_operations=False,
            ),
        )
        errors = {t.name: t.error_code for t in named.topics}
        assert errors == {"secret": CODE["TOPIC_AUTHORIZATION_FAILED"], "orders": 0}

    secured(tmp_path, scenario, brokers=1)


def test_auto_creation_needs_create(tmp_path: Path) -> None:
    async def scenario(cluster: SimCluster) -> None:
        broker = await orders_with_alice_reading(cluster)
        authorizer = broker.authorizer
        assert authorizer is not None
        await authorizer.create_acls(
            [allow("User:alice", AclOperation.DESCRIBE, ResourceType.TOPIC, "fresh")]
        )
        request = pb.MetadataRequest(topics=["fresh"], allow_auto_topic_creation=True)
        answer = await as_caller(ALICE, lambda: grpc(broker, proto.METHOD_METADATA)(request))
        assert answer.topics[0].error_code == CODE["UNKNOWN_TOPIC_OR_PARTITION"]
        await cluster.sleep(1)
        assert "fresh" not in broker.metadata.topics()  # not created

    secured(tmp_path, scenario, brokers=1, **{"auto.create.topics.enable": True})


# -- the controller's and brokers' requests, forged ------------------------------------------------


def test_forged_inter_broker_requests_are_refused_and_change_nothing(tmp_path: Path) -> None:
    async def scenario(cluster: SimCluster) -> None:
        broker = await orders_with_alice_reading(cluster)
        epoch = broker.broker_epoch
        controller_epoch = broker.replica_manager.controller_epoch
        hw = broker.replica_manager.partitions[ORDERS].high_watermark

        stop = pb.StopReplicaRequest(
            controller_id=1, controller_epoch=controller_epoch, broker_epoch=epoch
        )
        stop.partitions.add(topic="orders", partition=0, delete_partition=True)
        stopped = await as_caller(MALLORY, lambda: grpc(broker, proto.METHOD_STOP_REPLICA)(stop))
        assert stopped.error_code == CODE["CLUSTER_AUTHORIZATION_FAILED"]
        assert ORDERS in broker.replica_manager.partitions

        poison = pb.UpdateMetadataRequest(
            controller_id=1, controller_epoch=2**31 - 1, broker_epoch=epoch
        )
        poisoned = await as_caller(
            MALLORY, lambda: grpc(broker, proto.METHOD_UPDATE_METADATA)(poison)
        )
        assert poisoned.error_code == CODE["CLUSTER_AUTHORIZATION_FAILED"]
        assert broker.replica_manager.controller_epoch == controller_epoch

        lai = pb.LeaderAndIsrRequest(
            controller_id=1, controller_epoch=2**31 - 1, broker_epoch=epoch
        )
        led = await as_caller(MALLORY, lambda: grpc(broker, proto.METHOD_LEADER_AND_ISR)(lai))
        assert led.error_code == CODE["CLUSTER_AUTHORIZATION_FAILED"]

        shutdown = pb.ControlledShutdownRequest(broker_id=1, broker_epoch=epoch)
        moved = await as_caller(
            MALLORY, lambda: grpc(broker, proto.METHOD_CONTROLLED_SHUTDOWN)(shutdown)
        )
        assert moved.error_code == CODE["CLUSTER_AUTHORIZATION_FAILED"]
        assert broker.replica_manager.partitions[ORDERS].is_leader

        # A spoofed follower fetch: Kafka answers TOPIC_AUTHORIZATION_FAILED per partition.
        spoof = pb.FetchRequest(replica_id=2, max_bytes=1 << 20)
        spoof.partitions.add(
            topic="orders", partition=0, fetch_offset=1, partition_max_bytes=1 << 20
        )
        spoofed = await as_caller(MALLORY, lambda: grpc(broker, proto.METHOD_FETCH)(spoof))
        assert spoofed.partitions[0].error_code == CODE["TOPIC_AUTHORIZATION_FAILED"]
        assert broker.replica_manager.partitions[ORDERS].high_watermark == hw

        markers = pb.WriteTxnMarkersRequest()
        marker = markers.markers.add(producer_id=7, producer_epoch=0, coordinator_epoch=0)
        marker.topics.add(name="orders", partition_indexes=[0])
        written = await as_caller(
            MALLORY, lambda: grpc(broker, proto.METHOD_WRITE_TXN_MARKERS)(markers)
        )
        assert written.markers[0].partitions[0].error_code == CODE["CLUSTER_AUTHORIZATION_FAILED"]
        assert leo_of(cluster, 1, ORDERS) == 1

    secured(tmp_path, scenario, brokers=1)


# -- groups, coordinators, transactions, ACLs ------------------------------------------------------


def test_groups_transactions_and_acl_apis_need_their_rights(tmp_path: Path) -> None:
    async def scenario(cluster: SimCluster) -> None:
        broker = await orders_with_alice_reading(cluster)
        find = pb.FindCoordinatorRequest(key="g", key_type=0)
        found = await as_caller(ALICE, lambda: grpc(broker, proto.METHOD_FIND_COORDINATOR)(find))
        assert found.error_code == CODE["GROUP_AUTHORIZATION_FAILED"]
        join = pb.JoinGroupRequest(
            group_id="g",
            session_timeout_ms=10_000,
            rebalance_timeout_ms=10_000,
            protocol_type="consumer",
        )
        joined = await as_caller(ALICE, lambda: grpc(broker, proto.METHOD_JOIN_GROUP)(join))
        assert joined.error_code == CODE["GROUP_AUTHORIZATION_FAILED"]

        txn = pb.InitProducerIdRequest(transactional_id="tx", transaction_timeout_ms=10_000)
        init = await as_caller(ALICE, lambda: grpc(broker, proto.METHOD_INIT_PRODUCER_ID)(txn))
        assert init.error_code == CODE["TRANSACTIONAL_ID_AUTHORIZATION_FAILED"]
        idempotent = pb.InitProducerIdRequest()
        init = await as_caller(
            ALICE, lambda: grpc(broker, proto.METHOD_INIT_PRODUCER_ID)(idempotent)
        )
        assert init.error_code == CODE["CLUSTER_AUTHORIZATION_FAILED"]  # Read only
        authorizer = broker.authorizer
        assert authorizer is not None
        await authorizer.create_acls(
            [allow("User:alice", AclOperation.WRITE, ResourceType.TOPIC, "orders")]
        )
        init = await as_caller(
            ALICE, lambda: grpc(broker, proto.METHOD_INIT_PRODUCER_ID)(idempotent)
        )
        assert init.error_code == 0  # WRITE on a topic implies idempotence (KIP-679)

        # The ACL APIs: DESCRIBE, resp. ALTER, on the cluster.
        described = await as_caller(ALICE, lambda: describe_all_acls(broker))
        assert described.error_code == CODE["CLUSTER_AUTHORIZATION_FAILED"]
        await authorizer.create_acls(
            [allow("User:alice", AclOperation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME)]
        )
        described = await as_caller(ALICE, lambda: describe_all_acls(broker))
        assert described.error_code == 0 and described.resources

    secured(tmp_path, scenario, brokers=1)


# -- end to end ----------------------------------------------------------------------------------


def test_a_secured_cluster_replicates_and_a_reader_can_consume_but_not_produce(
    tmp_path: Path,
) -> None:
    """Three brokers with the authorizer on: their own requests (replica fetches, the
    controller's) pass as super users; a client with only Read on the topic consumes what
    an admin produced and is refused when it produces."""

    async def scenario(cluster: SimCluster) -> None:
        admin = cluster.client("admin", principal="User:admin")
        await admin.create_topic("orders", 1, 3)
        await admin.wait_for_leaders("orders", 1)
        assert (await admin.produce(ORDERS, [b"a", b"b"])).ok
        await cluster.wait_for(
            lambda: all(leo_of(cluster, b, ORDERS) == 2 for b in (1, 2, 3)), what="replication"
        )
        authorizer = cluster.brokers[1].authorizer
        assert authorizer is not None
        await authorizer.create_acls(
            [allow("User:reader", AclOperation.READ, ResourceType.TOPIC, "orders")]
        )
        await cluster.wait_for(
            lambda: all(
                b.authorizer is not None and len(b.authorizer.cache) == 1
                for b in cluster.brokers.values()
            ),
            what="the ACL on every broker",
        )
        reader = cluster.client("reader", principal="User:reader")
        await reader.wait_for_leaders("orders", 1)
        assert [r.value for r in (await reader.fetch(ORDERS, 0)).records] == [b"a", b"b"]
        refused = await reader.produce(ORDERS, [b"c"], retry=False)
        assert refused.error_code == CODE["TOPIC_AUTHORIZATION_FAILED"]
        assert leo_of(cluster, 1, ORDERS) == 2

    secured(tmp_path, scenario, brokers=3)
