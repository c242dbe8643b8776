"""The active controller's picture of the cluster, and the frozen view others may read.

:class:`ControllerContext` is Kafka's ``ControllerContext``: live brokers, assignments, the
partition states as last read or written (with their znode versions), the topics being
deleted. Only the event being handled changes it (one event queue, see
:mod:`controller.events`), and it is dropped when the controller resigns.
:class:`ControllerSnapshot` is a frozen copy for ``cluster status`` and tests.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType

from kafkasim.common.types import TopicPartition
from kafkasim.controller import zk_data
from kafkasim.controller.partition_state_machine import PartitionState
from kafkasim.controller.zk_data import BrokerInfo, LeaderAndIsr


@dataclass(frozen=True, slots=True)
class PartitionView:
    """One partition as the active controller sees it (leader -1 and epoch -1: no state)."""

    tp: TopicPartition
    replicas: tuple[int, ...]
    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    controller_epoch: int
    zk_version: int
    offline_replicas: tuple[int, ...]

    @property
    def online(self) -> bool:
        return self.leader >= 0 and self.leader not in self.offline_replicas


@dataclass(frozen=True)
class ControllerSnapshot:
    """A frozen copy of the controller's view, for ``cluster status`` and tests.

    A broker that is not the active controller has empty maps and ``active`` False.
    """

    broker_id: int
    active: bool
    active_controller_id: int
    epoch: int
    epoch_zk_version: int
    cluster_id: str
    live_brokers: Mapping[int, BrokerInfo]
    shutting_down_brokers: frozenset[int]
    partitions: Mapping[TopicPartition, PartitionView]
    topics_being_deleted: frozenset[str]

    @classmethod
    def inactive(cls, broker_id: int, active_controller_id: int) -> ControllerSnapshot:
        """The view of a broker that is not the active controller."""
        return cls(
            broker_id,
            False,
            active_controller_id,
            -1,
            -1,
            "",
            MappingProxyType({}),
            frozenset(),
            MappingProxyType({}),
            frozenset(),
        )

    def topics(self) -> list[str]:
        return sorted({tp.topic for tp in self.partitions})

    def offline_partitions(self) -> list[TopicPartition]:
        return [tp for tp, p in self.partitions.items() if not p.online]

    def leader_of(self, tp: TopicPartition) -> int:
        view = self.partitions.get(tp)
        return zk_data.NO_LEADER if view is None else view.leader


class ControllerContext:
    """The active controller's picture of the cluster (Kafka's ``ControllerContext``).

    Changed only by the event being handled. ``leadership`` mirrors the state znodes as last
    read or written (with their versions), Kafka's ``partitionLeadershipInfo``; a partition in
    ``assignments`` without one is *new* (no replica was live when it was created).
    ``partition_states`` holds each partition's state in the partition state machine. Live
    brokers include the ones shutting down; :meth:`live_broker_ids` excludes them, as Kafka's
    ``liveBrokerIds`` does.
    """

    def __init__(self, epoch: int, epoch_zk_version: int) -> None:
        self.epoch = epoch
        self.epoch_zk_version = epoch_zk_version
        self.cluster_id = ""
        self.live_brokers: dict[int, BrokerInfo] = {}
        self.shutting_down: set[int] = set()
        self.assignments: dict[str, dict[int, tuple[int, ...]]] = {}
        self.topic_zk_versions: dict[str, int] = {}
        self.leadership: dict[TopicPartition, LeaderAndIsr] = {}
        self.partition_states: dict[TopicPartition, PartitionState] = {}
        self.topics_to_delete: set[str] = set()
        # Started deletions: the (partition, broker) replicas whose StopReplica(delete) is
        # not yet acknowledged.
        self.deletion_pending: dict[str, set[tuple[TopicPartition, int]]] = {}

    def replicas(self, tp: TopicPartition) -> tuple[int, ...]:
        return self.assignments.get(tp.topic, {}).get(tp.partition, ())

    def partitions_of(self, topic: str) -> list[TopicPartition]:
        return [TopicPartition(topic, p) for p in sorted(self.assignments.get(topic, {}))]

    def all_partitions(self) -> list[TopicPartition]:
        return [tp for topic in sorted(self.assignments) for tp in self.partitions_of(topic)]

    def live_broker_ids(self) -> set[int]:
        return set(self.live_brokers) - self.shutting_down

    def live_or_shutting_down_ids(self) -> set[int]:
        return set(self.live_brokers)

    def offline_replicas(self, tp: TopicPartition) -> tuple[int, ...]:
        return tuple(r for r in self.replicas(tp) if r not in self.live_brokers)

    def partitions_on_broker(self, broker_id: int) -> list[TopicPartition]:
        return [tp for tp in self.all_partitions() if broker_id in self.replicas(tp)]

    def is_being_deleted(self, topic: str) -> bool:
        return topic in self.topics_to_delete

    def add_topic(self, topic: str, assignment: Mapping[int, Sequence[int]], version: int) -> None:
        self.assignments[topic] = {p: tuple(r) for p, r in assignment.items()}
        self.topic_zk_versions[topic] = version

    def remove_topic(self, topic: str) -> None:
        for tp in self.partitions_of(topic):
            self.leadership.pop(tp, None)
            self.partition_states.pop(tp, None)
        self.assignments.pop(topic, None)
        self.topic_zk_versions.pop(topic, None)
        self.topics_to_delete.discard(topic)
        self.deletion_pending.pop(topic, None)

    def snapshot(self, broker_id: int, active_controller_id: int) -> ControllerSnapshot:
        """A frozen copy of this picture (see :class:`ControllerSnapshot`)."""
        partitions: dict[TopicPartition, PartitionView] = {}
        for tp in self.all_partitions():
            state = self.leadership.get(tp)
            replicas = self.replicas(tp)
            offline = tuple(r for r in replicas if r not in self.live_brokers)
            if state is None:
                partitions[tp] = PartitionView(
                    tp, replicas, zk_data.NO_LEADER, -1, (), -1, -1, offline
                )
            else:
                partitions[tp] = PartitionView(
                    tp,
                    replicas,
                    state.leader,
                    state.leader_epoch,
                    state.isr,
                    state.controller_epoch,
                    state.zk_version,
                    offline,
                )
        return ControllerSnapshot(
            broker_id,
            True,
            active_controller_id,
            self.epoch,
            self.epoch_zk_version,
            self.cluster_id,
            MappingProxyType(dict(sorted(self.live_brokers.items()))),
            frozenset(self.shutting_down),
            MappingProxyType(partitions),
            frozenset(self.topics_to_delete),
        )

    def has_leaders(self, topic: str) -> bool:
        """Every partition of ``topic`` has a live leader."""
        tps = self.partitions_of(topic)
        return bool(tps) and all(
            tp in self.leadership and self.leadership[tp].leader in self.live_brokers for tp in tps
        )
