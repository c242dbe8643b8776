"""A stream handler's requests are received one ahead (node.rpc_grpc._Requests): the receive of
the next request is under way while the handler works on the current one, the handler still
gets them one at a time and in order, the end of the requests cancels the handler as before,
and a read-ahead left pending when the call ends is cancelled."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from google.protobuf.message import Message

from kafkasim.node.rpc_grpc import _Requests
from kafkasim.proto import kafkasim_pb2 as pb


class _Receiver:
    """gRPC's request iterator stand-in: counts receives; each waits for its message."""

    def __init__(self) -> None:
        self.receives = 0
        self.arrivals: asyncio.Queue[Message | None] = asyncio.Queue()
        self.cancelled = 0

    def __aiter__(self) -> AsyncIterator[Message]:
        return self

    async def __anext__(self) -> Message:
        self.receives += 1
        try:
            message = await self.arrivals.get()
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        if message is None:
            raise StopAsyncIteration
        return message


async def _settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


def test_the_next_receive_starts_before_the_handler_asks() -> None:
    async def scenario() -> None:
        receiver = _Receiver()
        requests = _Requests(receiver)
        for correlation_id in (1, 2):
            receiver.arrivals.put_nowait(pb.ProduceRequest(correlation_id=correlation_id))
        first = await requests.__anext__()
        await _settle()
        assert receiver.receives == 2  # request 2 is being received while 1 is handled
        second = await requests.__anext__()
        assert [first.correlation_id, second.correlation_id] == [1, 2]  # type: ignore[attr-defined]
        requests.close()

    asyncio.run(scenario())


def test_the_end_of_the_requests_cancels_the_handler() -> None:
    async def scenario() -> None:
        receiver = _Receiver()
        requests = _Requests(receiver)
        receiver.arrivals.put_nowait(pb.ProduceRequest(correlation_id=1))
        receiver.arrivals.put_nowait(None)
        seen: list[int] = []

        async def handler() -> None:
            async for request in requests:
                seen.append(request.correlation_id)  # type: ignore[attr-defined]

        with pytest.raises(asyncio.CancelledError):
            await asyncio.create_task(handler())
        assert seen == [1]

    asyncio.run(scenario())


def test_closing_cancels_a_pending_read_ahead() -> None:
    async def scenario() -> None:
        receiver = _Receiver()
        requests = _Requests(receiver)
        receiver.arrivals.put_nowait(pb.ProduceRequest(correlation_id=1))
        await requests.__anext__()
        await _settle()
        assert receiver.receives == 2 and receiver.cancelled == 0
        requests.close()
        await _settle()
        assert receiver.cancelled == 1

    asyncio.run(scenario())
