"""The admin calls in protobuf form (``node.apis_admin``): each request is translated into the
controller's domain entry points (config changes: a broker's own ZooKeeper writes) and their
results (or errors) back, against a real controller on the simulated ZooKeeper
(``tests.unit.controller.harness``)."""

from __future__ import annotations

from kafkasim.common.errors import error_for_name
from kafkasim.common.types import TopicPartition
from kafkasim.controller import zk_data
from kafkasim.node import apis_admin
from kafkasim.node.config import BrokerConfig
from kafkasim.proto import kafkasim_pb2 as pb
from tests.unit.controller.harness import Cluster, in_cluster

T0 = TopicPartition("t", 0)


def test_controlled_shutdown_of_another_broker_needs_its_epoch() -> None:
    """Broker 3 (or anyone) asking to shut down broker 1 with broker 3's own epoch is refused
    with STALE_BROKER_EPOCH; broker 1 keeps its leadership."""

    async def scenario(cluster: Cluster) -> None:
        await cluster.start(3, 1, 2)
        await cluster.create_topic("t", {0: [1, 2, 3]})
        await cluster.settle()
        admin = await cluster.start_admin()
        _, other = await admin.get(zk_data.broker_path(3))
        response = await apis_admin.controlled_shutdown(
            cluster.active(), pb.ControlledShutdownRequest(broker_id=1, broker_epoch=other.czxid)
        )
        assert response.error_code == error_for_name("STALE_BROKER_EPOCH").code
        assert (await cluster.state(T0)).leader == 1
        assert cluster.active().snapshot().shutting_down_brokers == frozenset()

    in_cluster(scenario)


def test_admin_calls_on_a_follower_broker_answer_not_controller() -> None:
    async def scenario(cluster: Cluster) -> None:
        await cluster.start(1, 2)
        follower = cluster.brokers[2].controller
        response = await apis_admin.controlled_shutdown(
            follower, pb.ControlledShutdownRequest(broker_id=2, broker_epoch=-1)
        )
        assert response.error_code == 41
        created = await apis_admin.create_topics(
            follower,
            pb.CreateTopicsRequest(
                topics=[pb.CreatableTopic(name="t", num_partitions=1, replication_factor=1)]
            ),
        )
        assert [(t.name, t.error_code) for t in created.topics] == [("t", 41)]

    in_cluster(scenario)


def test_protobuf_entry_points() -> None:
    async def scenario(cluster: Cluster) -> None:
        await cluster.start(1, 2)
        controller = cluster.active()
        created = await apis_admin.create_topics(
            controller,
            pb.CreateTopicsRequest(
                topics=[
                    pb.CreatableTopic(
                        name="t",
                        num_partitions=-1,
                        replication_factor=-1,
                        assignments=[pb.ReplicaAssignment(partition=0, broker_ids=[2, 1])],
                    )
                ],
                timeout_ms=5_000,
            ),
        )
        assert [(t.name, t.error_code) for t in created.topics] == [("t", 0)]
        await cluster.settle()
        grown = await apis_admin.create_partitions(
            controller,
            pb.CreatePartitionsRequest(topics=[pb.CreatePartitionsTopic(name="t", count=2)]),
        )
        assert [r.error_code for r in grown.results] == [0]
        await cluster.settle()
        elected = await apis_admin.elect_leaders(
            controller, pb.ElectLeadersRequest(election_type=0)
        )
        assert {(r.partition, r.error_code) for r in elected.results} == {(0, 84), (1, 84)}
        admin = await cluster.start_admin()
        _, stat = await admin.get(zk_data.broker_path(2))
        shutdown = await apis_admin.controlled_shutdown(
            controller, pb.ControlledShutdownRequest(broker_id=2, broker_epoch=stat.czxid)
        )
        assert shutdown.error_code == 0
        assert [(p.topic, p.partition) for p in shutdown.remaining_partitions] == []
        deleted = await apis_admin.delete_topics(
            controller, pb.DeleteTopicsRequest(topic_names=["t"], timeout_ms=5_000)
        )
        assert [(t.name, t.error_code) for t in deleted.topics] == [("t", 0)]

    in_cluster(scenario)


