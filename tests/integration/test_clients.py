"""The producer and consumer against a real local cluster (ZooKeeper + 3 broker processes,
real gRPC, the wall clock): keys land on Kafka's partitions, an idempotent retry forced by a
paused replica set is written once, and a group of three consumers rebalances when one leaves
without processing any committed record twice."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from kafkasim.client.consumer import Consumer, ConsumerRebalanceListener
from kafkasim.client.producer import Producer
from kafkasim.client.simple import MinimalClient
from kafkasim.cluster.local import LocalCluster
from kafkasim.common.clock import SystemClock
from kafkasim.common.rpc_grpc_client import GrpcTransport
from kafkasim.common.types import TopicPartition
from kafkasim.controller.zk_process import zookeeper_available
from tests.cli_run import TEST_BROKER_PROPS
from tests.unit.client.test_partitioner import MURMUR2_VECTORS


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    reason = zookeeper_available()
    if reason is not None:
        pytest.skip(f"real ZooKeeper unavailable: {reason}")
    root = Path(tmp_path_factory.mktemp("clients"))
    local = LocalCluster(root, brokers=3, broker_props=dict(TEST_BROKER_PROPS))
    try:
        local.start()
        yield local
    finally:
        local.stop()


async def _topic(client: MinimalClient, name: str, partitions: int) -> None:
    await client.create_topic(name, partitions, 3, {"min.insync.replicas": "2"})
    await client.wait_for_leaders(name, partitions)


def test_keys_land_on_the_partitions_kafkas_java_client_chooses(cluster: LocalCluster) -> None:
    """Each published murmur2 vector's key goes to toPositive(murmur2) % 7, read back there."""

    async def main() -> None:
        transport = GrpcTransport()
        try:
            client = MinimalClient(transport, cluster.bootstrap, SystemClock())
            await _topic(client, "keyed", 7)
            config = {"bootstrap.servers": ",".join(cluster.bootstrap), "linger.ms": 5}
            async with Producer(config, transport=transport, clock=SystemClock()) as producer:
                futures = [producer.send("keyed", b"v", key=key) for key, _ in MURMUR2_VECTORS]
                landed = [(await f).partition for f in futures]
            expected = [(murmur & 0x7FFFFFFF) % 7 for _, murmur in MURMUR2_VECTORS]
            assert landed == expected
            for p in range(7):
                keys = [r.key for r in await client.read_all(TopicPartition("keyed", p))]
                assert keys == [
                    k for (k, _), e in zip(MURMUR2_VECTORS, expected, strict=True) if e == p
                ]
        finally:
            await transport.close()

    asyncio.run(main())


@pytest.mark.parametrize("idempotent", [True, False])
def test_a_retry_after_a_lost_answer_is_written_once_only_with_idempotence(
    cluster: LocalCluster, idempotent: bool
) -> None:
    """Both followers are paused, so the leader appends but cannot answer acks=all within the
    request timeout; the producer sends the batch again; then the followers resume. With
    idempotence every retry is recognised as a duplicate; without it, each retry is written
    again (which proves the retries happened)."""
    topic = f"retried-{idempotent}".lower()

    async def main() -> None:
        transport = GrpcTransport()
        try:
            client = MinimalClient(transport, cluster.bootstrap, SystemClock())
            await _topic(client, topic, 1)
            tp = TopicPartition(topic, 0)
            await client.refresh_metadata([topic])
            leader = client.metadata.leader(tp)
            followers = [b for b in cluster.brokers if b != leader]
            config = {
                "bootstrap.servers": ",".join(cluster.bootstrap),
                "enable.idempotence": idempotent,
                "acks": "all",
                "request.timeout.ms": 1500,
                "delivery.timeout.ms": 60_000,
                "retry.backoff.ms": 100,
                "max.in.flight.requests.per.connection": 1,
            }
            async with Producer(config, transport=transport, clock=SystemClock()) as producer:
                # One acknowledged record first: the producer id and metadata are in place.
                await asyncio.wait_for(producer.send(topic, b"warm"), 30)
                for broker in followers:
                    cluster.pause(broker)
                try:
                    future = producer.send(topic, b"once")
                    await asyncio.sleep(4)  # past the request timeout: at least one retry
                finally:
                    for broker in followers:
                        cluster.resume(broker)
                metadata = await asyncio.wait_for(future, 60)
            values = [r.value for r in await client.read_all(tp)]
            copies = values.count(b"once")
            assert copies == 1 if idempotent else copies >= 2, values
            assert metadata.offset in [i for i, v in enumerate(values) if v == b"once"]
        finally:
            await transport.close()

    asyncio.run(main())


