"""One term of the active controller: what exists only while this broker is the controller.

A :class:`Term` starts when the broker wins ``/controller`` and ends when it resigns. It holds
the :class:`~controller.context.ControllerContext`, the fenced ZooKeeper writer of this
epoch, the channel to the brokers, and the helpers that put partition states into a
:class:`~controller.channel.RequestBatch` and send it (Kafka's ``ControllerBrokerRequestBatch``
usage). :class:`Watches` are the one-shot ZooKeeper watchers the term's handlers set again
after each read; they outlive terms (one watcher object per path, so that re-registering a
watch does not stack duplicates).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from kafkasim.common.coordination import Watcher
from kafkasim.common.types import TopicPartition
from kafkasim.controller.api import ControllerConfig
from kafkasim.controller.channel import (
    ControllerChannel,
    RequestBatch,
    ResponseCallback,
    partition_state,
)
from kafkasim.controller.context import ControllerContext
from kafkasim.controller.log import ControllerLog
from kafkasim.controller.stats import ControllerStats
from kafkasim.controller.zk_data import LeaderAndIsr
from kafkasim.controller.zk_writer import FencedZkWriter
from kafkasim.proto import kafkasim_pb2 as pb


@dataclass
class Watches:
    """The controller's ZooKeeper watchers; each enqueues the event of its path."""

    broker_change: Watcher
    topic_change: Watcher
    topic_deletion: Watcher
    isr_change: Watcher
    preferred_election: Watcher
    make_partition_watcher: Callable[[str], Watcher]
    _partition: dict[str, Watcher] = field(default_factory=dict)

    def partition(self, topic: str) -> Watcher:
        """The data watcher of ``/brokers/topics/<topic>`` (PartitionModifications)."""
        watcher = self._partition.get(topic)
        if watcher is None:
            watcher = self._partition[topic] = self.make_partition_watcher(topic)
        return watcher

    def forget_partition(self, topic: str) -> None:
        self._partition.pop(topic, None)

    def forget_partitions(self) -> None:
        self._partition.clear()


class Term:
    """The active controller's state and tools for one epoch."""

    def __init__(
        self,
        broker_id: int,
        ctx: ControllerContext,
        *,
        zk: FencedZkWriter,
        channel: ControllerChannel,
        config: ControllerConfig,
        log: ControllerLog,
        watches: Watches,
        on_stop_replica_response: ResponseCallback,
        stats: ControllerStats | None = None,
    ) -> None:
        self.broker_id = broker_id
        self.ctx = ctx
        # The controller's counters (kept across terms); a term of its own when not given.
        self.stats = stats if stats is not None else ControllerStats(lambda: 0)
        self.zk = zk
        self.channel = channel
        self.config = config
        self.log = log
        self.watches = watches
        self._on_stop_replica_response = on_stop_replica_response

    def send(self, batch: RequestBatch) -> None:
        if batch.is_empty():
            return
        batch.send(
            self.channel,
            controller_id=self.broker_id,
            controller_epoch=self.ctx.epoch,
            cluster_id=self.ctx.cluster_id,
            on_stop_replica_response=self._on_stop_replica_response,
        )

    def metadata_state(self, tp: TopicPartition) -> pb.PartitionState | None:
        ctx = self.ctx
        state = ctx.leadership.get(tp)
        if state is None:
            return None
        return partition_state(
            tp, state, ctx.replicas(tp), offline_replicas=ctx.offline_replicas(tp)
        )

    def add_update_metadata(
        self, batch: RequestBatch, broker_ids: Iterable[int], tps: Iterable[TopicPartition]
    ) -> None:
        states = [s for s in (self.metadata_state(tp) for tp in tps) if s is not None]
        batch.add_update_metadata(broker_ids, states)

    def add_leader_and_isr(
        self,
        batch: RequestBatch,
        recipients: Iterable[int],
        tp: TopicPartition,
        state: LeaderAndIsr,
        *,
        is_new: bool = False,
    ) -> None:
        """LeaderAndIsr to the live ``recipients``, and UpdateMetadata of ``tp`` to every live
        broker (as Kafka's ``addLeaderAndIsrRequestForBrokers`` does)."""
        ctx = self.ctx
        live = ctx.live_or_shutting_down_ids()
        batch.add_leader_and_isr(
            sorted(b for b in set(recipients) if b in live),
            tp,
            state,
            ctx.replicas(tp),
            is_new=is_new,
            offline_replicas=ctx.offline_replicas(tp),
        )
        self.add_update_metadata(batch, sorted(live), [tp])
