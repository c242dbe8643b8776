"""What the interop tests do with kafkasim's own tools: create topics over gRPC, read a
partition back with kafkasim's consumer, run ``console-consumer``/``console-producer`` and
``dump-log``. Every step is bounded in time."""

from __future__ import annotations

import asyncio
import time

from kafkasim.client.consumer import Consumer, ConsumerRecord
from kafkasim.client.simple import MinimalClient
from kafkasim.cluster.local import LocalCluster
from kafkasim.common.clock import SystemClock
from kafkasim.common.rpc_grpc_client import GrpcTransport
from kafkasim.common.types import TopicPartition

DEADLINE_S = 60.0  # any one read or set-up step


def create_topic(
    cluster: LocalCluster,
    name: str,
    *,
    partitions: int = 1,
    replication_factor: int = 3,
    configs: dict[str, str] | None = None,
) -> None:
    """Create ``name`` and wait until every partition has a leader."""

    async def main() -> None:
        transport = GrpcTransport()
        try:
            client = MinimalClient(transport, cluster.bootstrap, SystemClock())
            await client.create_topic(name, partitions, replication_factor, configs)
            await client.wait_for_leaders(name, partitions)
        finally:
            await transport.close()

    asyncio.run(asyncio.wait_for(main(), DEADLINE_S))


def read_partition(cluster: LocalCluster, topic: str, partition: int = 0) -> list[ConsumerRecord]:
    """Every record of the partition below its high watermark, read with kafkasim's consumer
    (manual assignment, from the beginning)."""
    tp = TopicPartition(topic, partition)

    async def main() -> list[ConsumerRecord]:
        transport = GrpcTransport()
        config = {"bootstrap.servers": ",".join(cluster.bootstrap), "auto.offset.reset": "earliest"}
        try:
            async with Consumer(config, transport=transport, clock=SystemClock()) as consumer:
                end = (await consumer.end_offsets([tp]))[tp]
                consumer.assign([tp])
                consumer.seek_to_beginning([tp])
                records: list[ConsumerRecord] = []
                deadline = time.monotonic() + DEADLINE_S
                while (records[-1].offset + 1 if records else 0) < end:
                    assert time.monotonic() < deadline, f"read {len(records)} of {end} records"
                    records.extend(await consumer.poll(500))
                return records
        finally:
            await transport.close()

    return asyncio.run(asyncio.wait_for(main(), DEADLINE_S + 10))
