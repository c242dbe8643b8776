"""The broker's metadata cache: live brokers and partition states, as the controller last sent
them in UpdateMetadata (and LeaderAndIsr's live leaders). Clients' Metadata requests and the
fetchers' leader addresses are answered from it."""

from __future__ import annotations

from dataclasses import dataclass

from kafkasim.common.errors import (
    LeaderNotAvailableError,
    ListenerNotFoundError,
    UnknownTopicOrPartitionError,
)
from kafkasim.common.types import TopicPartition
from kafkasim.controller.api import INTERNAL_TOPICS
from kafkasim.proto import kafkasim_pb2 as pb


@dataclass(frozen=True, slots=True)
class CachedPartition:
    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    replicas: tuple[int, ...]
    offline_replicas: tuple[int, ...]
    zk_version: int
    controller_epoch: int


class MetadataCache:
    def __init__(self, broker_id: int) -> None:
        self.broker_id = broker_id
        self.brokers: dict[int, pb.BrokerEndpoint] = {}
        self.partitions: dict[TopicPartition, CachedPartition] = {}
        self.controller_id = -1
        self.controller_epoch = -1
        self.cluster_id = ""

    def address_of(self, broker_id: int) -> str | None:
        endpoint = self.brokers.get(broker_id)
        return None if endpoint is None else f"{endpoint.host}:{endpoint.port}"

    def add_brokers(self, endpoints: list[pb.BrokerEndpoint]) -> None:
        for endpoint in endpoints:
            copy = pb.BrokerEndpoint()
            copy.CopyFrom(endpoint)
            self.brokers[endpoint.node_id] = copy

    def update(self, request: pb.UpdateMetadataRequest) -> None:
        """Apply an UpdateMetadata (the broker has already checked the controller epoch)."""
        self.controller_id = request.controller_id
        self.controller_epoch = request.controller_epoch
        if request.cluster_id:
            self.cluster_id = request.cluster_id
        if request.live_brokers:
            self.brokers = {}
            self.add_brokers(list(request.live_brokers))
        for topic in request.deleted_topics:
            for tp in [tp for tp in self.partitions if tp.topic == topic]:
                del self.partitions[tp]
        for state in request.partition_states:
            self.partitions[TopicPartition(state.topic, state.partition)] = CachedPartition(
                state.leader,
                state.leader_epoch,
                tuple(state.isr),
                tuple(state.replicas),
                tuple(state.offline_replicas),
                state.zk_version,
                state.controller_epoch,
            )

    def topics(self) -> list[str]:
        return sorted({tp.topic for tp in self.partitions})

    def partition_count(self, topic: str) -> int:
        return sum(1 for tp in self.partitions if tp.topic == topic)

    def endpoint_for(self, broker_id: int, listener: str | None) -> pb.BrokerEndpoint | None:
        """Broker ``broker_id`` as a client on ``listener`` reaches it (None: that broker is
        not live, or has no such listener). ``listener`` None: its inter-broker endpoint."""
        endpoint = self.brokers.get(broker_id)
        if endpoint is None:
            return None
        if listener is None or not endpoint.listeners:
            return pb.BrokerEndpoint(
                node_id=endpoint.node_id, host=endpoint.host, port=endpoint.port, rack=endpoint.rack
            )
        for named in endpoint.listeners:
            if named.name == listener:
                return pb.BrokerEndpoint(
                    node_id=endpoint.node_id, host=named.host, port=named.port, rack=endpoint.rack
                )
        return None

    def metadata(
        self, request: pb.MetadataRequest, listener: str | None = None
    ) -> pb.MetadataResponse:
        """Kafka's Metadata answer for a request that came in on ``listener``: brokers are
        listed with that listener's address; a partition whose leader lacks the listener
        answers LISTENER_NOT_FOUND (Kafka's behaviour with mismatched listeners)."""
        response = pb.MetadataResponse(cluster_id=self.cluster_id, controller_id=self.controller_id)
        reachable: set[int] = set()
        for broker_id in sorted(self.brokers):
            endpoint = self.endpoint_for(broker_id, listener)
            if endpoint is not None:
                response.brokers.append(endpoint)
                reachable.add(broker_id)
        wanted = self.topics() if request.all_topics or not request.topics else list(request.topics)
        by_topic: dict[str, list[tuple[int, CachedPartition]]] = {}
        for tp, state in self.partitions.items():
            by_topic.setdefault(tp.topic, []).append((tp.partition, state))
        for topic in wanted:
            entry = response.topics.add(name=topic, is_internal=topic in INTERNAL_TOPICS)
            parts = by_topic.get(topic)
            if not parts:
                entry.error_code = UnknownTopicOrPartitionError.code
                continue
            for partition, state in sorted(parts):
                live_replicas = [r for r in state.replicas if r in self.brokers]
                offline = [r for r in state.replicas if r not in self.brokers]
                code = 0
                if state.leader < 0 or state.leader not in self.brokers:
                    code = LeaderNotAvailableError.code
                elif state.leader not in reachable:
                    code = ListenerNotFoundError.code
                entry.partitions.add(
                    error_code=code,
                    partition=partition,
                    leader=state.leader if state.leader in self.brokers else -1,
                    leader_epoch=state.leader_epoch,
                    replicas=list(state.replicas),
                    isr=[r for r in state.isr if r in live_replicas] or list(state.isr),
                    offline_replicas=offline,
                )
        return response
