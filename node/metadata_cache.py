"""The broker's metadata cache: live brokers and partition states, as the controller last sent
them in UpdateMetadata (and LeaderAndIsr's live leaders). Clients' Metadata requests and the
fetchers' leader addresses are answered from it."""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass

from kafkasim.common.errors import (
    KafkaError,
    LeaderNotAvailableError,
    ListenerNotFoundError,
    UnknownTopicOrPartitionError,
)
from kafkasim.common.types import TopicPartition
from kafkasim.controller.api import INTERNAL_TOPICS
from kafkasim.proto import kafkasim_pb2 as pb


@dataclass(frozen=True, slots=True)
class BrokerAddress:
    """A live broker as a client on one listener reaches it."""

    node_id: int
    host: str
    port: int
    rack: str | None = None


@dataclass(frozen=True, slots=True)
class PartitionView:
    """One partition as Metadata answers it (``error``: Kafka's error class or None)."""

    partition: int
    error: type[KafkaError] | None
    leader: int
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    offline_replicas: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class TopicView:
    name: str
    error: type[KafkaError] | None
    is_internal: bool
    partitions: tuple[PartitionView, ...]


@dataclass(frozen=True, slots=True)
class ClusterView:
    """Kafka's Metadata answer as domain values, for one listener."""

    cluster_id: str
    controller_id: int
    brokers: tuple[BrokerAddress, ...]
    topics: tuple[TopicView, ...]


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
        # Set by the first UpdateMetadata that lists this broker: until then the cache knows
        # no broker and no topic, and an answer from it would tell a client the cluster is
        # empty (see wait_ready).
        self._ready = asyncio.Event()

    def address_of(self, broker_id: int) -> str | None:
        endpoint = self.brokers.get(broker_id)
        return None if endpoint is None else f"{endpoint.host}:{endpoint.port}"

    def listener_address_of(self, broker_id: int, listener: str) -> str | None:
        """Where broker ``broker_id``'s listener ``listener`` is (None: not live, or it has no
        such listener; never its inter-broker address instead)."""
        endpoint = self.brokers.get(broker_id)
        if endpoint is None:
            return None
        for named in endpoint.listeners:
            if named.name == listener:
                return f"{named.host}:{named.port}"
        return None

    def add_brokers(self, endpoints: list[pb.BrokerEndpoint]) -> None:
        for endpoint in endpoints:
            copy = pb.BrokerEndpoint()
            copy.CopyFrom(endpoint)
            self.brokers[endpoint.node_id] = copy

    @property
    def ready(self) -> bool:
        """Whether the controller has told this broker about the cluster (itself included)."""
        return self._ready.is_set()

    async def wait_ready(self, timeout_s: float) -> bool:
        """Until the first UpdateMetadata listing this broker has arrived, at most
        ``timeout_s``; whether it has. A broker that has just (re)started answers Kafka's
        clients only then: an empty Metadata answer makes librdkafka forget every broker it
        knew, and it would not ask the bootstrap servers again for minutes."""
        if not self._ready.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._ready.wait(), timeout_s)
        return self._ready.is_set()

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
        if self.broker_id in self.brokers:
            self._ready.set()
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

    def marker_leader(self, tp: TopicPartition) -> int | None:
        """Where a transaction marker for ``tp`` goes (``node.txn_markers.PartitionLeaders``):
        its leader; -1 when the leader is not alive, or not known yet; None when the cluster
        has no ``tp``.

        Before the first UpdateMetadata (a restarted broker) the cache knows no partition at
        all: that is not known yet, never gone. A coordinator that took over its transaction
        log partitions then (a LeaderAndIsr that came first) dropped the markers of committed
        transactions as if their partitions had been deleted, and the records stayed invisible
        to read_committed consumers (catalog txn-leader-crash, random seed 8)."""
        state = self.partitions.get(tp)
        if state is None:
            return None if self.ready else -1
        return state.leader if state.leader in self.brokers else -1

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

    def address(self, broker_id: int, listener: str | None) -> BrokerAddress | None:
        """Where a client on ``listener`` reaches ``broker_id`` (None: not live, or no such
        listener); ``listener`` None: the inter-broker endpoint."""
        endpoint = self.endpoint_for(broker_id, listener)
        if endpoint is None:
            return None
        return BrokerAddress(endpoint.node_id, endpoint.host, endpoint.port, endpoint.rack or None)

    def describe(self, topics: list[str] | None, listener: str | None = None) -> ClusterView:
        """Kafka's Metadata answer for a request that came in on ``listener`` (``topics``
        None: every topic): brokers are listed with that listener's address; a partition whose
        leader lacks the listener answers LISTENER_NOT_FOUND (Kafka's behaviour with
        mismatched listeners)."""
        brokers = tuple(
            address
            for address in (self.address(b, listener) for b in sorted(self.brokers))
            if address is not None
        )
        reachable = {b.node_id for b in brokers}
        by_topic: dict[str, list[tuple[int, CachedPartition]]] = {}
        for tp, state in self.partitions.items():
            by_topic.setdefault(tp.topic, []).append((tp.partition, state))
        views: list[TopicView] = []
        for topic in self.topics() if topics is None else topics:
            parts = by_topic.get(topic)
            if not parts:
                views.append(
                    TopicView(topic, UnknownTopicOrPartitionError, topic in INTERNAL_TOPICS, ())
                )
                continue
            partitions: list[PartitionView] = []
            for partition, state in sorted(parts):
                live_replicas = [r for r in state.replicas if r in self.brokers]
                error: type[KafkaError] | None = None
                if state.leader < 0 or state.leader not in self.brokers:
                    error = LeaderNotAvailableError
                elif state.leader not in reachable:
                    error = ListenerNotFoundError
                partitions.append(
                    PartitionView(
                        partition,
                        error,
                        state.leader if state.leader in self.brokers else -1,
                        state.leader_epoch,
                        state.replicas,
                        tuple(r for r in state.isr if r in live_replicas) or state.isr,
                        tuple(r for r in state.replicas if r not in self.brokers),
                    )
                )
            views.append(TopicView(topic, None, topic in INTERNAL_TOPICS, tuple(partitions)))
        return ClusterView(self.cluster_id, self.controller_id, brokers, tuple(views))
