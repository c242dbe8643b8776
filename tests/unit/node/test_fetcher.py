"""A follower's fetcher against a scripted leader: what it does with what the leader sends.

Why: a follower must never store batches it cannot verify (a CRC mismatch), and, as Kafka's
fetcher thread, it must say so in one error line naming the partition and keep fetching that
partition after ``replica.fetch.backoff.ms`` rather than treat the refusal as a crash.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest
from google.protobuf.message import Message

from kafkasim.common.clock import ManualClock
from kafkasim.common.rpc import BidiStream, RpcServer
from kafkasim.common.types import TopicPartition
from kafkasim.node.config import BrokerConfig
from kafkasim.node.fetcher import FetchState, ReplicaFetcher, ReplicaState
from kafkasim.node.fetcher_wire import FetchAnswer, decode_fetch_answer
from kafkasim.node.partition import Partition
from kafkasim.proto import kafkasim_pb2 as pb
from kafkasim.storage.config import LogConfig
from kafkasim.storage.log import Log
from tests.unit.storage.logtools import T0, make_batch

TP = TopicPartition("topic", 0)
BACKOFF_MS = 200


class ScriptedStream:
    """The leader's end of the replication stream: answers each fetch from a script."""

    def __init__(self, answers: list[pb.FetchResponse | FetchAnswer]) -> None:
        self.answers = answers
        self.sent: list[Message] = []

    async def send(self, message: Message) -> None:
        self.sent.append(message)

    async def recv(self, timeout_s: float | None = None) -> Any:
        return self.answers.pop(0)

    async def close(self) -> None:
        pass


class ScriptedTransport:
    def __init__(self, stream: ScriptedStream) -> None:
        self.stream = stream

    async def call(
        self, target: str, method: str, request: Message, *, timeout_s: float | None = None
    ) -> Message:
        raise AssertionError(f"unexpected call {method}")

    def open_stream(self, target: str, method: str) -> BidiStream:
        return self.stream

    def server(
        self,
        address: str,
        handlers: Mapping[str, Callable[[Any], Any]],
        stream_handlers: Mapping[str, Callable[[Any], Any]] | None = None,
    ) -> RpcServer:
        raise AssertionError("no server here")

    async def close(self) -> None:
        pass


def answer(records: bytes) -> pb.FetchResponse:
    return pb.FetchResponse(
        partitions=[
            pb.FetchPartitionResponse(
                topic=TP.topic, partition=TP.partition, high_watermark=2, records=records
            )
        ]
    )


def as_received(message: pb.FetchResponse, form: str) -> pb.FetchResponse | FetchAnswer:
    """The answer as a transport hands it over: the message itself (the simulation's), or
    read off the wire with the records left in the received bytes (the broker's gRPC one)."""
    if form == "message":
        return message
    return decode_fetch_answer(message.SerializeToString())


def follower(tmp_path: Path, clock: ManualClock) -> Partition:
    log = Log.open(tmp_path / "topic-0", LogConfig.from_props({}), clock, topic_partition=TP)
    partition = Partition(TP, 2, log)
    partition.make_follower(
        leader_id=1, leader_epoch=0, isr=[1, 2], replicas=[1, 2], zk_version=0, controller_epoch=1
    )
    return partition


@pytest.mark.parametrize("form", ["message", "wire"])
def test_a_crc_bad_fetch_is_refused_logged_once_and_fetched_again_after_the_backoff(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, form: str
) -> None:
    good = make_batch([b"a", b"b"])
    bad = bytearray(good)
    bad[-1] ^= 0xFF  # a flipped bit in the last record: the batch CRC no longer matches

    async def scenario() -> None:
        clock = ManualClock(T0)
        partition = follower(tmp_path, clock)
        stream = ScriptedStream(
            [as_received(answer(bytes(bad)), form), as_received(answer(good), form)]
        )
        config = BrokerConfig.from_props(
            {
                "broker.id": 2,
                "log.dirs": str(tmp_path),
                "zookeeper.connect": "sim",
                "replica.fetch.backoff.ms": BACKOFF_MS,
            }
        )
        fetcher = ReplicaFetcher(
            2,
            1,
            address_of=lambda _b: "leader:9092",
            transport=ScriptedTransport(stream),
            config=config,
            clock=clock,
        )
        state = FetchState(partition, 0, ReplicaState.FETCHING)
        fetcher.states[TP] = state

        with caplog.at_level(logging.INFO, logger="kafkasim.node.fetcher"):
            await fetcher._step()
        assert partition.log.log_end_offset == 0  # nothing stored
        errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
        assert len(errors) == 1
        assert errors[0].exc_info is None  # one line, no "fetcher crashed" traceback
        assert "topic-0" in errors[0].getMessage()
        assert "CORRUPT_MESSAGE" in errors[0].getMessage()
        # The partition backs off, still fetching; it is not dropped or truncated.
        assert state.state is ReplicaState.FETCHING
        assert not state.is_ready(ReplicaState.FETCHING, clock.time_ms())
        clock.advance(BACKOFF_MS)
        assert state.is_ready(ReplicaState.FETCHING, clock.time_ms())

        await fetcher._step()  # the same offset again; the leader now sends good bytes
        assert isinstance(stream.sent[1], pb.FetchRequest)
        assert stream.sent[1].partitions[0].fetch_offset == 0
        assert partition.log.log_end_offset == 2
        assert partition.log.high_watermark == 2  # min(log end, the leader's HW)

    asyncio.run(scenario())


