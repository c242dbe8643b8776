"""The controller on SimZooKeeper with recording brokers: election and fencing, failover,
broker death and return, ISR notifications, topic creation and deletion, controlled shutdown,
unclean election only when allowed, preferred election."""

from __future__ import annotations

import asyncio
import logging

import pytest

from kafkasim.common.errors import KafkaError, error_for_name
from kafkasim.common.types import TopicPartition
from kafkasim.controller import zk_data
from kafkasim.controller.controller import (
    ControllerConfig,
    ElectionType,
    NewPartitions,
    NewTopic,
)
from kafkasim.proto import METHOD_LEADER_AND_ISR, METHOD_UPDATE_METADATA
from kafkasim.proto import kafkasim_pb2 as pb

from .harness import Cluster, address, in_cluster

T0 = TopicPartition("t", 0)
T1 = TopicPartition("t", 1)


def states_of(requests: list[pb.LeaderAndIsrRequest]) -> dict[TopicPartition, pb.PartitionState]:
    """The last partition state each partition got in these requests."""
    out: dict[TopicPartition, pb.PartitionState] = {}
    for request in requests:
        for s in request.partition_states:
            out[TopicPartition(s.topic, s.partition)] = s
    return out


# -- election and fencing ---------------------------------------------------------------------


def test_first_broker_becomes_controller_with_epoch_1() -> None:
    """The controller epoch starts at 1 and /controller names the winner; others follow it."""

    async def scenario(cluster: Cluster) -> None:
        await cluster.start(1, 2)
        first, second = cluster.brokers[1].controller, cluster.brokers[2].controller
        assert first.is_active and not second.is_active
        assert first.epoch == 1
        assert second.active_controller_id == 1
        admin = await cluster.start_admin()
        data, stat = await admin.get(zk_data.CONTROLLER)
        assert zk_data.decode_controller(data) == 1
        assert stat.ephemeral_owner == cluster.brokers[1].session.session_id
        epoch_data, _ = await admin.get(zk_data.CONTROLLER_EPOCH)
        assert zk_data.decode_controller_epoch(epoch_data) == 1
        snapshot = first.snapshot()
        assert snapshot.active and sorted(snapshot.live_brokers) == [1, 2]
        assert not second.snapshot().active

    in_cluster(scenario)


def test_zombie_controller_cannot_write_and_resigns() -> None:
    """Another controller bumped /controller_epoch: every write of the old one is fenced by
    its CheckOp on the epoch znode's version, so nothing it decides reaches ZooKeeper."""

    async def scenario(cluster: Cluster) -> None:
        await cluster.start(1, 2, 3)
        await cluster.create_topic("t", {0: [2, 3]})
        zombie = cluster.active()
        admin = await cluster.start_admin()
        _, stat = await admin.get(zk_data.CONTROLLER_EPOCH)
        # A newer controller's election, without touching /controller (so no watch fires).
        await admin.set(zk_data.CONTROLLER_EPOCH, zk_data.encode_controller_epoch(2), stat.version)
        before = await cluster.state(T0)

        with pytest.raises(KafkaError) as info:
            await zombie.create_topics([NewTopic("u", 1, 1)])
        assert info.value.error_name == "NOT_CONTROLLER"
        assert zombie.epoch != 1
        assert await admin.exists(zk_data.topic_path("u")) is None
        assert await cluster.state(T0) == before
        # The zombie freed /controller, so a fresh election ran: epoch 3, once.
        await cluster.settle()
        assert cluster.active().epoch == 3

    in_cluster(scenario)


def test_zombie_partition_state_write_is_fenced() -> None:
    """The zombie reacts to a broker death: its election write fails on the epoch check."""

    async def scenario(cluster: Cluster) -> None:
        await cluster.start(1, 2, 3)
        await cluster.create_topic("t", {0: [2, 3]})
        zombie = cluster.brokers[1].controller
        admin = await cluster.start_admin()
        _, stat = await admin.get(zk_data.CONTROLLER_EPOCH)
        await admin.set(zk_data.CONTROLLER_EPOCH, zk_data.encode_controller_epoch(2), stat.version)
        versions: list[zk_data.LeaderAndIsr] = []

        def watch_state(event: object) -> None:
            asyncio.get_running_loop().create_task(record())

        async def record() -> None:
            data, stat = await admin.get(zk_data.partition_state_path(T0), watch_state)
            versions.append(zk_data.decode_partition_state(data, stat.version))

        await record()
        cluster.kill(2)
        await cluster.settle()
        assert zombie.epoch != 1
        # Every state written after the bump comes from the new controller (epoch 3): the
        # zombie's election for the dead leader 2 never reached ZooKeeper.
        assert [s.controller_epoch for s in versions[1:]] and all(
            s.controller_epoch == 3 for s in versions[1:]
        )
        assert (versions[-1].leader, versions[-1].isr) == (3, (3,))

    in_cluster(scenario)


