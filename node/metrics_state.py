"""The state half of a broker's metrics (see node/metrics.py): what a scrape reads from the
live objects (:class:`StateReading`: partitions, ISR health against min.insync.replicas, the
controller's counts and elections, replica and consumer-group lag, log sizes, records in) and
the Prometheus families built from it. Nothing here runs per request."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from prometheus_client.metrics_core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    Metric,
    SummaryMetricFamily,
)

from kafkasim.common.types import TopicPartition

if TYPE_CHECKING:
    from kafkasim.common.clock import Clock
    from kafkasim.controller.controller import ControllerSnapshot
    from kafkasim.controller.stats import ControllerStats
    from kafkasim.node.fetcher import ReplicaFetcherManager
    from kafkasim.node.group_coordinator import GroupCoordinator
    from kafkasim.node.replica_manager import ReplicaManager
    from kafkasim.storage.log_manager import LogManager


class ControllerView(Protocol):
    """What the metrics read of the controller a broker hosts."""

    @property
    def is_active(self) -> bool: ...

    @property
    def stats(self) -> ControllerStats: ...

    def snapshot(self) -> ControllerSnapshot: ...


class Broker(Protocol):
    """What the metrics read of a broker (``node.broker.Broker`` is one): a protocol, so that
    this module does not import the broker module, which imports it."""

    @property
    def clock(self) -> Clock: ...

    @property
    def replica_manager(self) -> ReplicaManager: ...

    @property
    def controller(self) -> ControllerView | None: ...

    @property
    def log_manager(self) -> LogManager: ...

    @property
    def fetchers(self) -> ReplicaFetcherManager: ...

    @property
    def groups(self) -> GroupCoordinator: ...


@dataclass(frozen=True, slots=True)
class StateReading:
    """The broker's state as one scrape reads it from the live objects."""

    under_replicated: int
    partition_count: int
    leader_count: int
    isr_shrinks: int
    isr_expands: int
    active_controller: int
    offline_partitions: int
    log_sizes: tuple[tuple[TopicPartition, int], ...]
    under_min_isr: int = 0
    at_min_isr: int = 0
    global_partitions: int = 0
    leader_elections: int = 0
    leader_election_time_ms: int = 0
    unclean_elections: int = 0
    max_lag: int = 0
    messages_in: tuple[tuple[str, int], ...] = ()
    group_lag: tuple[tuple[str, TopicPartition, int], ...] = ()

    @classmethod
    def of(cls, broker: Broker) -> StateReading:
        replica_manager = broker.replica_manager
        partitions = list(replica_manager.partitions.values())
        controller = broker.controller
        active = controller is not None and controller.is_active
        leading = [(p, len(p.isr), p.log.config.min_insync_replicas) for p in partitions]
        leading = [entry for entry in leading if entry[0].is_leader]
        stats = controller.stats if controller is not None else None
        return cls(
            under_replicated=sum(1 for p in partitions if p.under_replicated),
            partition_count=len(partitions),
            leader_count=sum(1 for p in partitions if p.is_leader),
            isr_shrinks=replica_manager.isr_shrinks,
            isr_expands=replica_manager.isr_expands,
            active_controller=1 if active else 0,
            # As in Kafka, only the active controller knows (and reports) offline partitions.
            offline_partitions=(
                len(controller.snapshot().offline_partitions())
                if controller is not None and active
                else 0
            ),
            log_sizes=tuple(
                (tp, log.size_in_bytes) for tp, log in sorted(broker.log_manager.logs.items())
            ),
            under_min_isr=sum(1 for _, isr, min_isr in leading if isr < min_isr),
            at_min_isr=sum(1 for _, isr, min_isr in leading if isr == min_isr),
            global_partitions=(
                len(controller.snapshot().partitions) if controller is not None and active else 0
            ),
            leader_elections=stats.leader_elections if stats else 0,
            leader_election_time_ms=stats.leader_election_time_ms if stats else 0,
            unclean_elections=stats.unclean_leader_elections if stats else 0,
            max_lag=broker.fetchers.max_lag,
            messages_in=tuple(sorted(replica_manager.messages_in.items())),
            group_lag=_group_lag(broker),
        )


def _group_lag(broker: Broker) -> tuple[tuple[str, TopicPartition, int], ...]:
    """Per group this broker coordinates and partition it committed an offset of: the
    partition's high watermark here minus the committed offset (what kafka-consumer-groups
    --describe shows as LAG). Partitions with no replica on this broker are left out: their
    high watermark is only known where they are."""
    partitions = broker.replica_manager.partitions
    lags = []
    for group_id, group in sorted(broker.groups.manager.groups.items()):
        for tp, committed in sorted(group.offsets.items()):
            partition = partitions.get(tp)
            if partition is not None:
                lags.append((group_id, tp, max(0, partition.high_watermark - committed.offset)))
    return tuple(lags)


NO_STATE = StateReading(0, 0, 0, 0, 0, 0, 0, ())


