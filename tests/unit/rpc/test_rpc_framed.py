"""What only the framed replication transport (``node/rpc_framed.py``) does, on real sockets on
127.0.0.1: streams only (unary methods and SASL refused, methods not served UNIMPLEMENTED), the
bounds on requests and answers, bytes that are not a request or not a hello, answers written
as their pieces, TLS with client certificates giving the handler its caller, and the client's
response decoders. (The stream contract it shares with the other transports is
``test_stream_conformance.py``'s, kind "framed".)"""

from __future__ import annotations

import asyncio
import logging
import os
import struct
from collections.abc import AsyncIterator, Mapping
from typing import Any

import pytest
from google.protobuf.message import Message

from kafkasim import proto
from kafkasim.common.rpc import RpcError, RpcStatus, StreamHandler
from kafkasim.common.security import CALLER, Caller
from kafkasim.common.tls import TlsMaterial
from kafkasim.node.fetcher_wire import FetchAnswer, decode_fetch_answer
from kafkasim.node.rpc_framed import FramedServer, FramedTransport
from kafkasim.proto import EncodedMessage
from kafkasim.proto import kafkasim_pb2 as pb
from tests.unit.rpc.harness import Env, never_ending, run
from tests.unit.rpc.test_grpc_tls import Certs
from tests.unit.rpc.test_transport_conformance import TIMEOUT_S, echo_fetch_stream, fetch, hw_of

LOGGER = "kafkasim.node.rpc_framed"
_SIZE = struct.Struct(">i")
_HEAD = struct.Struct(">iB")


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return Certs(tmp_path_factory.mktemp("tls"))


async def serve(
    env: Env,
    streams: Mapping[str, StreamHandler],
    *,
    transport: FramedTransport | None = None,
    tls: TlsMaterial | None = None,
    listener: str = "",
) -> FramedServer:
    """A started framed server on a free port of 127.0.0.1 (stopped with ``env``)."""
    transport = transport or FramedTransport()
    env.transports.append(transport)
    server = transport.server("127.0.0.1:0", {}, streams, tls=tls, listener=listener)
    await server.start()
    env.servers.append(server)
    return server


def client(env: Env, **kwargs: Any) -> FramedTransport:
    """A client transport (closed with ``env``)."""
    transport = FramedTransport(**kwargs)
    env.transports.append(transport)
    return transport


