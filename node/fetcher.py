"""Replica fetchers: how a follower copies its leaders' logs.

One :class:`ReplicaFetcher` per leader broker holds one long-lived bidirectional stream
(``Replication/ReplicaFetch``) multiplexing every partition this broker follows from that
leader. A partition is in one of two states (:class:`ReplicaState`, Kafka's ``Truncating`` and
``Fetching``), and may be delayed (backing off) in either:

1. **truncating** — right after it starts following (a new leader or a new epoch): ask the
   leader ``OffsetsForLeaderEpoch`` for this replica's latest epoch and truncate to where the
   two logs stop agreeing (``node.replication.truncation_decision``, KIP-101/279), never to the
   local HW while epochs exist (``ReplicationRules.truncate_to_high_watermark`` reproduces the
   pre-KIP-101 rule for the failure-search tests);
2. **fetching** — fetch from offset = local LEO with the current leader epoch; append the
   leader's batches as they are; HW = min(LEO, leader's HW).

Errors per partition follow Kafka: FENCED_LEADER_EPOCH → stop and wait for the controller's
next LeaderAndIsr; UNKNOWN_LEADER_EPOCH / NOT_LEADER_OR_FOLLOWER → back off and retry;
OFFSET_OUT_OF_RANGE → ask the leader for its log end and start and realign. Batches the
follower refuses to append (CORRUPT_MESSAGE: a CRC mismatch; INVALID_RECORD, ...) are not stored:
one error line names the partition and the error, and that partition's fetch is retried after
``replica.fetch.backoff.ms`` while the others go on (Kafka's ``partitionsWithError``). A broken
stream is reopened after ``replica.fetch.backoff.ms``.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
from collections.abc import Callable
from dataclasses import dataclass

from kafkasim import proto
from kafkasim.common.clock import Clock
from kafkasim.common.errors import (
    InvalidOffsetError,
    InvalidTxnStateError,
    KafkaError,
    KafkaStorageError,
    error_for_code,
    error_for_name,
)
from kafkasim.common.rpc import BidiStream, ClientTransport, RpcError, RpcStatus, Transport
from kafkasim.common.types import TopicPartition
from kafkasim.node.config import BrokerConfig
from kafkasim.node.disk_delay import DiskSlot
from kafkasim.node.fetcher_wire import FetchAnswer, FetchedPartition
from kafkasim.node.partition import Partition
from kafkasim.node.replication import follower_high_watermark, truncation_decision
from kafkasim.node.rules import KAFKA_RULES, ReplicationRules
from kafkasim.proto import kafkasim_pb2 as pb
from kafkasim.storage.log import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP

logger = logging.getLogger(__name__)


class ReplicaState(enum.Enum):
    """Where a followed partition is (Kafka's ``ReplicaState``)."""

    TRUNCATING = "truncating"  # asking the leader where the logs agree, then truncating there
    FETCHING = "fetching"  # copying the leader's batches from the local log end


_OUT_OF_RANGE = error_for_name("OFFSET_OUT_OF_RANGE").code
_FENCED = error_for_name("FENCED_LEADER_EPOCH").code


@dataclass(slots=True)
class FetchState:
    """A followed partition (Kafka's ``PartitionFetchState``): its state, and until when it
    backs off (``delayed_until_ms`` in the past: not delayed)."""

    partition: Partition
    leader_epoch: int
    state: ReplicaState = ReplicaState.TRUNCATING
    delayed_until_ms: int = 0
    # How far behind the leader's high watermark its last fetch left this replica (Kafka's
    # FetcherLagMetrics: the leader's HW minus the next offset to fetch, at least 0).
    lag: int = 0

    def is_ready(self, state: ReplicaState, now_ms: int) -> bool:
        return self.state is state and self.delayed_until_ms <= now_ms

    def delay(self, until_ms: int) -> None:
        self.delayed_until_ms = until_ms


@dataclass(frozen=True, slots=True)
class StreamRoute:
    """Where followers open their fetch streams when not where their unary calls go: to each
    leader's replication listener ``listener`` (``replica.fetch.listener.name``), over
    ``transport`` (``node.rpc_framed``: a fetch round trip costs a third of gRPC's CPU)."""

    listener: str
    address_of: Callable[[int, str], str | None]  # (broker id, listener) -> host:port
    transport: ClientTransport


class ReplicaFetcher:
    """Fetches every partition this broker follows from one leader broker: the fetch stream
    over ``stream_route`` when given, else over ``transport`` to ``address_of`` as the
    follower's unary calls (OffsetsForLeaderEpoch, ListOffsets) always go."""

    def __init__(
        self,
        broker_id: int,
        leader_id: int,
        *,
        address_of: Callable[[int], str | None],
        transport: Transport,
        config: BrokerConfig,
        clock: Clock,
        rules: ReplicationRules = KAFKA_RULES,
        disk: DiskSlot | None = None,
        stream_route: StreamRoute | None = None,
    ) -> None:
        self.broker_id = broker_id
        self.leader_id = leader_id
        self._route = stream_route
        self.rules = rules
        self.disk = disk if disk is not None else DiskSlot()  # node.disk_delay
        self._address_of = address_of
        self._transport = transport
        self._clock = clock
        self.max_wait_ms: int = config["replica.fetch.wait.max.ms"]
        self.min_bytes: int = config["replica.fetch.min.bytes"]
        self.max_bytes: int = config["replica.fetch.response.max.bytes"]
        self.partition_max_bytes: int = config["replica.fetch.max.bytes"]
        self.backoff_ms: int = config["replica.fetch.backoff.ms"]
        self.timeout_ms: int = config["replica.socket.timeout.ms"]
        self.states: dict[TopicPartition, FetchState] = {}
        # Kafka's failedPartitions: dropped after an unexpected append error (INVALID_TXN_STATE).
        self.failed_partitions: set[TopicPartition] = set()
        self._stream: BidiStream | None = None
        self._stream_target: str | None = None
        self._wakeup = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.fetches = 0
        self._healthy = True

    # -- membership -------------------------------------------------------------------------

    def add(self, partition: Partition, leader_epoch: int) -> None:
        self.failed_partitions.discard(partition.tp)
        self.states[partition.tp] = FetchState(partition, leader_epoch)
        self._wakeup.set()
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(
                self._run(), name=f"replica-fetcher-{self.broker_id}-from-{self.leader_id}"
            )

    def remove(self, tp: TopicPartition) -> None:
        self.states.pop(tp, None)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        await self._close_stream()

    # -- the loop ---------------------------------------------------------------------------

    async def _run(self) -> None:
        while True:
            try:
                await self._step()
            except asyncio.CancelledError:
                raise
            except RpcError as e:
                # The first failure after a success is news; the retries that follow are not.
                logger.log(
                    logging.INFO if self._healthy else logging.DEBUG,
                    "broker %d: fetch from leader %d failed: %s; retrying in %d ms",
                    self.broker_id,
                    self.leader_id,
                    e,
                    self.backoff_ms,
                )
                self._healthy = False
                await self._close_stream()
                await asyncio.sleep(self.backoff_ms / 1000)
            except KafkaStorageError as e:
                # The log dir has failed and the broker is halting (Broker._on_log_dir_failure).
                logger.error(
                    "broker %d: fetch from leader %d not appended: %s",
                    self.broker_id,
                    self.leader_id,
                    e.message,
                )
                await self._close_stream()
                await asyncio.sleep(self.backoff_ms / 1000)
            except Exception:
                logger.exception(
                    "broker %d: fetcher from %d crashed; retrying", self.broker_id, self.leader_id
                )
                await self._close_stream()
                await asyncio.sleep(self.backoff_ms / 1000)

    async def _step(self) -> None:
        now = self._clock.time_ms()
        # FetchState.is_ready inline (two calls per partition per fetch otherwise)
        truncating_state = ReplicaState.TRUNCATING
        truncating = {
            tp: s
            for tp, s in self.states.items()
            if s.state is truncating_state and s.delayed_until_ms <= now
        }
        if truncating:
            await self._truncate(truncating)
            return
        fetching_state = ReplicaState.FETCHING
        fetching = {
            tp: s
            for tp, s in self.states.items()
            if s.state is fetching_state and s.delayed_until_ms <= now
        }
        if not fetching:
            self._wakeup.clear()
            waiting = [s.delayed_until_ms for s in self.states.values() if s.delayed_until_ms > now]
            timeout = (min(waiting) - now) / 1000 if waiting else None
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wakeup.wait(), timeout)
            return
        await self._fetch(fetching)

    def _target(self) -> str:
        address = self._address_of(self.leader_id)
        if address is None:
            raise RpcError(
                RpcStatus.UNAVAILABLE, f"no address known for leader broker {self.leader_id}"
            )
        return address

    async def _close_stream(self) -> None:
        stream, self._stream = self._stream, None
        if stream is not None:
            await stream.close()

    def _open_stream(self) -> tuple[str, ClientTransport]:
        """Where this fetcher's stream goes, and over which transport."""
        route = self._route
        if route is None:
            return self._target(), self._transport
        address = route.address_of(self.leader_id, route.listener)
        if address is None:
            # As Kafka's BrokerEndPointNotAvailableException: every broker needs the listener.
            raise RpcError(
                RpcStatus.UNAVAILABLE,
                f"leader broker {self.leader_id} has no listener {route.listener} "
                "(replica.fetch.listener.name)",
            )
        return address, route.transport

    async def _fetch(self, fetching: dict[TopicPartition, FetchState]) -> None:
        target, transport = self._open_stream()
        if self._stream is None or self._stream_target != target:
            await self._close_stream()
            self._stream = transport.open_stream(target, proto.METHOD_REPLICA_FETCH)
            self._stream_target = target
        request = pb.FetchRequest(
            replica_id=self.broker_id,
            max_wait_ms=self.max_wait_ms,
            min_bytes=self.min_bytes,
            max_bytes=self.max_bytes,
        )
        for tp, state in fetching.items():
            log = state.partition.log
            request.partitions.add(
                topic=tp.topic,
                partition=tp.partition,
                current_leader_epoch=state.leader_epoch,
                fetch_offset=log.log_end_offset,
                log_start_offset=log.log_start_offset,
                partition_max_bytes=self.partition_max_bytes,
            )
        await self._stream.send(request)
        response = await self._stream.recv((self.timeout_ms + self.max_wait_ms) / 1000)
        # Over gRPC the broker's transport decodes the answer itself (node.fetcher_wire: the
        # records as a view of the received bytes); other transports hand over the message.
        assert isinstance(response, FetchAnswer | pb.FetchResponse)
        self.fetches += 1
        self._healthy = True
        for result in response.partitions:
            tp = TopicPartition(result.topic, result.partition)
            current = self.states.get(tp)
            if current is None or current is not fetching.get(tp):
                continue  # removed or re-added while the fetch was in flight
            await self._process(current, result)

    async def _process(
        self, state: FetchState, result: FetchedPartition | pb.FetchPartitionResponse
    ) -> None:
        partition = state.partition
        log = partition.log
        if partition.leader_id != self.leader_id or partition.leader_epoch != state.leader_epoch:
            return  # the controller moved this partition meanwhile
        if result.error_code == 0:
            # Read once: each read of a protobuf bytes field is a fresh copy (1 MiB per batch);
            # a FetchedPartition's records are a view of the answer's bytes.
            records = result.records
            if records:
                disk = self.disk.delay
                if disk is not None:  # a slowed disk blocks this fetcher (node.disk_delay)
                    await disk.write()
                    if self._moved(state):
                        return
                flushes = log.flushes
                try:
                    log.append_as_follower(records)
                except InvalidOffsetError as e:
                    logger.warning(
                        "%s: follower append rejected (%s); truncating again", partition.tp, e
                    )
                    state.state = ReplicaState.TRUNCATING
                    return
                except KafkaStorageError:
                    raise  # the log dir failed: the broker halts (see _run)
                except InvalidTxnStateError as e:
                    # Kafka's fetcher thread on an unexpected error: the partition is marked
                    # failed and no longer fetched until a LeaderAndIsr adds it again.
                    logger.error(
                        "%s: unexpected error while processing data from leader %d at offset "
                        "%d (%s); the partition is marked failed",
                        partition.tp,
                        self.leader_id,
                        log.log_end_offset,
                        e,
                    )
                    self.states.pop(partition.tp, None)
                    self.failed_partitions.add(partition.tp)
                    return
                except KafkaError as e:
                    # Kafka's "Found invalid messages during fetch": nothing was stored; this
                    # partition backs off and fetches the same offset again.
                    logger.error(
                        "%s: found invalid records in the fetch from leader %d at offset %d "
                        "(%s); retrying in %d ms",
                        partition.tp,
                        self.leader_id,
                        log.log_end_offset,
                        e,
                        self.backoff_ms,
                    )
                    state.delay(self._clock.time_ms() + self.backoff_ms)
                    return
                partition.notify_follower_append()
                if disk is not None and log.flushes > flushes:
                    await disk.fsync(log.flushes - flushes)
                    if self._moved(state):
                        return
            state.lag = max(0, result.high_watermark - log.log_end_offset)
            log.update_high_watermark(
                follower_high_watermark(log.log_end_offset, result.high_watermark)
            )
            partition.fetched_leader_epoch = state.leader_epoch
            if log.log_start_offset < result.log_start_offset <= log.high_watermark:
                log.maybe_increment_log_start_offset(result.log_start_offset)
            return
        if result.error_code == _OUT_OF_RANGE:
            await self._handle_out_of_range(state)
            return
        if result.error_code == _FENCED:
            logger.info(
                "%s: fenced by leader %d (epoch %d is old); waiting for LeaderAndIsr",
                partition.tp,
                self.leader_id,
                state.leader_epoch,
            )
            self.states.pop(partition.tp, None)
            return
        error = error_for_code(result.error_code)
        logger.info(
            "%s: fetch from leader %d: %s; backing off",
            partition.tp,
            self.leader_id,
            error.error_name,
        )
        state.delay(self._clock.time_ms() + self.backoff_ms)

    def _moved(self, state: FetchState) -> bool:
        """Whether ``state``'s partition left this fetcher or changed leader or epoch while a
        slowed disk kept it waiting (what the fetched answer says no longer applies then)."""
        partition = state.partition
        return (
            self.states.get(partition.tp) is not state
            or partition.leader_id != self.leader_id
            or partition.leader_epoch != state.leader_epoch
        )

    # -- truncation -------------------------------------------------------------------------

    async def _truncate(self, truncating: dict[TopicPartition, FetchState]) -> None:
        request = pb.OffsetsForLeaderEpochRequest(replica_id=self.broker_id)
        for tp, state in truncating.items():
            log = state.partition.log
            latest = log.epoch_cache.latest_epoch
            if self.rules.truncate_to_high_watermark or latest is None:
                # No epochs to compare (an empty or old-format log): the HW is all we have.
                log.truncate_to(log.high_watermark)
                state.state = ReplicaState.FETCHING
                continue
            request.partitions.add(
                topic=tp.topic,
                partition=tp.partition,
                current_leader_epoch=state.leader_epoch,
                leader_epoch=latest,
            )
        if not request.partitions:
            return
        response = await self._transport.call(
            self._target(),
            proto.METHOD_OFFSETS_FOR_LEADER_EPOCH,
            request,
            timeout_s=self.timeout_ms / 1000,
        )
        assert isinstance(response, pb.OffsetsForLeaderEpochResponse)
        for result in response.partitions:
            tp = TopicPartition(result.topic, result.partition)
            asked = truncating.get(tp)
            if asked is None or self.states.get(tp) is not asked:
                continue
            if result.error_code == _FENCED:
                self.states.pop(tp, None)
                continue
            if result.error_code:
                # Still truncating, retried after the backoff.
                asked.delay(self._clock.time_ms() + self.backoff_ms)
                continue
            log = asked.partition.log
            decision = truncation_decision(
                leader_epoch=result.leader_epoch,
                leader_end_offset=result.end_offset,
                local_end_for_leader_epoch=log.end_offset_for_epoch(result.leader_epoch)
                if result.leader_epoch >= 0
                else (-1, -1),
                local_log_end_offset=log.log_end_offset,
                local_high_watermark=log.high_watermark,
            )
            if decision.offset < log.log_end_offset:
                logger.info(
                    "%s: truncating from %d to %d (leader %d epoch %d ends at %d)",
                    tp,
                    log.log_end_offset,
                    decision.offset,
                    self.leader_id,
                    result.leader_epoch,
                    result.end_offset,
                )
                log.truncate_to(decision.offset)
            asked.state = ReplicaState.FETCHING if decision.completed else ReplicaState.TRUNCATING

    async def _handle_out_of_range(self, state: FetchState) -> None:
        """The leader has no data at our LEO: we are ahead of it, or behind its log start."""
        log = state.partition.log
        tp = state.partition.tp
        leader_end = await self._list_offset(state, LATEST_TIMESTAMP)
        if leader_end < log.log_end_offset:
            logger.warning("%s: truncating to the leader's log end %d", tp, leader_end)
            log.truncate_to(leader_end)
            return
        leader_start = await self._list_offset(state, EARLIEST_TIMESTAMP)
        if log.log_end_offset < leader_start:
            logger.warning(
                "%s: behind the leader's log start %d; restarting there", tp, leader_start
            )
            log.truncate_fully_and_start_at(leader_start)

    async def _list_offset(self, state: FetchState, timestamp: int) -> int:
        tp = state.partition.tp
        request = pb.ListOffsetsRequest(replica_id=self.broker_id)
        request.partitions.add(
            topic=tp.topic,
            partition=tp.partition,
            current_leader_epoch=state.leader_epoch,
            timestamp=timestamp,
        )
        response = await self._transport.call(
            self._target(), proto.METHOD_LIST_OFFSETS, request, timeout_s=self.timeout_ms / 1000
        )
        assert isinstance(response, pb.ListOffsetsResponse)
        result = response.partitions[0]
        if result.error_code:
            raise error_for_code(result.error_code)(f"ListOffsets for {tp} failed")
        return int(result.offset)


