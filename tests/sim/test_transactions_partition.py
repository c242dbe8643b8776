"""The partition side of transactions against an in-process cluster on the virtual clock:
transactional batches produced over gRPC, COMMIT/ABORT markers written by WriteTxnMarkers
over gRPC (as a transaction coordinator sends them to partition leaders), and consumers of
both isolation levels.

What a Kafka user relies on: a read_committed consumer never returns a record of an aborted
or still-open transaction and returns every committed one once its marker is written; a
read_uncommitted one returns all data and never a marker; the markers are replicated with the
data (acks=all) and each partition answers its own error.
"""

from __future__ import annotations

from pathlib import Path

from kafkasim import proto
from kafkasim.client.simple import MinimalClient
from kafkasim.common.errors import error_for_name
from kafkasim.common.types import TopicPartition
from kafkasim.proto import kafkasim_pb2 as pb
from kafkasim.sim.cluster import SimCluster, broker_address
from kafkasim.storage.records.batch import decode_batch, iter_batches
from tests.sim.helpers import create, leader_of, partition_on, simulate
from tests.sim.test_consumer import consuming, poll_until
from tests.txn_records import Producer

TOPIC = "payments"
TP = TopicPartition(TOPIC, 0)
NOT_LEADER = error_for_name("NOT_LEADER_OR_FOLLOWER").code
UNKNOWN_TOPIC = error_for_name("UNKNOWN_TOPIC_OR_PARTITION").code


async def produce(
    client: MinimalClient, cluster: SimCluster, producer: Producer, *values: int
) -> int:
    """One transactional batch of ``len(values)`` records to TP's leader (acks=all)."""
    batch = producer.batch(len(values), timestamp=cluster.clock.time_ms())
    request = pb.ProduceRequest(acks=-1, timeout_ms=10_000)
    request.partitions.add(topic=TP.topic, partition=TP.partition, records=batch)
    response = await client.transport.call(
        broker_address(leader_of(cluster, TP)), proto.METHOD_PRODUCE, request, timeout_s=20
    )
    assert isinstance(response, pb.ProduceResponse)
    (part,) = response.partitions
    assert part.error_code == 0, part.error_message
    return part.base_offset


async def write_markers(
    client: MinimalClient,
    broker_id: int,
    producer: Producer,
    commit: bool,
    *tps: TopicPartition,
) -> list[tuple[str, int, int]]:
    """WriteTxnMarkers for one transaction to ``broker_id``: (topic, partition, error code)."""
    topics: dict[str, list[int]] = {}
    for tp in tps or (TP,):
        topics.setdefault(tp.topic, []).append(tp.partition)
    request = pb.WriteTxnMarkersRequest(
        markers=[
            pb.WritableTxnMarker(
                producer_id=producer.pid,
                producer_epoch=producer.epoch,
                transaction_result=commit,
                coordinator_epoch=1,
                topics=[
                    pb.WritableTxnMarkerTopic(name=name, partition_indexes=parts)
                    for name, parts in topics.items()
                ],
            )
        ]
    )
    response = await client.transport.call(
        broker_address(broker_id), proto.METHOD_WRITE_TXN_MARKERS, request, timeout_s=60
    )
    assert isinstance(response, pb.WriteTxnMarkersResponse)
    (marker,) = response.markers
    assert marker.producer_id == producer.pid
    return [(p.topic, p.partition, p.error_code) for p in marker.partitions]


def test_read_committed_consumers_read_only_committed_transactions(tmp_path: Path) -> None:
    async def scenario(cluster: SimCluster) -> None:
        client = await create(cluster, TOPIC)
        leader = leader_of(cluster, TP)
        aborting, committing = Producer(1), Producer(2)
        assert await produce(client, cluster, aborting, 0, 1) == 0  # 0-1
        assert await produce(client, cluster, committing, 0) == 2  # 2, open until 4
        assert await write_markers(client, leader, aborting, False) == [(TOPIC, 0, 0)]  # 3
        plain = await client.produce(TP, [b"plain"])  # 4 (the COMMIT below goes to 5)
        assert plain.ok and plain.base_offset == 4
        committed_config = {"auto.offset.reset": "earliest", "isolation.level": "read_committed"}
        async with consuming(cluster, committed_config, name="committed") as consumer:
            consumer.assign([TP])
            # The aborted batch is below the LSO (2) and dropped; P2's is above it.
            assert await poll_until(consumer, 1, polls=5) == []
            assert consumer.position(TP) == 2
            assert await consumer.end_offsets([TP]) == {TP: 2}  # LATEST is the LSO
            assert await write_markers(client, leader, committing, True) == [(TOPIC, 0, 0)]  # 5
            records = await poll_until(consumer, 2)
            assert [(r.offset, r.value) for r in records] == [(2, b"p2-0"), (4, b"plain")]
            assert await consumer.poll(1000) == []
            assert consumer.position(TP) == 6  # past the COMMIT marker
        uncommitted_config = {"auto.offset.reset": "earliest"}
        async with consuming(cluster, uncommitted_config, name="uncommitted") as consumer:
            consumer.assign([TP])
            records = await poll_until(consumer, 4)
            assert [r.value for r in records] == [b"p1-0", b"p1-1", b"p2-0", b"plain"]
            assert await consumer.poll(1000) == []
            assert consumer.position(TP) == 6

    simulate(tmp_path, scenario)


def test_write_txn_markers_over_grpc_is_replicated_and_answers_per_partition(
    tmp_path: Path,
) -> None:
    async def scenario(cluster: SimCluster) -> None:
        client = await create(cluster, TOPIC)
        leader = leader_of(cluster, TP)
        follower = next(b for b in cluster.brokers if b != leader)
        producer = Producer(9, epoch=4)
        await produce(client, cluster, producer, 0)
        missing = TopicPartition("nowhere", 0)
        assert await write_markers(client, follower, producer, True) == [(TOPIC, 0, NOT_LEADER)]
        assert await write_markers(client, leader, producer, True, TP, missing) == [
            (TOPIC, 0, 0),
            ("nowhere", 0, UNKNOWN_TOPIC),
        ]
        # acks=all: answered once every ISR member has the marker.
        for broker_id in cluster.brokers:
            log = partition_on(cluster, broker_id, TP).log
            assert log.log_end_offset == 2
            data = log.read(1, 1 << 20).records
            ((position, header),) = list(iter_batches(data))
            assert header.is_control and (header.producer_id, header.producer_epoch) == (9, 4)
            _, (record,) = decode_batch(data, position)
            assert record.key == b"\x00\x00\x00\x01"  # version 0, COMMIT
        # A stale producer epoch is refused by the partition, by name.
        stale = Producer(9, epoch=3)
        assert await write_markers(client, leader, stale, False) == [
            (TOPIC, 0, error_for_name("INVALID_PRODUCER_EPOCH").code)
        ]

    simulate(tmp_path, scenario)