def test_failover_increments_epoch_and_resends_state() -> None:
    """The controller's broker dies: another wins with epoch 2, elects leaders for what the
    dead broker led, and sends every live replica its partitions' state at the new epoch."""

    async def scenario(cluster: Cluster) -> None:
        await cluster.start(1, 2, 3)
        await cluster.create_topic("t", {0: [1, 2, 3], 1: [2, 3, 1]})
        assert cluster.active().broker_id == 1
        cluster.kill(1)
        await cluster.settle()
        new = cluster.active()
        assert new.broker_id in (2, 3) and new.epoch == 2
        assert cluster.brokers[1].controller.active_controller_id == -1  # it resigned
        s0, s1 = await cluster.state(T0), await cluster.state(T1)
        assert (s0.leader, s0.isr, s0.leader_epoch, s0.controller_epoch) == (2, (2, 3), 1, 2)
        assert (s1.leader, s1.isr, s1.leader_epoch) == (2, (2, 3), 1)
        transport = cluster.transport_of_active()
        for b in (2, 3):
            requests = transport.leader_and_isr(b)
            assert requests and all(r.controller_epoch == 2 for r in requests)
            assert all(r.controller_id == new.broker_id for r in requests)
            got = states_of(requests)
            assert set(got) == {T0, T1}
            assert (got[T0].leader, got[T0].leader_epoch, list(got[T0].isr)) == (2, 1, [2, 3])
            metadata = transport.update_metadata(b)
            assert metadata and sorted(e.node_id for e in metadata[-1].live_brokers) == [2, 3]
        assert transport.leader_and_isr(1) == []  # the dead broker gets nothing

    in_cluster(scenario)


def test_failover_sends_update_metadata_before_leader_and_isr() -> None:
    """A new controller first tells every live broker the live brokers and every partition's
    state, then sends LeaderAndIsr (Kafka's ``onControllerFailover``): a broker restarted
    just before must know the cluster before it acts on a LeaderAndIsr. Without this order a
    restarted transaction coordinator took partitions it did not know yet for deleted ones
    and dropped COMMIT markers (random seed 8 of txn-leader-crash)."""

    async def scenario(cluster: Cluster) -> None:
        await cluster.start(1, 2, 3)
        await cluster.create_topic("t", {0: [1, 2, 3], 1: [2, 3, 1]})
        cluster.kill(1)
        await cluster.settle()
        new = cluster.active()
        transport = cluster.transport_of_active()
        for b in (2, 3):
            calls = [
                c
                for c in transport.calls
                if c.target == address(b)
                and c.method in (METHOD_UPDATE_METADATA, METHOD_LEADER_AND_ISR)
                and c.request.controller_epoch == new.epoch
            ]
            assert calls and calls[0].method == METHOD_UPDATE_METADATA, [c.method for c in calls]
            first = calls[0].request
            assert {(s.topic, s.partition) for s in first.partition_states} == {("t", 0), ("t", 1)}
            assert sorted(e.node_id for e in first.live_brokers) == [2, 3]
            assert any(c.method == METHOD_LEADER_AND_ISR for c in calls[1:])

    in_cluster(scenario)


def test_requests_carry_the_target_brokers_epoch() -> None:
    """KIP-380: a broker can drop requests meant for an earlier incarnation of itself."""

    async def scenario(cluster: Cluster) -> None:
        await cluster.start(1, 2)
        await cluster.create_topic("t", {0: [1, 2]})
        admin = await cluster.start_admin()
        transport = cluster.transport_of_active()
        for b in (1, 2):
            _, stat = await admin.get(zk_data.broker_path(b))
            for request in transport.leader_and_isr(b) + transport.update_metadata(b):
                assert request.broker_epoch == stat.czxid
                assert request.controller_id == 1 and request.controller_epoch == 1

    in_cluster(scenario)


