"""The authorization of the group, transaction and admin API families, over Kafka's protocol
and gRPC, against a simulated broker whose ACL authorizer runs on the in-memory ZooKeeper
twin; each test's caller is set explicitly (``CALLER``), as the listeners set it.

Why: each family has its own Kafka rules (which resource, which operation, which error, in
which order, what a listing leaves out); a caller must meet Kafka's errors and learn nothing
of what it may not see, and a refused request must change nothing.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

from kafkasim import proto
from kafkasim.client.admin import AdminClient
from kafkasim.common.errors import error_for_name
from kafkasim.common.security import Caller
from kafkasim.common.types import TopicPartition
from kafkasim.node.acl import CLUSTER_NAME, AclOperation, ResourceType
from kafkasim.node.broker import Broker
from kafkasim.proto import kafkasim_pb2 as pb
from kafkasim.sim.cluster import SimCluster, broker_address
from kafkasim.sim.network import SimTransport
from tests.sim.test_authorization import (
    ALICE,
    CODE,
    ORDERS,
    allow,
    as_caller,
    grpc,
    kafka,
    orders_with_alice_reading,
    secured,
)

T = TypeVar("T")
SECRET = TopicPartition("secret", 0)
GHOST = TopicPartition("ghost", 0)  # no such topic
OP = AclOperation
GROUP_FAILED = CODE["GROUP_AUTHORIZATION_FAILED"]
TOPIC_FAILED = CODE["TOPIC_AUTHORIZATION_FAILED"]
CLUSTER_FAILED = CODE["CLUSTER_AUTHORIZATION_FAILED"]
TXN_FAILED = CODE["TRANSACTIONAL_ID_AUTHORIZATION_FAILED"]
UNKNOWN = CODE["UNKNOWN_TOPIC_OR_PARTITION"]


def bits(*ops: AclOperation) -> int:
    field = 0
    for op in ops:
        field |= 1 << int(op)
    return field


def alice(call: Callable[[], Awaitable[T]]) -> Awaitable[T]:
    return as_caller(ALICE, call)


async def grant(broker: Broker, op: AclOperation, rtype: ResourceType, name: str) -> None:
    authorizer = broker.authorizer
    assert authorizer is not None
    await authorizer.create_acls([allow("User:alice", op, rtype, name)])


def by_partition(response: Any) -> dict[tuple[str, int], int]:
    return {
        (t.name, int(p.partition_index)): int(p.error_code)
        for t in response.topics
        for p in t.partitions
    }


def commit_topics(*tps: TopicPartition) -> list[dict[str, Any]]:
    return [
        {
            "name": tp.topic,
            "partitions": [
                {
                    "partition_index": tp.partition,
                    "committed_offset": 1,
                    "committed_leader_epoch": -1,
                    "committed_metadata": None,
                }
            ],
        }
        for tp in tps
    ]


async def admin_groups(cluster: SimCluster) -> AdminClient:
    """Groups g and h (empty, with committed offsets of orders and secret), made by admin."""
    transport = SimTransport(cluster.network, "admin-groups", "User:admin")
    admin = AdminClient(
        {"bootstrap.servers": [broker_address(b) for b in cluster.broker_ids]},
        transport=transport,
        clock=cluster.clock,
    )
    for group in ("g", "h"):
        await admin.alter_group_offsets(group, {ORDERS: 1, SECRET: 1})
    return admin


# -- groups ---------------------------------------------------------------------------------------


def test_group_requests_need_their_group_and_topic_rights(tmp_path: Path) -> None:
    async def scenario(cluster: SimCluster) -> None:
        broker = await orders_with_alice_reading(cluster)
        admin = await admin_groups(cluster)

        # SyncGroup, Heartbeat, LeaveGroup: READ on the group, both doors.
        sync = await alice(
            lambda: grpc(broker, proto.METHOD_SYNC_GROUP)(
                pb.SyncGroupRequest(group_id="g", generation_id=1, member_id="m")
            )
        )
        beat = await alice(
            lambda: grpc(broker, proto.METHOD_HEARTBEAT)(
                pb.HeartbeatRequest(group_id="g", generation_id=1, member_id="m")
            )
        )
        leave = await alice(
            lambda: grpc(broker, proto.METHOD_LEAVE_GROUP)(
                pb.LeaveGroupRequest(group_id="g", member_ids=["m"])
            )
        )
        assert (sync.error_code, beat.error_code, leave.error_code) == (GROUP_FAILED,) * 3
        member = {"group_id": "g", "generation_id": 1, "member_id": "m", "group_instance_id": None}
        ksync = await alice(
            lambda: kafka(broker, 14, 5, **member, protocol_type=None, protocol_name=None)
        )
        kbeat = await alice(lambda: kafka(broker, 12, 4, **member))
        kleave = await alice(
            lambda: kafka(
                broker, 13, 4, group_id="g", members=[{"member_id": "m", "group_instance_id": None}]
            )
        )
        assert (ksync.error_code, kbeat.error_code, kleave.error_code) == (GROUP_FAILED,) * 3

        # OffsetCommit without READ on the group: every partition, the unknown one included.
        commit = {"group_id": "g", "generation_id_or_member_epoch": -1, "member_id": ""}
        refused = await alice(
            lambda: kafka(broker, 8, 8, **commit, topics=commit_topics(ORDERS, GHOST))
        )
        assert by_partition(refused) == {("orders", 0): GROUP_FAILED, ("ghost", 0): GROUP_FAILED}

        # With READ on the group: a topic alice may not read is TOPIC_AUTHORIZATION_FAILED,
        # existing or not (nothing learnt); an unknown topic she may read is unknown.
        await grant(broker, OP.READ, ResourceType.GROUP, "g")
        await grant(broker, OP.READ, ResourceType.TOPIC, "phantom")
        phantom = TopicPartition("phantom", 0)
        topics = commit_topics(ORDERS, SECRET, GHOST, phantom)
        committed = await alice(lambda: kafka(broker, 8, 8, **commit, topics=topics))
        assert by_partition(committed) == {
            ("orders", 0): 0,
            ("secret", 0): TOPIC_FAILED,
            ("ghost", 0): TOPIC_FAILED,
            ("phantom", 0): UNKNOWN,
        }
        grpc_commit = pb.OffsetCommitRequest(group_id="g", generation_id=-1, member_id="")
        grpc_commit.partitions.add(topic="secret", partition=0, committed_offset=7)
        answer = await alice(lambda: grpc(broker, proto.METHOD_OFFSET_COMMIT)(grpc_commit))
        assert answer.partitions[0].error_code == TOPIC_FAILED
        assert (await admin.list_group_offsets("g"))[SECRET] == 1  # unchanged

        # OffsetFetch: READ implies DESCRIBE on the group; all offsets leave secret out, a
        # named secret is refused.
        fetched = await alice(lambda: kafka(broker, 9, 7, group_id="g", topics=None))
        assert [(t.name, [p.committed_offset for p in t.partitions]) for t in fetched.topics] == [
            ("orders", [1])
        ]
        named = await alice(
            lambda: kafka(
                broker,
                9,
                7,
                group_id="g",
                topics=[{"name": "secret", "partition_indexes": [0]}],
                require_stable=False,
            )
        )
        assert named.topics[0].partitions[0].error_code == TOPIC_FAILED
        other = await alice(lambda: kafka(broker, 9, 7, group_id="h", topics=None))
        assert other.error_code == GROUP_FAILED

        # DescribeGroups' authorized operations are alice's (not every group operation).
        described = await alice(
            lambda: kafka(broker, 15, 5, groups=["g"], include_authorized_operations=True)
        )
        assert described.groups[0].authorized_operations == bits(OP.READ, OP.DESCRIBE)

        # OffsetDelete: DELETE on the group (the request's error), then READ on each topic.
        delete = {
            "group_id": "g",
            "topics": [
                {"name": tp.topic, "partitions": [{"partition_index": 0}]}
                for tp in (ORDERS, SECRET, GHOST)
            ],
        }
        no_delete = await alice(lambda: kafka(broker, 47, 0, **delete))
        assert no_delete.error_code == GROUP_FAILED
        grpc_delete = pb.OffsetDeleteRequest(group_id="g")
        grpc_delete.partitions.add(topic="ghost", partition=0)
        grpc_refused = await alice(lambda: grpc(broker, proto.METHOD_OFFSET_DELETE)(grpc_delete))
        assert grpc_refused.error_code == GROUP_FAILED
        await grant(broker, OP.DELETE, ResourceType.GROUP, "g")
        deleted = await alice(lambda: kafka(broker, 47, 0, **delete))
        assert by_partition(deleted) == {
            ("orders", 0): 0,
            ("secret", 0): TOPIC_FAILED,
            ("ghost", 0): TOPIC_FAILED,
        }
        grpc_deleted = await alice(lambda: grpc(broker, proto.METHOD_OFFSET_DELETE)(grpc_delete))
        assert grpc_deleted.partitions[0].error_code == TOPIC_FAILED
        assert await admin.list_group_offsets("g") == {SECRET: 1}

        # ListGroups: only the groups alice may describe, unless DESCRIBE on the cluster.
        listed = await alice(lambda: kafka(broker, 16, 4, states_filter=[]))
        assert [g.group_id for g in listed.groups] == ["g"]
        grpc_listed = await alice(
            lambda: grpc(broker, proto.METHOD_LIST_GROUPS)(pb.ListGroupsRequest())
        )
        assert [g.group_id for g in grpc_listed.groups] == ["g"]

        # DescribeGroups: DESCRIBE on each group; the authorized operations are alice's.
        described = await alice(
            lambda: kafka(broker, 15, 5, groups=["g", "h"], include_authorized_operations=True)
        )
        g, h = described.groups
        assert (g.error_code, g.authorized_operations) == (0, bits(OP.READ, OP.DELETE, OP.DESCRIBE))
        assert h.error_code == GROUP_FAILED
        assert h.authorized_operations == -(2**31)  # omitted, as for any refused group
        grpc_described = await alice(
            lambda: grpc(broker, proto.METHOD_DESCRIBE_GROUPS)(
                pb.DescribeGroupsRequest(groups=["g", "h"])
            )
        )
        assert [d.error_code for d in grpc_described.groups] == [0, GROUP_FAILED]

        # DeleteGroups: DELETE on each group; h stays.
        refused_delete = await alice(lambda: kafka(broker, 42, 2, groups_names=["h"]))
        assert refused_delete.results[0].error_code == GROUP_FAILED
        grpc_refused_delete = await alice(
            lambda: grpc(broker, proto.METHOD_DELETE_GROUPS)(
                pb.DeleteGroupsRequest(groups_names=["h"])
            )
        )
        assert grpc_refused_delete.results[0].error_code == GROUP_FAILED
        assert await admin.list_group_offsets("h") == {ORDERS: 1, SECRET: 1}

        await grant(broker, OP.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME)
        everything = await alice(lambda: kafka(broker, 16, 4, states_filter=[]))
        assert sorted(g.group_id for g in everything.groups) == ["g", "h"]
        await admin.close()

    secured(tmp_path, scenario, brokers=1)


# -- transactions ---------------------------------------------------------------------------------


def test_transaction_requests_need_the_transactional_id_and_their_resources(
    tmp_path: Path,
) -> None:
    async def scenario(cluster: SimCluster) -> None:
        broker = await orders_with_alice_reading(cluster)
        admin = Caller("User:admin", "10.0.0.1", "PLAINTEXT")
        for tid in ("tx", "other"):
            init = pb.InitProducerIdRequest(transactional_id=tid, transaction_timeout_ms=10_000)
            find = pb.FindCoordinatorRequest(key=tid, key_type=1)
            for _ in range(100):  # until __transaction_state has its coordinator
                await as_caller(
                    admin, lambda find=find: grpc(broker, proto.METHOD_FIND_COORDINATOR)(find)
                )
                started = await as_caller(
                    admin, lambda init=init: grpc(broker, proto.METHOD_INIT_PRODUCER_ID)(init)
                )
                if started.error_code == 0:
                    break
                await cluster.sleep(0.1)
            assert started.error_code == 0
        ids = {"producer_id": 0, "producer_epoch": 0}

        def add_partitions() -> Awaitable[Any]:
            return kafka(
                broker,
                24,
                3,
                v3_and_below_transactional_id="tx",
                v3_and_below_producer_id=0,
                v3_and_below_producer_epoch=0,
                v3_and_below_topics=[
                    {"name": "orders", "partitions": [0]},
                    {"name": "secret", "partitions": [0]},
                ],
            )

        def results(response: Any) -> dict[str, int]:
            return {
                t.name: int(p.partition_error_code)
                for t in response.results_by_topic_v3_and_below
                for p in t.results_by_partition
            }

        # Without WRITE on the transactional id: every request refused, every partition.
        assert results(await alice(add_partitions)) == {"orders": TXN_FAILED, "secret": TXN_FAILED}
        grpc_add = pb.AddPartitionsToTxnRequest(transactional_id="tx", **ids)
        grpc_add.partitions.add(topic="orders", partition=0)
        added = await alice(lambda: grpc(broker, proto.METHOD_ADD_PARTITIONS_TO_TXN)(grpc_add))
        assert [p.error_code for p in added.partitions] == [TXN_FAILED]
        offsets = {"transactional_id": "tx", **ids, "group_id": "g"}
        assert (await alice(lambda: kafka(broker, 25, 3, **offsets))).error_code == TXN_FAILED
        end = {"transactional_id": "tx", **ids, "committed": True}
        assert (await alice(lambda: kafka(broker, 26, 3, **end))).error_code == TXN_FAILED
        txn_commit = {
            "transactional_id": "tx",
            "group_id": "g",
            **ids,
            "generation_id": -1,
            "member_id": "",
            "group_instance_id": None,
            "topics": commit_topics(ORDERS),
        }
        refused = await alice(lambda: kafka(broker, 28, 3, **txn_commit))
        assert by_partition(refused) == {("orders", 0): TXN_FAILED}

        # WRITE on the id: WRITE on each topic (the others not attempted), READ on the group.
        await grant(broker, OP.WRITE, ResourceType.TRANSACTIONAL_ID, "tx")
        await grant(broker, OP.WRITE, ResourceType.TOPIC, "orders")
        operation_not_attempted = error_for_name("OPERATION_NOT_ATTEMPTED").code
        assert results(await alice(add_partitions)) == {
            "orders": operation_not_attempted,
            "secret": TOPIC_FAILED,
        }
        assert (await alice(lambda: kafka(broker, 25, 3, **offsets))).error_code == GROUP_FAILED
        refused = await alice(lambda: kafka(broker, 28, 3, **txn_commit))
        assert by_partition(refused) == {("orders", 0): GROUP_FAILED}
        await grant(broker, OP.READ, ResourceType.GROUP, "g")
        secret_commit = {**txn_commit, "topics": commit_topics(SECRET, GHOST)}
        refused = await alice(lambda: kafka(broker, 28, 3, **secret_commit))
        assert by_partition(refused) == {("secret", 0): TOPIC_FAILED, ("ghost", 0): TOPIC_FAILED}

        # DescribeTransactions: DESCRIBE (WRITE implies it) on each id; ListTransactions
        # lists only those.
        described = await alice(lambda: kafka(broker, 65, 0, transactional_ids=["tx", "other"]))
        assert [(t.transactional_id, t.error_code) for t in described.transaction_states] == [
            ("tx", 0),
            ("other", TXN_FAILED),
        ]
        listed = await alice(lambda: kafka(broker, 66, 0, state_filters=[], producer_id_filters=[]))
        assert [t.transactional_id for t in listed.transaction_states] == ["tx"]
        everything = await as_caller(
            admin, lambda: kafka(broker, 66, 0, state_filters=[], producer_id_filters=[])
        )
        assert sorted(t.transactional_id for t in everything.transaction_states) == [
            "other",
            "tx",
        ]

    secured(
        tmp_path,
        scenario,
        brokers=1,
        **{
            "transaction.state.log.replication.factor": 1,
            "transaction.state.log.min.isr": 1,
            "transaction.state.log.num.partitions": 2,
        },
    )


# -- admin ----------------------------------------------------------------------------------------


def new_topic(name: str) -> dict[str, Any]:
    return {
        "name": name,
        "num_partitions": 1,
        "replication_factor": 1,
        "assignments": [],
        "configs": [{"name": "retention.ms", "value": "60000"}],
    }


def test_admin_requests_need_create_alter_describe_configs_or_cluster_rights(
    tmp_path: Path,
) -> None:
    async def scenario(cluster: SimCluster) -> None:
        broker = await orders_with_alice_reading(cluster)

        def create(*names: str) -> Awaitable[Any]:
            return kafka(
                broker,
                19,
                5,
                topics=[new_topic(n) for n in names],
                timeout=10_000,
                validate_only=False,
            )

        # CreateTopics: CREATE on the cluster or the topic.
        refused = (await alice(lambda: create("fresh"))).topics[0]
        assert (refused.error_code, refused.error_message) == (
            TOPIC_FAILED,
            "Authorization failed.",
        )
        assert refused.topic_config_error_code == TOPIC_FAILED
        grpc_create = pb.CreateTopicsRequest(timeout_ms=10_000)
        grpc_create.topics.add(name="fresh", num_partitions=1, replication_factor=1)
        grpc_refused = await alice(lambda: grpc(broker, proto.METHOD_CREATE_TOPICS)(grpc_create))
        assert grpc_refused.topics[0].error_code == TOPIC_FAILED
        assert "fresh" not in broker.metadata.topics()
        # CREATE on the topic creates it; v5+ answer its configs only with DESCRIBE_CONFIGS.
        for name in ("fresh", "described"):
            await grant(broker, OP.CREATE, ResourceType.TOPIC, name)
        await grant(broker, OP.DESCRIBE_CONFIGS, ResourceType.TOPIC, "described")
        fresh, described = (await alice(lambda: create("fresh", "described"))).topics
        assert (fresh.error_code, fresh.topic_config_error_code) == (0, TOPIC_FAILED)
        assert (fresh.num_partitions, fresh.replication_factor, fresh.configs) == (-1, -1, ())
        assert (described.error_code, described.topic_config_error_code) == (0, 0)
        assert described.num_partitions == 1
        assert ("retention.ms", "60000") in {(c.name, c.value) for c in described.configs}
        # CREATE on the cluster: any topic.
        await grant(broker, OP.CREATE, ResourceType.CLUSTER, CLUSTER_NAME)
        assert (await alice(lambda: create("anything"))).topics[0].error_code == 0

        # CreatePartitions: ALTER on the topic.
        grow = await alice(
            lambda: kafka(
                broker,
                37,
                3,
                topics=[{"name": "orders", "count": 2, "assignments": None}],
                timeout=10_000,
                validate_only=False,
            )
        )
        assert grow.results[0].error_code == TOPIC_FAILED
        assert broker.metadata.partition_count("orders") == 1

        # DescribeConfigs / AlterConfigs / IncrementalAlterConfigs: DESCRIBE_CONFIGS, resp.
        # ALTER_CONFIGS, on the topic, or on the cluster for a broker.
        topic = {"resource_type": 2, "resource_name": "orders"}
        node = {"resource_type": 4, "resource_name": "1"}
        configs = await alice(
            lambda: kafka(
                broker,
                32,
                4,
                resources=[
                    {**topic, "configuration_keys": None},
                    {**node, "configuration_keys": None},
                ],
            )
        )
        assert [r.error_code for r in configs.results] == [TOPIC_FAILED, CLUSTER_FAILED]
        setting = [{"name": "retention.ms", "value": "1"}]
        altered = await alice(
            lambda: kafka(broker, 33, 2, resources=[{**topic, "configs": setting}])
        )
        assert altered.responses[0].error_code == TOPIC_FAILED
        incremental = await alice(
            lambda: kafka(
                broker,
                44,
                1,
                resources=[
                    {**topic, "configs": [{**setting[0], "config_operation": 0}]},
                    {**node, "configs": [{**setting[0], "config_operation": 0}]},
                ],
            )
        )
        assert [r.error_code for r in incremental.responses] == [TOPIC_FAILED, CLUSTER_FAILED]
        assert broker.topic_config("orders").retention_ms != 1

        # ElectLeaders, DescribeLogDirs: ALTER, resp. DESCRIBE, on the cluster.
        elected = await alice(
            lambda: kafka(broker, 43, 2, election_type=0, topic_partitions=None, timeout=1000)
        )
        assert elected.error_code == CLUSTER_FAILED
        dirs = await alice(lambda: kafka(broker, 35, 3, topics=None))
        assert (dirs.error_code, dirs.results) == (CLUSTER_FAILED, ())

        # DescribeProducers: READ on each topic.
        producers = await alice(
            lambda: kafka(
                broker,
                61,
                0,
                topics=[
                    {"name": "orders", "partition_indexes": [0]},
                    {"name": "secret", "partition_indexes": [0]},
                ],
            )
        )
        codes = {t.name: t.partitions[0].error_code for t in producers.topics}
        assert codes == {"orders": 0, "secret": TOPIC_FAILED}

        # CreateAcls / DeleteAcls: ALTER on the cluster; nothing changes.
        authorizer = broker.authorizer
        assert authorizer is not None
        before = len(authorizer.cache)
        acl = {
            "resource_type": 2,
            "resource_name": "secret",
            "resource_pattern_type": 3,
            "principal": "User:alice",
            "host": "*",
            "operation": 3,
            "permission_type": 3,
        }
        created = await alice(lambda: kafka(broker, 30, 3, creations=[acl]))
        assert created.results[0].error_code == CLUSTER_FAILED
        match_all = {
            "resource_type_filter": 1,
            "resource_name_filter": None,
            "pattern_type_filter": 1,
            "principal_filter": None,
            "host_filter": None,
            "operation": 1,
            "permission_type": 1,
        }
        removed = await alice(lambda: kafka(broker, 31, 3, filters=[match_all]))
        assert removed.filter_results[0].error_code == CLUSTER_FAILED
        assert len(authorizer.cache) == before

    secured(tmp_path, scenario, brokers=1)


def test_describe_replicas_shows_only_the_topics_the_caller_may_describe(tmp_path: Path) -> None:
    """kafkasim's gRPC DescribeReplicas (offsets, ISR): DESCRIBE on the cluster, or on each
    topic; the others are left out, as unknown."""

    async def scenario(cluster: SimCluster) -> None:
        broker = await orders_with_alice_reading(cluster)
        method = grpc(broker, proto.METHOD_DESCRIBE_REPLICAS)
        everything = await alice(lambda: method(pb.DescribeReplicasRequest()))
        assert [r.topic for r in everything.replicas] == ["orders"]
        asked = pb.DescribeReplicasRequest()
        asked.partitions.add(topic="secret", partition=0)
        assert not (await alice(lambda: method(asked))).replicas
        anonymous = await method(pb.DescribeReplicasRequest())  # the default caller
        assert not anonymous.replicas
        await grant(broker, OP.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME)
        everything = await alice(lambda: method(pb.DescribeReplicasRequest()))
        assert {r.topic for r in everything.replicas} >= {"orders", "secret"}

    secured(tmp_path, scenario, brokers=1)
