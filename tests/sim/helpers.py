"""Helpers for the simulation tests."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from kafkasim.client.simple import MinimalClient
from kafkasim.common.types import TopicPartition
from kafkasim.node.broker import MarkerSenderFactory
from kafkasim.node.rules import KAFKA_RULES, ReplicationRules
from kafkasim.node.txn_marker_sender import rpc_marker_sender
from kafkasim.sim.cluster import SimCluster
from kafkasim.sim.loop import run_simulation

TIME_LIMIT_S = 3600.0


def simulate(
    tmp_path: Path,
    scenario: Callable[[SimCluster], Awaitable[Any]],
    *,
    brokers: int = 3,
    seed: int = 0,
    rules: ReplicationRules = KAFKA_RULES,
    marker_sender_factory: MarkerSenderFactory = rpc_marker_sender,
    **props: object,
) -> Any:
    """Run ``scenario`` against a started cluster whose brokers run by ``rules``; stop
    everything afterwards."""

    async def main() -> Any:
        cluster = SimCluster(
            tmp_path,
            brokers=brokers,
            seed=seed,
            broker_props=props,
            rules=rules,
            marker_sender_factory=marker_sender_factory,
        )
        await cluster.start()
        try:
            await cluster.wait_for(lambda: cluster.controller_id() > 0, what="a controller")
            return await scenario(cluster)
        finally:
            await cluster.stop()

    return run_simulation(main(), time_limit_s=TIME_LIMIT_S)


async def create(
    cluster: SimCluster, topic: str, partitions: int = 1, rf: int = 3, **configs: str
) -> MinimalClient:
    client = cluster.client()
    await client.create_topic(
        topic, partitions, rf, {k.replace("_", "."): v for k, v in configs.items()}
    )
    await client.wait_for_leaders(topic, partitions)
    return client


def leader_of(cluster: SimCluster, tp: TopicPartition) -> int:
    for broker_id, broker in cluster.brokers.items():
        partition = broker.replica_manager.partitions.get(tp)
        if partition is not None and partition.is_leader:
            return broker_id
    return -1


def partition_on(cluster: SimCluster, broker_id: int, tp: TopicPartition) -> Any:
    return cluster.brokers[broker_id].replica_manager.partitions[tp]


def leo_of(cluster: SimCluster, broker_id: int, tp: TopicPartition) -> int:
    """A replica's log end offset, or -1 if that broker is down or does not host it yet."""
    broker = cluster.brokers.get(broker_id)
    partition = None if broker is None else broker.replica_manager.partitions.get(tp)
    return -1 if partition is None else int(partition.log_end_offset)


async def produce_all(
    client: MinimalClient, tp: TopicPartition, values: list[bytes], acks: int = -1
) -> dict[bytes, int]:
    """Produce one record per call; returns value -> offset for the acknowledged ones."""
    acked: dict[bytes, int] = {}
    for value in values:
        result = await client.produce(tp, [value], acks=acks)
        if result.ok:
            acked[value] = result.base_offset
    return acked


def log_values(
    cluster: SimCluster, broker_id: int, tp: TopicPartition, end: int | None = None
) -> list[tuple[int, bytes | None]]:
    """(offset, value) of everything in a replica's log up to ``end`` (default: its LEO)."""
    from kafkasim.storage.records.batch import decode_batch, iter_batches

    log = partition_on(cluster, broker_id, tp).log
    stop = log.log_end_offset if end is None else end
    out: list[tuple[int, bytes | None]] = []
    offset = log.log_start_offset
    while offset < stop:
        data = log.read(offset, 1 << 20, max_offset=stop).records
        if not data:
            break
        for position, _ in iter_batches(data):
            _, records = decode_batch(data, position)
            out.extend((r.offset, r.value) for r in records if offset <= r.offset < stop)
        offset = out[-1][0] + 1 if out else stop
    return out
