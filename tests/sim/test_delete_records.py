"""DeleteRecords against an in-process cluster on the virtual clock (Kafka's semantics).

What a Kafka user relies on: the records below the offset are gone for consumers at once, on
every replica (each follower takes the leader's log start offset from its fetches, and the
leader answers only when the low watermark — the smallest log start offset over the live
replicas — has reached it); the segments below go with the next retention pass; -1 means the
high watermark; the refusals come with Kafka's error classes and name the partition; a live
replica that cannot follow holds the answer back until REQUEST_TIMED_OUT.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from kafkasim import proto
from kafkasim.client.admin import AdminClient
from kafkasim.client.consumer import Consumer
from kafkasim.common.errors import (
    KafkaError,
    OffsetOutOfRangeError,
    RequestTimedOutError,
    UnknownTopicOrPartitionError,
    error_for_name,
)
from kafkasim.common.types import TopicPartition
from kafkasim.node.replica_types import DeleteRecordsParams, DeleteRecordsPartition
from kafkasim.proto import kafkasim_pb2 as pb
from kafkasim.sim.cluster import SimCluster, broker_address, broker_node
from kafkasim.sim.network import SimTransport
from tests.sim.helpers import create, leader_of, partition_on, produce_all, simulate

PolicyViolationError = error_for_name("POLICY_VIOLATION")

TOPIC = "events"
TP = TopicPartition(TOPIC, 0)
# Small segments (a few one-record batches each) so that retention has whole segments to drop.
SEGMENT_BYTES = "300"
BROKER_PROPS = {"log.retention.check.interval.ms": 2_000}


def admin_for(cluster: SimCluster) -> AdminClient:
    client = cluster.client("admin")
    return AdminClient(client.bootstrap, transport=client.transport, clock=client.clock)


async def replica_log_starts(cluster: SimCluster, tp: TopicPartition) -> dict[int, int]:
    """Each broker's log start offset of ``tp``, as DescribeReplicas reports it (what
    ``kafkasim cluster status`` prints)."""
    client = cluster.client("describer")
    starts: dict[int, int] = {}
    for broker_id in sorted(cluster.brokers):
        response = await client.transport.call(
            broker_address(broker_id),
            proto.METHOD_DESCRIBE_REPLICAS,
            pb.DescribeReplicasRequest(
                partitions=[pb.TopicPartitionId(topic=tp.topic, partition=tp.partition)]
            ),
            timeout_s=5,
        )
        assert isinstance(response, pb.DescribeReplicasResponse)
        for replica in response.replicas:
            starts[replica.broker_id] = replica.log_start_offset
    return starts


@contextlib.asynccontextmanager
async def consuming(cluster: SimCluster) -> AsyncIterator[Consumer]:
    transport = SimTransport(cluster.network, "consumer")
    props: dict[str, object] = {
        "bootstrap.servers": ",".join(broker_address(b) for b in cluster.broker_ids),
        "auto.offset.reset": "earliest",
    }
    try:
        async with Consumer(props, transport=transport, clock=cluster.clock) as consumer:
            yield consumer
    finally:
        await transport.close()


def test_delete_records_moves_every_replicas_log_start_and_consumers_start_there(
    tmp_path: Path,
) -> None:
    """After DeleteRecords(10) the answer's low watermark is 10, every replica reports log
    start 10, a consumer from the beginning reads offset 10 first, and the next retention
    pass drops the segments wholly below 10 on every replica (not before)."""

    async def scenario(cluster: SimCluster) -> None:
        client = await create(cluster, TOPIC, segment_bytes=SEGMENT_BYTES)
        acked = await produce_all(client, TP, [f"r{i}".encode() for i in range(30)])
        assert sorted(acked.values()) == list(range(30))
        segments_before = {
            b: partition_on(cluster, b, TP).log.num_segments for b in cluster.brokers
        }
        assert all(n > 3 for n in segments_before.values()), segments_before

        lows = await admin_for(cluster).delete_records({TP: 10})

        assert lows == {TP: 10}
        assert await replica_log_starts(cluster, TP) == {1: 10, 2: 10, 3: 10}
        async with consuming(cluster) as consumer:
            consumer.assign([TP])
            records = []
            for _ in range(20):
                records.extend(await consumer.poll(1000))
                if len(records) >= 20:
                    break
        assert [r.offset for r in records] == list(range(10, 30))
        assert records[0].value == b"r10"

        await cluster.sleep(5)  # at least two retention passes
        for broker_id in cluster.brokers:
            log = partition_on(cluster, broker_id, TP).log
            first = log.segments.first
            assert first is not None and 0 < first.base_offset <= 10, (broker_id, first)
            assert log.num_segments < segments_before[broker_id]
            assert log.log_start_offset == 10

    simulate(tmp_path, scenario, **BROKER_PROPS)


def test_minus_one_deletes_up_to_the_high_watermark(tmp_path: Path) -> None:
    async def scenario(cluster: SimCluster) -> None:
        client = await create(cluster, TOPIC)
        await produce_all(client, TP, [b"a", b"b", b"c"])
        admin = admin_for(cluster)
        assert await admin.delete_records({TP: -1}) == {TP: 3}
        assert await replica_log_starts(cluster, TP) == {1: 3, 2: 3, 3: 3}
        # Again at or below the log start: nothing moves, the low watermark is reported.
        assert await admin.delete_records({TP: 1}) == {TP: 3}

    simulate(tmp_path, scenario)


def test_refusals_use_kafkas_error_classes_and_name_the_partition(tmp_path: Path) -> None:
    """Past the HW: OFFSET_OUT_OF_RANGE; a compacted topic: POLICY_VIOLATION; an unknown
    topic or partition: UNKNOWN_TOPIC_OR_PARTITION. Other partitions of the same call still
    go through (per-partition results)."""

    async def scenario(cluster: SimCluster) -> None:
        client = await create(cluster, TOPIC)
        await produce_all(client, TP, [b"a", b"b"])
        await create(cluster, "compacted", cleanup_policy="compact")
        admin = admin_for(cluster)
        with pytest.raises(OffsetOutOfRangeError, match=r"events-0.*high watermark 2"):
            await admin.delete_records({TP: 5})
        with pytest.raises(PolicyViolationError, match=r"compacted-0 can not be deleted"):
            await admin.delete_records({TopicPartition("compacted", 0): 0})
        with pytest.raises(UnknownTopicOrPartitionError, match="nowhere-0"):
            await admin.delete_records({TopicPartition("nowhere", 0): 0})
        with pytest.raises(UnknownTopicOrPartitionError, match="events-7"):
            await admin.delete_records({TopicPartition(TOPIC, 7): 0})

        results = await admin.delete_records_results(
            {TP: 1, TopicPartition("compacted", 0): 0, TopicPartition(TOPIC, 9): 0}
        )
        assert results[TP] == 1
        assert isinstance(results[TopicPartition("compacted", 0)], PolicyViolationError)
        assert isinstance(results[TopicPartition(TOPIC, 9)], UnknownTopicOrPartitionError)

    simulate(tmp_path, scenario)


def test_a_live_follower_that_cannot_fetch_holds_the_answer_until_request_timed_out(
    tmp_path: Path,
) -> None:
    """Kafka's low watermark counts every replica on a live broker, in the ISR or not: cut
    from its leader (but still registered), a follower keeps the old log start and the call
    times out; once it fetches again, the same call completes. A crashed follower's broker is
    not live, so it does not hold the call back."""

    async def scenario(cluster: SimCluster) -> None:
        client = await create(cluster, TOPIC)
        await produce_all(client, TP, [f"r{i}".encode() for i in range(6)])
        leader = leader_of(cluster, TP)
        cut, other = (b for b in cluster.broker_ids if b != leader)
        cluster.network.partition([{broker_node(leader)}, {broker_node(cut)}])
        admin = admin_for(cluster)

        with pytest.raises(RequestTimedOutError, match=r"events-0.*low watermark 0"):
            await admin.delete_records({TP: 2}, timeout_ms=3_000)
        assert partition_on(cluster, leader, TP).log.log_start_offset == 2
        assert partition_on(cluster, cut, TP).log.log_start_offset == 0

        cluster.network.heal_all()
        assert await admin.delete_records({TP: 2}, timeout_ms=30_000) == {TP: 2}
        assert (await replica_log_starts(cluster, TP))[cut] == 2

        await cluster.crash(other)
        await cluster.wait_for(
            lambda: other not in cluster.brokers[leader].metadata.brokers,
            what=f"broker {other} gone from the leader's metadata",
        )
        assert await admin.delete_records({TP: 4}) == {TP: 4}

    simulate(tmp_path, scenario)


def test_records_of_the_internal_offsets_topic_cannot_be_deleted(tmp_path: Path) -> None:
    async def scenario(cluster: SimCluster) -> None:
        leader = cluster.brokers[1]
        (result,) = await leader.replica_manager.delete_records(
            DeleteRecordsParams(
                timeout_ms=100,
                partitions=(
                    DeleteRecordsPartition(TopicPartition("__consumer_offsets", 0), offset=0),
                ),
            )
        )
        assert isinstance(result.error, error_for_name("INVALID_TOPIC_EXCEPTION"))
        assert result.low_watermark == -1

    simulate(tmp_path, scenario)


def test_a_failed_partition_error_is_a_kafka_error_naming_it(tmp_path: Path) -> None:
    async def scenario(cluster: SimCluster) -> None:
        client = await create(cluster, TOPIC)
        await produce_all(client, TP, [b"a"])
        results = await admin_for(cluster).delete_records_results({TP: 3})
        error = results[TP]
        assert isinstance(error, KafkaError) and "events-0" in error.message

    simulate(tmp_path, scenario)