# -- broker death and return ------------------------------------------------------------------


def test_broker_death_elects_a_new_leader_from_the_isr() -> None:
    async def scenario(cluster: Cluster) -> None:
        await cluster.start(3, 1, 2)  # 3 is the controller
        await cluster.create_topic("t", {0: [1, 2, 3], 1: [2, 1, 3]})
        transport = cluster.transport_of_active()
        transport.clear()
        cluster.kill(1)
        await cluster.settle()
        s0, s1 = await cluster.state(T0), await cluster.state(T1)
        # Led by 1: the next live ISR member in assignment order leads, epoch + 1.
        assert (s0.leader, s0.isr, s0.leader_epoch) == (2, (2, 3), 1)
        # Followed by 1: it leaves the ISR, the leader stays, the epoch grows (Kafka 2.x).
        assert (s1.leader, s1.isr, s1.leader_epoch) == (2, (2, 3), 1)
        got = states_of(transport.leader_and_isr(2))
        assert got[T0].leader == 2 and got[T0].leader_epoch == 1 and not got[T0].is_new
        assert list(got[T0].offline_replicas) == [1]
        assert transport.leader_and_isr(1) == []
        metadata = transport.update_metadata(3)
        assert metadata and {s.partition for s in metadata[-1].partition_states} >= {0}
        view = cluster.active().snapshot().partitions[T0]
        assert view.leader == 2 and view.offline_replicas == (1,) and view.online

    in_cluster(scenario)


def test_returning_broker_gets_metadata_and_its_partitions() -> None:
    async def scenario(cluster: Cluster) -> None:
        await cluster.start(3, 1, 2)
        await cluster.create_topic("t", {0: [1, 2, 3]})
        await cluster.create_topic("u", {0: [3, 2]})
        cluster.kill(1)
        await cluster.settle()
        transport = cluster.transport_of_active()
        transport.clear()
        await cluster.start_broker(1)
        metadata = transport.update_metadata(1)
        assert metadata, "the returning broker learns the cluster"
        assert {(s.topic, s.partition) for s in metadata[0].partition_states} == {
            ("t", 0),
            ("u", 0),
        }
        got = states_of(transport.leader_and_isr(1))
        assert set(got) == {T0}  # only its own replicas
        assert got[T0].leader == 2 and list(got[T0].isr) == [2, 3]
        # Existing brokers hear about the new one.
        assert any(
            sorted(e.node_id for e in r.live_brokers) == [1, 2, 3]
            for r in transport.update_metadata(2)
        )
        # Not in the ISR yet: leadership does not move back by itself.
        assert (await cluster.state(T0)).leader == 2

    in_cluster(scenario)


def test_unclean_disabled_keeps_partition_offline_with_last_isr() -> None:
    """ISR {1}; 1 dies; 2 is live but out of sync: the partition goes offline (leader -1) and
    keeps ISR [1], so 1 (which has every acknowledged record) is the only one that may lead."""

    async def scenario(cluster: Cluster) -> None:
        await cluster.start(3, 1, 2)
        await cluster.create_topic("t", {0: [1, 2]})
        await cluster.write_isr(T0, [1], notify=True)
        await cluster.settle()
        cluster.kill(1)
        await cluster.settle()
        s0 = await cluster.state(T0)
        assert (s0.leader, s0.isr, s0.leader_epoch) == (-1, (1,), 1)
        assert T0 in cluster.active().snapshot().offline_partitions()
        # Broker 1 comes back: the retained ISR member leads again.
        await cluster.start_broker(1)
        s0 = await cluster.state(T0)
        assert (s0.leader, s0.isr, s0.leader_epoch) == (1, (1,), 2)

    in_cluster(scenario)