def test_alter_configs_protobuf_form_refuses_other_resources_and_works_on_every_broker() -> None:
    """A broker key that cannot change dynamically is refused (INVALID_REQUEST), a dynamic
    one is written to /config/brokers/<id>; a topic's change is written through the session
    it is given, whether that broker hosts the active controller or not."""

    async def scenario(cluster: Cluster) -> None:
        await cluster.start(1, 2)
        await cluster.create_topic("t", {0: [1, 2]})
        request = pb.IncrementalAlterConfigsRequest(
            resources=[
                pb.AlterConfigsResource(
                    resource_type=4,
                    resource_name="1",
                    configs=[pb.AlterableConfig(name="log.dirs", value="/elsewhere")],
                ),
                pb.AlterConfigsResource(
                    resource_type=4,
                    resource_name="1",
                    configs=[pb.AlterableConfig(name="log.retention.ms", value="1")],
                ),
                pb.AlterConfigsResource(
                    resource_type=2,
                    resource_name="t",
                    configs=[pb.AlterableConfig(name="cleanup.policy", config_operation=2,
                                                value="compact")],
                ),
            ]
        )  # fmt: skip
        follower = next(b for b in cluster.brokers.values() if not b.controller.is_active)
        response = await apis_admin.incremental_alter_configs(
            follower.session, request, BrokerConfig.from_props({"zookeeper.connect": "zk:2181"})
        )
        assert [(r.resource_type, r.resource_name, r.error_code) for r in response.responses] == [
            (4, "1", 42),
            (4, "1", 0),
            (2, "t", 0),
        ]
        assert "log.dirs" in response.responses[0].error_message
        admin = await cluster.start_admin()
        data, _ = await admin.get(zk_data.topic_config_path("t"))
        assert zk_data.decode_topic_config(data) == {"cleanup.policy": "delete,compact"}
        data, _ = await admin.get(zk_data.broker_config_path("1"))
        assert zk_data.decode_topic_config(data) == {"log.retention.ms": "1"}
        assert len(await admin.get_children(zk_data.CONFIG_CHANGES)) == 2

    in_cluster(scenario)


def test_create_topics_refuses_internal_topics_and_creates_the_rest() -> None:
    async def scenario(cluster: Cluster) -> None:
        await cluster.start(1)
        response = await apis_admin.create_topics(
            cluster.active(),
            pb.CreateTopicsRequest(
                topics=[
                    pb.CreatableTopic(name="__consumer_offsets", num_partitions=1),
                    pb.CreatableTopic(name="plain", num_partitions=1, replication_factor=1),
                    pb.CreatableTopic(name="__transaction_state", num_partitions=1),
                ]
            ),
        )
        invalid = error_for_name("INVALID_REQUEST").code
        assert [(t.name, t.error_code) for t in response.topics] == [
            ("__consumer_offsets", invalid),
            ("plain", 0),
            ("__transaction_state", invalid),
        ]
        admin = await cluster.start_admin()
        assert await admin.exists(zk_data.topic_path("__consumer_offsets")) is None
        assert await admin.exists(zk_data.topic_path("plain")) is not None

    in_cluster(scenario)


def test_a_broker_without_a_controller_answers_not_controller_for_every_item() -> None:
    not_controller = error_for_name("NOT_CONTROLLER").code
    created = apis_admin.not_controller_response(
        pb.CreateTopicsRequest(topics=[pb.CreatableTopic(name="a"), pb.CreatableTopic(name="b")]),
        pb.CreateTopicsResponse,
    )
    assert [(t.name, t.error_code) for t in created.topics] == [
        ("a", not_controller),
        ("b", not_controller),
    ]
    deleted = apis_admin.not_controller_response(
        pb.DeleteTopicsRequest(topic_names=["a"]), pb.DeleteTopicsResponse
    )
    assert [(t.name, t.error_code) for t in deleted.topics] == [("a", not_controller)]
    shutdown = apis_admin.not_controller_response(
        pb.ControlledShutdownRequest(broker_id=1), pb.ControlledShutdownResponse
    )
    assert shutdown.error_code == not_controller
