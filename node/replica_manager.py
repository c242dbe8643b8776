"""The replica manager: every partition replica on this broker, and the requests on them.

It serves produce (with the acks=all purgatory), fetch (consumers below the HW; followers
anything, with long-poll), ListOffsets, OffsetsForLeaderEpoch and DeleteRecords (with its
low-watermark purgatory) for partitions it leads, and applies the controller's LeaderAndIsr /
StopReplica. It writes ISR changes to ZooKeeper as a version-checked update of the partition
state znode plus an ``/isr_change_notification`` entry (Kafka's ZooKeeper-mode ISR path), and
checkpoints high watermarks.

Every request path answers with Kafka's per-partition error codes; nothing here raises into
the transport. Not thread-safe: one event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass

from kafkasim.common.clock import Clock
from kafkasim.common.coordination import (
    BadVersionError,
    Coordination,
    CoordinationError,
    NoNodeError,
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
from kafkasim.controller import zk_data
from kafkasim.controller.api import INTERNAL_TOPICS
from kafkasim.node.config import BrokerConfig
from kafkasim.node.partition import Partition
from kafkasim.proto import kafkasim_pb2 as pb
from kafkasim.storage.config import LogConfig
from kafkasim.storage.log import EARLIEST_LOCAL_TIMESTAMP, EARLIEST_TIMESTAMP, LATEST_TIMESTAMP
from kafkasim.storage.log_manager import LogManager
from kafkasim.storage.records.validation import check_produce_records

logger = logging.getLogger(__name__)

NONE = 0
CONSUMER_REPLICA_ID = -1
INVALID_LOW_WATERMARK = -1
InvalidTopicError = error_for_name("INVALID_TOPIC_EXCEPTION")


def _code(name: str) -> int:
    return error_for_name(name).code


def _error(e: BaseException) -> tuple[int, str]:
    if isinstance(e, KafkaError):
        return e.code, e.message
    logger.exception("unexpected error", exc_info=e)
    return -1, f"{type(e).__name__}: {e}"


@dataclass(frozen=True, slots=True)
class _DeleteRecordsWait:
    """One partition of a DeleteRecords parked in the purgatory."""

    result: pb.DeleteRecordsPartitionResult
    partition: Partition
    requested: int
    future: asyncio.Future[None]


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
    ) -> None:
        self.broker_id = broker_id
        self.config = config
        self.log_manager = log_manager
        self._clock = clock
        self._zk = coordination
        self._topic_config = topic_config
        self.partitions: dict[TopicPartition, Partition] = {}
        self.controller_epoch = -1
        self.lag_time_max_ms: int = config["replica.lag.time.max.ms"]
        # Set by the broker: called with the partitions to follow / stop following.
        self.on_become_follower: Callable[[list[FetchTarget]], None] = lambda _targets: None
        self.on_stop_following: Callable[[list[TopicPartition]], None] = lambda _tps: None
        # Set by the broker: whether a broker is alive (its metadata cache); DeleteRecords'
        # low watermark leaves out followers on dead brokers, as Kafka's does.
        self.is_broker_alive: Callable[[int], bool] = lambda _broker_id: True
        self.isr_shrinks = 0
        self.isr_expands = 0
        self._isr_tasks: set[asyncio.Task[None]] = set()

    def set_coordination(self, coordination: Coordination) -> None:
        """A new ZooKeeper session (after expiry): ISR writes go through it from now on."""
        self._zk = coordination

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

    async def produce(self, request: pb.ProduceRequest) -> pb.ProduceResponse:
        acks = request.acks
        response = pb.ProduceResponse(correlation_id=request.correlation_id)
        if acks not in (0, 1, -1):
            for data in request.partitions:
                response.partitions.add(
                    topic=data.topic,
                    partition=data.partition,
                    error_code=_code("INVALID_REQUIRED_ACKS"),
                    error_message=f"acks must be 0, 1 or -1 (all), not {acks}",
                    base_offset=-1,
                    log_append_time_ms=-1,
                    log_start_offset=-1,
                )
            return response
        waits: list[tuple[pb.ProducePartitionResponse, Partition, asyncio.Future[None]]] = []
        for data in request.partitions:
            tp = TopicPartition(data.topic, data.partition)
            result = response.partitions.add(
                topic=data.topic,
                partition=data.partition,
                base_offset=-1,
                log_append_time_ms=-1,
                log_start_offset=-1,
            )
            try:
                partition = self.leader_partition(tp)
                check_produce_records(data.records)
                info = partition.append_records_to_leader(data.records, acks)
            except Exception as e:
                result.error_code, result.error_message = _error(e)
                continue
            result.base_offset = info.first_offset
            result.log_append_time_ms = info.log_append_time
            result.log_start_offset = info.log_start_offset
            # A duplicate (an idempotent retry) waits too: its original append may not be
            # replicated yet, and acks=all must not answer before the HW passes it.
            if acks == -1:
                waits.append(
                    (result, partition, partition.wait_for_high_watermark(info.last_offset + 1))
                )
        if waits:
            await self._await_replication(waits, request.timeout_ms)
        return response

    async def _await_replication(
        self,
        waits: list[tuple[pb.ProducePartitionResponse, Partition, asyncio.Future[None]]],
        timeout_ms: int,
    ) -> None:
        """The produce purgatory: until HW passes each batch, the leader changes, or timeout."""
        futures = [future for _, _, future in waits]
        try:
            _, pending = await asyncio.wait(futures, timeout=max(timeout_ms, 0) / 1000)
        except asyncio.CancelledError:
            # The request went away (the broker stops, the caller left): nobody will read
            # these futures, so they must not be failed later with nobody to retrieve it.
            for future in futures:
                future.cancel()
            raise
        for result, partition, future in waits:
            if future in pending:
                future.cancel()
                result.error_code = RequestTimedOutError.code
                result.error_message = (
                    f"acks=all not satisfied within {timeout_ms} ms for {partition.tp}: "
                    f"HW {partition.high_watermark}, ISR {sorted(partition.isr)}"
                )
            elif future.exception() is not None:
                result.error_code, result.error_message = _error(future.exception())  # type: ignore[arg-type]
            else:
                result.error_code = partition.acks_all_result()
                if result.error_code:
                    result.error_message = (
                        f"ISR {sorted(partition.isr)} shrank below min.insync.replicas="
                        f"{partition.log.config.min_insync_replicas} after the append"
                    )

    # -- fetch ------------------------------------------------------------------------------

    async def fetch(self, request: pb.FetchRequest) -> pb.FetchResponse:
        """Read from each partition; long-poll up to ``max_wait_ms`` for ``min_bytes``."""
        deadline = self._clock.monotonic_ms() + max(request.max_wait_ms, 0)
        while True:
            response, total, waiters = self._read_once(request)
            remaining = deadline - self._clock.monotonic_ms()
            has_error = any(p.error_code for p in response.partitions)
            if total >= max(request.min_bytes, 1) or remaining <= 0 or has_error or not waiters:
                for w in waiters:
                    w.cancel()
                return response
            await asyncio.wait(
                waiters, timeout=remaining / 1000, return_when=asyncio.FIRST_COMPLETED
            )
            for w in waiters:
                w.cancel()

    def _read_once(
        self, request: pb.FetchRequest
    ) -> tuple[pb.FetchResponse, int, list[asyncio.Future[None]]]:
        is_follower = request.replica_id >= 0
        now_ms = self._clock.time_ms()
        response = pb.FetchResponse()
        total = 0
        waiters: list[asyncio.Future[None]] = []
        budget = request.max_bytes if request.max_bytes > 0 else 50 * 1024 * 1024
        for part in request.partitions:
            tp = TopicPartition(part.topic, part.partition)
            result = response.partitions.add(
                topic=part.topic,
                partition=part.partition,
                high_watermark=-1,
                last_stable_offset=-1,
                log_start_offset=-1,
            )
            try:
                partition = self.leader_partition(tp, part.current_leader_epoch)
                log = partition.log
                if is_follower:
                    if request.replica_id not in partition.assigned_replicas:
                        raise NotLeaderOrFollowerError(
                            f"broker {request.replica_id} is not a replica of {tp}"
                        )
                    partition.record_follower_fetch(
                        request.replica_id, part.fetch_offset, now_ms, part.log_start_offset
                    )
                    self._maybe_expand_isr(partition)
                    max_offset = None
                else:
                    max_offset = partition.high_watermark
                limit = min(part.partition_max_bytes or budget, budget)
                info = log.read(
                    part.fetch_offset,
                    max(limit, 0),
                    max_offset=max_offset,
                    min_one_message=total == 0,
                )
                result.records = info.records
                total += len(info.records)
                budget -= len(info.records)
                result.high_watermark = partition.high_watermark
                result.last_stable_offset = partition.high_watermark
                result.log_start_offset = log.log_start_offset
                if not info.records:
                    waiters.append(partition.data_waiter())
            except Exception as e:
                result.error_code, result.error_message = _error(e)
                partition_or_none = self.partitions.get(tp)
                if partition_or_none is not None:
                    result.high_watermark = partition_or_none.high_watermark
                    result.log_start_offset = partition_or_none.log.log_start_offset
        return response, total, waiters

    # -- offsets ----------------------------------------------------------------------------

    def list_offsets(self, request: pb.ListOffsetsRequest) -> pb.ListOffsetsResponse:
        response = pb.ListOffsetsResponse()
        for part in request.partitions:
            tp = TopicPartition(part.topic, part.partition)
            result = response.partitions.add(
                topic=part.topic,
                partition=part.partition,
                timestamp=-1,
                offset=-1,
                leader_epoch=-1,
            )
            try:
                partition = self.leader_partition(tp, part.current_leader_epoch)
                log = partition.log
                # Consumers may only see up to the HW; replicas see the log end.
                fetchable = (
                    log.log_end_offset if request.replica_id >= 0 else partition.high_watermark
                )
                if part.timestamp == LATEST_TIMESTAMP:
                    result.offset = fetchable
                    result.leader_epoch = partition.leader_epoch
                elif part.timestamp in (EARLIEST_TIMESTAMP, EARLIEST_LOCAL_TIMESTAMP):
                    # Without tiered storage the local log start is the log start (KIP-405).
                    result.offset = log.log_start_offset
                    epoch = log.epoch_cache.epoch_for_offset(log.log_start_offset)
                    result.leader_epoch = -1 if epoch is None else epoch
                else:
                    found = log.fetch_offset_by_timestamp(part.timestamp)
                    if found is not None and found.offset < fetchable:
                        result.timestamp = found.timestamp
                        result.offset = found.offset
                        result.leader_epoch = found.leader_epoch
            except Exception as e:
                result.error_code, _ = _error(e)
        return response

    def offsets_for_leader_epoch(
        self, request: pb.OffsetsForLeaderEpochRequest
    ) -> pb.OffsetsForLeaderEpochResponse:
        response = pb.OffsetsForLeaderEpochResponse()
        for part in request.partitions:
            tp = TopicPartition(part.topic, part.partition)
            result = response.partitions.add(
                topic=part.topic, partition=part.partition, leader_epoch=-1, end_offset=-1
            )
            try:
                partition = self.leader_partition(tp, part.current_leader_epoch)
                epoch, end = partition.log.end_offset_for_epoch(part.leader_epoch)
                result.leader_epoch, result.end_offset = epoch, end
            except Exception as e:
                result.error_code, _ = _error(e)
        return response

    def describe_replicas(self, request: pb.DescribeReplicasRequest) -> pb.DescribeReplicasResponse:
        """What this broker holds of each partition (kafkasim's own admin call)."""
        wanted = {TopicPartition(p.topic, p.partition) for p in request.partitions}
        response = pb.DescribeReplicasResponse(monotonic_ms=self._clock.monotonic_ms())
        for tp in sorted(self.partitions):
            if wanted and tp not in wanted:
                continue
            partition = self.partitions[tp]
            log = partition.log
            response.replicas.add(
                topic=tp.topic,
                partition=tp.partition,
                broker_id=self.broker_id,
                is_leader=partition.is_leader,
                leader=partition.leader_id,
                leader_epoch=partition.leader_epoch,
                high_watermark=log.high_watermark,
                log_end_offset=log.log_end_offset,
                log_start_offset=log.log_start_offset,
                isr=sorted(partition.isr),
                size_bytes=log.size_in_bytes,
                replicas=list(partition.assigned_replicas),
            )
        return response

    # -- delete records ---------------------------------------------------------------------

    async def delete_records(self, request: pb.DeleteRecordsRequest) -> pb.DeleteRecordsResponse:
        """Kafka's DeleteRecords on the leader: move each log start offset, then answer once
        every partition's low watermark has reached it (the delete-records purgatory), the
        leader changes, or ``timeout_ms`` passes (REQUEST_TIMED_OUT)."""
        response = pb.DeleteRecordsResponse()
        waits: list[_DeleteRecordsWait] = []
        for part in request.partitions:
            tp = TopicPartition(part.topic, part.partition)
            result = response.partitions.add(
                topic=part.topic, partition=part.partition, low_watermark=INVALID_LOW_WATERMARK
            )
            try:
                if tp.topic in INTERNAL_TOPICS:
                    raise InvalidTopicError(f"Cannot delete records of internal topic {tp.topic}")
                partition = self.leader_partition(tp)
                requested = partition.delete_records_on_leader(part.offset)
                result.low_watermark = partition.low_watermark
            except Exception as e:
                result.error_code, result.error_message = _error(e)
                continue
            if result.low_watermark < requested:
                future = partition.wait_for_low_watermark(requested)
                waits.append(_DeleteRecordsWait(result, partition, requested, future))
        if waits:
            await self._await_low_watermarks(waits, request.timeout_ms)
        return response

    async def _await_low_watermarks(self, waits: list[_DeleteRecordsWait], timeout_ms: int) -> None:
        futures = [w.future for w in waits]
        try:
            _, pending = await asyncio.wait(futures, timeout=max(timeout_ms, 0) / 1000)
        except asyncio.CancelledError:
            for future in futures:
                future.cancel()
            raise
        for w in waits:
            result, partition = w.result, w.partition
            if w.future in pending:
                w.future.cancel()
                with contextlib.suppress(KafkaError):
                    result.low_watermark = partition.low_watermark
                result.error_code = RequestTimedOutError.code
                result.error_message = (
                    f"{partition.tp}: the low watermark {result.low_watermark} did not reach "
                    f"the new log start offset {w.requested} within {timeout_ms} ms"
                )
            elif w.future.exception() is not None:
                result.error_code, result.error_message = _error(w.future.exception())  # type: ignore[arg-type]
                result.low_watermark = INVALID_LOW_WATERMARK
            else:
                # Reached; it may have moved on since (or leadership moved: report the goal).
                low = partition.low_watermark if partition.is_leader else w.requested
                result.low_watermark = max(low, w.requested)

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

    def leader_and_isr(self, request: pb.LeaderAndIsrRequest) -> pb.LeaderAndIsrResponse:
        """Become leader or follower for each partition, as the controller says."""
        response = pb.LeaderAndIsrResponse()
        if not self._check_controller_epoch(request.controller_epoch):
            response.error_code = _code("STALE_CONTROLLER_EPOCH")
            return response
        now_ms = self._clock.time_ms()
        follow: list[FetchTarget] = []
        stop: list[TopicPartition] = []
        for state in request.partition_states:
            tp = TopicPartition(state.topic, state.partition)
            error = response.partition_errors.add(topic=state.topic, partition=state.partition)
            if self.broker_id not in state.replicas:
                error.error_code = UnknownTopicOrPartitionError.code
                continue
            existing = self.partitions.get(tp)
            if existing is not None and state.leader_epoch < existing.leader_epoch:
                # A LeaderAndIsr older than what we have: Kafka answers STALE_CONTROLLER_EPOCH.
                error.error_code = _code("STALE_CONTROLLER_EPOCH")
                continue
            try:
                partition = existing or self._create_partition(tp)
                if state.leader == self.broker_id:
                    partition.make_leader(
                        leader_epoch=state.leader_epoch,
                        isr=state.isr,
                        replicas=state.replicas,
                        zk_version=state.zk_version,
                        controller_epoch=state.controller_epoch,
                        now_ms=now_ms,
                    )
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
                error.error_code, _ = _error(e)
        if stop:
            self.on_stop_following(stop)
        if follow:
            self.on_become_follower(follow)
        return response

    def _create_partition(self, tp: TopicPartition) -> Partition:
        config = self._topic_config(tp.topic)
        log = self.log_manager.get_or_create_log(tp, config)
        if log.config != config:
            # Loaded from disk at startup, before this topic's overrides were read.
            log.update_config(config)
        partition = Partition(tp, self.broker_id, log, is_broker_alive=self._is_broker_alive)
        self.partitions[tp] = partition
        return partition

    def _is_broker_alive(self, broker_id: int) -> bool:
        return self.is_broker_alive(broker_id)

    def stop_replica(self, request: pb.StopReplicaRequest) -> pb.StopReplicaResponse:
        response = pb.StopReplicaResponse()
        if not self._check_controller_epoch(request.controller_epoch):
            response.error_code = _code("STALE_CONTROLLER_EPOCH")
            return response
        stopped = []
        for part in request.partitions:
            tp = TopicPartition(part.topic, part.partition)
            result = response.partition_errors.add(topic=part.topic, partition=part.partition)
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
                    result.error_code = e.code
            elif partition is not None:
                partition.make_follower(
                    leader_id=-1,
                    leader_epoch=partition.leader_epoch,
                    isr=partition.isr,
                    replicas=partition.assigned_replicas,
                    zk_version=partition.zk_version,
                    controller_epoch=request.controller_epoch,
                )
        if stopped:
            self.on_stop_following(stopped)
        return response

    # -- ISR maintenance --------------------------------------------------------------------

    def _maybe_expand_isr(self, partition: Partition) -> None:
        proposed = partition.isr_to_expand()
        if proposed is not None:
            self._start_isr_write(partition, proposed, "expand")

    def maybe_shrink_isr(self) -> None:
        """Kafka's isr-expiration task (run every replica.lag.time.max.ms / 2)."""
        now_ms = self._clock.time_ms()
        for partition in list(self.partitions.values()):
            proposed = partition.isr_to_shrink(now_ms, self.lag_time_max_ms)
            if proposed is not None:
                self._start_isr_write(partition, proposed, "shrink")

    def _start_isr_write(self, partition: Partition, proposed: frozenset[int], kind: str) -> None:
        partition.propose_isr(proposed, kind)
        task = asyncio.get_running_loop().create_task(
            self._write_isr(partition, proposed, kind), name=f"isr-{kind}-{partition.tp}"
        )
        self._isr_tasks.add(task)
        task.add_done_callback(self._isr_tasks.discard)

    async def _write_isr(self, partition: Partition, proposed: frozenset[int], kind: str) -> None:
        """Version-checked write of the partition state znode, then the change notification."""
        tp = partition.tp
        state = zk_data.LeaderAndIsr(
            self.broker_id,
            partition.leader_epoch,
            tuple(sorted(proposed)),
            partition.controller_epoch,
            partition.zk_version,
        )
        try:
            stat = await self._zk.set(
                zk_data.partition_state_path(tp),
                zk_data.encode_partition_state(state),
                version=partition.zk_version,
            )
        except BadVersionError:
            logger.info(
                "%s: cached zkVersion %d not equal to that in ZooKeeper, skip updating ISR",
                tp,
                partition.zk_version,
            )
            partition.abort_isr_change()
            return
        except (CoordinationError, NoNodeError) as e:
            logger.warning("%s: could not write ISR %s: %s", tp, sorted(proposed), e)
            partition.abort_isr_change()
            return
        if partition.pending_isr is None or partition.pending_isr.proposed != proposed:
            return  # a LeaderAndIsr arrived meanwhile and reset the state
        if kind == "expand":
            self.isr_expands += 1
        else:
            self.isr_shrinks += 1
        partition.commit_isr(proposed, stat.version)
        try:
            await self._zk.create(
                f"{zk_data.ISR_CHANGE_NOTIFICATION}/{zk_data.ISR_CHANGE_PREFIX}",
                zk_data.encode_isr_change([tp]),
                sequence=True,
                makepath=True,
            )
        except CoordinationError as e:
            logger.warning("%s: could not write the ISR change notification: %s", tp, e)

    # -- checkpoints and facts --------------------------------------------------------------

    def checkpoint_high_watermarks(self) -> None:
        self.log_manager.checkpoint_high_watermarks()

    async def close(self) -> None:
        for task in list(self._isr_tasks):
            task.cancel()
        for task in list(self._isr_tasks):
            with contextlib.suppress(asyncio.CancelledError):
                await task
        for partition in self.partitions.values():
            partition.fail_waiters(NotLeaderOrFollowerError(f"{partition.tp}: broker stopping"))
