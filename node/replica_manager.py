"""The replica manager: every partition replica on this broker, and the requests on them.

It serves produce (with the acks=all purgatory), fetch (read_uncommitted consumers below the
HW, read_committed ones below the last stable offset with the aborted transactions of what
they read; followers anything, with long-poll), ListOffsets, OffsetsForLeaderEpoch,
DeleteRecords (with its low-watermark purgatory) and WriteTxnMarkers (through the produce
purgatory) for partitions it leads, and applies the controller's LeaderAndIsr /
StopReplica. It takes and returns the domain values of ``node.replica_types`` (the front doors
translate, ``node.apis``); both purgatories are ``node.purgatory``'s. It decides ISR changes
(written to ZooKeeper by ``node.isr_writer``) and checkpoints high watermarks.

Every request path answers with Kafka's per-partition errors; nothing here raises into the
transport. Not thread-safe: one event loop.

The fetch read and its long-poll are in ``node.replica_fetch``, the markers' translation in
``node.replica_markers``, ListOffsets by timestamp in ``node.partition``, the ISR writes in
``node.isr_writer``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass

from kafkasim.common.clock import Clock
from kafkasim.common.coordination import (
    Coordination,
)
from kafkasim.common.errors import (
    FencedLeaderEpochError,
    KafkaError,
    KafkaStorageError,
    NotLeaderOrFollowerError,
    RequestTimedOutError,
    UnknownLeaderEpochError,
    UnknownTopicOrPartitionError,
    error_for_name,
)
from kafkasim.common.types import TopicPartition
from kafkasim.controller.api import INTERNAL_TOPICS
from kafkasim.node.config import BrokerConfig
from kafkasim.node.disk_delay import DiskSlot
from kafkasim.node.isr_writer import ZkIsrWriter
from kafkasim.node.partition import Partition
from kafkasim.node.purgatory import (
    DelayedDeleteRecords,
    DelayedOperations,
    DelayedProduce,
    PartitionWait,
)
from kafkasim.node.replica_fetch import ReadOnce, fetch_isolation, long_poll, read_partitions
from kafkasim.node.replica_markers import MarkersWritten, write_txn_markers
from kafkasim.node.replica_types import (
    DeleteRecordsParams,
    DeleteRecordsPartitionResult,
    DescribeReplicasResult,
    EpochEndOffset,
    EpochRequest,
    FetchParams,
    FetchPartitionData,
    LeaderAndIsrParams,
    ListOffsetsParams,
    ListOffsetsPartition,
    ListOffsetsPartitionResult,
    PartitionErrors,
    ProduceParams,
    ProducePartitionResult,
    ReplicaDescription,
    StopReplicaParams,
    TxnMarkerResult,
    WriteTxnMarkersParams,
)
from kafkasim.node.rules import KAFKA_RULES, ReplicationRules
from kafkasim.storage.config import LogConfig
from kafkasim.storage.log_manager import LogManager
from kafkasim.storage.records.validation import check_produce_records

logger = logging.getLogger(__name__)

INVALID_LOW_WATERMARK = -1
InvalidTopicError = error_for_name("INVALID_TOPIC_EXCEPTION")
InvalidRequiredAcksError = error_for_name("INVALID_REQUIRED_ACKS")
StaleControllerEpochError = error_for_name("STALE_CONTROLLER_EPOCH")
UnknownServerError = error_for_name("UNKNOWN_SERVER_ERROR")


def _kafka_error(e: BaseException) -> KafkaError:
    """A partition's failure as the Kafka error it answers; anything unexpected is logged and
    answers UNKNOWN_SERVER_ERROR naming it."""
    if isinstance(e, KafkaError):
        return e
    logger.exception("unexpected error", exc_info=e)
    return UnknownServerError(f"{type(e).__name__}: {e}")


def _delete_records_outcome(
    result: DeleteRecordsPartitionResult, wait: PartitionWait
) -> DeleteRecordsPartitionResult:
    """A parked DeleteRecords partition, once its wait settled."""
    partition = wait.partition
    if isinstance(wait.error, RequestTimedOutError):
        low = result.low_watermark
        with contextlib.suppress(KafkaError):
            low = partition.low_watermark
        return DeleteRecordsPartitionResult(result.tp, wait.error, low)
    if wait.error is not None:
        return DeleteRecordsPartitionResult(result.tp, wait.error, INVALID_LOW_WATERMARK)
    # Reached; it may have moved on since (or leadership moved: report the goal).
    low = partition.low_watermark if partition.is_leader else wait.required_offset
    return DeleteRecordsPartitionResult(result.tp, low_watermark=max(low, wait.required_offset))


@dataclass(frozen=True, slots=True)
class FetchTarget:
    """A partition a follower should fetch, for the fetcher manager."""

    tp: TopicPartition
    leader_id: int
    leader_epoch: int


class ReplicaManager:
    def __init__(
        self,
        broker_id: int,
        config: BrokerConfig,
        log_manager: LogManager,
        clock: Clock,
        coordination: Coordination,
        *,
        topic_config: Callable[[str], LogConfig],
        rules: ReplicationRules = KAFKA_RULES,
        disk: DiskSlot | None = None,
    ) -> None:
        self.broker_id = broker_id
        # How slow this broker's disk is (node.disk_delay; the fetchers share the slot).
        self.disk = disk if disk is not None else DiskSlot()
        self.config = config
        self.log_manager = log_manager
        self._clock = clock
        self._topic_config = topic_config
        self.partitions: dict[TopicPartition, Partition] = {}
        self.rules = rules
        # The acks=all produce and DeleteRecords purgatories of every partition here.
        self.delayed = DelayedOperations()
        self.controller_epoch = -1
        self.lag_time_max_ms: int = config["replica.lag.time.max.ms"]
        # Set by the broker: called with the partitions to follow / stop following.
        self.on_become_follower: Callable[[list[FetchTarget]], None] = lambda _targets: None
        self.on_stop_following: Callable[[list[TopicPartition]], None] = lambda _tps: None
        # Set by the broker: whether a broker is alive (its metadata cache); DeleteRecords'
        # low watermark leaves out followers on dead brokers, as Kafka's does.
        self.is_broker_alive: Callable[[int], bool] = lambda _broker_id: True
        # Set by the broker: told of each transaction marker written here (its group
        # coordinator completes transactional offset commits; node.replica_markers).
        self.on_txn_markers_written: MarkersWritten | None = None
        # The leader's ISR changes, written to ZooKeeper (Kafka's ZkIsrManager).
        self.isr_writer = ZkIsrWriter(broker_id, coordination)
        self.messages_in: dict[str, int] = {}  # records appended as leader, by topic

    def set_coordination(self, coordination: Coordination) -> None:
        """A new ZooKeeper session (after expiry): ISR writes go through it from now on."""
        self.isr_writer.set_coordination(coordination)

    @property
    def isr_shrinks(self) -> int:
        return self.isr_writer.shrinks

    @property
    def isr_expands(self) -> int:
        return self.isr_writer.expands

    # -- lookups ----------------------------------------------------------------------------

    def partition(self, tp: TopicPartition) -> Partition:
        partition = self.partitions.get(tp)
        if partition is None:
            raise UnknownTopicOrPartitionError(
                f"This server does not host this topic-partition: {tp}"
            )
        return partition

    def leader_partition(self, tp: TopicPartition, current_leader_epoch: int = -1) -> Partition:
        """The partition if this broker leads it (and the caller's epoch is current)."""
        partition = self.partition(tp)
        if current_leader_epoch >= 0:
            if current_leader_epoch < partition.leader_epoch:
                raise FencedLeaderEpochError(
                    f"{tp}: request epoch {current_leader_epoch} is older than the current "
                    f"leader epoch {partition.leader_epoch}"
                )
            if current_leader_epoch > partition.leader_epoch:
                raise UnknownLeaderEpochError(
                    f"{tp}: request epoch {current_leader_epoch} is newer than this broker's "
                    f"{partition.leader_epoch}"
                )
        if not partition.is_leader:
            raise NotLeaderOrFollowerError(
                f"Leader not local for partition {tp} on broker {self.broker_id}"
            )
        return partition

    # -- produce ----------------------------------------------------------------------------

    async def append_records(self, params: ProduceParams) -> list[ProducePartitionResult]:
        """Kafka's ``appendRecords``: append each partition's batches as leader; with acks=all,
        wait in the produce purgatory until the HW passes each append, the leader changes, or
        ``timeout_ms`` passes. acks=0 and 1 answer after the local append."""
        acks = params.acks
        if acks not in (0, 1, -1):
            error = InvalidRequiredAcksError(f"acks must be 0, 1 or -1 (all), not {acks}")
            return [ProducePartitionResult(p.tp, error) for p in params.partitions]
        results: list[ProducePartitionResult] = []
        waits: list[PartitionWait] = []
        pending: list[tuple[int, PartitionWait]] = []
        for data in params.partitions:
            disk = self.disk.delay
            try:
                partition = self.leader_partition(data.tp)
                check_produce_records(data.records)
                if disk is not None:  # a slowed disk (node.disk_delay); None: no await at all
                    await disk.write()
                    partition = self.leader_partition(data.tp)  # it may have moved meanwhile
                flushes = partition.log.flushes
                info = partition.append_records_to_leader(data.records, acks, params.origin)
            except Exception as e:
                results.append(ProducePartitionResult(data.tp, _kafka_error(e)))
                continue
            if disk is not None and partition.log.flushes > flushes:
                await disk.fsync(partition.log.flushes - flushes)
            if not info.duplicate:  # Kafka's MessagesInPerSec: records appended, per topic
                self.messages_in[data.tp.topic] = (
                    self.messages_in.get(data.tp.topic, 0) + info.record_count
                )
            results.append(
                ProducePartitionResult(
                    data.tp,
                    base_offset=info.first_offset,
                    log_append_time_ms=info.log_append_time,
                    log_start_offset=info.log_start_offset,
                )
            )
            # A duplicate (an idempotent retry) waits too: its original append may not be
            # replicated yet, and acks=all must not answer before the HW passes it.
            if acks == -1:
                wait = PartitionWait(partition, info.last_offset + 1)
                waits.append(wait)
                pending.append((len(results) - 1, wait))
        if waits:
            await self.delayed.produce.try_complete_else_watch(
                DelayedProduce(waits, params.timeout_ms)
            )
            for index, wait in pending:
                if wait.error is not None:
                    results[index] = dataclasses.replace(results[index], error=wait.error)
        return results

    async def write_txn_markers(self, params: WriteTxnMarkersParams) -> list[TxnMarkerResult]:
        """WriteTxnMarkers on the partition leader (``node.replica_markers``): each marker
        appended as the coordinator, acks=all, waiting up to ``request.timeout.ms``."""
        return await write_txn_markers(
            self.append_records,
            params,
            now_ms=self._clock.time_ms(),
            timeout_ms=self.config["request.timeout.ms"],
            on_written=self.on_txn_markers_written,
        )

    # -- fetch ------------------------------------------------------------------------------

    async def fetch_messages(self, params: FetchParams) -> list[FetchPartitionData]:
        """Kafka's ``fetchMessages``: read from each partition; long-poll up to
        ``max_wait_ms`` until ``min_bytes`` are there (or an error, or nothing to wait on).
        As Kafka's DelayedFetch, a parked fetch is woken only by what can answer it
        (``node.replica_fetch``)."""
        return await long_poll(
            params,
            self.fetch_max_bytes(params.max_bytes),
            self._clock.monotonic_ms,
            self._read_once,
        )

    def fetch_max_bytes(self, requested: int) -> int:
        """The most one fetch answer may hold: what the request asks (0: no limit asked),
        never more than ``fetch.max.bytes`` — Kafka's handleFetchRequest caps consumers and
        followers alike, so a request's max_bytes of 2**31-1 cannot make the broker build a
        huge answer. The first partition with data still returns one whole batch (KIP-74)."""
        cap: int = self.config["fetch.max.bytes"]
        return cap if requested <= 0 else min(requested, cap)

    def _read_once(self, params: FetchParams, max_bytes: int) -> ReadOnce:
        """One read of every partition of ``params`` (``replica_fetch.read_partitions``)."""
        return read_partitions(
            params,
            max_bytes,
            now_ms=self._clock.time_ms(),
            leader_partition=self.leader_partition,
            hosted=self.partitions,
            rules=self.rules,
            expand_isr=self._maybe_expand_isr,
            kafka_error=_kafka_error,
        )

    # -- offsets ----------------------------------------------------------------------------

    def list_offsets(self, params: ListOffsetsParams) -> list[ListOffsetsPartitionResult]:
        return [
            self._list_offset(params.replica_id, params.isolation_level, part)
            for part in params.partitions
        ]

    def _list_offset(
        self, replica_id: int, isolation_level: int, part: ListOffsetsPartition
    ) -> ListOffsetsPartitionResult:
        tp = part.tp
        try:
            partition = self.leader_partition(tp, part.current_leader_epoch)
            isolation = fetch_isolation(replica_id, isolation_level)
            found = partition.fetch_offset_for_timestamp(part.timestamp, isolation)
        except Exception as e:
            return ListOffsetsPartitionResult(tp, _kafka_error(e))
        if found is None:
            return ListOffsetsPartitionResult(tp)
        return ListOffsetsPartitionResult(
            tp, timestamp=found.timestamp, offset=found.offset, leader_epoch=found.leader_epoch
        )

    def offsets_for_leader_epoch(self, requests: Sequence[EpochRequest]) -> list[EpochEndOffset]:
        results: list[EpochEndOffset] = []
        for part in requests:
            try:
                partition = self.leader_partition(part.tp, part.current_leader_epoch)
                epoch, end = partition.log.end_offset_for_epoch(part.leader_epoch)
                results.append(EpochEndOffset(part.tp, leader_epoch=epoch, end_offset=end))
            except Exception as e:
                results.append(EpochEndOffset(part.tp, _kafka_error(e)))
        return results

    def describe_replicas(self, wanted: Collection[TopicPartition] = ()) -> DescribeReplicasResult:
        """What this broker holds of each partition in ``wanted`` (empty: of every one)."""
        replicas: list[ReplicaDescription] = []
        for tp in sorted(self.partitions):
            if wanted and tp not in wanted:
                continue
            partition = self.partitions[tp]
            log = partition.log
            replicas.append(
                ReplicaDescription(
                    tp,
                    broker_id=self.broker_id,
                    is_leader=partition.is_leader,
                    leader=partition.leader_id,
                    leader_epoch=partition.leader_epoch,
                    high_watermark=log.high_watermark,
                    log_end_offset=log.log_end_offset,
                    log_start_offset=log.log_start_offset,
                    isr=tuple(sorted(partition.isr)),
                    size_bytes=log.size_in_bytes,
                    replicas=tuple(partition.assigned_replicas),
                    fetched_leader_epoch=partition.fetched_leader_epoch,
                )
            )
        return DescribeReplicasResult(self._clock.monotonic_ms(), tuple(replicas))

    # -- delete records ---------------------------------------------------------------------

    async def delete_records(
        self, params: DeleteRecordsParams
    ) -> list[DeleteRecordsPartitionResult]:
        """Kafka's DeleteRecords on the leader: move each log start offset, then answer once
        every partition's low watermark has reached it (the delete-records purgatory), the
        leader changes, or ``timeout_ms`` passes (REQUEST_TIMED_OUT)."""
        results: list[DeleteRecordsPartitionResult] = []
        pending: list[tuple[int, PartitionWait]] = []
        for part in params.partitions:
            tp = part.tp
            try:
                if tp.topic in INTERNAL_TOPICS:
                    raise InvalidTopicError(f"Cannot delete records of internal topic {tp.topic}")
                partition = self.leader_partition(tp)
                requested = partition.delete_records_on_leader(part.offset)
                low = partition.low_watermark
            except Exception as e:
                results.append(DeleteRecordsPartitionResult(tp, _kafka_error(e)))
                continue
            results.append(DeleteRecordsPartitionResult(tp, low_watermark=low))
            if low < requested:
                pending.append((len(results) - 1, PartitionWait(partition, requested)))
        if pending:
            await self.delayed.delete_records.try_complete_else_watch(
                DelayedDeleteRecords([w for _, w in pending], params.timeout_ms)
            )
            for index, wait in pending:
                results[index] = _delete_records_outcome(results[index], wait)
        return results

    def maybe_complete_delete_records(self) -> None:
        """Re-check parked DeleteRecords (the set of live brokers changed)."""
        for partition in self.partitions.values():
            partition.maybe_complete_delete_records()

    # -- controller requests ----------------------------------------------------------------

    def _check_controller_epoch(self, controller_epoch: int) -> bool:
        if controller_epoch < self.controller_epoch:
            logger.warning(
                "ignoring a request from a stale controller (epoch %d < %d)",
                controller_epoch,
                self.controller_epoch,
            )
            return False
        self.controller_epoch = controller_epoch
        return True

    def leader_and_isr(self, params: LeaderAndIsrParams) -> PartitionErrors:
        """Become leader or follower for each partition, as the controller says."""
        if not self._check_controller_epoch(params.controller_epoch):
            return PartitionErrors(
                StaleControllerEpochError(
                    f"controller epoch {params.controller_epoch} is older than "
                    f"{self.controller_epoch}"
                )
            )
        now_ms = self._clock.time_ms()
        follow: list[FetchTarget] = []
        stop: list[TopicPartition] = []
        errors: list[tuple[TopicPartition, KafkaError | None]] = []
        new_leaders: set[TopicPartition] = set()
        for state in params.partition_states:
            tp = state.tp
            if self.broker_id not in state.replicas:
                errors.append(
                    (tp, UnknownTopicOrPartitionError(f"broker {self.broker_id} is not a replica"))
                )
                continue
            existing = self.partitions.get(tp)
            if existing is not None and state.leader_epoch < existing.leader_epoch:
                # A LeaderAndIsr older than what we have: Kafka answers STALE_CONTROLLER_EPOCH.
                errors.append(
                    (
                        tp,
                        StaleControllerEpochError(
                            f"leader epoch {state.leader_epoch} is older than "
                            f"{existing.leader_epoch}"
                        ),
                    )
                )
                continue
            error: KafkaError | None = None
            try:
                partition = existing or self._create_partition(tp)
                if state.leader == self.broker_id:
                    became = partition.make_leader(
                        leader_epoch=state.leader_epoch,
                        isr=state.isr,
                        replicas=state.replicas,
                        zk_version=state.zk_version,
                        controller_epoch=state.controller_epoch,
                        now_ms=now_ms,
                    )
                    if became.became_leader:
                        new_leaders.add(tp)
                    stop.append(tp)
                else:
                    change = partition.make_follower(
                        leader_id=state.leader,
                        leader_epoch=state.leader_epoch,
                        isr=state.isr,
                        replicas=state.replicas,
                        zk_version=state.zk_version,
                        controller_epoch=state.controller_epoch,
                    )
                    if state.leader >= 0:
                        if change.leader_changed or existing is None:
                            follow.append(FetchTarget(tp, state.leader, state.leader_epoch))
                    else:
                        stop.append(tp)
            except Exception as e:
                error = _kafka_error(e)
            errors.append((tp, error))
        if stop:
            self.on_stop_following(stop)
        if follow:
            self.on_become_follower(follow)
        return PartitionErrors(None, tuple(errors), frozenset(new_leaders))

    def _create_partition(self, tp: TopicPartition) -> Partition:
        config = self._topic_config(tp.topic)
        log = self.log_manager.get_or_create_log(tp, config)
        if log.config != config:
            # Loaded from disk at startup, before this topic's overrides were read.
            log.update_config(config)
        partition = Partition(
            tp,
            self.broker_id,
            log,
            is_broker_alive=self._is_broker_alive,
            delayed=self.delayed,
            rules=self.rules,
        )
        self.partitions[tp] = partition
        return partition

    def _is_broker_alive(self, broker_id: int) -> bool:
        return self.is_broker_alive(broker_id)

    def stop_replica(self, params: StopReplicaParams) -> PartitionErrors:
        if not self._check_controller_epoch(params.controller_epoch):
            return PartitionErrors(
                StaleControllerEpochError(
                    f"controller epoch {params.controller_epoch} is older than "
                    f"{self.controller_epoch}"
                )
            )
        stopped = []
        errors: list[tuple[TopicPartition, KafkaError | None]] = []
        for part in params.partitions:
            tp = part.tp
            error: KafkaError | None = None
            partition = self.partitions.get(tp)
            if partition is not None:
                stopped.append(tp)
                partition.fail_waiters(NotLeaderOrFollowerError(f"{tp}: replica stopped"))
            if part.delete_partition:
                if partition is not None:
                    del self.partitions[tp]
                try:
                    self.log_manager.delete_log(tp)
                except KafkaStorageError as e:
                    # Kafka answers the partition's error; the controller asks again later.
                    logger.error("%s: could not delete the replica: %s", tp, e)
                    error = e
            elif partition is not None:
                partition.make_follower(
                    leader_id=-1,
                    leader_epoch=partition.leader_epoch,
                    isr=partition.isr,
                    replicas=partition.assigned_replicas,
                    zk_version=partition.zk_version,
                    controller_epoch=params.controller_epoch,
                )
            errors.append((tp, error))
        if stopped:
            self.on_stop_following(stopped)
        return PartitionErrors(None, tuple(errors))

    # -- ISR maintenance --------------------------------------------------------------------

    def _maybe_expand_isr(self, partition: Partition) -> None:
        change = partition.isr_to_expand()
        if change is not None:
            self.isr_writer.propose(partition, change)

    def maybe_shrink_isr(self) -> None:
        """Kafka's isr-expiration task (run every replica.lag.time.max.ms / 2)."""
        now_ms = self._clock.time_ms()
        for partition in list(self.partitions.values()):
            change = partition.isr_to_shrink(now_ms, self.lag_time_max_ms)
            if change is not None:
                self.isr_writer.propose(partition, change)

    # -- checkpoints and facts --------------------------------------------------------------

    def checkpoint_high_watermarks(self) -> None:
        self.log_manager.checkpoint_high_watermarks()

    async def close(self) -> None:
        await self.isr_writer.close()
        for partition in self.partitions.values():
            partition.fail_waiters(NotLeaderOrFollowerError(f"{partition.tp}: broker stopping"))
