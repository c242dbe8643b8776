"""The clients' one view of the cluster: which brokers there are, which one is the
controller, which broker leads each partition and in which leader epoch.

:class:`ClusterMetadata` is pure: it only applies Metadata responses and answers lookups. It
never goes back to an older leader epoch of a partition (KIP-320: a broker with stale metadata
must not move a client back to a deposed leader). The producer's refresher
(``client.producer_metadata``) and the network client (``client.network``) both keep one.

Not thread-safe: the client's event loop owns it.
"""

from __future__ import annotations

from dataclasses import dataclass

from kafkasim.common.sentinels import NO_LEADER_EPOCH
from kafkasim.common.types import TopicPartition
from kafkasim.proto import kafkasim_pb2 as pb

__all__ = ["NO_LEADER", "ClusterMetadata", "TopicMetadata"]

NO_LEADER = -1


@dataclass(slots=True)
class TopicMetadata:
    name: str
    leaders: list[int]
    leader_epochs: list[int]
    available: list[int]  # partitions with a live leader, ascending
    num_partitions: int = 0

    def __post_init__(self) -> None:
        self.num_partitions = len(self.leaders)


class ClusterMetadata:
    """Brokers, controller and partition leaders, from Metadata responses."""

    def __init__(self) -> None:
        self.brokers: dict[int, str] = {}
        self.controller_id = NO_LEADER
        self.topics: dict[str, TopicMetadata] = {}  # updated in place, never replaced
        self.last_refresh_ms = -1
        self.refreshes = 0

    def has_partition(self, tp: TopicPartition) -> bool:
        """Whether the last metadata of ``tp``'s topic showed the partition."""
        topic = self.topics.get(tp.topic)
        return topic is not None and tp.partition < topic.num_partitions

    def leader(self, tp: TopicPartition) -> int:
        """The live leader of ``tp``, -1 when unknown or not a known broker."""
        topic = self.topics.get(tp.topic)
        if topic is None or tp.partition >= topic.num_partitions:
            return NO_LEADER
        leader = topic.leaders[tp.partition]
        return leader if leader in self.brokers else NO_LEADER

    def leader_address(self, tp: TopicPartition) -> str | None:
        """``host:port`` of the live leader of ``tp``, None when there is none known."""
        return self.brokers.get(self.leader(tp))

    def leader_epoch(self, tp: TopicPartition) -> int:
        """The latest leader epoch of ``tp`` seen, -1 when unknown."""
        topic = self.topics.get(tp.topic)
        if topic is None or tp.partition >= topic.num_partitions:
            return NO_LEADER_EPOCH
        return topic.leader_epochs[tp.partition]

    def controller_address(self) -> str | None:
        return self.brokers.get(self.controller_id)

    def forget_leader(self, tp: TopicPartition) -> None:
        """The leader of ``tp`` answered an error or went away: unknown until the next
        refresh (which may give it back in the same epoch)."""
        topic = self.topics.get(tp.topic)
        if topic is None or tp.partition >= topic.num_partitions:
            return
        topic.leaders[tp.partition] = NO_LEADER
        if tp.partition in topic.available:
            topic.available.remove(tp.partition)

    def update(self, response: pb.MetadataResponse, now_ms: int) -> dict[str, int]:
        """Apply a response; returns topic-level errors (topic -> code)."""
        self.brokers = {b.node_id: f"{b.host}:{b.port}" for b in response.brokers}
        self.controller_id = response.controller_id
        errors: dict[str, int] = {}
        for topic in response.topics:
            if topic.error_code:
                errors[topic.name] = topic.error_code
                continue
            old = self.topics.get(topic.name)
            count = max((p.partition for p in topic.partitions), default=-1) + 1
            leaders = [NO_LEADER] * count
            epochs = [NO_LEADER_EPOCH] * count
            for p in topic.partitions:
                leader, epoch = p.leader, p.leader_epoch
                # KIP-320: never go back to an older leader epoch (a stale broker's answer).
                if (
                    old is not None
                    and p.partition < old.num_partitions
                    and epoch < old.leader_epochs[p.partition]
                ):
                    leader, epoch = old.leaders[p.partition], old.leader_epochs[p.partition]
                leaders[p.partition] = leader
                epochs[p.partition] = epoch
            available = [p for p, leader in enumerate(leaders) if leader in self.brokers]
            self.topics[topic.name] = TopicMetadata(topic.name, leaders, epochs, available)
        self.last_refresh_ms = now_ms
        self.refreshes += 1
        return errors
