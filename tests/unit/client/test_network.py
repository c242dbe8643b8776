"""The network client over a scripted transport: where its calls go, what it does with the
answers (leader forgotten, metadata refreshed, controller found again), and the one fetch
path handing back raw batches."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest
from google.protobuf.message import Message

from kafkasim import proto
from kafkasim.client.network import ConnectionWarnings, NetworkClient
from kafkasim.common.clock import ManualClock
from kafkasim.common.errors import (
    NotLeaderOrFollowerError,
    OffsetOutOfRangeError,
    error_for_name,
)
from kafkasim.common.rpc import BidiStream, RpcError, RpcStatus
from kafkasim.common.types import TopicPartition
from kafkasim.proto import kafkasim_pb2 as pb
from kafkasim.storage.records.batch import RecordBatchBuilder

TP = TopicPartition("events", 0)
Handler = Callable[[str, Message], Message]


class ScriptedTransport:
    """Each broker address answers through a function of (method, request); calls are logged."""

    def __init__(self, brokers: dict[str, Handler]) -> None:
        self.brokers = brokers
        self.calls: list[tuple[str, str]] = []

    async def call(
        self, target: str, method: str, request: Message, *, timeout_s: float
    ) -> Message:
        self.calls.append((target, method.rsplit("/", 1)[1]))
        return self.brokers[target](method, request)

    def open_stream(self, target: str, method: str) -> BidiStream:
        raise AssertionError("no streams here")

    async def close(self) -> None:
        pass


class Cluster:
    """Three brokers b1..b3 that agree on a leader and epoch of ``events-0`` (changeable)."""

    def __init__(self) -> None:
        self.leader = 1
        self.epoch = 5
        self.controller = 1
        self.fetch_errors: list[str] = []

    def metadata(self, leader: int | None = None, epoch: int | None = None) -> pb.MetadataResponse:
        response = pb.MetadataResponse(controller_id=self.controller)
        for node in (1, 2, 3):
            response.brokers.add(node_id=node, host=f"b{node}", port=9092)
        topic = response.topics.add(name="events")
        topic.partitions.add(
            partition=0,
            leader=self.leader if leader is None else leader,
            leader_epoch=self.epoch if epoch is None else epoch,
        )
        return response

    def handler(self, node: int, *, stale: bool = False) -> Handler:
        def handle(method: str, request: Message) -> Message:
            if method == proto.METHOD_METADATA:
                return self.metadata(1, 4) if stale else self.metadata()
            if method == proto.METHOD_FETCH:
                assert isinstance(request, pb.FetchRequest)
                response = pb.FetchResponse()
                part = response.partitions.add(topic="events", partition=0, high_watermark=3)
                if self.fetch_errors:
                    part.error_code = error_for_name(self.fetch_errors.pop(0)).code
                else:
                    builder = RecordBatchBuilder(base_offset=request.partitions[0].fetch_offset)
                    builder.append(0, None, b"v")
                    part.records = builder.build()
                return response
            if method == proto.METHOD_LIST_OFFSETS:
                response_lo = pb.ListOffsetsResponse()
                response_lo.partitions.add(topic="events", partition=0, offset=10 * node)
                return response_lo
            if method == proto.METHOD_DELETE_TOPICS:
                response_dt = pb.DeleteTopicsResponse()
                code = 0 if node == self.controller else error_for_name("NOT_CONTROLLER").code
                response_dt.topics.add(name="events", error_code=code)
                return response_dt
            raise AssertionError(method)

        return handle


def client_for(transport: ScriptedTransport, bootstrap: list[str]) -> NetworkClient:
    return NetworkClient(transport, bootstrap, ManualClock(), retry_backoff_ms=1)


def test_fetch_raw_hands_back_the_raw_batches_of_the_leader() -> None:
    cluster = Cluster()
    transport = ScriptedTransport({f"b{n}:9092": cluster.handler(n) for n in (1, 2, 3)})
    client = client_for(transport, ["b3:9092"])
    part = asyncio.run(client.fetch_raw(TP, 7))
    assert part.records[:8] == (7).to_bytes(8, "big")  # the batch header, as stored
    assert transport.calls == [("b3:9092", "Metadata"), ("b1:9092", "Fetch")]


def test_a_not_leader_answer_forgets_the_leader_and_the_next_fetch_finds_the_new_one() -> None:
    cluster = Cluster()
    cluster.fetch_errors = ["NOT_LEADER_OR_FOLLOWER"]
    transport = ScriptedTransport({f"b{n}:9092": cluster.handler(n) for n in (1, 2, 3)})
    client = client_for(transport, ["b3:9092"])

    async def scenario() -> None:
        with pytest.raises(NotLeaderOrFollowerError, match="fetch events-0 at 0"):
            await client.fetch_raw(TP, 0)
        assert client.metadata.leader(TP) == -1
        cluster.leader, cluster.epoch = 2, 6
        await client.fetch_raw(TP, 0)

    asyncio.run(scenario())
    assert transport.calls[-2:] == [("b1:9092", "Metadata"), ("b2:9092", "Fetch")]


def test_offset_out_of_range_raises_but_keeps_the_leader() -> None:
    cluster = Cluster()
    cluster.fetch_errors = ["OFFSET_OUT_OF_RANGE"]
    transport = ScriptedTransport({f"b{n}:9092": cluster.handler(n) for n in (1, 2, 3)})
    client = client_for(transport, ["b3:9092"])
    with pytest.raises(OffsetOutOfRangeError):
        asyncio.run(client.fetch_raw(TP, 99))
    assert client.metadata.leader(TP) == 1


def test_a_stale_brokers_metadata_does_not_send_list_offsets_to_a_deposed_leader() -> None:
    cluster = Cluster()
    cluster.leader = 2
    brokers = {f"b{n}:9092": cluster.handler(n) for n in (2, 3)}
    brokers["b1:9092"] = cluster.handler(1, stale=True)  # still thinks it leads, epoch 4
    transport = ScriptedTransport(brokers)
    client = client_for(transport, ["b3:9092"])

    async def scenario() -> dict[TopicPartition, tuple[int, int]]:
        await client.refresh_metadata(["events"])  # from b3: leader 2, epoch 5
        return await client.list_offsets({TP: -1})  # b1, known now, is asked first

    assert asyncio.run(scenario()) == {TP: (20, 0)}
    assert transport.calls == [
        ("b3:9092", "Metadata"),
        ("b1:9092", "Metadata"),
        ("b2:9092", "ListOffsets"),
    ]


def test_a_controller_call_follows_the_controller_when_it_moves() -> None:
    cluster = Cluster()
    transport = ScriptedTransport({f"b{n}:9092": cluster.handler(n) for n in (1, 2, 3)})
    client = client_for(transport, ["b3:9092"])
    cluster.controller = 2  # moved: b1 answers NOT_CONTROLLER
    reported = iter([1])  # the first refresh still shows b1 as the controller

    def metadata_then_move(node: int) -> Handler:
        def handle(method: str, request: Message) -> Message:
            response = cluster.handler(node)(method, request)
            if isinstance(response, pb.MetadataResponse):
                response.controller_id = next(reported, cluster.controller)
            return response

        return handle

    transport.brokers = {f"b{n}:9092": metadata_then_move(n) for n in (1, 2, 3)}
    response = asyncio.run(
        client.controller_call(
            proto.METHOD_DELETE_TOPICS, pb.DeleteTopicsRequest(topic_names=["events"])
        )
    )
    assert isinstance(response, pb.DeleteTopicsResponse)
    assert response.topics[0].error_code == 0
    assert [c for c in transport.calls if c[1] == "DeleteTopics"] == [
        ("b1:9092", "DeleteTopics"),
        ("b2:9092", "DeleteTopics"),
    ]


class RefusingTransport(ScriptedTransport):
    """Every broker refuses the connection (UNAVAILABLE), as a closed port does."""

    def __init__(self) -> None:
        super().__init__({})

    async def call(
        self, target: str, method: str, request: Message, *, timeout_s: float
    ) -> Message:
        self.calls.append((target, method.rsplit("/", 1)[1]))
        raise RpcError(RpcStatus.UNAVAILABLE, "Connection refused")


WARNING = "Connection to node {} ({}) could not be established. Broker may not be available."


def test_an_unreachable_broker_is_named_in_kafkas_warning_at_most_once_a_second(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = ManualClock()
    client = NetworkClient(RefusingTransport(), ["h1:9092", "h2:9092"], clock)

    async def refresh_at(delays_ms: list[int]) -> None:
        for delay_ms in delays_ms:
            clock.advance(delay_ms)
            with pytest.raises(RpcError):
                await client.refresh_metadata()

    with caplog.at_level("WARNING", logger="kafkasim.client.network"):
        asyncio.run(refresh_at([0, 100, 500, 400, 999, 1]))
    # Bootstrap servers are nodes -1, -2, ... as in Kafka; one warning per second per node.
    assert [r.getMessage() for r in caplog.records] == [
        WARNING.format(-1, "h1:9092"),
        WARNING.format(-2, "h2:9092"),
        WARNING.format(-1, "h1:9092"),
        WARNING.format(-2, "h2:9092"),
        WARNING.format(-1, "h1:9092"),
        WARNING.format(-2, "h2:9092"),
    ]


def test_a_known_broker_is_warned_about_by_its_id_and_other_faults_are_not() -> None:
    warnings = ConnectionWarnings(ManualClock())
    nodes = ConnectionWarnings.candidates({3: "b3:1", 1: "b1:1"}, ["b1:1", "seed:1"])
    assert nodes == {"b3:1": 3, "b1:1": 1, "seed:1": -2}
    # A timeout is not a refused connection: no warning (and no rate-limit slot used).
    warnings.failed(3, "b3:1", RpcError(RpcStatus.DEADLINE_EXCEEDED, "slow"))
    assert warnings._last_ms == {}


def test_retries_never_back_off_past_the_deadline() -> None:
    clock = ManualClock()
    client = NetworkClient(
        RefusingTransport(), ["h1:9092"], clock, delivery_timeout_ms=1500, retry_backoff_ms=1000
    )
    waits: list[float] = []

    async def sleep(seconds: float) -> None:
        waits.append(seconds)
        clock.advance(int(seconds * 1000))

    async def main() -> None:
        retrying = client.retrying()
        retrying.sleep = sleep  # type: ignore[method-assign]
        with pytest.raises(RpcError):
            async for attempt in retrying:
                with attempt:
                    await client.refresh_metadata()

    asyncio.run(main())
    assert waits == [1.0, 0.5]  # the second backoff is cut to the 0.5 s left


def _failing_client(clock: ManualClock) -> NetworkClient:
    return NetworkClient(
        RefusingTransport(),
        ["h1:9092"],
        clock,
        delivery_timeout_ms=5000,
        retry_backoff_ms=100,
        retry_backoff_max_ms=1000,
    )


def test_retry_is_retryings_policy_step_for_step(monkeypatch: pytest.MonkeyPatch) -> None:
    """The plain loop makes the same attempts and the same (capped, deadline-cut) pauses."""

    def run(use_tenacity: bool) -> tuple[list[float], int]:
        clock = ManualClock()
        client = _failing_client(clock)
        waits: list[float] = []
        attempts = 0

        async def sleep(seconds: float) -> None:
            waits.append(seconds)
            clock.advance(int(seconds * 1000))

        async def attempt() -> None:
            nonlocal attempts
            attempts += 1
            await client.refresh_metadata()

        async def main() -> None:
            with pytest.raises(RpcError):
                if use_tenacity:
                    retrying = client.retrying()
                    retrying.sleep = sleep  # type: ignore[method-assign]
                    async for tried in retrying:
                        with tried:
                            await attempt()
                else:
                    with monkeypatch.context() as patch:
                        patch.setattr(asyncio, "sleep", sleep)
                        await client.retry(attempt)

        asyncio.run(main())
        return waits, attempts

    waits, attempts = run(use_tenacity=False)
    assert waits == [0.1, 0.2, 0.4, 0.8, 1.0, 1.0, 1.0, 0.5]
    assert attempts == 9  # the last one at the deadline
    assert run(use_tenacity=True) == (waits, attempts)


def test_retry_raises_what_is_not_retriable_at_once_and_returns_a_success() -> None:
    client = _failing_client(ManualClock())
    failures = [RpcError(RpcStatus.UNAVAILABLE, "down"), RpcError(RpcStatus.UNAVAILABLE, "down")]

    async def flaky() -> str:
        if failures:
            raise failures.pop()
        return "answer"

    async def broken() -> str:
        raise ValueError("a bug")

    async def main() -> str:
        with pytest.raises(ValueError, match="a bug"):
            await client.retry(broken)
        return await client.retry(flaky)

    assert asyncio.run(main()) == "answer"
    assert failures == []