class _Recorder(ConsumerRebalanceListener):
    def __init__(self) -> None:
        self.assignments: list[list[TopicPartition]] = []

    async def on_partitions_assigned(self, partitions: list[TopicPartition]) -> None:
        self.assignments.append(sorted(partitions))


def test_three_consumers_rebalance_when_one_leaves_and_process_nothing_twice(
    cluster: LocalCluster,
) -> None:
    """Three members of one group read 6 partitions and commit after processing each poll;
    after reading a third of the records one member closes (LeaveGroup). The other two take
    over its partitions from the committed offsets: every record is processed exactly once."""
    topic, partitions, per_partition = "grouped", 6, 100

    async def main() -> None:
        transport = GrpcTransport()
        try:
            client = MinimalClient(transport, cluster.bootstrap, SystemClock())
            await _topic(client, topic, partitions)
            for p in range(partitions):
                for start in range(0, per_partition, 25):
                    result = await client.produce(
                        TopicPartition(topic, p),
                        [b"%d-%d" % (p, i) for i in range(start, start + 25)],
                        acks=-1,
                    )
                    assert result.ok
            total = partitions * per_partition
            processed: list[tuple[int, int]] = []
            listeners = {name: _Recorder() for name in ("a", "b", "c")}
            c_left = asyncio.Event()

            async def member(name: str) -> None:
                config = {
                    "bootstrap.servers": ",".join(cluster.bootstrap),
                    "group.id": "three",
                    "client.id": name,
                    "auto.offset.reset": "earliest",
                    "enable.auto.commit": False,
                    "session.timeout.ms": 6000,
                    "heartbeat.interval.ms": 500,
                    "max.poll.records": 20,
                }
                async with Consumer(config, transport=transport, clock=SystemClock()) as consumer:
                    consumer.subscribe([topic], listener=listeners[name])
                    idle = 0
                    while len(processed) < total and idle < 40:
                        if name == "c" and len(processed) >= total // 3:
                            c_left.set()
                            return  # close(): LeaveGroup
                        records = await consumer.poll(250)
                        idle = 0 if records else idle + 1
                        processed.extend((r.partition, r.offset) for r in records)
                        if records:
                            await consumer.commit()

            await asyncio.wait_for(asyncio.gather(member("a"), member("b"), member("c")), 180)
            assert c_left.is_set()
            assert len(set(processed)) == len(processed), "a committed record was read twice"
            assert len(processed) == total
            final = listeners["a"].assignments[-1] + listeners["b"].assignments[-1]
            assert sorted(final) == [TopicPartition(topic, p) for p in range(partitions)]
        finally:
            await transport.close()

    asyncio.run(main())


def test_a_request_body_that_is_not_protobuf_is_refused_by_name(cluster: LocalCluster) -> None:
    """A raw gRPC call to a broker process with bytes that are no protobuf message: the broker
    answers INVALID_ARGUMENT naming the method, logs no traceback, and keeps serving."""
    broker = cluster.brokers[1]
    logged_before = broker.log_path.stat().st_size

    async def main() -> None:
        async with grpc.aio.insecure_channel(broker.address) as channel:
            call = channel.unary_unary("/kafkasim.Kafkasim/Produce")
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await call(b"\xff\xff\xff\xff not protobuf", timeout=10)
            assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            details = refused.value.details() or ""
            assert "/kafkasim.Kafkasim/Produce" in details
            assert "not a valid kafkasim.ProduceRequest message" in details
        transport = GrpcTransport()
        try:
            client = MinimalClient(transport, [broker.address], SystemClock())
            response = await client.refresh_metadata()
            assert len(response.brokers) == 3
        finally:
            await transport.close()

    asyncio.run(main())
    with broker.log_path.open("rb") as log:
        log.seek(logged_before)
        assert b"Traceback" not in log.read()
