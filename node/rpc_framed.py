"""Bidirectional streams of the Rpc port over plain TCP (or TLS) frames: the replication
listener's transport (issue 19).

Why a third transport: a follower's fetch is one small request and one answer of up to a MiB,
a few hundred times a second per leader. Over grpc.aio each round trip cost the two processes
~400 µs of CPU at any size up to 16 KiB, against ~120 µs over an asyncio protocol reading
into one buffer, and a 1 MiB answer 1.0 ms against 0.6 (``./dev bench transport``); on a
three-broker cluster (RF=3, acks=all) the followers' CPU per MiB halved and the cluster's
throughput rose by a quarter (the prototype's measurements, issue 19's notes). gRPC stays the
transport of everything else (clients, the controller, the rare unary calls of a follower):
what it costs there is per call, not per MiB.

The wire, one connection per stream (numbers big-endian):

* client → server: first a hello ``int32 size, the method's full name (UTF-8)``, then each
  request as ``int32 size, the request message`` (protobuf);
* server → client: ``int32 size, uint8 kind, payload`` with size counting kind and payload;
  kind 0 is an answer (the response message), kind 1 the end of the stream: the
  :class:`~kafkasim.common.rpc.RpcStatus` name, a newline, and why (UTF-8). The server closes
  the connection after an end frame.

What a caller sees is the stream contract of ``common.rpc`` (and of the other two
transports, tests/unit/rpc's conformance suite): a handler that returns ends the stream with
CANCELLED after its answers, one that raises with INTERNAL; a method not served, or not a
stream of the contract, is UNIMPLEMENTED; a refused connection, a server that stops or a
connection lost is UNAVAILABLE; a recv that times out (DEADLINE_EXCEEDED) leaves the stream
as it was. Sizes are bounded on both sides before a byte of the body is read: a request over
``max_request_bytes`` (``socket.request.max.bytes``) ends the stream with INTERNAL, an answer
over ``max_answer_bytes`` closes the connection (INTERNAL to the caller). Unary calls are not
carried (UNIMPLEMENTED): the follower's OffsetsForLeaderEpoch and ListOffsets go over gRPC.

Security: a listener with TLS material speaks TLS (the client's certificate gives the caller's
principal, as on the other listeners); SASL is not carried (the broker's config refuses a
SASL replication listener). Answers in wire form are written as their pieces
(``EncodedMessage.pieces``, the small ones joined): a fetch answer's records go from the file
read to the socket without being copied into one buffer first.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
import struct
from collections import deque
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any, cast

from google.protobuf.message import DecodeError, Message

from kafkasim.common.rpc import (
    ResponseDecoder,
    RpcError,
    RpcStatus,
    StreamHandler,
    UnaryHandler,
)
from kafkasim.common.security import ANONYMOUS, CALLER, Caller, PasswordVerifier
from kafkasim.common.tls import TlsMaterial, server_handshake
from kafkasim.common.waits import Wakeup
from kafkasim.proto import EncodedMessage, MethodSpec, check_servable, method_spec

__all__ = ["FramedServer", "FramedStream", "FramedTransport"]

_log = logging.getLogger(__name__)

_SIZE = struct.Struct(">i")
_HEAD = struct.Struct(">iB")  # an answer's or end's size, and its kind
_ANSWER = 0
_END = 1
_MAX_HELLO_BYTES = 1024  # a method's name
_MAX_END_BYTES = 64 * 1024  # an end frame's status and reason
# How long a connection has for its TLS handshake and hello before it is closed.
HELLO_TIMEOUT_S = 10.0


def _stream_spec(method: str) -> MethodSpec:
    spec = method_spec(method, streaming=True)
    if spec is None:
        raise RpcError(
            RpcStatus.UNIMPLEMENTED, f"{method} is not a bidirectional-stream rpc of kafkasim.proto"
        )
    return spec


def _end_frame(status: RpcStatus, message: str) -> bytes:
    payload = f"{status.value}\n{message}".encode()[:_MAX_END_BYTES]
    return _HEAD.pack(len(payload) + 1, _END) + payload


def _end_error(payload: bytes | bytearray) -> RpcError:
    name, _, message = payload.decode("utf-8", "replace").partition("\n")
    try:
        status = RpcStatus(name)
    except ValueError:
        status = RpcStatus.INTERNAL
        message = f"the server ended the stream with an unknown status {name!r}: {message}"
    return RpcError(status, message)


# A piece of an answer this large is written on its own; smaller ones are joined first.
_COALESCE_BELOW = 32 * 1024


def _coalesced(head: bytes, pieces: Sequence[bytes]) -> list[bytes]:
    """An answer's frame as few writes as copy nothing large: the small pieces (the frame's
    head, protobuf keys, lengths and fields) joined between the large ones (records, as read
    from the file), which go as they are. One write per piece put every small one in a TCP
    segment of its own (the sockets are TCP_NODELAY) and a send call each; joining the records
    copies each answer (Python 3.11's ``writelines`` joins everything)."""
    writes: list[bytes] = []
    small: list[bytes] = [head]
    for piece in pieces:
        if len(piece) < _COALESCE_BELOW:
            small.append(piece)
            continue
        if small:
            writes.append(b"".join(small))
            small = []
        writes.append(piece)
    if small:
        writes.append(b"".join(small))
    return writes


# -- server ------------------------------------------------------------------------------------


class _StreamEndedError(Exception):
    """Raised out of a connection's requests to end its stream with ``status``."""

    def __init__(self, status: RpcStatus, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class FramedServer:
    """Serves bidirectional-stream handlers on ``address``; implements ``common.rpc.RpcServer``.

    Lifecycle as the gRPC server's: unbound until ``start()`` (port 0 picks a free port,
    reported by ``address``); ``stop()`` closes the listening socket and every connection
    (their callers see UNAVAILABLE); a stopped server is not started again."""

    def __init__(
        self,
        address: str,
        streams: Mapping[str, StreamHandler],
        *,
        tls: TlsMaterial | None = None,
        listener: str = "",
        max_request_bytes: int,
    ) -> None:
        check_servable((), streams)
        self._requested_address = address
        self._address = address
        self._streams = dict(streams)
        self._ssl_context = tls.server_context() if tls is not None else None
        self._listener = listener
        self._max_request_bytes = max_request_bytes
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task[None]] = set()
        self._stopped = False

    @property
    def address(self) -> str:
        """``host:port`` actually bound once started; the requested address before."""
        return self._address

    async def start(self) -> None:
        if self._stopped or self._server is not None:
            raise RuntimeError(f"server {self._address} was already started")
        host, _, port = self._requested_address.rpartition(":")
        try:
            self._server = await asyncio.start_server(self._serve, host, int(port))
        except OSError as e:
            # Kafka's SocketServer wording, naming the address.
            raise OSError(
                f"Socket server failed to bind to {self._requested_address}: {e.strerror or e}."
            ) from e
        bound = self._server.sockets[0].getsockname()[1]
        self._address = f"{host}:{bound}"

    async def stop(self, grace_s: float = 0.0) -> None:
        """Close the listener and every connection (idempotent). Streams are long-lived: there
        is no call to let finish, so ``grace_s`` is not waited for."""
        del grace_s
        self._stopped = True
        server, self._server = self._server, None
        if server is None:
            return
        server.close()
        for task in list(self._connections):
            task.cancel()
        for task in list(self._connections):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        await server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        peer = writer.get_extra_info("peername")
        where = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        host = peer[0] if isinstance(peer, tuple) else ""
        try:
            principal = ANONYMOUS
            if self._ssl_context is not None:
                handshake = await server_handshake(
                    writer, self._ssl_context, where=where, what="replication listener", log=_log
                )
                if handshake is None:
                    return
                principal = handshake
            # The stream's handler runs in this task: its caller is set once, here.
            CALLER.set(Caller(principal, host, self._listener))
            await self._stream(reader, writer, where)
        except OSError as e:
            # The peer went away, or broke the TLS session (ssl.SSLError: a bad record).
            _log.info("replication listener: %s went away: %s", where, e)
        except asyncio.CancelledError:
            # The client went away (its requests ended) or the server stopped: the connection
            # task ends here, not cancelled (asyncio's streams log a connection task that
            # ends cancelled as an error).
            pass
        finally:
            self._connections.discard(task)
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _stream(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, where: str
    ) -> None:
        try:
            async with asyncio.timeout(HELLO_TIMEOUT_S):
                (size,) = _SIZE.unpack(await reader.readexactly(4))
                if not 0 < size <= _MAX_HELLO_BYTES:
                    _log.warning("replication listener: closing %s: no valid hello", where)
                    return
                method = (await reader.readexactly(size)).decode("utf-8", "replace")
        except (asyncio.IncompleteReadError, TimeoutError, OSError):
            return
        handler = self._streams.get(method)
        spec = method_spec(method, streaming=True)
        if handler is None or spec is None:
            writer.write(_end_frame(RpcStatus.UNIMPLEMENTED, f"{method} is not served here"))
            await writer.drain()
            return
        responses = handler(self._requests(reader, spec))
        transport = writer.transport
        try:
            async for response in responses:
                answer = spec.check_response(response)
                pieces = (
                    answer.pieces()
                    if isinstance(answer, EncodedMessage)
                    else (answer.SerializeToString(),)
                )
                head = _HEAD.pack(sum(map(len, pieces)) + 1, _ANSWER)
                for write in _coalesced(head, pieces):
                    transport.write(write)
                await writer.drain()
        except _StreamEndedError as e:
            _log.warning("replication listener: ending %s's %s: %s", where, spec.name, e.message)
            writer.write(_end_frame(e.status, e.message))
        except (OSError, asyncio.CancelledError):
            raise  # the connection's trouble, not the handler's
        except Exception as exc:
            _log.exception("stream handler for %s raised; the caller gets INTERNAL", spec.name)
            writer.write(_end_frame(RpcStatus.INTERNAL, f"{type(exc).__name__}: {exc}"))
        else:
            writer.write(_end_frame(RpcStatus.CANCELLED, "stream ended by the server"))
        finally:
            # Close the handler's generator now rather than whenever it is collected.
            aclose = getattr(responses, "aclose", None)
            if aclose is not None:
                with contextlib.suppress(Exception):
                    await aclose()
        with contextlib.suppress(OSError):
            await writer.drain()

    async def _requests(self, reader: asyncio.StreamReader, spec: MethodSpec) -> AsyncIterator[Any]:
        """The stream's requests as the handler pulls them. The stream has no half-close: its
        end is the client gone, and the handler is cancelled then (as the gRPC adapter does)."""
        limit = self._max_request_bytes
        decode = spec.request_cls.FromString
        while True:
            try:
                (size,) = _SIZE.unpack(await reader.readexactly(4))
                if size < 0 or size > limit:
                    raise _StreamEndedError(
                        RpcStatus.INTERNAL,
                        f"a request of {size} bytes is over socket.request.max.bytes ({limit}) "
                        "(InvalidReceiveException)",
                    )
                data = await reader.readexactly(size)
            except (asyncio.IncompleteReadError, OSError):
                # The client went away (or broke the TLS session): the stream is over.
                task = asyncio.current_task()
                assert task is not None
                task.cancel()
                await asyncio.sleep(0)  # raises CancelledError here
                raise
            try:
                request = decode(data)
            except DecodeError as e:
                raise _StreamEndedError(
                    RpcStatus.INTERNAL,
                    f"{spec.name}: the request body is not a valid "
                    f"{spec.request_cls.__name__} message ({e})",
                ) from None
            yield request


# -- client ------------------------------------------------------------------------------------


class _Answers(asyncio.BufferedProtocol):
    """Reads frames straight into their buffers: the 5-byte head, then a ``bytearray`` of the
    frame's size (an answer's records are decoded as views of it, never copied again)."""

    def __init__(self, stream: FramedStream) -> None:
        self._stream = stream
        self._head = bytearray(_HEAD.size)
        self._head_view = memoryview(self._head)
        self._body: bytearray | None = None
        self._body_view = memoryview(b"")
        self._kind = _ANSWER
        self._filled = 0
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def get_buffer(self, sizehint: int) -> memoryview:
        if self._body is None:
            return self._head_view[self._filled :]
        return self._body_view[self._filled :]

    def buffer_updated(self, nbytes: int) -> None:
        self._filled += nbytes
        if self._body is None:
            if self._filled < _HEAD.size:
                return
            size, kind = _HEAD.unpack(self._head)
            size -= 1
            limit = self._stream.max_answer_bytes if kind == _ANSWER else _MAX_END_BYTES
            if size < 0 or size > limit or kind not in (_ANSWER, _END):
                self._stream.fail(
                    RpcError(
                        RpcStatus.INTERNAL,
                        f"the server sent a frame of kind {kind} and {size} bytes "
                        f"(answers are bounded by {limit} bytes)",
                    )
                )
                assert self.transport is not None
                self.transport.close()
                return
            self._kind = kind
            self._body = bytearray(size)
            self._body_view = memoryview(self._body)
            self._filled = 0
        if self._filled < len(self._body):
            return
        body, kind = self._body, self._kind
        self._body = None
        self._body_view = memoryview(b"")
        self._filled = 0
        if kind == _ANSWER:
            self._stream.arrived(body)
        else:
            self._stream.fail(_end_error(body))

    def eof_received(self) -> bool | None:
        return None  # close the transport

    def connection_lost(self, exc: Exception | None) -> None:
        why = f": {exc}" if exc is not None else ""
        self._stream.fail(RpcError(RpcStatus.UNAVAILABLE, f"connection lost{why}"))


class FramedStream:
    """One client-side stream; implements ``common.rpc.BidiStream``. The connection is opened
    at once (in a task); ``send`` waits for it, ``recv`` returns the oldest answer queued,
    without yielding when one is there. Once the stream has ended or broken, queued answers
    are still taken, then every call fails with the same error."""

    def __init__(
        self,
        transport: FramedTransport,
        target: str,
        spec: MethodSpec,
        *,
        decode: ResponseDecoder,
        max_answer_bytes: int,
    ) -> None:
        self._transport = transport
        self._spec = spec
        self._decode = decode
        self.max_answer_bytes = max_answer_bytes
        self._queued: deque[bytearray] = deque()
        self._arrived = Wakeup()
        self._end: RpcError | None = None
        self._closed = False
        self._protocol: _Answers | None = None
        self._connecting = asyncio.ensure_future(self._connect(target))

    async def _connect(self, target: str) -> None:
        host, _, port = target.rpartition(":")
        loop = asyncio.get_running_loop()
        context = self._transport.ssl_context
        try:
            async with asyncio.timeout(self._transport.connect_timeout_s):
                _, protocol = await loop.create_connection(
                    lambda: _Answers(self),
                    host,
                    int(port),
                    ssl=context,
                    server_hostname=host if context is not None else None,
                )
        except (OSError, TimeoutError, ValueError, ssl.SSLError) as e:
            self.fail(RpcError(RpcStatus.UNAVAILABLE, f"cannot connect to {target}: {e}"))
            return
        self._protocol = protocol
        name = self._spec.name.encode()
        assert protocol.transport is not None
        protocol.transport.write(_SIZE.pack(len(name)) + name)

    def arrived(self, body: bytearray) -> None:
        self._queued.append(body)
        self._arrived.set()

    def fail(self, error: RpcError) -> None:
        """The stream has ended: the first reason is kept."""
        if self._end is None:
            self._end = error
        self._arrived.set()

    def _error(self) -> RpcError:
        if self._closed:
            return RpcError(RpcStatus.CANCELLED, "stream closed")
        assert self._end is not None
        return RpcError(self._end.status, self._end.message)  # a fresh error each time

    async def send(self, message: Message) -> None:
        self._spec.check_request(message)
        if not self._connecting.done():
            # wait, not await: close() cancelling the connection is not this task cancelled
            await asyncio.wait({self._connecting})
        if self._closed or self._end is not None:
            raise self._error()
        protocol = self._protocol
        assert protocol is not None and protocol.transport is not None
        data = message.SerializeToString()
        protocol.transport.write(_SIZE.pack(len(data)) + data)

    async def recv(self, timeout_s: float | None = None) -> Any:
        queued = self._queued
        if not queued and self._end is None and not self._closed:
            self._arrived.clear()
            if not await self._arrived.wait(timeout_s):
                raise RpcError(RpcStatus.DEADLINE_EXCEEDED, f"no message within {timeout_s} s")
        if self._closed:
            raise self._error()
        if queued:
            return self._decode(queued.popleft())
        raise self._error()

    async def close(self) -> None:
        """Close the connection (idempotent); the server's handler is cancelled."""
        if self._closed:
            return
        self._closed = True
        self._transport._forget(self)
        self._connecting.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._connecting
        if self._protocol is not None and self._protocol.transport is not None:
            self._protocol.transport.close()
        self._arrived.set()  # a recv waiting in another task fails (closed) instead of hanging


def _parser(cls: type[Message]) -> ResponseDecoder:
    """The contract's decoding of ``cls``, for the methods without a decoder of their own."""

    def parse(data: bytes | bytearray) -> Message:
        # protobuf parses any buffer, the received bytearray as it is (its stubs say bytes)
        return cls.FromString(cast(bytes, data))

    return parse


class FramedTransport:
    """``common.rpc.Transport`` for bidirectional streams over TCP frames (see the module doc).

    Client side: ``tls`` (a truststore, and a keystore for mutual TLS) as the gRPC transport
    takes it; ``response_decoders`` per method as the gRPC transport's (the follower reads its
    fetch answers with ``node.fetcher_wire.decode_fetch_answer``); answers bounded by
    ``max_answer_bytes``. Server side: requests bounded by ``max_request_bytes``."""

    def __init__(
        self,
        *,
        tls: TlsMaterial | None = None,
        response_decoders: Mapping[str, ResponseDecoder] | None = None,
        max_answer_bytes: int = 64 * 1024 * 1024,
        max_request_bytes: int = 100 * 1024 * 1024,
        connect_timeout_s: float = 30.0,
    ) -> None:
        self.ssl_context = tls.client_context() if tls is not None else None
        self._decoders = dict(response_decoders or {})
        self._max_answer_bytes = max_answer_bytes
        self._max_request_bytes = max_request_bytes
        self.connect_timeout_s = connect_timeout_s
        self._streams: dict[FramedStream, None] = {}
        self._closed = False

    async def call(
        self, target: str, method: str, request: Message, *, timeout_s: float
    ) -> Message:
        raise RpcError(
            RpcStatus.UNIMPLEMENTED, f"{method}: the framed transport carries streams only"
        )

    def open_stream(self, target: str, method: str) -> FramedStream:
        if self._closed:
            raise RpcError(RpcStatus.CANCELLED, "transport closed")
        spec = _stream_spec(method)
        decode = self._decoders.get(method) or _parser(spec.response_cls)
        stream = FramedStream(
            self, target, spec, decode=decode, max_answer_bytes=self._max_answer_bytes
        )
        self._streams[stream] = None
        return stream

    def _forget(self, stream: FramedStream) -> None:
        self._streams.pop(stream, None)

    async def close(self) -> None:
        """Close every stream (idempotent); they fail with CANCELLED."""
        self._closed = True
        for stream in list(self._streams):
            await stream.close()

    def server(
        self,
        address: str,
        unary: Mapping[str, UnaryHandler],
        streams: Mapping[str, StreamHandler],
        *,
        tls: TlsMaterial | None = None,
        listener: str = "",
        sasl: PasswordVerifier | None = None,
    ) -> FramedServer:
        """A server for these stream handlers; ``ValueError`` for unary handlers (not carried)
        or SASL (no credentials travel on this transport)."""
        if unary:
            raise ValueError(f"the framed transport serves streams only, not {sorted(unary)}")
        if sasl is not None:
            raise ValueError("the framed transport carries no SASL credentials")
        return FramedServer(
            address,
            streams,
            tls=tls,
            listener=listener,
            max_request_bytes=self._max_request_bytes,
        )
