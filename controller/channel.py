"""The controller's channel to the brokers: ordered, retried requests (Kafka's
``ControllerChannelManager``) and per-broker batching (``ControllerBrokerRequestBatch``).

Theory of operation
-------------------
1. :class:`ControllerChannel` keeps one FIFO queue and one sender task per live broker. A request
   is sent with the Rpc port to the broker's registered address; the next request to that
   broker leaves only after the previous one was answered, so a broker sees the controller's
   decisions in the order they were made.
2. A transport failure (:class:`~common.rpc.RpcError`) is retried with a bounded exponential
   backoff (one tenacity policy), without limit, until the broker answers or is removed with
   :meth:`ControllerChannel.remove_broker` (it died, or bounced to a new epoch): then its queue
   is dropped, as Kafka drops the queue of a dead broker. A Kafka error inside an answer is not
   retried; it is logged (and handed to the request's callback when it has one).
3. :class:`RequestBatch` collects, while the controller handles one event, every LeaderAndIsr
   partition state per broker, one UpdateMetadata (a set of brokers, a set of partition states,
   deleted topics) and every StopReplica partition per broker; :meth:`RequestBatch.send` turns
   them into at most one request of each kind per broker, queued in Kafka's order:
   LeaderAndIsr, then UpdateMetadata, then StopReplica.

Every request carries ``controller_id``, ``controller_epoch`` and the target broker's epoch
(the czxid of its registration, KIP-380), so a broker can drop requests from a deposed
controller or meant for an earlier incarnation of itself.

This is a wire client of the brokers (as Kafka's controller sends LeaderAndIsr, UpdateMetadata
and StopReplica over its own network client), so it builds and reads protobuf requests itself;
the controller's admin requests from clients, by contrast, reach it only as domain calls
(translated by the broker's request layer, ``node.apis_admin``).

Not thread-safe: everything runs on one asyncio loop.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType

from google.protobuf.message import Message
from tenacity import AsyncRetrying, RetryCallState, retry_if_exception_type, wait_exponential

from kafkasim.common.rpc import RpcError, Transport
from kafkasim.common.types import TopicPartition
from kafkasim.controller.zk_data import BrokerInfo, LeaderAndIsr
from kafkasim.proto import METHOD_LEADER_AND_ISR, METHOD_STOP_REPLICA, METHOD_UPDATE_METADATA
from kafkasim.proto import kafkasim_pb2 as pb

logger = logging.getLogger(__name__)

ResponseCallback = Callable[[int, Message, Message], None]
"""Called with (broker id, request, response) once the broker answered."""


@dataclass(frozen=True, slots=True)
class _QueuedRequest:
    method: str
    request: Message
    on_response: ResponseCallback | None


@dataclass(slots=True)
class _BrokerQueue:
    info: BrokerInfo
    queue: asyncio.Queue[_QueuedRequest]
    sender: asyncio.Task[None]


def broker_endpoint(info: BrokerInfo) -> pb.BrokerEndpoint:
    """A broker as brokers see it: its inter-broker address, and every advertised listener
    (which clients on each listener are told)."""
    return pb.BrokerEndpoint(
        node_id=info.broker_id,
        host=info.host,
        port=info.port,
        rack=info.rack or "",
        listeners=[
            pb.ListenerEndpoint(name=name, host=host, port=port)
            for name, host, port in info.endpoints
        ],
    )


class ControllerChannel:
    """One ordered, retried request queue per live broker.

    ``request_timeout_s`` bounds one attempt (``controller.socket.timeout.ms``); between
    attempts the wait doubles from ``backoff_initial_s`` up to ``backoff_max_s``.
    """

    def __init__(
        self,
        transport: Transport,
        *,
        request_timeout_s: float = 30.0,
        backoff_initial_s: float = 0.1,
        backoff_max_s: float = 1.0,
    ) -> None:
        if request_timeout_s <= 0 or backoff_initial_s <= 0 or backoff_max_s < backoff_initial_s:
            raise ValueError("timeouts and backoffs must be positive, max >= initial")
        self._transport = transport
        self._request_timeout_s = request_timeout_s
        self._backoff_initial_s = backoff_initial_s
        self._backoff_max_s = backoff_max_s
        self._brokers: dict[int, _BrokerQueue] = {}
        self._closed = False

    @property
    def brokers(self) -> Mapping[int, BrokerInfo]:
        """The brokers requests can be sent to (a read-only view, by id)."""
        return MappingProxyType({b: q.info for b, q in sorted(self._brokers.items())})

    def add_broker(self, info: BrokerInfo) -> None:
        """Start a queue for ``info`` (replacing the queue of an older epoch of that broker)."""
        if self._closed:
            raise RuntimeError("the controller channel is closed")
        self.remove_broker(info.broker_id)
        queue: asyncio.Queue[_QueuedRequest] = asyncio.Queue()
        sender = asyncio.get_running_loop().create_task(
            self._send_loop(info, queue), name=f"controller-channel-{info.broker_id}"
        )
        self._brokers[info.broker_id] = _BrokerQueue(info, queue, sender)

    def remove_broker(self, broker_id: int) -> None:
        """Drop the broker's queue: requests not yet answered are never sent (or re-sent)."""
        entry = self._brokers.pop(broker_id, None)
        if entry is not None:
            entry.sender.cancel()

    def enqueue(
        self,
        broker_id: int,
        method: str,
        request: Message,
        on_response: ResponseCallback | None = None,
    ) -> bool:
        """Queue ``request`` for ``broker_id``; False (and nothing sent) if it is not live."""
        entry = self._brokers.get(broker_id)
        if entry is None:
            logger.debug("not sending %s to broker %d: not a live broker", method, broker_id)
            return False
        entry.queue.put_nowait(_QueuedRequest(method, request, on_response))
        return True

    def queued(self, broker_id: int) -> int:
        """Requests queued for ``broker_id`` and not yet answered (0 for unknown brokers)."""
        entry = self._brokers.get(broker_id)
        return 0 if entry is None else entry.queue.qsize()

    async def drain(self) -> None:
        """Wait until every request queued so far was answered (or its broker removed)."""
        for entry in list(self._brokers.values()):
            join = asyncio.ensure_future(entry.queue.join())
            done, _ = await asyncio.wait([join, entry.sender], return_when=asyncio.FIRST_COMPLETED)
            if join not in done:
                join.cancel()

    async def close(self) -> None:
        """Stop every sender; queued requests are dropped."""
        self._closed = True
        entries = list(self._brokers.values())
        self._brokers.clear()
        for entry in entries:
            entry.sender.cancel()
        for entry in entries:
            try:
                await entry.sender
            except asyncio.CancelledError:
                current = asyncio.current_task()
                if current is not None and current.cancelling():
                    raise

    def _log_retry(self, info: BrokerInfo, method: str) -> Callable[[RetryCallState], None]:
        def log(state: RetryCallState) -> None:
            error = state.outcome.exception() if state.outcome is not None else None
            level = logging.WARNING if state.attempt_number == 1 else logging.DEBUG
            logger.log(
                level,
                "controller request %s to broker %d at %s failed (attempt %d, %s); retrying",
                method.rsplit("/", 1)[-1],
                info.broker_id,
                info.address,
                state.attempt_number,
                error,
            )

        return log

    async def _send_loop(self, info: BrokerInfo, queue: asyncio.Queue[_QueuedRequest]) -> None:
        while True:
            item = await queue.get()
            try:
                response = await self._send_with_retries(info, item)
                self._handle_response(info, item, response)
            finally:
                queue.task_done()

    async def _send_with_retries(self, info: BrokerInfo, item: _QueuedRequest) -> Message:
        retrying = AsyncRetrying(
            retry=retry_if_exception_type(RpcError),
            wait=wait_exponential(
                multiplier=self._backoff_initial_s,
                min=self._backoff_initial_s,
                max=self._backoff_max_s,
            ),
            before_sleep=self._log_retry(info, item.method),
            reraise=True,
        )
        async for attempt in retrying:
            with attempt:
                return await self._transport.call(
                    info.address, item.method, item.request, timeout_s=self._request_timeout_s
                )
        raise AssertionError("unreachable: the retry policy never stops")  # pragma: no cover

    def _handle_response(self, info: BrokerInfo, item: _QueuedRequest, response: Message) -> None:
        error_code = getattr(response, "error_code", 0)
        if error_code:
            logger.warning(
                "broker %d answered %s with error code %d",
                info.broker_id,
                item.method.rsplit("/", 1)[-1],
                error_code,
            )
        if item.on_response is not None:
            try:
                item.on_response(info.broker_id, item.request, response)
            except Exception:
                logger.exception("response callback failed for broker %d", info.broker_id)