def state_families(r: StateReading) -> list[Metric]:
    log_size = GaugeMetricFamily(
        "kafka_log_log_size",
        "Bytes of a partition replica's log on disk (kafka.log:type=Log,name=Size).",
        labels=["topic", "partition"],
    )
    for tp, size in r.log_sizes:
        log_size.add_metric([tp.topic, str(tp.partition)], size)
    messages_in = CounterMetricFamily(
        "kafka_server_brokertopicmetrics_messagesin",
        "Records appended by produce requests to partitions led here, by topic "
        "(kafka.server:type=BrokerTopicMetrics,name=MessagesInPerSec).",
        labels=["topic"],
    )
    for topic, count in r.messages_in:
        messages_in.add_metric([topic], count)
    group_lag = GaugeMetricFamily(
        "kafka_consumergroup_lag",
        "Per group coordinated here and partition with a replica here: high watermark minus "
        "committed offset, kafka-consumer-groups' LAG, named as kafka_exporter names it "
        "(kafka.consumer:type=consumer-fetch-manager-metrics,name=records-lag as a consumer "
        "sees it).",
        labels=["consumergroup", "topic", "partition"],
    )
    for group_id, tp, lag in r.group_lag:
        group_lag.add_metric([group_id, tp.topic, str(tp.partition)], lag)
    elections = SummaryMetricFamily(
        "kafka_controller_controllerstats_leaderelectionrateandtimems",
        "Leader election rounds of the controller on this broker and their time in ms "
        "(kafka.controller:type=ControllerStats,name=LeaderElectionRateAndTimeMs).",
        count_value=r.leader_elections,
        sum_value=r.leader_election_time_ms,
    )
    return [
        messages_in,
        group_lag,
        elections,
        CounterMetricFamily(
            "kafka_controller_controllerstats_uncleanleaderelections",
            "Partitions given a leader outside their ISR by the controller on this broker "
            "(kafka.controller:type=ControllerStats,name=UncleanLeaderElectionsPerSec).",
            value=r.unclean_elections,
        ),
        GaugeMetricFamily(
            "kafka_controller_kafkacontroller_globalpartitioncount",
            "Partitions in the cluster, reported by the active controller "
            "(kafka.controller:type=KafkaController,name=GlobalPartitionCount).",
            value=r.global_partitions,
        ),
        GaugeMetricFamily(
            "kafka_server_replicamanager_underminisrpartitioncount",
            "Partitions led here whose ISR is smaller than min.insync.replicas: acks=all "
            "produce fails (kafka.server:type=ReplicaManager,name=UnderMinIsrPartitionCount).",
            value=r.under_min_isr,
        ),
        GaugeMetricFamily(
            "kafka_server_replicamanager_atminisrpartitioncount",
            "Partitions led here whose ISR is exactly min.insync.replicas: one more failure "
            "stops acks=all (kafka.server:type=ReplicaManager,name=AtMinIsrPartitionCount).",
            value=r.at_min_isr,
        ),
        GaugeMetricFamily(
            "kafka_server_replicafetchermanager_maxlag",
            "The largest lag, in records, of a partition this broker follows behind its "
            "leader's high watermark "
            "(kafka.server:type=ReplicaFetcherManager,name=MaxLag,clientId=Replica).",
            value=r.max_lag,
        ),
        GaugeMetricFamily(
            "kafka_server_replicamanager_underreplicatedpartitions",
            "Partitions led here whose ISR is smaller than their replica set "
            "(kafka.server:type=ReplicaManager,name=UnderReplicatedPartitions).",
            value=r.under_replicated,
        ),
        GaugeMetricFamily(
            "kafka_server_replicamanager_partitioncount",
            "Partition replicas on this broker "
            "(kafka.server:type=ReplicaManager,name=PartitionCount).",
            value=r.partition_count,
        ),
        GaugeMetricFamily(
            "kafka_server_replicamanager_leadercount",
            "Partitions led by this broker (kafka.server:type=ReplicaManager,name=LeaderCount).",
            value=r.leader_count,
        ),
        CounterMetricFamily(
            "kafka_server_replicamanager_isrshrinks",
            "ISR shrinks written by this broker as leader "
            "(kafka.server:type=ReplicaManager,name=IsrShrinksPerSec).",
            value=r.isr_shrinks,
        ),
        CounterMetricFamily(
            "kafka_server_replicamanager_isrexpands",
            "ISR expansions written by this broker as leader "
            "(kafka.server:type=ReplicaManager,name=IsrExpandsPerSec).",
            value=r.isr_expands,
        ),
        GaugeMetricFamily(
            "kafka_controller_kafkacontroller_activecontrollercount",
            "1 on the active controller, else 0 "
            "(kafka.controller:type=KafkaController,name=ActiveControllerCount).",
            value=r.active_controller,
        ),
        GaugeMetricFamily(
            "kafka_controller_kafkacontroller_offlinepartitionscount",
            "Partitions without a live leader, reported by the active controller "
            "(kafka.controller:type=KafkaController,name=OfflinePartitionsCount).",
            value=r.offline_partitions,
        ),
        log_size,
    ]