def test_unclean_election_when_the_topic_allows_it_logs_loudly(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def scenario(cluster: Cluster) -> None:
        await cluster.start(3, 1, 2)
        await cluster.create_topic("t", {0: [1, 2]}, {"unclean.leader.election.enable": "true"})
        await cluster.write_isr(T0, [1], notify=True)
        await cluster.settle()
        with caplog.at_level(logging.WARNING, logger="controller.controller"):
            cluster.kill(1)
            await cluster.settle()
        s0 = await cluster.state(T0)
        assert (s0.leader, s0.isr, s0.leader_epoch) == (2, (2,), 1)

    in_cluster(scenario)
    unclean = [r.getMessage() for r in caplog.records if "UNCLEAN" in r.getMessage()]
    assert len(unclean) == 1
    assert "t-0" in unclean[0] and "broker 2" in unclean[0] and "LOST" in unclean[0]


def test_broker_default_enables_unclean_election() -> None:
    async def scenario(cluster: Cluster) -> None:
        await cluster.start(3, 1, 2)
        await cluster.create_topic("t", {0: [1, 2]})
        await cluster.write_isr(T0, [1], notify=True)
        await cluster.settle()
        cluster.kill(1)
        await cluster.settle()
        assert (await cluster.state(T0)).leader == 2

    in_cluster(
        scenario,
        ControllerConfig(auto_leader_rebalance_enable=False, unclean_leader_election_enable=True),
    )


def test_topic_config_overrides_an_unclean_broker_default() -> None:
    async def scenario(cluster: Cluster) -> None:
        await cluster.start(3, 1, 2)
        await cluster.create_topic("t", {0: [1, 2]}, {"unclean.leader.election.enable": "false"})
        await cluster.write_isr(T0, [1], notify=True)
        await cluster.settle()
        cluster.kill(1)
        await cluster.settle()
        assert (await cluster.state(T0)).leader == -1

    in_cluster(
        scenario,
        ControllerConfig(auto_leader_rebalance_enable=False, unclean_leader_election_enable=True),
    )


def test_election_reads_zookeeper_not_its_cache() -> None:
    """A leader shrank the ISR without the controller hearing of it yet: the election uses
    the ISR in ZooKeeper, never electing a replica that fell out of sync."""

    async def scenario(cluster: Cluster) -> None:
        await cluster.start(4, 1, 2, 3)
        await cluster.create_topic("t", {0: [1, 2, 3]})
        await cluster.write_isr(T0, [1, 3], notify=False)
        cluster.kill(1)
        await cluster.settle()
        s0 = await cluster.state(T0)
        assert (s0.leader, s0.isr) == (3, (3,))

    in_cluster(scenario)


def test_bad_version_makes_the_controller_re_read_and_decide_again() -> None:
    """The leader's ISR write lands between the controller's read and its write: the
    conditional write fails, and the decision is made again on the new ISR."""

    async def scenario(cluster: Cluster) -> None:
        await cluster.start_admin()
        racing: list[object] = []

        async def race() -> None:
            await cluster.write_isr(T0, [1, 3], notify=False)

        def wrap(session: object) -> object:
            from .harness import RacingCoordination

            coordination = RacingCoordination(
                session,  # type: ignore[arg-type]
                zk_data.partition_state_path(T0),
                race,
            )
            racing.append(coordination)
            return coordination

        await cluster.start_broker(4, wrap=wrap)
        for b in (1, 2, 3):
            await cluster.start_broker(b)
        await cluster.create_topic("t", {0: [1, 2, 3]})
        cluster.kill(1)
        await cluster.settle()
        assert racing[0].raced  # type: ignore[attr-defined]
        s0 = await cluster.state(T0)
        assert (s0.leader, s0.isr, s0.leader_epoch) == (3, (3,), 1)
        assert cluster.active().broker_id == 4  # a version conflict is not a fence

    in_cluster(scenario)


# -- ISR change notifications -----------------------------------------------------------------


def test_isr_change_notification_broadcasts_update_metadata() -> None:
    async def scenario(cluster: Cluster) -> None:
        await cluster.start(1, 2, 3)
        await cluster.create_topic("t", {0: [1, 2, 3]})
        transport = cluster.transport_of_active()
        transport.clear()
        await cluster.write_isr(T0, [1, 2], notify=True)
        await cluster.settle()
        for b in (1, 2, 3):
            metadata = transport.update_metadata(b)
            assert len(metadata) == 1
            (state,) = metadata[0].partition_states
            assert list(state.isr) == [1, 2] and state.zk_version == 1
        assert transport.leader_and_isr() == []
        admin = await cluster.start_admin()
        assert await admin.get_children(zk_data.ISR_CHANGE_NOTIFICATION) == []
        assert cluster.active().snapshot().partitions[T0].isr == (1, 2)

    in_cluster(scenario)


# -- topics -----------------------------------------------------------------------------------


def test_topic_creation_writes_states_and_sends_leader_and_isr() -> None:
    async def scenario(cluster: Cluster) -> None:
        await cluster.start(1, 2, 3)
        controller = cluster.active()
        results = await controller.create_topics(
            [NewTopic("t", 2, 2, configs={"retention.ms": "1000"})], timeout_ms=10_000
        )
        assert [r.error_code for r in results] == [0]
        await cluster.settle()
        admin = await cluster.start_admin()
        config, _ = await admin.get(zk_data.topic_config_path("t"))
        assert zk_data.decode_topic_config(config) == {"retention.ms": "1000"}
        assignment_data, _ = await admin.get(zk_data.topic_path("t"))
        assignment = zk_data.decode_topic_assignment(assignment_data)
        assert sorted(assignment) == [0, 1] and all(len(r) == 2 for r in assignment.values())
        transport = cluster.transport_of_active()
        for p, replicas in assignment.items():
            tp = TopicPartition("t", p)
            state = await cluster.state(tp)
            assert (state.leader, state.isr, state.leader_epoch) == (
                replicas[0],
                tuple(replicas),
                0,
            )
            assert state.controller_epoch == 1
            for b in replicas:
                got = states_of(transport.leader_and_isr(b))[tp]
                assert got.is_new and got.leader == replicas[0] and list(got.replicas) == replicas
        for b in (1, 2, 3):
            known = {
                s.partition
                for r in transport.update_metadata(b)
                for s in r.partition_states
                if s.topic == "t"
            }
            assert known == {0, 1}

    in_cluster(scenario)


@pytest.mark.parametrize(
    ("topic", "error", "message"),
    [
        (
            NewTopic("big", 1, 4),
            "INVALID_REPLICATION_FACTOR",
            "Replication factor: 4 larger than available brokers: 3.",
        ),
        (
            NewTopic("zero", 0, 1),
            "INVALID_PARTITIONS",
            "Number of partitions must be larger than 0.",
        ),
        (NewTopic("bad name!", 1, 1), "INVALID_TOPIC_EXCEPTION", None),
        (NewTopic("exists", 1, 1), "TOPIC_ALREADY_EXISTS", "Topic 'exists' already exists."),
        (
            NewTopic("e.xists", 1, 1),
            "INVALID_TOPIC_EXCEPTION",
            "Topic 'e.xists' collides with existing topics: e_xists",
        ),
        (NewTopic("both", 1, -1, assignments={0: [1]}), "INVALID_REQUEST", None),
        (NewTopic("ghost", assignments={0: [1, 9]}), "INVALID_REPLICA_ASSIGNMENT", None),
        (NewTopic("cfg", 1, 1, configs={"segment.bytes": "1"}), "INVALID_CONFIG", None),
        (NewTopic("cfg2", 1, 1, configs={"no.such.key": "1"}), "INVALID_CONFIG", None),
    ],
)
def test_topic_creation_errors(topic: NewTopic, error: str, message: str | None) -> None:
    async def scenario(cluster: Cluster) -> None:
        await cluster.start(1, 2, 3)
        await cluster.create_topic("exists", {0: [1]})
        await cluster.create_topic("e_xists", {0: [1]})
        (result,) = await cluster.active().create_topics([topic])
        assert result.error_code == error_for_name(error).code, result
        if message is not None:
            assert result.error_message == message
        admin = await cluster.start_admin()
        if error != "TOPIC_ALREADY_EXISTS":
            assert await admin.exists(zk_data.topic_path(topic.name)) is None

    in_cluster(scenario)


def test_validate_only_and_duplicates_write_nothing() -> None:
    async def scenario(cluster: Cluster) -> None:
        await cluster.start(1, 2)
        results = await cluster.active().create_topics(
            [NewTopic("a", 3, 2), NewTopic("d", 1, 1), NewTopic("d", 1, 1)], validate_only=True
        )
        assert [r.error_code for r in results] == [0, 42, 42]
        admin = await cluster.start_admin()
        assert await admin.get_children(zk_data.BROKER_TOPICS) == []

    in_cluster(scenario)


def test_topic_with_no_live_replica_waits_then_comes_online() -> None:
    """A partition none of whose replicas is live stays new; it starts when one registers."""

    async def scenario(cluster: Cluster) -> None:
        await cluster.start(1, 2)
        await cluster.create_topic("t", {0: [2]})
        cluster.kill(2)
        await cluster.settle()
        await cluster.create_topic("u", {0: [1]})
        admin = await cluster.start_admin()
        # Register a topic assigned to the dead broker directly, as an old admin tool would.
        await admin.create(zk_data.topic_path("v"), zk_data.encode_topic_assignment({0: [2]}))
        await cluster.settle()
        assert await admin.exists(zk_data.partition_state_path(TopicPartition("v", 0))) is None
        assert cluster.active().snapshot().partitions[TopicPartition("v", 0)].leader == -1
        await cluster.start_broker(2)
        state = await cluster.state(TopicPartition("v", 0))
        assert (state.leader, state.isr, state.leader_epoch) == (2, (2,), 0)

    in_cluster(scenario)


def test_topic_deletion_stops_replicas_and_removes_znodes() -> None:
    async def scenario(cluster: Cluster) -> None:
        await cluster.start(1, 2, 3)
        await cluster.create_topic("t", {0: [1, 2], 1: [2, 3]}, {"retention.ms": "5"})
        transport = cluster.transport_of_active()
        transport.clear()
        results = await cluster.active().delete_topics(["t", "nope"], timeout_ms=10_000)
        assert [r.error_code for r in results] == [0, 3]
        await cluster.settle()
        admin = await cluster.start_admin()
        for path in (
            zk_data.topic_path("t"),
            zk_data.topic_config_path("t"),
            zk_data.delete_topic_path("t"),
        ):
            assert await admin.exists(path) is None, path
        stops = {
            (b, p.partition, p.delete_partition)
            for b in (1, 2, 3)
            for r in transport.stop_replica(b)
            for p in r.partitions
        }
        assert stops == {(1, 0, True), (2, 0, True), (2, 1, True), (3, 1, True)}
        for b in (1, 2, 3):
            assert any("t" in r.deleted_topics for r in transport.update_metadata(b))
        assert cluster.active().snapshot().topics() == []

    in_cluster(scenario)


def test_topic_deletion_waits_for_dead_replicas() -> None:
    """Kafka deletes a topic only once every replica acknowledged (a dead broker would keep
    the log otherwise); the deletion resumes when the broker returns."""

    async def scenario(cluster: Cluster) -> None:
        await cluster.start(1, 2, 3)
        await cluster.create_topic("t", {0: [2, 3]})
        cluster.kill(3)
        await cluster.settle()
        (result,) = await cluster.active().delete_topics(["t"])
        assert result.ok
        await cluster.settle()
        admin = await cluster.start_admin()
        assert await admin.exists(zk_data.topic_path("t")) is not None
        assert "t" in cluster.active().snapshot().topics_being_deleted
        await cluster.start_broker(3)
        assert await admin.exists(zk_data.topic_path("t")) is None

    in_cluster(scenario)


def test_create_partitions_keeps_existing_and_adds_new() -> None:
    async def scenario(cluster: Cluster) -> None:
        await cluster.start(1, 2, 3)
        await cluster.create_topic("t", {0: [1, 2]})
        controller = cluster.active()
        results = await controller.create_partitions(
            [NewPartitions("t", 3), NewPartitions("nope", 2)],
            timeout_ms=10_000,
        )
        assert [r.error_code for r in results] == [0, 3]
        await cluster.settle()
        admin = await cluster.start_admin()
        data, _ = await admin.get(zk_data.topic_path("t"))
        assignment = zk_data.decode_topic_assignment(data)
        assert assignment[0] == [1, 2] and sorted(assignment) == [0, 1, 2]
        assert assignment[1] == [2, 3] and assignment[2] == [3, 1]  # start/shift at broker 1
        for p in (1, 2):
            state = await cluster.state(TopicPartition("t", p))
            assert state.leader == assignment[p][0] and state.leader_epoch == 0
        (shrink,) = await controller.create_partitions([NewPartitions("t", 2)])
        assert shrink.error_message == (
            "Topic currently has 3 partitions, which is higher than the requested 2."
        )
        (same,) = await controller.create_partitions([NewPartitions("t", 3)])
        assert same.error_message == "Topic already has 3 partitions."

    in_cluster(scenario)


# -- controlled shutdown ----------------------------------------------------------------------


def test_controlled_shutdown_moves_leadership_and_isr_membership() -> None:
    async def scenario(cluster: Cluster) -> None:
        await cluster.start(3, 1, 2)
        await cluster.create_topic("t", {0: [1, 2, 3], 1: [2, 1, 3]})
        await cluster.create_topic("single", {0: [1]})
        admin = await cluster.start_admin()
        _, stat = await admin.get(zk_data.broker_path(1))
        controller = cluster.active()
        transport = cluster.transport_of_active()
        transport.clear()
        remaining = await controller.controlled_shutdown(1, stat.czxid)
        assert remaining == []  # RF-1 partitions are not counted (nowhere to move them)
        s0, s1 = await cluster.state(T0), await cluster.state(T1)
        assert (s0.leader, s0.isr, s0.leader_epoch) == (2, (2, 3), 1)
        assert (s1.leader, s1.isr, s1.leader_epoch) == (2, (2, 3), 1)
        await cluster.settle()
        # The shutting-down broker becomes a follower of p0 and stops fetching p1.
        assert states_of(transport.leader_and_isr(1))[T0].leader == 2
        stops = [
            (p.partition, p.delete_partition)
            for r in transport.stop_replica(1)
            for p in r.partitions
        ]
        assert stops == [(1, False)]
        assert controller.snapshot().shutting_down_brokers == {1}

    in_cluster(scenario)


def test_controlled_shutdown_reports_what_cannot_move() -> None:
    async def scenario(cluster: Cluster) -> None:
        await cluster.start(3, 1, 2)
        await cluster.create_topic("t", {0: [1, 2]})
        await cluster.write_isr(T0, [1], notify=True)
        await cluster.settle()
        admin = await cluster.start_admin()
        _, stat = await admin.get(zk_data.broker_path(1))
        remaining = await cluster.active().controlled_shutdown(1, stat.czxid)
        assert remaining == [T0]
        assert (await cluster.state(T0)).leader == 1

    in_cluster(scenario)


@pytest.mark.parametrize(
    ("broker", "epoch", "error"),
    [
        (1, 0, "STALE_BROKER_EPOCH"),  # older than the registration
        (1, -1, "STALE_BROKER_EPOCH"),  # unknown: no check skipped (KIP-380)
        (1, 2**63 - 1, "STALE_BROKER_EPOCH"),  # forged: newer than any registration
        (9, -1, "BROKER_NOT_AVAILABLE"),
    ],
)
def test_controlled_shutdown_rejects(broker: int, epoch: int, error: str) -> None:
    """Nothing moves: no broker is marked as shutting down."""

    async def scenario(cluster: Cluster) -> None:
        await cluster.start(3, 1)
        with pytest.raises(KafkaError) as info:
            await cluster.active().controlled_shutdown(broker, epoch)
        assert info.value.error_name == error
        assert cluster.active().snapshot().shutting_down_brokers == frozenset()

    in_cluster(scenario)


# -- preferred election -----------------------------------------------------------------------


def test_preferred_election_on_request() -> None:
    async def scenario(cluster: Cluster) -> None:
        await cluster.start(3, 1, 2)
        await cluster.create_topic("t", {0: [1, 2]})
        cluster.kill(1)
        await cluster.settle()
        await cluster.start_broker(1)
        controller = cluster.active()
        outcomes = await controller.elect_leaders(
            ElectionType.PREFERRED, [T0, TopicPartition("nope", 0)]
        )
        assert outcomes[T0].error_code == 80  # PREFERRED_LEADER_NOT_AVAILABLE: not in ISR
        assert outcomes[TopicPartition("nope", 0)].error_code == 3
        await cluster.write_isr(T0, [2, 1], notify=True)  # the leader let 1 back in
        await cluster.settle()
        outcomes = await controller.elect_leaders(ElectionType.PREFERRED, [T0])
        assert (outcomes[T0].error_code, outcomes[T0].leader) == (0, 1)
        state = await cluster.state(T0)
        assert (state.leader, state.isr) == (1, (2, 1))
        outcomes = await controller.elect_leaders(ElectionType.PREFERRED, [T0])
        assert outcomes[T0].error_code == 84  # ELECTION_NOT_NEEDED

    in_cluster(scenario)


def test_preferred_election_through_the_admin_znode() -> None:
    async def scenario(cluster: Cluster) -> None:
        await cluster.start(3, 1, 2)
        await cluster.create_topic("t", {0: [1, 2]})
        admin = await cluster.start_admin()
        cluster.kill(1)
        await cluster.settle()
        await cluster.start_broker(1)
        await cluster.write_isr(T0, [2, 1], notify=True)
        await admin.create(
            zk_data.PREFERRED_REPLICA_ELECTION, zk_data.encode_preferred_election([T0])
        )
        await cluster.settle()
        assert (await cluster.state(T0)).leader == 1
        assert await admin.exists(zk_data.PREFERRED_REPLICA_ELECTION) is None

    in_cluster(scenario)


def test_unclean_election_on_request() -> None:
    async def scenario(cluster: Cluster) -> None:
        await cluster.start(3, 1, 2)
        await cluster.create_topic("t", {0: [1, 2]})
        await cluster.write_isr(T0, [1], notify=True)
        await cluster.settle()
        cluster.kill(1)
        await cluster.settle()
        assert (await cluster.state(T0)).leader == -1
        outcomes = await cluster.active().elect_leaders(ElectionType.UNCLEAN, [T0])
        assert (outcomes[T0].error_code, outcomes[T0].leader) == (0, 2)

    in_cluster(scenario)


def test_auto_leader_rebalance_moves_leadership_back() -> None:
    async def scenario(cluster: Cluster) -> None:
        await cluster.start(3, 1, 2)
        await cluster.create_topic("t", {0: [1, 2]})
        cluster.kill(1)
        await cluster.settle()
        await cluster.start_broker(1)
        await cluster.write_isr(T0, [2, 1], notify=True)
        await cluster.settle()
        assert (await cluster.state(T0)).leader == 2
        await asyncio.sleep(60)
        await cluster.settle()
        assert (await cluster.state(T0)).leader == 1

    in_cluster(scenario, ControllerConfig(leader_imbalance_check_interval_seconds=60))


# -- sessions ---------------------------------------------------------------------------------


def test_reconnect_with_the_same_session_sets_the_watches_again() -> None:
    """A connection loss drops the session's watches: after CONNECTED the controller re-reads
    everything it watches, so a broker death during or after the outage is still seen."""

    async def scenario(cluster: Cluster) -> None:
        await cluster.start(3, 1, 2)
        await cluster.create_topic("t", {0: [1, 2]})
        session = cluster.brokers[3].session
        session.disconnect()
        await asyncio.sleep(1)
        cluster.kill(1)  # happens while the controller cannot hear it
        await asyncio.sleep(1)
        session.reconnect()
        await cluster.settle()
        assert cluster.active().broker_id == 3
        assert (await cluster.state(T0)).leader == 2
        cluster.kill(2)  # and the watches work again afterwards
        await cluster.settle()
        assert (await cluster.state(T0)).leader == -1

    in_cluster(scenario)


def test_expired_controller_campaigns_again_with_a_new_session() -> None:
    async def scenario(cluster: Cluster) -> None:
        await cluster.start(1, 2)
        cluster.kill(1)
        await cluster.settle()
        assert cluster.active().broker_id == 2 and cluster.active().epoch == 2
        old = cluster.brokers[1]
        assert not old.controller.is_active
        # The broker opens a new session, registers again and hands it to its controller.
        from kafkasim.sim.zookeeper import SimZooKeeperClient

        session = SimZooKeeperClient(cluster.server, 6_000, "broker-1-again")
        await session.start()
        await session.create(
            zk_data.broker_path(1),
            zk_data.encode_broker(zk_data.BrokerInfo(1, "broker1", 9092), 0),
            ephemeral=True,
        )
        await old.controller.replace_session(session)
        await cluster.settle()
        assert old.controller.snapshot().active_controller_id == 2
        assert not old.controller.snapshot().active
        cluster.kill(2)
        await cluster.settle()
        assert old.controller.snapshot().active and old.controller.epoch == 3
        await old.controller.stop()
        await session.close()

    in_cluster(scenario)


def test_stopping_the_controller_hands_over_at_once() -> None:
    """A clean shutdown deletes /controller, so another broker takes over without waiting
    for the session to end."""

    async def scenario(cluster: Cluster) -> None:
        await cluster.start(1, 2)
        await cluster.brokers[1].controller.stop()
        await cluster.settle()
        assert cluster.brokers[2].controller.is_active
        assert cluster.brokers[2].controller.epoch == 2
        with pytest.raises(KafkaError) as info:
            await cluster.brokers[1].controller.create_topics([NewTopic("t", 1, 1)])
        assert info.value.error_name == "NOT_CONTROLLER"

    in_cluster(scenario)