class ReplicaFetcherManager:
    """One fetcher per leader broker; partitions move between them as leaders change."""

    def __init__(
        self,
        broker_id: int,
        address_of: Callable[[int], str | None],
        transport: Transport,
        config: BrokerConfig,
        clock: Clock,
        *,
        rules: ReplicationRules = KAFKA_RULES,
        disk: DiskSlot | None = None,
        stream_route: StreamRoute | None = None,
    ) -> None:
        self.broker_id = broker_id
        self._disk = disk if disk is not None else DiskSlot()
        self._route = stream_route
        self._address_of = address_of
        self._rules = rules
        self._transport = transport
        self._config = config
        self._clock = clock
        self.fetchers: dict[int, ReplicaFetcher] = {}

    def add(self, partition: Partition, leader_id: int, leader_epoch: int) -> None:
        self.remove([partition.tp])
        fetcher = self.fetchers.get(leader_id)
        if fetcher is None:
            fetcher = ReplicaFetcher(
                self.broker_id,
                leader_id,
                address_of=self._address_of,
                transport=self._transport,
                config=self._config,
                clock=self._clock,
                rules=self._rules,
                disk=self._disk,
                stream_route=self._route,
            )
            self.fetchers[leader_id] = fetcher
        fetcher.add(partition, leader_epoch)

    def remove(self, tps: list[TopicPartition]) -> None:
        for fetcher in self.fetchers.values():
            for tp in tps:
                fetcher.remove(tp)

    @property
    def max_lag(self) -> int:
        """The largest lag of any partition followed here, in records (Kafka's
        ``ReplicaFetcherManager`` MaxLag); 0 when following none."""
        return max(
            (s.lag for fetcher in self.fetchers.values() for s in fetcher.states.values()),
            default=0,
        )

    async def shutdown(self) -> None:
        for fetcher in self.fetchers.values():
            await fetcher.stop()
        self.fetchers.clear()
