"""The gRPC server side against raw gRPC calls: what a client that does not speak our
contract gets. A request body that is not a message of the method (not protobuf at all) is
answered INVALID_ARGUMENT naming the method and the message type, without reaching the
handler and without a traceback in the server's log (gRPC alone answers UNKNOWN and logs one).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator

import grpc
import pytest
from google.protobuf.message import Message

from kafkasim import proto
from kafkasim.common.rpc_grpc_client import GrpcOptions
from kafkasim.node.rpc_grpc import GrpcServer
from kafkasim.proto import kafkasim_pb2 as pb

# Field 31 with wire type 7: no protobuf parser accepts it.
NOT_PROTOBUF = b"\xff\xff\xff\xff not a protobuf message"


async def _raw_call(
    method: str, body: bytes, *, streaming: bool
) -> tuple[grpc.StatusCode, str, list[str]]:
    """Serve ``method`` on loopback, send ``body`` as raw bytes; the status, its details and
    the requests the handler saw."""
    seen: list[str] = []

    async def produce(request: Message) -> Message:
        seen.append(type(request).__name__)
        return pb.ProduceResponse()

    async def produce_stream(requests: AsyncIterator[Message]) -> AsyncIterator[Message]:
        async for request in requests:
            seen.append(type(request).__name__)
            yield pb.ProduceResponse()

    server = GrpcServer(
        "127.0.0.1:0",
        {proto.METHOD_PRODUCE: produce},
        {proto.METHOD_PRODUCE_STREAM: produce_stream},
        GrpcOptions(),
    )
    await server.start()
    try:
        async with grpc.aio.insecure_channel(server.address) as channel:
            try:
                if streaming:
                    call = channel.stream_stream(method)()
                    await call.write(body)
                    await call.read()
                    code = await call.code()
                    return code, await call.details() or "", seen
                await channel.unary_unary(method)(body, timeout=10)
            except grpc.aio.AioRpcError as e:
                return e.code(), e.details() or "", seen
            return grpc.StatusCode.OK, "", seen
    finally:
        await server.stop(0)


@pytest.mark.parametrize(
    ("method", "streaming"),
    [(proto.METHOD_PRODUCE, False), (proto.METHOD_PRODUCE_STREAM, True)],
    ids=["unary", "stream"],
)
def test_a_body_that_is_not_protobuf_is_invalid_argument(
    method: str, streaming: bool, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    code, details, seen = asyncio.run(_raw_call(method, NOT_PROTOBUF, streaming=streaming))
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert method in details
    assert "not a valid kafkasim.ProduceRequest message" in details
    assert seen == []
    assert not [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR]


def test_a_valid_body_still_reaches_the_handler() -> None:
    body = pb.ProduceRequest(acks=1).SerializeToString()
    code, _, seen = asyncio.run(_raw_call(proto.METHOD_PRODUCE, body, streaming=False))
    assert code == grpc.StatusCode.OK
    assert seen == ["ProduceRequest"]
