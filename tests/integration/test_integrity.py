"""Issue 20 against real broker processes (real ZooKeeper, real gRPC): forged controller
requests are refused with STALE_BROKER_EPOCH and acks=all records survive them; a log dir of
another cluster is refused at start-up."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from kafkasim import proto
from kafkasim.client.simple import MinimalClient
from kafkasim.cluster.local import BrokerStartError, LocalCluster
from kafkasim.common.clock import SystemClock
from kafkasim.common.errors import error_for_name
from kafkasim.common.rpc_grpc_client import GrpcTransport
from kafkasim.common.types import TopicPartition
from kafkasim.controller import zk_data
from kafkasim.controller.zk_kazoo import KazooCoordination
from kafkasim.proto import kafkasim_pb2 as pb
from kafkasim.storage.checkpoints import read_meta_properties, write_meta_properties

TP = TopicPartition("events", 0)
STALE_BROKER_EPOCH = error_for_name("STALE_BROKER_EPOCH").code


async def _zk_state(cluster: LocalCluster) -> tuple[int, dict[int, int], str]:
    """(controller id, broker id -> epoch (registration czxid), cluster id)."""
    zk = KazooCoordination(cluster.zookeeper.connect_string, 6000)
    await zk.start()
    try:
        data, _ = await zk.get(zk_data.CONTROLLER)
        epochs = {}
        for broker_id in cluster.brokers:
            _, stat = await zk.get(zk_data.broker_path(broker_id))
            epochs[broker_id] = stat.czxid
        cluster_id, _ = await zk.get(zk_data.CLUSTER_ID)
        return zk_data.decode_controller(data), epochs, zk_data.decode_cluster_id(cluster_id)
    finally:
        await zk.close()


def test_forged_controller_requests_lose_no_acknowledged_record(
    local_cluster: LocalCluster,
) -> None:
    async def main() -> None:
        client = MinimalClient(GrpcTransport(), local_cluster.bootstrap, SystemClock())
        try:
            await client.create_topic("events", 1, 3, {"min.insync.replicas": "2"})
            await client.wait_for_leaders("events", 1)
            acked = {}
            for i in range(5):
                result = await client.produce(TP, [b"acked-%d" % i], acks=-1)
                assert result.ok, result
                acked[b"acked-%d" % i] = result.base_offset
            controller, epochs, _ = await _zk_state(local_cluster)
            leader = client.metadata.leader(TP)

            async def send(broker_id: int, method: str, request: Any) -> Any:
                address = local_cluster.brokers[broker_id].address
                return await client.transport.call(address, method, request, timeout_s=10)

            for broker_id, epoch in epochs.items():
                for forged in (-1, epoch - 1, 2**63 - 1):
                    update = await send(
                        broker_id,
                        proto.METHOD_UPDATE_METADATA,
                        pb.UpdateMetadataRequest(
                            controller_id=broker_id,
                            controller_epoch=2**31 - 1,
                            broker_epoch=forged,
                        ),
                    )
                    assert update.error_code == STALE_BROKER_EPOCH
                    stop = await send(
                        broker_id,
                        proto.METHOD_STOP_REPLICA,
                        pb.StopReplicaRequest(
                            controller_id=broker_id,
                            controller_epoch=2**31 - 1,
                            broker_epoch=forged,
                            partitions=[
                                pb.StopReplicaPartition(
                                    topic=TP.topic, partition=0, delete_partition=True
                                )
                            ],
                        ),
                    )
                    assert stop.error_code == STALE_BROKER_EPOCH
            other = next(b for b in epochs if b != leader)
            shutdown = await send(
                controller,
                proto.METHOD_CONTROLLED_SHUTDOWN,
                pb.ControlledShutdownRequest(broker_id=leader, broker_epoch=epochs[other]),
            )
            assert shutdown.error_code == STALE_BROKER_EPOCH
            # The brokers still obey the real controller: the leader dies, another takes over.
            local_cluster.kill(leader)
            for _ in range(200):
                await client.refresh_metadata(["events"])
                if client.metadata.leader(TP) not in (-1, leader):
                    break
                await asyncio.sleep(0.1)
            assert client.metadata.leader(TP) not in (-1, leader)
            read = {r.value: r.offset for r in await client.read_all(TP)}
            assert read == acked
        finally:
            await client.transport.close()

    asyncio.run(main())


def test_a_log_dir_of_another_cluster_is_refused(local_cluster: LocalCluster) -> None:
    _, _, cluster_id = asyncio.run(_zk_state(local_cluster))
    broker = local_cluster.brokers[2]
    log_dir = broker.data_dir / "logs"
    props = read_meta_properties(log_dir)
    assert props is not None and props["cluster.id"] == cluster_id
    local_cluster.kill(2)
    write_meta_properties(log_dir, 2, "AAAAAAAAAAAAAAAAAAAAAA")
    local_cluster.start_broker(2)
    with pytest.raises(BrokerStartError, match="exited"):
        local_cluster.wait_serving(2)
    output = broker.log_path.read_text()
    assert "AAAAAAAAAAAAAAAAAAAAAA" in output and cluster_id in output
    write_meta_properties(log_dir, 2, cluster_id)
    local_cluster.start_broker(2)
    local_cluster.wait_serving(2)
