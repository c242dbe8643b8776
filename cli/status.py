"""The cluster status view: brokers (gRPC address, and Kafka-protocol address when known) and
controller from ZooKeeper, partitions in ``kafka-topics --describe``'s shape, and each
replica's HW and LEO asked of its broker.

Internal topics (``__consumer_offsets``'s 50 partitions, ``__transaction_state``) are left out
unless asked for, as a Kafka user reads ``kafka-topics --describe --exclude-internal``; a
:class:`StatusFilter` also keeps one topic, or only under-replicated partitions (ISR smaller
than the replicas, ``kafka-topics --under-replicated-partitions``: those print without their
topic line)."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass

from kafkasim import proto
from kafkasim.common.coordination import NoNodeError
from kafkasim.common.rpc import RpcError
from kafkasim.common.rpc_grpc_client import GrpcTransport, client_transport
from kafkasim.common.types import TopicPartition
from kafkasim.controller import zk_data
from kafkasim.controller.api import INTERNAL_TOPICS
from kafkasim.controller.zk_kazoo import KazooCoordination
from kafkasim.proto import kafkasim_pb2 as pb


@dataclass(frozen=True, slots=True)
class StatusFilter:
    """Which partitions the view shows: ``topic`` only (None: all); internal topics too
    (shown anyway when ``topic`` names one); only under-replicated partitions."""

    topic: str | None = None
    include_internal: bool = False
    under_replicated: bool = False

    def shows_topic(self, topic: str) -> bool:
        if self.topic is not None:
            return topic == self.topic
        return self.include_internal or topic not in INTERNAL_TOPICS


async def describe_cluster(
    connect: str,
    addresses: dict[int, str],
    *,
    alive: dict[int, bool] | None = None,
    kafka_addresses: dict[int, str] | None = None,
    paused: set[int] | None = None,
    metrics_urls: dict[int, str] | None = None,
    shown: StatusFilter = StatusFilter(),
    client_properties: Mapping[str, object] | None = None,
) -> str:
    """``addresses``: each broker's gRPC listener (asked for its replicas, over TLS when
    ``client_properties`` say ``security.protocol=SSL``);
    ``kafka_addresses``: its Kafka-protocol listener, shown beside it; ``alive`` and
    ``paused``: its process's state (SIGSTOP: alive but paused); ``metrics_urls``: where it
    serves its Prometheus metrics."""
    zk = KazooCoordination(connect, 10_000)
    await zk.start()
    transport = client_transport(client_properties or {})
    lines: list[str] = []
    try:
        registered = {int(b) for b in await zk.get_children(zk_data.BROKER_IDS)}
        try:
            data, _ = await zk.get(zk_data.CONTROLLER)
            controller = zk_data.decode_controller(data)
            epoch_data, _ = await zk.get(zk_data.CONTROLLER_EPOCH)
            controller_epoch = zk_data.decode_controller_epoch(epoch_data)
        except NoNodeError:
            controller, controller_epoch = -1, -1
        replicas = await _replica_states(transport, addresses, registered)
        lines.append("Brokers:")
        for broker_id in sorted(addresses):
            process = (
                ""
                if alive is None
                else " process paused"
                if broker_id in (paused or set())
                else (" process up" if alive.get(broker_id) else " process down")
            )
            registration = "registered" if broker_id in registered else "not registered"
            kafka = (kafka_addresses or {}).get(broker_id)
            metrics = (metrics_urls or {}).get(broker_id)
            listeners = (
                f"gRPC {addresses[broker_id]}"
                + (f"  Kafka {kafka}" if kafka else "")
                + (f"  metrics {metrics}" if metrics else "")
            )
            lines.append(f"  {broker_id}  {listeners}  {registration}{process}")
        lines.append(
            f"Controller: broker {controller} (controller epoch {controller_epoch})"
            if controller >= 0
            else "Controller: none"
        )
        topics = [t for t in await zk.get_children(zk_data.BROKER_TOPICS) if shown.shows_topic(t)]
        if shown.topic is not None and not topics:
            raise ValueError(f"Topic '{shown.topic}' does not exist")
        for topic in sorted(topics):
            data, _ = await zk.get(zk_data.topic_path(topic))
            assignment = zk_data.decode_topic_assignment(data)
            try:
                config_data, _ = await zk.get(zk_data.topic_config_path(topic))
                config = zk_data.decode_topic_config(config_data)
            except NoNodeError:
                config = {}
            rf = len(next(iter(assignment.values()), []))
            configs = ",".join(f"{k}={v}" for k, v in sorted(config.items()))
            if not shown.under_replicated:
                lines.append(
                    f"Topic: {topic}\tPartitionCount: {len(assignment)}\t"
                    f"ReplicationFactor: {rf}\tConfigs: {configs}"
                )
            for partition in sorted(assignment):
                tp = TopicPartition(topic, partition)
                try:
                    state_data, stat = await zk.get(zk_data.partition_state_path(tp))
                    state = zk_data.decode_partition_state(state_data, stat.version)
                    leader, isr, leader_epoch = state.leader, state.isr, state.leader_epoch
                except NoNodeError:
                    leader, isr, leader_epoch = -1, (), -1
                if shown.under_replicated and len(isr) >= len(assignment[partition]):
                    continue
                lines.append(
                    f"\tTopic: {topic}\tPartition: {partition}\tLeader: {leader}\t"
                    f"Replicas: {','.join(map(str, assignment[partition]))}\t"
                    f"Isr: {','.join(map(str, isr))}\tLeaderEpoch: {leader_epoch}"
                )
                for replica in assignment[partition]:
                    found = replicas.get((replica, tp))
                    if found is None:
                        lines.append(f"\t\treplica {replica}: unavailable")
                        continue
                    role = "leader  " if found.is_leader else "follower"
                    lines.append(
                        f"\t\treplica {replica}: {role}  HW {found.high_watermark}  "
                        f"LEO {found.log_end_offset}  log start "
                        f"{found.log_start_offset}  {found.size_bytes} bytes"
                    )
    finally:
        await transport.close()
        await zk.close()
    return "\n".join(lines) + "\n"


async def _replica_states(
    transport: GrpcTransport, addresses: dict[int, str], registered: set[int]
) -> dict[tuple[int, TopicPartition], pb.ReplicaState]:
    async def ask(broker_id: int) -> list[pb.ReplicaState]:
        try:
            response = await transport.call(
                addresses[broker_id],
                proto.METHOD_DESCRIBE_REPLICAS,
                pb.DescribeReplicasRequest(),
                timeout_s=2,
            )
        except RpcError:
            return []
        assert isinstance(response, pb.DescribeReplicasResponse)
        return list(response.replicas)

    ids = sorted(b for b in addresses if b in registered)
    answers = await asyncio.gather(*(ask(b) for b in ids))
    return {
        (r.broker_id, TopicPartition(r.topic, r.partition)): r
        for replicas in answers
        for r in replicas
    }
