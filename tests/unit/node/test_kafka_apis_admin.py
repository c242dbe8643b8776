"""The admin requests of the Kafka-protocol front door as pure translations (kio request →
domain values; domain results → the kio response of the version asked), the wire-free admin
calls they share with gRPC, and the handlers of a broker without a controller (topic changes
answer NOT_CONTROLLER; config changes are written by the broker itself, on SimZooKeeper)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from types import SimpleNamespace
from typing import Any

from kio.index import load_request_schema

from kafkasim.common.errors import error_for_name
from kafkasim.common.types import TopicPartition
from kafkasim.controller import zk_data
from kafkasim.controller.api import ElectionOutcome, NewTopic, TopicResult
from kafkasim.controller.topic_configs import AlterConfigOp, OpType
from kafkasim.node import admin_calls, broker_admin
from kafkasim.node import kafka_apis_admin as ka
from kafkasim.node import kafka_apis_describe as kd
from kafkasim.node.config import BrokerConfig
from kafkasim.node.kafka_codec import KafkaRequest, build, encode_response, response_schema
from kafkasim.node.metadata_cache import BrokerAddress, ClusterView
from kafkasim.sim.loop import run_simulation
from kafkasim.sim.zookeeper import SimZooKeeperClient, SimZooKeeperServer
from kafkasim.storage.config import LOG_CONFIG_DEF

INVALID_CONFIG = error_for_name("INVALID_CONFIG").code
INVALID_REQUEST = error_for_name("INVALID_REQUEST").code
NOT_CONTROLLER = error_for_name("NOT_CONTROLLER").code
ELECTION_NOT_NEEDED = error_for_name("ELECTION_NOT_NEEDED").code


def request(api_key: int, version: int, **values: Any) -> KafkaRequest:
    return KafkaRequest(
        api_key, version, 1, "unit", build(load_request_schema(api_key, version), values)
    )


def config(**props: object) -> BrokerConfig:
    base = {"broker.id": 1, "log.dirs": "/nonexistent", "zookeeper.connect": "sim"}
    return BrokerConfig.from_props({**base, **props})


def topic(name: str, n: int = -1, rf: int = -1, **more: Any) -> dict[str, Any]:
    return {
        "name": name,
        "num_partitions": n,
        "replication_factor": rf,
        "assignments": more.get("assignments", []),
        "configs": more.get("configs", []),
    }


# -- CreateTopics -------------------------------------------------------------------------------


def test_create_topics_params_keep_defaults_assignments_and_refuse_null_configs() -> None:
    body = request(
        ka.CREATE_TOPICS,
        7,
        topics=[
            topic("a", configs=[{"name": "retention.ms", "value": "1"}]),
            topic("b", assignments=[{"partition_index": 0, "broker_ids": [2, 1]}]),
            topic("c", 1, 1, configs=[{"name": "retention.ms", "value": None}]),
            topic(
                "d",
                2,
                1,
                configs=[
                    {"name": "segment.ms", "value": "5"},
                    {"name": "segment.ms", "value": "6"},
                ],
            ),
        ],
    ).body
    topics, refused = ka.create_topics_params(body)
    assert topics[0] == NewTopic("a", -1, -1, None, {"retention.ms": "1"})
    assert topics[1].assignments == {0: [2, 1]}
    assert topics[3].configs == {"segment.ms": "6"}  # last wins, as Kafka's Properties
    assert set(refused) == {"c"}
    assert refused["c"].error_code == INVALID_CONFIG
    assert "retention.ms" in refused["c"].error_message


def test_created_shape_uses_broker_defaults_or_the_assignment() -> None:
    assert ka.created_shape(NewTopic("t"), 3, 2) == (3, 2)
    assert ka.created_shape(NewTopic("t", 5, 1), 3, 2) == (5, 1)
    assert ka.created_shape(NewTopic("t", assignments={0: [1, 2, 3], 1: [2, 3, 1]}), 3, 2) == (
        2,
        3,
    )


def test_create_topics_response_v5_and_later_carries_the_created_shape() -> None:
    entries = broker_admin.topic_config_entries(config(), {"retention.ms": "1000"})
    results = [
        TopicResult("ok"),
        TopicResult("dup", error_for_name("TOPIC_ALREADY_EXISTS").code, "exists"),
    ]
    created = {"ok": (4, 1, entries)}
    new = ka.create_topics_response(
        response_schema(request(ka.CREATE_TOPICS, 7, topics=[])), [], results, created
    )
    ok, dup = new.topics
    assert (ok.num_partitions, ok.replication_factor, ok.error_message) == (4, 1, None)
    retention = {c.name: c for c in ok.configs}["retention.ms"]
    assert (retention.value, retention.config_source) == ("1000", broker_admin.TOPIC_CONFIG)
    assert (dup.error_code, dup.error_message, dup.num_partitions, dup.configs) == (
        36,
        "exists",
        -1,
        (),
    )
    old_request = request(ka.CREATE_TOPICS, 4, topics=[])
    old = ka.create_topics_response(response_schema(old_request), [], results, created)
    assert not hasattr(old.topics[0], "num_partitions")
    assert encode_response(old_request, old)  # a v4 body encodes without the v5 fields


# -- DeleteTopics -------------------------------------------------------------------------------


def test_delete_topics_v6_by_name_only() -> None:
    some_id = uuid.uuid4()
    req = request(
        ka.DELETE_TOPICS,
        6,
        topics=[
            {"name": "a", "topic_id": 0},
            {"name": None, "topic_id": some_id},
            {"name": "b", "topic_id": some_id},
        ],
    )
    names, refused = ka.delete_topics_params(req)
    assert names == ["a"]
    assert refused[1][2] == error_for_name("UNKNOWN_TOPIC_ID").code
    assert refused[2][2] == INVALID_REQUEST
    response = ka.delete_topics_response(req, [TopicResult("a")], refused)
    assert [(r.name, int(r.error_code)) for r in response.responses] == [
        ("a", 0),
        (None, 100),
        ("b", INVALID_REQUEST),
    ]


def test_topic_deletion_disabled_is_invalid_request_before_v3() -> None:
    disabled = [TopicResult("a", error_for_name("TOPIC_DELETION_DISABLED").code, "disabled")]
    old = request(ka.DELETE_TOPICS, 2, topic_names=["a"])
    assert ka.delete_topics_params(old) == (["a"], {})
    assert ka.delete_topics_response(old, disabled, {}).responses[0].error_code == INVALID_REQUEST
    new = request(ka.DELETE_TOPICS, 4, topic_names=["a"])
    assert ka.delete_topics_response(new, disabled, {}).responses[0].error_code == 73


# -- CreatePartitions, AlterConfigs -------------------------------------------------------------


def test_create_partitions_params() -> None:
    body = request(
        ka.CREATE_PARTITIONS,
        3,
        topics=[
            {"name": "a", "count": 3, "assignments": None},
            {"name": "b", "count": 2, "assignments": [{"broker_ids": [2, 3]}]},
        ],
    ).body
    a, b = ka.create_partitions_params(body)
    assert (a.topic, a.count, a.assignments) == ("a", 3, None)
    assert b.assignments == [[2, 3]]


def test_legacy_alter_configs_replaces_the_whole_set() -> None:
    body = request(
        ka.ALTER_CONFIGS,
        1,
        resources=[
            {
                "resource_type": 2,
                "resource_name": "t",
                "configs": [
                    {"name": "retention.ms", "value": "5"},
                    {"name": "segment.ms", "value": None},
                ],
            }
        ],
    ).body
    (alteration,), refused = ka.alter_configs_params(body, incremental=False)
    assert refused == {}
    ops = {op.name: op for op in alteration.ops}
    assert ops["retention.ms"] == AlterConfigOp("retention.ms", OpType.SET, "5")
    assert ops["segment.ms"].op == OpType.DELETE  # null: back to the default
    assert set(ops) == set(LOG_CONFIG_DEF.keys)  # every other key is deleted


def test_incremental_alter_configs_refuses_null_values_except_delete() -> None:
    body = request(
        ka.INCREMENTAL_ALTER_CONFIGS,
        1,
        resources=[
            {
                "resource_type": 2,
                "resource_name": "t",
                "configs": [{"name": "retention.ms", "config_operation": 1, "value": None}],
            },
            {
                "resource_type": 2,
                "resource_name": "u",
                "configs": [{"name": "retention.ms", "config_operation": 0, "value": None}],
            },
        ],
    ).body
    alterations, refused = ka.alter_configs_params(body, incremental=True)
    assert alterations[0].ops == [AlterConfigOp("retention.ms", OpType.DELETE, "")]
    assert list(refused) == [1] and refused[1].error_code == INVALID_CONFIG


class ZooKeeperBench:
    """SimZooKeeper with topic ``t`` (no overrides yet) and one broker session."""

    def __init__(self) -> None:
        self.server = SimZooKeeperServer()
        self.zk = SimZooKeeperClient(self.server, 6_000, "broker-2")

    async def start(self) -> SimZooKeeperClient:
        await self.zk.start()
        for path in (zk_data.CONFIG_CHANGES, zk_data.CONFIG_TOPICS):
            await self.zk.create(path, makepath=True)
        await self.zk.create(
            zk_data.topic_path("t"), zk_data.encode_topic_assignment({0: [1]}), makepath=True
        )
        await self.zk.create(zk_data.topic_config_path("t"), zk_data.encode_topic_config({}))
        return self.zk

    async def overrides(self) -> dict[str, str]:
        data, _ = await self.zk.get(zk_data.topic_config_path("t"))
        return zk_data.decode_topic_config(data)

    def run(self, scenario: Callable[[], Awaitable[None]]) -> None:
        async def main() -> None:
            try:
                await scenario()
            finally:
                await self.zk.close()

        run_simulation(main(), time_limit_s=600)


def test_alter_configs_sends_topics_only() -> None:
    """Broker resources (read-only here) and other types are refused; the topic is written to
    ZooKeeper by this broker, controller or not."""
    bench = ZooKeeperBench()

    async def scenario() -> None:
        zk = await bench.start()
        results = await admin_calls.alter_configs(
            zk,
            [
                admin_calls.ConfigAlteration(4, "1", [AlterConfigOp("log.retention.ms", 0, "1")]),
                admin_calls.ConfigAlteration(2, "t", [AlterConfigOp("retention.ms", 0, "1")]),
                admin_calls.ConfigAlteration(7, "x", []),
            ],
            validate_only=False,
        )
        assert [(r.resource_name, r.error_code) for r in results] == [
            ("1", INVALID_REQUEST),
            ("t", 0),
            ("x", INVALID_REQUEST),
        ]
        assert "log.retention.ms" in results[0].error_message
        assert await bench.overrides() == {"retention.ms": "1"}

    bench.run(scenario)


# -- ElectLeaders -------------------------------------------------------------------------------


def test_elect_leaders_params_by_version() -> None:
    v0 = request(ka.ELECT_LEADERS, 0, topic_partitions=[{"topic": "t", "partitions": [0, 2]}])
    assert ka.elect_leaders_params(v0) == (0, [TopicPartition("t", 0), TopicPartition("t", 2)])
    v2 = request(ka.ELECT_LEADERS, 2, election_type=1, topic_partitions=None)
    assert ka.elect_leaders_params(v2) == (1, None)


def test_elect_leaders_over_every_partition_leaves_out_those_not_needing_one() -> None:
    outcomes = {
        TopicPartition("t", 0): ElectionOutcome(ELECTION_NOT_NEEDED, "not needed"),
        TopicPartition("t", 1): ElectionOutcome(0, "", 2),
    }
    schema = response_schema(request(ka.ELECT_LEADERS, 2, election_type=0, topic_partitions=[]))
    everything = ka.elect_leaders_response(schema, None, outcomes)
    assert [p.partition_id for p in everything.replica_election_results[0].partition_result] == [1]
    asked = ka.elect_leaders_response(schema, list(outcomes), outcomes)
    results = asked.replica_election_results[0].partition_result
    assert [(p.partition_id, p.error_message) for p in results] == [(0, "not needed"), (1, None)]


# -- the handlers without a controller ----------------------------------------------------------


def test_a_broker_without_a_controller_answers_not_controller_for_topic_changes() -> None:
    metadata = SimpleNamespace(partitions={TopicPartition("t", 0): None})
    broker = SimpleNamespace(controller=None, config=config(), metadata=metadata, authorizer=None)
    apis = ka.KafkaAdminApis(broker)  # type: ignore[arg-type]

    async def scenario() -> None:
        created = await apis.create_topics(request(ka.CREATE_TOPICS, 5, topics=[topic("a")]))
        assert [(t.name, t.error_code) for t in created.topics] == [("a", NOT_CONTROLLER)]
        deleted = await apis.delete_topics(request(ka.DELETE_TOPICS, 3, topic_names=["a"]))
        assert deleted.responses[0].error_code == NOT_CONTROLLER
        grown = await apis.create_partitions(
            request(ka.CREATE_PARTITIONS, 1, topics=[{"name": "t", "count": 2}])
        )
        assert grown.results[0].error_code == NOT_CONTROLLER
        elected = await apis.elect_leaders(
            request(ka.ELECT_LEADERS, 1, election_type=0, topic_partitions=None)
        )
        (only,) = elected.replica_election_results
        assert (only.topic, only.partition_result[0].error_code) == ("t", NOT_CONTROLLER)

    asyncio.run(scenario())


def test_a_broker_without_a_controller_serves_config_changes() -> None:
    """AlterConfigs and IncrementalAlterConfigs on a broker hosting no controller: it writes
    the overrides and the change notification itself, as Kafka's brokers do (the Java
    AdminClient sends them to any broker)."""
    bench = ZooKeeperBench()

    async def scenario() -> None:
        broker = SimpleNamespace(
            controller=None, zk=await bench.start(), config=config(), authorizer=None
        )
        apis = ka.KafkaAdminApis(broker)  # type: ignore[arg-type]
        resource = {"resource_type": 2, "resource_name": "t"}
        altered = await apis.incremental_alter_configs(
            request(
                ka.INCREMENTAL_ALTER_CONFIGS,
                1,
                resources=[
                    {
                        **resource,
                        "configs": [
                            {"name": "retention.ms", "config_operation": 0, "value": "5000"},
                            {"name": "cleanup.policy", "config_operation": 2, "value": "compact"},
                        ],
                    }
                ],
            )
        )
        assert [(r.resource_name, r.error_code) for r in altered.responses] == [("t", 0)]
        assert await bench.overrides() == {
            "retention.ms": "5000",
            "cleanup.policy": "delete,compact",
        }
        replaced = await apis.alter_configs(
            request(
                ka.ALTER_CONFIGS,
                1,
                resources=[{**resource, "configs": [{"name": "segment.ms", "value": "60000"}]}],
            )
        )
        assert [(r.resource_name, r.error_code) for r in replaced.responses] == [("t", 0)]
        assert await bench.overrides() == {"segment.ms": "60000"}
        bad = await apis.incremental_alter_configs(
            request(
                ka.INCREMENTAL_ALTER_CONFIGS,
                0,
                resources=[
                    {
                        **resource,
                        "configs": [{"name": "retention.ms", "config_operation": 0, "value": "x"}],
                    }
                ],
            )
        )
        assert bad.responses[0].error_code == INVALID_CONFIG
        assert "retention.ms" in bad.responses[0].error_message
        assert await bench.overrides() == {"segment.ms": "60000"}
        assert len(await bench.zk.get_children(zk_data.CONFIG_CHANGES)) == 2

    bench.run(scenario)


def test_an_unknown_election_type_is_invalid_request() -> None:
    outcome = asyncio.run(admin_calls.elect_leaders(None, 7, None))
    assert not isinstance(outcome, dict) and outcome.code == INVALID_REQUEST


# -- DescribeConfigs, DescribeCluster (node.kafka_apis_describe) --------------------------------


def test_topic_config_sources_and_synonyms() -> None:
    entries = {
        e.name: e
        for e in broker_admin.topic_config_entries(
            config(**{"log.retention.minutes": 30}), {"segment.ms": "1000"}
        )
    }
    segment = entries["segment.ms"]
    assert (segment.value, segment.source) == ("1000", broker_admin.TOPIC_CONFIG)
    assert [s.name for s in segment.synonyms] == ["segment.ms", "log.roll.hours"]
    retention = entries["retention.ms"]
    assert (retention.value, retention.source) == ("1800000", broker_admin.STATIC_BROKER_CONFIG)
    assert [(s.name, s.source) for s in retention.synonyms] == [
        ("log.retention.minutes", broker_admin.STATIC_BROKER_CONFIG),
        ("log.retention.hours", broker_admin.DEFAULT_CONFIG),
    ]
    policy = entries["cleanup.policy"]
    assert (policy.value, policy.source, policy.config_type) == ("delete", 5, 7)


def test_describe_configs_response_synonyms_and_documentation_only_when_asked() -> None:
    entries = tuple(broker_admin.topic_config_entries(config(), {"retention.ms": "1"}))
    answers = [
        broker_admin.ResourceConfigs(2, "t", None, entries),
        broker_admin.ResourceConfigs(2, "gone", error_for_name("UNKNOWN_TOPIC_OR_PARTITION")("x")),
    ]
    resource = {"resource_type": 2, "resource_name": "t", "configuration_keys": None}
    plain = request(kd.DESCRIBE_CONFIGS, 4, resources=[resource])
    rich = request(
        kd.DESCRIBE_CONFIGS,
        4,
        resources=[resource],
        include_synonyms=True,
        include_documentation=True,
    )
    bare = {c.name: c for c in kd.describe_configs_response(plain, answers).results[0].configs}
    assert bare["retention.ms"].synonyms == () and bare["retention.ms"].documentation is None
    full_results = kd.describe_configs_response(rich, answers).results
    full = {c.name: c for c in full_results[0].configs}
    assert [s.name for s in full["retention.ms"].synonyms][:2] == [
        "retention.ms",
        "log.retention.hours",
    ]
    assert full["retention.ms"].documentation
    assert (full_results[1].error_code, full_results[1].error_message) == (3, "x")
    assert kd.describe_configs_params(plain.body)[0].names is None


def test_broker_config_resource_must_name_this_broker() -> None:
    broker = SimpleNamespace(broker_id=1, config=config(), authorizer=None)
    resources = [
        broker_admin.ConfigResource(4, "1", {"broker.id"}),
        broker_admin.ConfigResource(4, "2"),
        broker_admin.ConfigResource(4, "one"),
        broker_admin.ConfigResource(4, ""),
        broker_admin.ConfigResource(9, "x"),
    ]
    answers = asyncio.run(broker_admin.describe_configs(broker, resources))  # type: ignore[arg-type]
    (broker_id,) = answers[0].configs
    assert (broker_id.value, broker_id.source, broker_id.read_only) == ("1", 4, True)
    assert [a.error.code if a.error else 0 for a in answers[1:]] == [42, 42, 0, 42]
    assert "expected 1" in str(answers[1].error)
    assert answers[3].configs == ()


def test_describe_cluster_response() -> None:
    view = ClusterView("cid", 2, (BrokerAddress(1, "h", 9092, None),), ())
    v0 = kd.describe_cluster_response(request(kd.DESCRIBE_CLUSTER, 0), view)
    assert (v0.cluster_id, v0.controller_id, v0.brokers[0].port) == ("cid", 2, 9092)
    controllers = request(kd.DESCRIBE_CLUSTER, 1, endpoint_type=2)
    refused = kd.describe_cluster_response(controllers, view)
    assert refused.error_code == error_for_name("UNSUPPORTED_ENDPOINT_TYPE").code
