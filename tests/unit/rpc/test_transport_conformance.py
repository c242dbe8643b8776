"""Both Rpc transports behave the same: real gRPC on 127.0.0.1 and SimNetwork on virtual time.

Every test runs once per transport (``kind``). What a caller sees for each fault is the
contract the broker's retry and reconnect logic is written against, so it must not depend on
which transport is underneath.
"""

from __future__ import annotations

import asyncio
import logging
import zlib
from collections.abc import AsyncIterator

import pytest
from google.protobuf.message import Message

from kafkasim import proto
from kafkasim.common.rpc import RpcError, RpcStatus
from kafkasim.proto import kafkasim_pb2 as pb
from tests.unit.rpc.harness import KINDS, Env, never_ending, run

pytestmark = pytest.mark.parametrize("kind", KINDS)

TIMEOUT_S = 2.0


def produce_request(records: bytes, topic: str = "orders", partition: int = 3) -> pb.ProduceRequest:
    return pb.ProduceRequest(
        acks=-1,
        timeout_ms=30_000,
        partitions=[pb.ProducePartitionData(topic=topic, partition=partition, records=records)],
    )


async def echo_produce(request: Message) -> Message:
    """Answers with what it got: sizes and CRCs prove the bytes arrived intact."""
    assert isinstance(request, pb.ProduceRequest)
    return pb.ProduceResponse(
        partitions=[
            pb.ProducePartitionResponse(
                topic=data.topic,
                partition=data.partition,
                base_offset=len(data.records),
                log_start_offset=zlib.crc32(data.records),
            )
            for data in request.partitions
        ]
    )


async def echo_fetch_stream(requests: AsyncIterator[Message]) -> AsyncIterator[Message]:
    """Answers each FetchRequest with its replica_id as the high watermark, in order."""
    async for request in requests:
        assert isinstance(request, pb.FetchRequest)
        yield pb.FetchResponse(
            partitions=[pb.FetchPartitionResponse(high_watermark=request.replica_id)]
        )


def fetch(seq: int) -> pb.FetchRequest:
    return pb.FetchRequest(replica_id=seq)


def hw_of(message: Message) -> int:
    assert isinstance(message, pb.FetchResponse)
    return message.partitions[0].high_watermark


def test_unary_round_trip_carries_bytes_intact(kind: str) -> None:
    records = bytes(range(256)) * 64

    async def scenario(env: Env) -> None:
        server = await env.serve(unary={proto.METHOD_PRODUCE: echo_produce})
        client = env.transport("client")
        response = await client.call(
            server.address, proto.METHOD_PRODUCE, produce_request(records), timeout_s=TIMEOUT_S
        )
        assert isinstance(response, pb.ProduceResponse)
        [partition] = response.partitions
        assert (partition.topic, partition.partition) == ("orders", 3)
        assert (partition.base_offset, partition.log_start_offset) == (
            len(records),
            zlib.crc32(records),
        )

    run(kind, scenario)


def test_a_message_larger_than_grpcs_4_mib_default_passes(kind: str) -> None:
    """Fetch responses can be tens of MiB; the channel limits are raised to >= 64 MiB."""
    records = b"\x5a" * (6 * 1024 * 1024)

    async def scenario(env: Env) -> None:
        server = await env.serve(unary={proto.METHOD_PRODUCE: echo_produce})
        response = await env.transport("client").call(
            server.address, proto.METHOD_PRODUCE, produce_request(records), timeout_s=TIMEOUT_S
        )
        assert isinstance(response, pb.ProduceResponse)
        assert response.partitions[0].base_offset == len(records)

    run(kind, scenario)


def test_nothing_is_shared_by_reference_between_caller_and_handler(kind: str) -> None:
    """Messages are serialized on the wire: mutations on one side never show on the other."""
    seen: list[Message] = []
    answer = pb.ProduceResponse(partitions=[pb.ProducePartitionResponse(topic="t")])

    async def handler(request: Message) -> Message:
        assert isinstance(request, pb.ProduceRequest)
        seen.append(request)
        request.partitions[0].topic = "mutated-by-handler"
        return answer

    async def scenario(env: Env) -> None:
        server = await env.serve(unary={proto.METHOD_PRODUCE: handler})
        request = produce_request(b"abc")
        response = await env.transport("client").call(
            server.address, proto.METHOD_PRODUCE, request, timeout_s=TIMEOUT_S
        )
        assert seen[0] is not request
        assert request.partitions[0].topic == "orders"
        assert response is not answer
        assert isinstance(response, pb.ProduceResponse)
        response.partitions[0].topic = "mutated-by-caller"
        assert answer.partitions[0].topic == "t"

    run(kind, scenario)