def partition_state(
    tp: TopicPartition,
    state: LeaderAndIsr,
    replicas: Iterable[int],
    *,
    offline_replicas: Iterable[int] = (),
    is_new: bool = False,
) -> pb.PartitionState:
    """The wire form of a partition's state (LeaderAndIsr and UpdateMetadata share it)."""
    return pb.PartitionState(
        topic=tp.topic,
        partition=tp.partition,
        controller_epoch=state.controller_epoch,
        leader=state.leader,
        leader_epoch=state.leader_epoch,
        isr=list(state.isr),
        zk_version=state.zk_version,
        replicas=list(replicas),
        offline_replicas=list(offline_replicas),
        is_new=is_new,
    )


class RequestBatch:
    """Requests collected while handling one controller event, sent together.

    Adding the same partition twice for a broker keeps the last state (it is the newer one).
    ``is_new`` sticks once set for a broker and partition, as in Kafka.
    """

    def __init__(self) -> None:
        self._clear()

    def _clear(self) -> None:
        self._leader_and_isr: dict[int, dict[TopicPartition, pb.PartitionState]] = {}
        self._update_metadata_brokers: set[int] = set()
        self._update_metadata_partitions: dict[TopicPartition, pb.PartitionState] = {}
        self._deleted_topics: set[str] = set()
        self._stop_replica: dict[int, dict[TopicPartition, pb.StopReplicaPartition]] = {}

    def is_empty(self) -> bool:
        return not (self._leader_and_isr or self._update_metadata_brokers or self._stop_replica)

    def add_leader_and_isr(
        self,
        broker_ids: Iterable[int],
        tp: TopicPartition,
        state: LeaderAndIsr,
        replicas: Iterable[int],
        *,
        is_new: bool = False,
        offline_replicas: Iterable[int] = (),
    ) -> None:
        replicas = list(replicas)
        offline = list(offline_replicas)
        for broker_id in broker_ids:
            if broker_id < 0:
                continue
            per_broker = self._leader_and_isr.setdefault(broker_id, {})
            previous = per_broker.get(tp)
            per_broker[tp] = partition_state(
                tp,
                state,
                replicas,
                offline_replicas=offline,
                is_new=is_new or (previous is not None and previous.is_new),
            )

    def add_update_metadata(
        self, broker_ids: Iterable[int], partitions: Iterable[pb.PartitionState] = ()
    ) -> None:
        """Send these partition states (and the live brokers) to ``broker_ids``.

        As in Kafka, one UpdateMetadata per batch: every broker in the set gets every
        partition added to the batch.
        """
        self._update_metadata_brokers.update(b for b in broker_ids if b >= 0)
        for state in partitions:
            self._update_metadata_partitions[TopicPartition(state.topic, state.partition)] = state

    def add_deleted_topics(self, broker_ids: Iterable[int], topics: Iterable[str]) -> None:
        self._update_metadata_brokers.update(b for b in broker_ids if b >= 0)
        self._deleted_topics.update(topics)

    def add_stop_replica(
        self,
        broker_ids: Iterable[int],
        tp: TopicPartition,
        *,
        delete: bool,
        leader_epoch: int = -1,
    ) -> None:
        for broker_id in broker_ids:
            if broker_id < 0:
                continue
            per_broker = self._stop_replica.setdefault(broker_id, {})
            previous = per_broker.get(tp)
            per_broker[tp] = pb.StopReplicaPartition(
                topic=tp.topic,
                partition=tp.partition,
                leader_epoch=leader_epoch,
                delete_partition=delete or (previous is not None and previous.delete_partition),
            )

    def send(
        self,
        channel: ControllerChannel,
        *,
        controller_id: int,
        controller_epoch: int,
        cluster_id: str = "",
        on_stop_replica_response: ResponseCallback | None = None,
    ) -> None:
        """Queue the collected requests on ``channel`` and empty the batch.

        Only brokers the channel knows (the live ones) get requests; the rest are dropped, as
        Kafka's batch filters by ``liveOrShuttingDownBrokerIds``.
        """
        brokers = channel.brokers
        live_endpoints = [broker_endpoint(info) for _, info in sorted(brokers.items())]
        for broker_id, states in sorted(self._leader_and_isr.items()):
            info = brokers.get(broker_id)
            if info is None:
                continue
            leader_ids = {s.leader for s in states.values()}
            request = pb.LeaderAndIsrRequest(
                controller_id=controller_id,
                controller_epoch=controller_epoch,
                broker_epoch=info.epoch,
                partition_states=[states[tp] for tp in sorted(states)],
                live_leaders=[e for e in live_endpoints if e.node_id in leader_ids],
            )
            channel.enqueue(broker_id, METHOD_LEADER_AND_ISR, request)
        partitions = [
            self._update_metadata_partitions[tp] for tp in sorted(self._update_metadata_partitions)
        ]
        deleted = sorted(self._deleted_topics)
        for broker_id in sorted(self._update_metadata_brokers):
            info = brokers.get(broker_id)
            if info is None:
                continue
            request_um = pb.UpdateMetadataRequest(
                controller_id=controller_id,
                controller_epoch=controller_epoch,
                broker_epoch=info.epoch,
                partition_states=partitions,
                live_brokers=live_endpoints,
                cluster_id=cluster_id,
                deleted_topics=deleted,
            )
            channel.enqueue(broker_id, METHOD_UPDATE_METADATA, request_um)
        for broker_id, stops in sorted(self._stop_replica.items()):
            info = brokers.get(broker_id)
            if info is None:
                continue
            request_sr = pb.StopReplicaRequest(
                controller_id=controller_id,
                controller_epoch=controller_epoch,
                broker_epoch=info.epoch,
                partitions=[stops[tp] for tp in sorted(stops)],
            )
            deletes = any(p.delete_partition for p in stops.values())
            channel.enqueue(
                broker_id,
                METHOD_STOP_REPLICA,
                request_sr,
                on_stop_replica_response if deletes else None,
            )
        self._clear()
