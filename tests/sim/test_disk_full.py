"""A full disk under a leader, in the simulation: the produce that hits it is answered
KAFKA_STORAGE_ERROR, the broker halts (its only log dir has failed), the controller elects a
follower, and once the disk has room the broker restarts and catches up, nothing acknowledged
lost."""

from __future__ import annotations

from pathlib import Path

from kafkasim import proto
from kafkasim.common.errors import error_for_name
from kafkasim.common.types import TopicPartition
from kafkasim.proto import kafkasim_pb2 as pb
from kafkasim.sim.cluster import SimCluster, broker_address
from kafkasim.sim.network import SimTransport
from kafkasim.storage import disk_faults
from tests.sim.helpers import create, leader_of, leo_of, produce_all, simulate
from tests.unit.storage.logtools import make_batch

TP = TopicPartition("events", 0)


def test_a_leader_whose_disk_fills_answers_kafka_storage_error_halts_and_comes_back(
    tmp_path: Path,
) -> None:
    async def scenario(cluster: SimCluster) -> None:
        client = await create(cluster, TP.topic, min_insync_replicas="2")
        acked = await produce_all(client, TP, [b"v%d" % i for i in range(5)])
        old = leader_of(cluster, TP)
        disk_faults.fill(cluster.log_dirs(old))
        transport = SimTransport(cluster.network, "raw")
        try:
            response = await transport.call(
                broker_address(old),
                proto.METHOD_PRODUCE,
                pb.ProduceRequest(
                    acks=-1,
                    timeout_ms=5000,
                    partitions=[
                        pb.ProducePartitionData(
                            topic=TP.topic, partition=0, records=make_batch([b"lost"])
                        )
                    ],
                ),
                timeout_s=10,
            )
        finally:
            await transport.close()
        assert isinstance(response, pb.ProduceResponse)
        answer = response.partitions[0]
        assert answer.error_code == error_for_name("KAFKA_STORAGE_ERROR").code
        assert "No space left on device" in answer.error_message
        # The broker halted; another in-sync replica leads, and writes go on there.
        await cluster.wait_for(lambda: old not in cluster.brokers, what="the halt")
        await cluster.wait_for(lambda: leader_of(cluster, TP) not in (-1, old), what="a new leader")
        acked.update(await produce_all(client, TP, [b"w%d" % i for i in range(5)]))
        disk_faults.free(cluster.log_dirs(old))
        await cluster.start_broker(old)
        await cluster.wait_for(lambda: leo_of(cluster, old, TP) == 10, what="the catch-up")
        records = await client.read_all(TP)
        assert sorted(r.value for r in records) == sorted(acked)
        assert all(r.value != b"lost" for r in records)

    try:
        simulate(tmp_path, scenario)
    finally:
        disk_faults.free_all()
