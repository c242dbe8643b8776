"""KIP-380 broker epochs on the virtual clock: controller requests that do not carry the
target broker's current epoch (the czxid of its registration znode) are refused with
STALE_BROKER_EPOCH before anything else of them is looked at, so the forged requests of
issue 20 item 3 lose nothing acknowledged."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kafkasim import proto
from kafkasim.common.errors import error_for_name
from kafkasim.common.types import TopicPartition
from kafkasim.controller import zk_data
from kafkasim.proto import kafkasim_pb2 as pb
from kafkasim.sim.cluster import SimCluster, broker_address
from tests.sim.helpers import create, leader_of, log_values, partition_on, produce_all, simulate

TP = TopicPartition("events", 0)
STALE_BROKER_EPOCH = error_for_name("STALE_BROKER_EPOCH").code
INT32_MAX = 2**31 - 1


async def raw(cluster: SimCluster, broker_id: int, method: str, request: Any) -> Any:
    """One request from a client that is not the controller."""
    client = cluster.client("attacker")
    return await client.transport.call(broker_address(broker_id), method, request, timeout_s=5)


async def registration_czxid(cluster: SimCluster, broker_id: int) -> int:
    stat = await cluster.brokers[broker_id].zk.exists(zk_data.broker_path(broker_id))
    assert stat is not None
    return stat.czxid


def test_broker_epoch_is_the_czxid_of_its_registration(tmp_path: Path) -> None:
    """... and a new registration after session expiry gives a new, larger epoch."""

    async def scenario(cluster: SimCluster) -> None:
        broker = cluster.brokers[2]
        first = broker.broker_epoch
        assert first == await registration_czxid(cluster, 2)
        cluster.zk_server.expire_session(broker.zk.session_id)
        await cluster.wait_for(
            lambda: broker.broker_epoch > first, what="re-registration with a new epoch"
        )
        assert broker.broker_epoch == await registration_czxid(cluster, 2)
        # The controller knows the new epoch and its requests are accepted again.
        controller = cluster.brokers[cluster.controller_id()].controller
        assert controller is not None
        await cluster.wait_for(
            lambda: controller.snapshot().live_brokers[2].epoch == broker.broker_epoch,
            what="the controller to see the new epoch",
        )
        client = await create(cluster, "after-expiry", rf=3)
        await client.wait_for_leaders("after-expiry", 1)
        await cluster.wait_for(
            lambda: TopicPartition("after-expiry", 0) in broker.replica_manager.partitions,
            what="broker 2 to host the new topic",
        )

    simulate(tmp_path, scenario)


def test_forged_controller_requests_are_refused_and_acked_records_survive(
    tmp_path: Path,
) -> None:
    """The attack of issue 20: StopReplica(delete) to every replica, ControlledShutdown of
    the leader on behalf of another broker, UpdateMetadata(controller_epoch=2^31-1). Each is
    refused with STALE_BROKER_EPOCH; the 5 acks=all records (RF 3, min ISR 2) stay on every
    replica and the brokers keep obeying the real controller."""

    async def scenario(cluster: SimCluster) -> None:
        client = await create(cluster, "events", min_insync_replicas="2")
        acked = await produce_all(client, TP, [b"acked-%d" % i for i in range(5)])
        assert len(acked) == 5
        leader = leader_of(cluster, TP)
        other = next(b for b in cluster.brokers if b != leader)
        for broker_id in sorted(cluster.brokers):
            epoch = cluster.brokers[broker_id].broker_epoch
            for forged in (-1, 0, epoch - 1, epoch + 1, 2**63 - 1):
                update = await raw(
                    cluster,
                    broker_id,
                    proto.METHOD_UPDATE_METADATA,
                    pb.UpdateMetadataRequest(
                        controller_id=broker_id,
                        controller_epoch=INT32_MAX,
                        broker_epoch=forged,
                    ),
                )
                assert update.error_code == STALE_BROKER_EPOCH
                stop = await raw(
                    cluster,
                    broker_id,
                    proto.METHOD_STOP_REPLICA,
                    pb.StopReplicaRequest(
                        controller_id=broker_id,
                        controller_epoch=INT32_MAX,
                        broker_epoch=forged,
                        partitions=[
                            pb.StopReplicaPartition(
                                topic=TP.topic, partition=0, delete_partition=True
                            )
                        ],
                    ),
                )
                assert stop.error_code == STALE_BROKER_EPOCH
                lai = await raw(
                    cluster,
                    broker_id,
                    proto.METHOD_LEADER_AND_ISR,
                    pb.LeaderAndIsrRequest(
                        controller_id=broker_id, controller_epoch=INT32_MAX, broker_epoch=forged
                    ),
                )
                assert lai.error_code == STALE_BROKER_EPOCH
            # The controller epoch of the forged requests was never recorded.
            assert cluster.brokers[broker_id].replica_manager.controller_epoch < INT32_MAX
        shutdown = await raw(
            cluster,
            cluster.controller_id(),
            proto.METHOD_CONTROLLED_SHUTDOWN,
            pb.ControlledShutdownRequest(
                broker_id=leader, broker_epoch=cluster.brokers[other].broker_epoch
            ),
        )
        assert shutdown.error_code == STALE_BROKER_EPOCH
        assert leader_of(cluster, TP) == leader
        for broker_id in cluster.brokers:
            assert [v for _, v in log_values(cluster, broker_id, TP)] == sorted(acked)
        # The real controller is still obeyed: the leader dies, another replica takes over
        # and the records are all there.
        await cluster.crash(leader)
        await cluster.wait_for(
            lambda: leader_of(cluster, TP) not in (-1, leader), what="a new leader"
        )
        assert partition_on(cluster, leader_of(cluster, TP), TP).isr
        read = {r.value: r.offset for r in await client.read_all(TP)}
        assert read == acked

    simulate(tmp_path, scenario)