def test_invalid_txn_state_in_a_fetch_marks_the_partition_failed(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Kafka's fetcher on an unexpected append error (INVALID_TXN_STATE: a producer's
    non-transactional batch inside its open transaction): nothing stored, one error line, the
    partition is dropped from fetching (``failed_partitions``) until LeaderAndIsr adds it."""
    from tests.txn_records import Producer

    producer = Producer(5)
    txn = producer.batch()
    plain = producer.batch(transactional=False, base_offset=1)

    async def scenario() -> None:
        clock = ManualClock(T0)
        partition = follower(tmp_path, clock)
        stream = ScriptedStream([answer(txn + plain)])
        config = BrokerConfig.from_props(
            {"broker.id": 2, "log.dirs": str(tmp_path), "zookeeper.connect": "sim"}
        )
        fetcher = ReplicaFetcher(
            2,
            1,
            address_of=lambda _b: "leader:9092",
            transport=ScriptedTransport(stream),
            config=config,
            clock=clock,
        )
        fetcher.states[TP] = FetchState(partition, 0, ReplicaState.FETCHING)
        with caplog.at_level(logging.INFO, logger="kafkasim.node.fetcher"):
            await fetcher._step()
        assert partition.log.log_end_offset == 0
        assert partition.log.producer_state.ongoing_txns == []  # restored as it was
        errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
        assert len(errors) == 1 and "INVALID_TXN_STATE" in errors[0].getMessage()
        assert TP not in fetcher.states
        assert fetcher.failed_partitions == {TP}
        fetcher.add(partition, 1)  # a new LeaderAndIsr
        assert fetcher.failed_partitions == set()
        assert TP in fetcher.states
        await fetcher.stop()

    asyncio.run(scenario())


def test_a_deposed_leader_keeps_its_hw_until_its_first_fetch_in_the_new_epoch_lowers_it(
    tmp_path: Path,
) -> None:
    """Kafka's makeFollower keeps the HW a deposed leader announced, although the new leader
    may not have learnt it yet; its first fetch in the new epoch sets the HW to min(its log
    end, the leader's HW), lower if need be (processPartitionData), and says it has fetched in
    that epoch (``fetched_leader_epoch``, what invariant 2 of the checker waits for)."""

    async def scenario() -> None:
        clock = ManualClock(T0)
        log = Log.open(tmp_path / "topic-0", LogConfig.from_props({}), clock, topic_partition=TP)
        partition = Partition(TP, 2, log)
        partition.make_leader(leader_epoch=0, isr=[2], replicas=[2, 1], zk_version=0,
                              controller_epoch=1, now_ms=T0)  # fmt: skip
        partition.append_records_to_leader(make_batch([b"a", b"b", b"c"]), required_acks=1)
        assert partition.high_watermark == 3 and partition.fetched_leader_epoch == -1
        partition.make_follower(leader_id=1, leader_epoch=1, isr=[1, 2], replicas=[2, 1],
                                zk_version=1, controller_epoch=1)  # fmt: skip
        assert partition.high_watermark == 3  # kept: not lowered on becoming a follower
        assert partition.fetched_leader_epoch < partition.leader_epoch
        stream = ScriptedStream([answer(b"")])  # the new leader's HW is 2
        config = BrokerConfig.from_props(
            {"broker.id": 2, "log.dirs": str(tmp_path), "zookeeper.connect": "sim"}
        )
        fetcher = ReplicaFetcher(2, 1, address_of=lambda _b: "leader:9092",
                                 transport=ScriptedTransport(stream), config=config,
                                 clock=clock)  # fmt: skip
        fetcher.states[TP] = FetchState(partition, 1, ReplicaState.FETCHING)
        await fetcher._step()
        assert partition.high_watermark == 2
        assert partition.fetched_leader_epoch == 1

    asyncio.run(scenario())


class RecordingTransport(ScriptedTransport):
    """Remembers where each stream was opened."""

    def __init__(self, stream: ScriptedStream) -> None:
        super().__init__(stream)
        self.opened: list[tuple[str, str]] = []

    def open_stream(self, target: str, method: str) -> BidiStream:
        self.opened.append((target, method))
        return self.stream


def test_a_stream_route_takes_the_fetch_stream_to_the_leaders_replication_listener(
    tmp_path: Path,
) -> None:
    """With ``replica.fetch.listener.name`` the stream goes over the route's transport to the
    leader's listener of that name, never over the unary transport; a leader without that
    listener is UNAVAILABLE naming it (as Kafka's BrokerEndPointNotAvailableException), and
    the next fetch tries again."""
    from kafkasim.common.rpc import RpcError, RpcStatus
    from kafkasim.node.fetcher import StreamRoute

    async def scenario() -> None:
        clock = ManualClock(T0)
        partition = follower(tmp_path, clock)
        good = make_batch([b"a"])
        framed = RecordingTransport(ScriptedStream([answer(good)]))
        unary = RecordingTransport(ScriptedStream([]))
        listeners: dict[int, str] = {}
        config = BrokerConfig.from_props(
            {"broker.id": 2, "log.dirs": str(tmp_path), "zookeeper.connect": "sim"}
        )
        fetcher = ReplicaFetcher(
            2,
            1,
            address_of=lambda _b: "leader:9092",
            transport=unary,
            config=config,
            clock=clock,
            stream_route=StreamRoute(
                "REPLICATION",
                lambda broker, name: listeners.get(broker) if name == "REPLICATION" else None,
                framed,
            ),
        )
        fetcher.states[TP] = FetchState(partition, 0, ReplicaState.FETCHING)
        with pytest.raises(RpcError) as raised:
            await fetcher._step()
        assert raised.value.status is RpcStatus.UNAVAILABLE
        assert "leader broker 1 has no listener REPLICATION" in raised.value.message
        listeners[1] = "leader:9093"
        await fetcher._step()
        assert framed.opened == [("leader:9093", "/kafkasim.Replication/ReplicaFetch")]
        assert unary.opened == []
        assert partition.log.log_end_offset == 1

    asyncio.run(scenario())
