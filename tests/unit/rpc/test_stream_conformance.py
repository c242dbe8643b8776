"""The stream contract, the same on every transport that carries streams: real gRPC, the
framed replication transport (``node/rpc_framed.py``), both on 127.0.0.1, and SimNetwork on
virtual time. (What only the transports with unary calls share is in
``test_transport_conformance.py``.) A follower's fetch loop is written against what a caller
sees here, so it must not depend on which transport is underneath.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from google.protobuf.message import Message

from kafkasim import proto
from kafkasim.common.rpc import RpcError, RpcStatus
from kafkasim.proto import kafkasim_pb2 as pb
from tests.unit.rpc.harness import STREAM_KINDS, Env, never_ending, run
from tests.unit.rpc.test_transport_conformance import TIMEOUT_S, echo_fetch_stream, fetch, hw_of

pytestmark = pytest.mark.parametrize("kind", STREAM_KINDS)


def test_bidi_stream_delivers_100_messages_in_order(kind: str) -> None:
    async def scenario(env: Env) -> None:
        server = await env.serve(streams={proto.METHOD_REPLICA_FETCH: echo_fetch_stream})
        stream = env.transport("client").open_stream(server.address, proto.METHOD_REPLICA_FETCH)
        for seq in range(100):
            await stream.send(fetch(seq))
        received = [hw_of(await stream.recv(TIMEOUT_S)) for _ in range(100)]
        assert received == list(range(100))
        # Ping-pong on the same stream keeps working.
        for seq in range(100, 110):
            await stream.send(fetch(seq))
            assert hw_of(await stream.recv(TIMEOUT_S)) == seq
        await stream.close()
        await stream.close()  # idempotent

    run(kind, scenario)


def test_a_recv_timeout_leaves_the_stream_usable(kind: str) -> None:
    async def scenario(env: Env) -> None:
        server = await env.serve(streams={proto.METHOD_REPLICA_FETCH: echo_fetch_stream})
        stream = env.transport("client").open_stream(server.address, proto.METHOD_REPLICA_FETCH)
        with pytest.raises(RpcError) as raised:
            await stream.recv(0.05)
        assert raised.value.status is RpcStatus.DEADLINE_EXCEEDED
        await stream.send(fetch(7))
        assert hw_of(await stream.recv(TIMEOUT_S)) == 7
        await stream.close()

    run(kind, scenario)


async def slow_echo_fetch_stream(requests: AsyncIterator[Message]) -> AsyncIterator[Message]:
    """``echo_fetch_stream`` that answers each request 0.3 s late."""
    async for request in requests:
        assert isinstance(request, pb.FetchRequest)
        await asyncio.sleep(0.3)
        yield pb.FetchResponse(
            partitions=[pb.FetchPartitionResponse(high_watermark=request.replica_id)]
        )


def test_an_answer_that_comes_after_a_recv_timed_out_goes_to_the_next_recv(kind: str) -> None:
    """A timed-out recv loses nothing: the late answer is the next recv's, in order."""

    async def scenario(env: Env) -> None:
        server = await env.serve(streams={proto.METHOD_REPLICA_FETCH: slow_echo_fetch_stream})
        stream = env.transport("client").open_stream(server.address, proto.METHOD_REPLICA_FETCH)
        await stream.send(fetch(7))
        with pytest.raises(RpcError) as raised:
            await stream.recv(0.05)
        assert raised.value.status is RpcStatus.DEADLINE_EXCEEDED
        await asyncio.sleep(0.5)  # the answer arrives while no recv waits for it
        await stream.send(fetch(8))
        assert hw_of(await stream.recv(TIMEOUT_S)) == 7
        assert hw_of(await stream.recv(TIMEOUT_S)) == 8
        await stream.close()

    run(kind, scenario)


def test_answers_that_arrived_while_no_recv_waited_are_taken_without_yielding(kind: str) -> None:
    """Once a stream is read, the server's answers are queued as they arrive: a recv that
    finds one returns it without giving the loop a step (issue 19: a gRPC read started by each
    recv cost the ProduceStream client four loop steps a message)."""

    async def scenario(env: Env) -> None:
        server = await env.serve(streams={proto.METHOD_REPLICA_FETCH: echo_fetch_stream})
        stream = env.transport("client").open_stream(server.address, proto.METHOD_REPLICA_FETCH)
        await stream.send(fetch(0))
        assert hw_of(await stream.recv(TIMEOUT_S)) == 0
        for seq in range(1, 6):
            await stream.send(fetch(seq))
        await asyncio.sleep(0.5)  # the answers arrive while no recv waits for them
        stepped: list[bool] = []
        asyncio.get_running_loop().call_soon(stepped.append, True)
        assert [hw_of(await stream.recv(TIMEOUT_S)) for _ in range(5)] == [1, 2, 3, 4, 5]
        assert not stepped, "a recv gave the loop a step with an answer already there"
        await stream.close()

    run(kind, scenario)


def test_closing_a_stream_fails_a_recv_waiting_in_another_task(kind: str) -> None:
    async def scenario(env: Env) -> None:
        server = await env.serve(streams={proto.METHOD_REPLICA_FETCH: slow_echo_fetch_stream})
        stream = env.transport("client").open_stream(server.address, proto.METHOD_REPLICA_FETCH)
        await stream.send(fetch(1))
        waiting = asyncio.ensure_future(stream.recv(TIMEOUT_S))
        await asyncio.sleep(0.05)
        await stream.close()
        with pytest.raises(RpcError) as raised:
            await waiting
        assert raised.value.status is RpcStatus.CANCELLED

    run(kind, scenario)


