"""A producer's connection to one broker (``client.producer_connection``): answers matched to
requests however the write's completion and the answer's arrival interleave."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from google.protobuf.message import Message

from kafkasim.client.producer_connection import BrokerConnection, InFlightRequest
from kafkasim.common.clock import SystemClock
from kafkasim.common.rpc import RpcError, RpcStatus
from kafkasim.proto import kafkasim_pb2 as pb

TIMEOUT_MS = 2_000


class AnswerBeforeWriteDone:
    """A ProduceStream whose broker answers before the client's write reports done: the answer
    is queued at once, and ``send`` returns only after the loop has run a few more steps (as a
    loaded machine can order grpc.aio's write completion after the answer's read)."""

    def __init__(self, *, fail_write: bool = False, break_after_answer: bool = False) -> None:
        self.answers: asyncio.Queue[Message] = asyncio.Queue()
        self.fail_write = fail_write
        self.break_after_answer = break_after_answer
        self.answered = 0
        self.closed = False

    async def send(self, message: Message) -> None:
        assert isinstance(message, pb.ProduceRequest)
        if self.fail_write:
            raise RpcError(RpcStatus.UNAVAILABLE, "connection reset")
        self.answers.put_nowait(pb.ProduceResponse(correlation_id=message.correlation_id))
        for _ in range(10):
            await asyncio.sleep(0)

    async def recv(self, timeout_s: float | None = None) -> Message:
        if self.break_after_answer and self.answered:
            raise RpcError(RpcStatus.UNAVAILABLE, "connection reset")
        try:
            answer = await asyncio.wait_for(self.answers.get(), timeout_s)
            self.answered += 1
            return answer
        except TimeoutError:
            raise RpcError(RpcStatus.DEADLINE_EXCEEDED, "no answer") from None

    async def close(self) -> None:
        self.closed = True


class OneStreamTransport:
    def __init__(self, stream: AnswerBeforeWriteDone) -> None:
        self.stream = stream

    def open_stream(self, target: str, method: str) -> AnswerBeforeWriteDone:
        return self.stream


class Outcomes:
    def __init__(self) -> None:
        self.answered: list[int] = []
        self.written: list[int] = []
        self.failed: list[tuple[int, RpcStatus]] = []
        self.done = asyncio.Event()

    def on_sent_without_ack(self, request: InFlightRequest) -> None:
        self.written.append(request.correlation_id)
        self.done.set()

    def on_response(self, request: InFlightRequest, response: pb.ProduceResponse) -> None:
        self.answered.append(response.correlation_id)
        self.done.set()

    def on_request_failed(self, request: InFlightRequest, broker_id: int, cause: RpcError) -> None:
        self.failed.append((request.correlation_id, cause.status))
        self.done.set()


def connect(outcomes: Outcomes, stream: AnswerBeforeWriteDone) -> BrokerConnection:
    return BrokerConnection(
        outcomes,
        1,
        "127.0.0.1:1",
        transport=OneStreamTransport(stream),  # type: ignore[arg-type]
        clock=SystemClock(),
        client_id="test",
        request_timeout_ms=TIMEOUT_MS,
    )


async def exchange(stream: AnswerBeforeWriteDone, acks: int, count: int) -> Outcomes:
    outcomes = Outcomes()
    connection = connect(outcomes, stream)
    try:
        for correlation_id in range(count):
            outcomes.done.clear()
            request = pb.ProduceRequest(correlation_id=correlation_id, acks=acks)
            connection.submit(InFlightRequest(correlation_id, request, []))
            # Well inside the request timeout: an answer dropped would be failed only after it.
            await asyncio.wait_for(outcomes.done.wait(), TIMEOUT_MS / 2000)
    finally:
        await connection.close()
    return outcomes


@pytest.mark.parametrize("acks", [1, -1])
def test_an_answer_read_before_the_write_is_done_answers_its_request(acks: int) -> None:
    # Before the fix the reader found no request in flight, dropped the answer, and the request
    # failed after request.timeout.ms (here: wait_for times out first).
    outcomes = asyncio.run(exchange(AnswerBeforeWriteDone(), acks, 5))
    assert outcomes.answered == [0, 1, 2, 3, 4]
    assert outcomes.failed == []


def test_an_acks_0_request_is_done_once_even_if_its_answer_came_first() -> None:
    # The answer proves the write: the reader finishes the request, and the write's late
    # completion does not finish it again (nor, had the stream broken meanwhile, leave it
    # unfinished).
    outcomes = asyncio.run(exchange(AnswerBeforeWriteDone(), 0, 3))
    assert outcomes.written == [0, 1, 2]
    assert outcomes.answered == [] and outcomes.failed == []


def test_an_acks_0_request_answered_then_cut_off_is_done_once() -> None:
    # Answered, then the stream broke, both before the write reported done.
    outcomes = asyncio.run(exchange(AnswerBeforeWriteDone(break_after_answer=True), 0, 1))
    assert outcomes.written == [0]
    assert outcomes.answered == [] and outcomes.failed == []


def test_a_failed_write_fails_its_request_once() -> None:
    stream = AnswerBeforeWriteDone(fail_write=True)
    outcomes = asyncio.run(exchange(stream, 1, 1))
    assert outcomes.failed == [(0, RpcStatus.UNAVAILABLE)]
    assert outcomes.answered == [] and outcomes.written == []
    assert stream.closed


def test_requests_taken_during_a_write_are_not_finished_by_it() -> None:
    async def run() -> tuple[Outcomes, list[int]]:
        outcomes = Outcomes()
        stream = AnswerBeforeWriteDone()
        connection = connect(outcomes, stream)
        stream.answers = _NeverAnswers()  # type: ignore[assignment]
        connection.submit(InFlightRequest(7, pb.ProduceRequest(correlation_id=7, acks=0), []))
        await asyncio.sleep(0)
        await asyncio.sleep(0)  # the writer is inside send now
        taken = [r.correlation_id for r in connection.take_requests()]
        for _ in range(20):
            await asyncio.sleep(0)
        await connection.close()
        return outcomes, taken

    outcomes, taken = asyncio.run(run())
    assert taken == [7]
    assert outcomes.written == [] and outcomes.failed == [] and outcomes.answered == []


class _NeverAnswers(asyncio.Queue[Any]):
    def put_nowait(self, item: Any) -> None:
        pass