async def raw_exchange(address: str, data: bytes) -> bytes:
    """Write ``data`` on a plain connection to ``address``; everything the server sends back
    until it closes the connection."""
    host, _, port = address.rpartition(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        writer.write(data)
        await writer.drain()
        return await reader.read()
    finally:
        writer.close()
        await writer.wait_closed()


def hello(method: str) -> bytes:
    name = method.encode()
    return _SIZE.pack(len(name)) + name


async def expect_rpc_error(status: RpcStatus, call: Any) -> RpcError:
    with pytest.raises(RpcError) as raised:
        await call
    assert raised.value.status is status, raised.value
    return raised.value


async def echo_still_served(env: Env, address: str) -> None:
    """A fresh stream to ``address`` is answered: the server survived what came before."""
    stream = client(env).open_stream(address, proto.METHOD_REPLICA_FETCH)
    await stream.send(fetch(42))
    assert hw_of(await stream.recv(TIMEOUT_S)) == 42
    await stream.close()


# -- streams only ------------------------------------------------------------------------------


def test_a_stream_the_server_does_not_serve_is_unimplemented() -> None:
    async def scenario(env: Env) -> None:
        server = await serve(env, {proto.METHOD_PRODUCE_STREAM: never_ending})
        stream = client(env).open_stream(server.address, proto.METHOD_REPLICA_FETCH)
        error = await expect_rpc_error(RpcStatus.UNIMPLEMENTED, stream.recv(TIMEOUT_S))
        assert proto.METHOD_REPLICA_FETCH in error.message
        # The stream stays ended: send and recv keep failing the same way.
        await expect_rpc_error(RpcStatus.UNIMPLEMENTED, stream.send(fetch(1)))
        await expect_rpc_error(RpcStatus.UNIMPLEMENTED, stream.recv(TIMEOUT_S))
        await stream.close()

    run("framed", scenario)


def test_unary_methods_are_unimplemented_at_once() -> None:
    async def scenario(env: Env) -> None:
        server = await serve(env, {proto.METHOD_REPLICA_FETCH: echo_fetch_stream})
        transport = client(env)
        with pytest.raises(RpcError) as raised:
            transport.open_stream(server.address, proto.METHOD_PRODUCE)
        assert raised.value.status is RpcStatus.UNIMPLEMENTED
        assert proto.METHOD_PRODUCE in raised.value.message
        with pytest.raises(RpcError) as raised:
            transport.open_stream(server.address, "/kafkasim.Kafkasim/NoSuchMethod")
        assert raised.value.status is RpcStatus.UNIMPLEMENTED
        error = await expect_rpc_error(
            RpcStatus.UNIMPLEMENTED,
            transport.call(server.address, proto.METHOD_PRODUCE, pb.ProduceRequest(), timeout_s=1),
        )
        assert "streams only" in error.message
        await echo_still_served(env, server.address)

    run("framed", scenario)


class _Users:
    """Stands for a SASL listener's users (``PasswordVerifier``)."""

    mechanisms: tuple[str, ...] = ("PLAIN",)

    def password_matches(self, mechanism: str, username: str, password: str) -> bool:
        return True


async def _produce(request: Message) -> Message:
    return pb.ProduceResponse()


def test_the_server_refuses_unary_handlers_and_sasl() -> None:
    transport = FramedTransport()
    with pytest.raises(ValueError, match="streams only"):
        transport.server("127.0.0.1:0", {proto.METHOD_PRODUCE: _produce}, {})
    with pytest.raises(ValueError, match="SASL"):
        transport.server(
            "127.0.0.1:0", {}, {proto.METHOD_REPLICA_FETCH: echo_fetch_stream}, sasl=_Users()
        )
    with pytest.raises(ValueError, match="not a bidirectional-stream rpc"):
        transport.server("127.0.0.1:0", {}, {proto.METHOD_PRODUCE: never_ending})


def test_closing_the_transport_cancels_its_streams_and_refuses_new_ones() -> None:
    async def scenario(env: Env) -> None:
        server = await serve(env, {proto.METHOD_REPLICA_FETCH: echo_fetch_stream})
        transport = client(env)
        stream = transport.open_stream(server.address, proto.METHOD_REPLICA_FETCH)
        await stream.send(fetch(1))
        assert hw_of(await stream.recv(TIMEOUT_S)) == 1
        waiting = asyncio.create_task(stream.recv(TIMEOUT_S))
        await asyncio.sleep(0.01)  # the recv is waiting for an answer
        assert not waiting.done()
        await transport.close()
        await expect_rpc_error(RpcStatus.CANCELLED, waiting)
        await expect_rpc_error(RpcStatus.CANCELLED, stream.recv(TIMEOUT_S))
        await expect_rpc_error(RpcStatus.CANCELLED, stream.send(fetch(2)))
        with pytest.raises(RpcError) as raised:
            transport.open_stream(server.address, proto.METHOD_REPLICA_FETCH)
        assert raised.value.status is RpcStatus.CANCELLED
        await transport.close()  # idempotent
        await echo_still_served(env, server.address)

    run("framed", scenario)


# -- bounds and bad bytes ----------------------------------------------------------------------


def test_a_request_over_max_request_bytes_ends_the_stream_with_internal() -> None:
    async def scenario(env: Env) -> None:
        server = await serve(
            env,
            {proto.METHOD_REPLICA_FETCH: echo_fetch_stream},
            transport=FramedTransport(max_request_bytes=64),
        )
        big = pb.FetchRequest(replica_id=1, partitions=[pb.FetchPartition(topic="t" * 100)])
        assert big.ByteSize() > 64
        stream = client(env).open_stream(server.address, proto.METHOD_REPLICA_FETCH)
        await stream.send(fetch(3))
        assert hw_of(await stream.recv(TIMEOUT_S)) == 3  # a small one is served
        await stream.send(big)
        error = await expect_rpc_error(RpcStatus.INTERNAL, stream.recv(TIMEOUT_S))
        assert f"a request of {big.ByteSize()} bytes" in error.message
        assert "socket.request.max.bytes (64)" in error.message
        await stream.close()
        await echo_still_served(env, server.address)

    run("framed", scenario)


def test_bytes_that_are_not_a_request_end_the_stream_with_an_internal_end_frame() -> None:
    async def scenario(env: Env) -> None:
        server = await serve(env, {proto.METHOD_REPLICA_FETCH: echo_fetch_stream})
        garbage = b"\xff\xff\xff"
        answer = await raw_exchange(
            server.address,
            hello(proto.METHOD_REPLICA_FETCH) + _SIZE.pack(len(garbage)) + garbage,
        )
        size, kind = _HEAD.unpack_from(answer)
        assert kind == 1  # an end frame, and nothing after it
        assert size == len(answer) - 4
        status, _, why = answer[_HEAD.size :].decode().partition("\n")
        assert status == "INTERNAL"
        assert "not a valid FetchRequest message" in why
        await echo_still_served(env, server.address)

    run("framed", scenario)


def test_an_unknown_method_over_the_raw_socket_gets_an_unimplemented_end_frame() -> None:
    async def scenario(env: Env) -> None:
        server = await serve(env, {proto.METHOD_REPLICA_FETCH: echo_fetch_stream})
        answer = await raw_exchange(server.address, hello(proto.METHOD_PRODUCE))
        size, kind = _HEAD.unpack_from(answer)
        assert (kind, size) == (1, len(answer) - 4)
        assert answer[_HEAD.size :].decode().startswith("UNIMPLEMENTED\n")

    run("framed", scenario)


@pytest.mark.parametrize("size", [0, -1, 1025, 1 << 30])
def test_a_connection_without_a_valid_hello_is_closed_and_the_server_goes_on(
    size: int, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, LOGGER)

    async def scenario(env: Env) -> None:
        server = await serve(env, {proto.METHOD_REPLICA_FETCH: echo_fetch_stream})
        assert await raw_exchange(server.address, _SIZE.pack(size)) == b""
        await echo_still_served(env, server.address)

    run("framed", scenario)
    warnings = [r.getMessage() for r in caplog.records if r.name == LOGGER]
    assert any("no valid hello" in line for line in warnings), warnings


async def big_answer(requests: AsyncIterator[Message]) -> AsyncIterator[Message]:
    """Answers each request with a FetchResponse of about 1 KB (a long topic name)."""
    async for _ in requests:
        yield pb.FetchResponse(partitions=[pb.FetchPartitionResponse(topic="t" * 1000)])


def test_an_answer_over_max_answer_bytes_fails_the_stream_with_internal() -> None:
    async def scenario(env: Env) -> None:
        server = await serve(env, {proto.METHOD_REPLICA_FETCH: big_answer})
        stream = client(env, max_answer_bytes=64).open_stream(
            server.address, proto.METHOD_REPLICA_FETCH
        )
        await stream.send(fetch(1))
        error = await expect_rpc_error(RpcStatus.INTERNAL, stream.recv(TIMEOUT_S))
        assert "bounded by 64 bytes" in error.message
        await expect_rpc_error(RpcStatus.INTERNAL, stream.recv(TIMEOUT_S))  # it stays ended
        await stream.close()
        # A client with room for it reads the same answer.
        roomy = client(env).open_stream(server.address, proto.METHOD_REPLICA_FETCH)
        await roomy.send(fetch(1))
        answer = await roomy.recv(TIMEOUT_S)
        assert isinstance(answer, pb.FetchResponse)
        assert answer.partitions[0].topic == "t" * 1000
        await roomy.close()

    run("framed", scenario)


# -- answers in pieces, decoders ---------------------------------------------------------------


def fetch_response(records: bytes) -> pb.FetchResponse:
    return pb.FetchResponse(
        partitions=[
            pb.FetchPartitionResponse(
                topic="orders", partition=2, high_watermark=77, records=records
            )
        ]
    )


def cut_in_three(data: bytes) -> list[bytes]:
    third = len(data) // 3
    return [data[:third], data[third : 2 * third], data[2 * third :]]


def test_an_encoded_message_in_pieces_is_their_concatenation() -> None:
    data = fetch_response(b"records").SerializeToString()
    parts = cut_in_three(data)
    encoded = EncodedMessage(pb.FetchResponse, pieces=parts)
    assert tuple(encoded.pieces()) == tuple(parts)  # not joined to be handed out
    assert encoded.data == data
    assert encoded.SerializeToString() == data
    assert tuple(encoded.pieces()) == (data,)
    whole = EncodedMessage(pb.FetchResponse, data)
    assert whole.data == data and tuple(whole.pieces()) == (data,)


def test_an_answer_written_as_pieces_arrives_intact() -> None:
    expected = fetch_response(bytes(range(256)) * 400)
    data = expected.SerializeToString()

    async def in_pieces(requests: AsyncIterator[Message]) -> AsyncIterator[Any]:
        async for _ in requests:
            yield EncodedMessage(pb.FetchResponse, pieces=cut_in_three(data))
            yield EncodedMessage(pb.FetchResponse, pieces=[b"", data, b""])
            yield pb.FetchResponse()  # an empty answer: a frame of kind only

    async def scenario(env: Env) -> None:
        server = await serve(env, {proto.METHOD_REPLICA_FETCH: in_pieces})
        stream = client(env).open_stream(server.address, proto.METHOD_REPLICA_FETCH)
        await stream.send(fetch(1))
        assert await stream.recv(TIMEOUT_S) == expected
        assert await stream.recv(TIMEOUT_S) == expected
        assert await stream.recv(TIMEOUT_S) == pb.FetchResponse()
        await stream.close()

    run("framed", scenario)


def test_the_transports_response_decoders_read_the_answers() -> None:
    records = bytes(range(256)) * 16

    async def answer(requests: AsyncIterator[Message]) -> AsyncIterator[Message]:
        async for _ in requests:
            yield fetch_response(records)

    async def scenario(env: Env) -> None:
        server = await serve(env, {proto.METHOD_REPLICA_FETCH: answer})
        transport = client(env, response_decoders={proto.METHOD_REPLICA_FETCH: decode_fetch_answer})
        stream = transport.open_stream(server.address, proto.METHOD_REPLICA_FETCH)
        await stream.send(fetch(1))
        decoded: object = await stream.recv(TIMEOUT_S)
        assert isinstance(decoded, FetchAnswer)
        assert decoded.error_code == 0
        [partition] = decoded.partitions
        assert (partition.topic, partition.partition, partition.high_watermark) == (
            "orders",
            2,
            77,
        )
        assert isinstance(partition.records, memoryview)
        assert isinstance(partition.records.obj, bytearray)  # a view of the frame, uncopied
        assert bytes(partition.records) == records
        await stream.close()

    run("framed", scenario)


# -- TLS ---------------------------------------------------------------------------------------


async def recording_echo(
    seen: list[Caller], requests: AsyncIterator[Message]
) -> AsyncIterator[Message]:
    async for request in requests:
        assert isinstance(request, pb.FetchRequest)
        seen.append(CALLER.get())
        yield pb.FetchResponse(
            partitions=[pb.FetchPartitionResponse(high_watermark=request.replica_id)]
        )


def test_mutual_tls_gives_the_handler_the_certificates_principal(
    certs: Certs, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, LOGGER)
    seen: list[Caller] = []

    def failed_authentications() -> list[str]:
        return [
            r.getMessage()
            for r in caplog.records
            if r.name == LOGGER and "Failed authentication" in r.getMessage()
        ]

    async def scenario(env: Env) -> list[str]:
        server = await serve(
            env,
            {proto.METHOD_REPLICA_FETCH: lambda requests: recording_echo(seen, requests)},
            tls=certs.server("required"),
            listener="REPLICATION",
        )
        outcomes: list[str] = []
        for material, send in (
            (certs.client(certs.alice), True),
            (certs.client(None), False),  # no certificate: refused before any request
            (certs.client(certs.mallory), True),  # another authority's
            (None, True),  # plaintext on the TLS port
            (certs.client(certs.alice), True),  # still served
        ):
            stream = client(env, tls=material).open_stream(
                server.address, proto.METHOD_REPLICA_FETCH
            )
            try:
                if send:
                    await stream.send(fetch(9))
                assert hw_of(await stream.recv(TIMEOUT_S)) == 9
                outcomes.append("ok")
            except RpcError as e:
                outcomes.append(e.status.name)
            finally:
                await stream.close()
        # The server logs each refusal as its handshake fails, maybe after the client saw it.
        for _ in range(100):
            if len(failed_authentications()) >= 3:
                break
            await asyncio.sleep(0.01)
        return outcomes

    outcomes = run("framed", scenario)
    assert outcomes == ["ok", "UNAVAILABLE", "UNAVAILABLE", "UNAVAILABLE", "ok"]
    alice = Caller("User:CN=alice,OU=kafkasim", "127.0.0.1", "REPLICATION")
    assert seen == [alice, alice]
    assert len(failed_authentications()) == 3, failed_authentications()
    assert all("replication listener" in line for line in failed_authentications())


@pytest.mark.parametrize("after_hello", [False, True], ids=["before-hello", "after-hello"])
def test_a_broken_tls_record_ends_only_that_connection_quietly(
    certs: Certs, caplog: pytest.LogCaptureFixture, after_hello: bool
) -> None:
    """A peer that writes a forged TLS record into its session (ssl.SSLError on the server,
    an OSError but not a ConnectionError) loses its connection with one INFO line: no task
    error from asyncio, no handler blamed with a traceback, and the server goes on."""
    forged = b"\x17\x03\x03\x00\x20" + bytes(32)  # application data that cannot decrypt

    async def scenario(env: Env) -> None:
        material = certs.server("none")
        server = await serve(
            env, {proto.METHOD_REPLICA_FETCH: echo_fetch_stream}, tls=material, listener="R"
        )
        host, _, port = server.address.rpartition(":")
        context = certs.client(None).client_context()
        reader, writer = await asyncio.open_connection(
            host, int(port), ssl=context, server_hostname=host
        )
        if after_hello:
            writer.write(hello(proto.METHOD_REPLICA_FETCH))
            await writer.drain()
            await asyncio.sleep(0.1)
        os.write(writer.get_extra_info("socket").fileno(), forged)
        assert await asyncio.wait_for(reader.read(), TIMEOUT_S) == b""  # closed
        writer.transport.abort()
        tls_client = client(env, tls=certs.client(None))
        stream = tls_client.open_stream(server.address, proto.METHOD_REPLICA_FETCH)
        await stream.send(fetch(42))
        assert hw_of(await stream.recv(TIMEOUT_S)) == 42
        await stream.close()

    with caplog.at_level(logging.INFO):
        run("framed", scenario)
    loud = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert not loud, loud


def test_an_answers_small_pieces_are_joined_and_its_large_ones_written_as_they_are() -> None:
    """Few writes (each small piece alone was a TCP segment and a send call of its own), and no
    copy of the records (the large pieces are the very objects handed over)."""
    from kafkasim.node.rpc_framed import _coalesced

    big, other = bytes(64 * 1024), b"r" * (32 * 1024)
    pieces = [b"\x0a", b"\x05", b"head", big, b"tail", other, big, b"", b"end"]
    writes = _coalesced(b"HEAD!", pieces)
    assert b"".join(writes) == b"HEAD!" + b"".join(pieces)
    assert [len(w) for w in writes] == [11, len(big), 4, len(other), len(big), 3]
    assert writes[1] is big and writes[3] is other and writes[4] is big
    assert _coalesced(b"H", [big]) == [b"H", big]
    assert _coalesced(b"H", [b"a", b"b"]) == [b"Hab"]