def test_cancelling_a_task_waiting_in_recv_leaves_the_stream_usable(kind: str) -> None:
    async def scenario(env: Env) -> None:
        server = await env.serve(streams={proto.METHOD_REPLICA_FETCH: slow_echo_fetch_stream})
        stream = env.transport("client").open_stream(server.address, proto.METHOD_REPLICA_FETCH)
        await stream.send(fetch(3))
        for timeout_s in (None, TIMEOUT_S):
            waiting = asyncio.ensure_future(stream.recv(timeout_s))
            await asyncio.sleep(0.05)
            waiting.cancel()
            with pytest.raises(asyncio.CancelledError):
                await waiting
        assert hw_of(await stream.recv(TIMEOUT_S)) == 3
        await stream.send(fetch(4))
        assert hw_of(await stream.recv(TIMEOUT_S)) == 4
        await stream.close()

    run(kind, scenario)


def test_server_stop_breaks_an_open_stream(kind: str) -> None:
    async def scenario(env: Env) -> None:
        server = await env.serve(streams={proto.METHOD_REPLICA_FETCH: echo_fetch_stream})
        stream = env.transport("client").open_stream(server.address, proto.METHOD_REPLICA_FETCH)
        await stream.send(fetch(1))
        assert hw_of(await stream.recv(TIMEOUT_S)) == 1
        await server.stop(0)
        with pytest.raises(RpcError) as raised:
            await stream.recv(TIMEOUT_S)
        assert raised.value.status is RpcStatus.UNAVAILABLE
        with pytest.raises(RpcError):
            await stream.send(fetch(2))
        await stream.close()

    run(kind, scenario)


def test_a_stream_whose_handler_returns_ends_with_cancelled_after_its_messages(kind: str) -> None:
    async def two_then_done(requests: AsyncIterator[Message]) -> AsyncIterator[Message]:
        async for request in requests:
            assert isinstance(request, pb.FetchRequest)
            yield pb.FetchResponse(partitions=[pb.FetchPartitionResponse(high_watermark=1)])
            yield pb.FetchResponse(partitions=[pb.FetchPartitionResponse(high_watermark=2)])
            return

    async def scenario(env: Env) -> None:
        server = await env.serve(streams={proto.METHOD_REPLICA_FETCH: two_then_done})
        stream = env.transport("client").open_stream(server.address, proto.METHOD_REPLICA_FETCH)
        await stream.send(fetch(0))
        assert [hw_of(await stream.recv(TIMEOUT_S)) for _ in range(2)] == [1, 2]
        with pytest.raises(RpcError) as raised:
            await stream.recv(TIMEOUT_S)
        assert raised.value.status is RpcStatus.CANCELLED
        with pytest.raises(RpcError) as again:
            await stream.send(fetch(1))
        assert again.value.status is RpcStatus.CANCELLED
        await stream.close()

    run(kind, scenario)


def test_a_stream_handler_that_raises_ends_the_stream_with_internal(kind: str) -> None:
    async def one_then_crash(requests: AsyncIterator[Message]) -> AsyncIterator[Message]:
        async for _ in requests:
            yield pb.FetchResponse(partitions=[pb.FetchPartitionResponse(high_watermark=1)])
            raise RuntimeError("stream handler bug")

    async def scenario(env: Env) -> None:
        server = await env.serve(streams={proto.METHOD_REPLICA_FETCH: one_then_crash})
        stream = env.transport("client").open_stream(server.address, proto.METHOD_REPLICA_FETCH)
        await stream.send(fetch(0))
        assert hw_of(await stream.recv(TIMEOUT_S)) == 1
        with pytest.raises(RpcError) as raised:
            await stream.recv(TIMEOUT_S)
        assert raised.value.status is RpcStatus.INTERNAL
        assert "stream handler bug" in raised.value.message
        await stream.close()

    run(kind, scenario)


def test_closing_a_stream_cancels_the_server_handler(kind: str) -> None:
    handler_cancelled = asyncio.Event()

    async def watched(requests: AsyncIterator[Message]) -> AsyncIterator[Message]:
        try:
            async for request in echo_fetch_stream(requests):
                yield request
        except asyncio.CancelledError:
            handler_cancelled.set()
            raise

    async def scenario(env: Env) -> None:
        server = await env.serve(streams={proto.METHOD_REPLICA_FETCH: watched})
        stream = env.transport("client").open_stream(server.address, proto.METHOD_REPLICA_FETCH)
        await stream.send(fetch(1))
        assert hw_of(await stream.recv(TIMEOUT_S)) == 1
        await stream.close()
        await asyncio.wait_for(handler_cancelled.wait(), TIMEOUT_S)
        with pytest.raises(RpcError) as raised:
            await stream.recv(TIMEOUT_S)
        assert raised.value.status is RpcStatus.CANCELLED

    run(kind, scenario)


def test_a_stream_to_a_stopped_server_is_unavailable(kind: str) -> None:
    async def scenario(env: Env) -> None:
        server = await env.serve(streams={proto.METHOD_REPLICA_FETCH: never_ending})
        address = server.address
        await server.stop(0)
        stream = env.transport("client").open_stream(address, proto.METHOD_REPLICA_FETCH)
        with pytest.raises(RpcError) as raised:
            await stream.recv(TIMEOUT_S)
        assert raised.value.status is RpcStatus.UNAVAILABLE
        await stream.close()

    run(kind, scenario)
