"""A scripted two-broker cluster behind a fake ``ClientTransport``, for the producer's unit
tests: it answers Metadata, FindCoordinator, InitProducerId, the transactional rpcs and the
ProduceStream from plain Python state, records every request in arrival order, and can hold
produce answers back or answer a transactional rpc with a scripted error."""

from __future__ import annotations

import asyncio
from collections import defaultdict, deque
from dataclasses import dataclass, field

from google.protobuf.message import Message

from kafkasim import proto
from kafkasim.common.errors import error_for_name
from kafkasim.common.rpc import BidiStream, RpcError, RpcStatus
from kafkasim.common.types import TopicPartition
from kafkasim.proto import kafkasim_pb2 as pb
from kafkasim.storage.records.batch import BatchHeader, iter_batches

BROKERS = {1: "b1:9092", 2: "b2:9092"}
# topic -> the leader of each of its partitions
TOPICS = {"a": [1], "b": [2], "c": [1, 2]}
PID = 4000


def code(name: str) -> int:
    return error_for_name(name).code


@dataclass
class Sent:
    """One request as the cluster received it."""

    method: str  # the rpc's short name (Produce for a ProduceStream request)
    target: str
    request: Message


@dataclass
class FakeCluster:
    coordinator: int = 1  # the transaction (and group) coordinator's broker id
    epoch: int = -1
    log: list[Sent] = field(default_factory=list)
    # rpc short name -> error codes for its next answers (one per call, then no error)
    errors: dict[str, deque[int]] = field(default_factory=lambda: defaultdict(deque))
    batches: dict[TopicPartition, list[BatchHeader]] = field(
        default_factory=lambda: defaultdict(list)
    )
    hold_produce: bool = False
    txn_calls_in_flight: int = 0
    max_txn_calls_in_flight: int = 0
    released: asyncio.Event = field(default_factory=asyncio.Event)

    def fail_next(self, method: str, *names: str) -> None:
        self.errors[method].extend(code(n) for n in names)

    def methods(self) -> list[str]:
        return [s.method for s in self.log]

    def transactional(self) -> list[str]:
        """The rpcs other than Metadata and Produce, in the order they arrived."""
        return [m for m in self.methods() if m not in ("Metadata", "Produce")]

    def release(self) -> None:
        self.hold_produce = False
        self.released.set()

    def _error(self, method: str) -> int:
        queue = self.errors.get(method)
        return queue.popleft() if queue else 0

    def answer(self, target: str, method: str, request: Message) -> Message:
        name = method.rsplit("/", 1)[1]
        self.log.append(Sent(name, target, request))
        error = self._error(name)
        match request:
            case pb.MetadataRequest():
                response = pb.MetadataResponse(controller_id=1)
                for node_id, address in BROKERS.items():
                    host, port = address.split(":")
                    response.brokers.add(node_id=node_id, host=host, port=int(port))
                for topic, leaders in TOPICS.items():
                    t = response.topics.add(name=topic)
                    for partition, leader in enumerate(leaders):
                        t.partitions.add(partition=partition, leader=leader, leader_epoch=0)
                return response
            case pb.FindCoordinatorRequest():
                if error:
                    return pb.FindCoordinatorResponse(error_code=error)
                host, port = BROKERS[self.coordinator].split(":")
                return pb.FindCoordinatorResponse(
                    node_id=self.coordinator, host=host, port=int(port)
                )
            case pb.InitProducerIdRequest():
                if error:
                    return pb.InitProducerIdResponse(error_code=error, producer_id=-1)
                self.epoch += 1
                return pb.InitProducerIdResponse(producer_id=PID, producer_epoch=self.epoch)
            case pb.AddPartitionsToTxnRequest():
                return pb.AddPartitionsToTxnResponse(
                    partitions=[
                        pb.PartitionError(topic=p.topic, partition=p.partition, error_code=error)
                        for p in request.partitions
                    ]
                )
            case pb.AddOffsetsToTxnRequest():
                return pb.AddOffsetsToTxnResponse(error_code=error)
            case pb.TxnOffsetCommitRequest():
                return pb.TxnOffsetCommitResponse(
                    partitions=[
                        pb.PartitionError(topic=p.topic, partition=p.partition, error_code=error)
                        for p in request.partitions
                    ]
                )
            case pb.EndTxnRequest():
                return pb.EndTxnResponse(error_code=error)
        raise AssertionError(f"unexpected {name}")

    def produce(self, target: str, request: pb.ProduceRequest) -> pb.ProduceResponse:
        self.log.append(Sent("Produce", target, request))
        response = pb.ProduceResponse(correlation_id=request.correlation_id)
        for part in request.partitions:
            tp = TopicPartition(part.topic, part.partition)
            stored = self.batches[tp]
            base = sum(h.records_count for h in stored)
            error = self._error("Produce")
            if not error:
                stored.extend(header for _, header in iter_batches(part.records))
            response.partitions.add(
                topic=part.topic, partition=part.partition, error_code=error, base_offset=base
            )
        return response


class FakeStream:
    def __init__(self, cluster: FakeCluster, target: str) -> None:
        self._cluster = cluster
        self._target = target
        self._answers: asyncio.Queue[pb.ProduceResponse] = asyncio.Queue()

    async def send(self, message: Message) -> None:
        assert isinstance(message, pb.ProduceRequest)
        request = message

        async def answer() -> None:
            while self._cluster.hold_produce:
                self._cluster.released.clear()
                await self._cluster.released.wait()
            await self._answers.put(self._cluster.produce(self._target, request))

        self._task = asyncio.get_running_loop().create_task(answer())

    async def recv(self, timeout_s: float | None = None) -> Message:
        return await self._answers.get()

    async def close(self) -> None:
        return None


class FakeTransport:
    """The client side of the fake cluster (a ``ClientTransport``)."""

    def __init__(self, cluster: FakeCluster) -> None:
        self.cluster = cluster
        self.unreachable: set[str] = set()

    async def call(
        self, target: str, method: str, request: Message, *, timeout_s: float
    ) -> Message:
        if target in self.unreachable:
            raise RpcError(RpcStatus.UNAVAILABLE, f"{target} is down")
        transactional = method not in (proto.METHOD_METADATA,)
        cluster = self.cluster
        if transactional:
            cluster.txn_calls_in_flight += 1
            cluster.max_txn_calls_in_flight = max(
                cluster.max_txn_calls_in_flight, cluster.txn_calls_in_flight
            )
        try:
            await asyncio.sleep(0)  # an answer is never synchronous
            return cluster.answer(target, method, request)
        finally:
            if transactional:
                cluster.txn_calls_in_flight -= 1

    def open_stream(self, target: str, method: str) -> BidiStream:
        assert method == proto.METHOD_PRODUCE_STREAM
        return FakeStream(self.cluster, target)

    async def close(self) -> None:
        return None