def test_a_handler_that_raises_surfaces_as_internal_and_is_logged(
    kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    async def broken(request: Message) -> Message:
        raise ZeroDivisionError("the handler has a bug")

    async def scenario(env: Env) -> None:
        server = await env.serve(
            unary={proto.METHOD_PRODUCE: broken, proto.METHOD_METADATA: _metadata}
        )
        client = env.transport("client")
        with pytest.raises(RpcError) as raised:
            await client.call(
                server.address, proto.METHOD_PRODUCE, produce_request(b"x"), timeout_s=TIMEOUT_S
            )
        assert raised.value.status is RpcStatus.INTERNAL
        assert not raised.value.retriable
        assert "ZeroDivisionError" in raised.value.message
        # The server keeps serving other calls.
        await client.call(
            server.address, proto.METHOD_METADATA, pb.MetadataRequest(), timeout_s=TIMEOUT_S
        )

    with caplog.at_level(logging.ERROR):
        run(kind, scenario)
    logged = [r for r in caplog.records if r.exc_info and "Produce" in r.getMessage()]
    assert logged, "the handler's exception must be logged with its traceback"
    assert logged[0].exc_info is not None
    assert logged[0].exc_info[0] is ZeroDivisionError


async def _metadata(request: Message) -> Message:
    return pb.MetadataResponse(cluster_id="c1")


def test_a_handler_answering_the_wrong_type_surfaces_as_internal(kind: str) -> None:
    async def wrong(request: Message) -> Message:
        return pb.FetchResponse()

    async def scenario(env: Env) -> None:
        server = await env.serve(unary={proto.METHOD_PRODUCE: wrong})
        with pytest.raises(RpcError) as raised:
            await env.transport("client").call(
                server.address, proto.METHOD_PRODUCE, produce_request(b"x"), timeout_s=TIMEOUT_S
            )
        assert raised.value.status is RpcStatus.INTERNAL

    run(kind, scenario)


@pytest.mark.parametrize(
    "method",
    [proto.METHOD_METADATA, "/kafkasim.Kafkasim/NoSuchMethod", proto.METHOD_REPLICA_FETCH],
    ids=["not-served", "not-in-contract", "stream-called-as-unary"],
)
def test_an_unknown_method_is_unimplemented(kind: str, method: str) -> None:
    async def scenario(env: Env) -> None:
        server = await env.serve(unary={proto.METHOD_PRODUCE: echo_produce})
        request: Message = {
            proto.METHOD_METADATA: pb.MetadataRequest(),
            proto.METHOD_REPLICA_FETCH: fetch(1),
        }.get(method, produce_request(b""))
        with pytest.raises(RpcError) as raised:
            await env.transport("client").call(server.address, method, request, timeout_s=TIMEOUT_S)
        assert raised.value.status is RpcStatus.UNIMPLEMENTED

    run(kind, scenario)


def test_sending_the_wrong_message_type_is_a_type_error(kind: str) -> None:
    async def scenario(env: Env) -> None:
        server = await env.serve(unary={proto.METHOD_PRODUCE: echo_produce})
        with pytest.raises(TypeError, match="takes ProduceRequest"):
            await env.transport("client").call(
                server.address, proto.METHOD_PRODUCE, fetch(1), timeout_s=TIMEOUT_S
            )

    run(kind, scenario)


def test_serving_a_method_outside_the_contract_is_refused(kind: str) -> None:
    async def scenario(env: Env) -> None:
        with pytest.raises(ValueError, match="NoSuchMethod"):
            env.transport("server").server(
                "127.0.0.1:0", {"/kafkasim.Kafkasim/NoSuchMethod": echo_produce}, {}
            )

    run(kind, scenario)


def test_a_stopped_server_is_unavailable(kind: str) -> None:
    async def scenario(env: Env) -> None:
        server = await env.serve(unary={proto.METHOD_PRODUCE: echo_produce})
        client = env.transport("client")
        await client.call(
            server.address, proto.METHOD_PRODUCE, produce_request(b"1"), timeout_s=TIMEOUT_S
        )
        await server.stop(0)
        with pytest.raises(RpcError) as raised:
            await client.call(
                server.address, proto.METHOD_PRODUCE, produce_request(b"2"), timeout_s=TIMEOUT_S
            )
        assert raised.value.status is RpcStatus.UNAVAILABLE
        assert raised.value.retriable

    run(kind, scenario)


def test_a_slow_handler_times_out_and_is_cancelled_at_the_deadline(kind: str) -> None:
    """The caller sees DEADLINE_EXCEEDED; the server gives up too (the deadline travels)."""
    handler_cancelled = asyncio.Event()

    async def slow(request: Message) -> Message:
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            handler_cancelled.set()
            raise
        return pb.ProduceResponse()

    async def scenario(env: Env) -> None:
        server = await env.serve(unary={proto.METHOD_PRODUCE: slow})
        loop = asyncio.get_running_loop()
        started = loop.time()
        with pytest.raises(RpcError) as raised:
            await env.transport("client").call(
                server.address, proto.METHOD_PRODUCE, produce_request(b""), timeout_s=0.2
            )
        assert raised.value.status is RpcStatus.DEADLINE_EXCEEDED
        assert 0.2 <= loop.time() - started < 2.0
        await asyncio.wait_for(handler_cancelled.wait(), 2.0)

    run(kind, scenario)


def test_a_stream_method_the_server_does_not_serve_is_unimplemented(kind: str) -> None:
    async def scenario(env: Env) -> None:
        server = await env.serve(unary={proto.METHOD_PRODUCE: echo_produce})
        stream = env.transport("client").open_stream(server.address, proto.METHOD_REPLICA_FETCH)
        with pytest.raises(RpcError) as raised:
            await stream.recv(TIMEOUT_S)
        assert raised.value.status is RpcStatus.UNIMPLEMENTED
        await stream.close()
        with pytest.raises(RpcError) as unary_as_stream:
            env.transport("client").open_stream(server.address, proto.METHOD_PRODUCE)
        assert unary_as_stream.value.status is RpcStatus.UNIMPLEMENTED

    run(kind, scenario)


def test_closing_the_transport_cancels_pending_calls_and_streams(kind: str) -> None:
    async def stalled(request: Message) -> Message:
        await asyncio.sleep(30)
        return pb.ProduceResponse()

    async def scenario(env: Env) -> None:
        server = await env.serve(
            unary={proto.METHOD_PRODUCE: stalled},
            streams={proto.METHOD_REPLICA_FETCH: never_ending},
        )
        client = env.transport("client")
        stream = client.open_stream(server.address, proto.METHOD_REPLICA_FETCH)
        await stream.send(fetch(1))
        pending = asyncio.ensure_future(
            client.call(
                server.address, proto.METHOD_PRODUCE, produce_request(b""), timeout_s=TIMEOUT_S
            )
        )
        await asyncio.sleep(0.1)
        await client.close()
        with pytest.raises(RpcError) as raised:
            await pending
        assert raised.value.status is RpcStatus.CANCELLED
        with pytest.raises(RpcError) as on_stream:
            await stream.recv(TIMEOUT_S)
        assert on_stream.value.status is RpcStatus.CANCELLED
        with pytest.raises(RpcError) as after_close:
            await client.call(
                server.address, proto.METHOD_PRODUCE, produce_request(b""), timeout_s=TIMEOUT_S
            )
        assert after_close.value.status is RpcStatus.CANCELLED

    run(kind, scenario)


def test_port_zero_binds_a_real_port_reported_after_start(kind: str) -> None:
    async def scenario(env: Env) -> None:
        first = await env.serve(unary={proto.METHOD_PRODUCE: echo_produce})
        second = await env.serve(unary={proto.METHOD_PRODUCE: echo_produce})
        for server in (first, second):
            host, _, port = server.address.rpartition(":")
            assert host
            assert int(port) > 0
        assert first.address != second.address
        taken = env.transport("server").server(
            first.address, {proto.METHOD_PRODUCE: echo_produce}, {}
        )
        with pytest.raises(OSError, match=r"in use|bind"):
            await taken.start()
        await taken.stop(0)

    run(kind, scenario)


def test_stop_with_grace_lets_a_running_call_finish_and_without_grace_fails_it(
    kind: str,
) -> None:
    # The handler runs when the server stops (``started``), and takes 0.1 s with a grace of
    # 2 s but longer than the call's deadline without one: a stop that let it finish would
    # answer or time out, never UNAVAILABLE. (It slept 0.1 s in both, with the stop 0.05 s
    # after the call: on a loaded machine the handler could finish before stop(0) took hold.)
    started = asyncio.Event()
    takes_s = [0.1]

    async def slow(request: Message) -> Message:
        started.set()
        await asyncio.sleep(takes_s[0])
        return pb.ProduceResponse()

    async def scenario(env: Env) -> list[str]:
        client = env.transport("client")
        outcomes = []
        for grace_s, handler_s in ((2.0, 0.1), (0.0, 30.0)):
            takes_s[0] = handler_s
            started.clear()
            server = await env.serve(unary={proto.METHOD_PRODUCE: slow})
            pending = asyncio.ensure_future(
                client.call(server.address, proto.METHOD_PRODUCE, produce_request(b""), timeout_s=5)
            )
            await asyncio.wait_for(started.wait(), 5)
            await server.stop(grace_s)
            try:
                await pending
                outcomes.append("ok")
            except RpcError as exc:
                outcomes.append(exc.status.value)
        return outcomes

    assert run(kind, scenario) == ["ok", "UNAVAILABLE"]
