"""The client side of the Rpc port over gRPC (grpc.aio): channels, unary calls, bidi streams.

With ``node/rpc_grpc.py`` (the server side) the only modules of kafkasim that import ``grpc``.
Everything that talks to brokers over the network (clients, the command-line tools, Spark,
the cluster backends, a broker's own fetchers and controller channel) calls through
:class:`GrpcTransport`; only a broker also serves (``node.rpc_grpc.GrpcBrokerTransport``).

No generated ``_grpc`` stubs: clients build multi-callables by full method name, (de)serializing
with the message classes of ``proto.METHODS``. Callers see ``common.rpc`` types only.

What a fault looks like to the caller (every one is an :class:`RpcError`)::

    peer not listening, refused, went away, server stopped   UNAVAILABLE
    no answer within timeout_s                               DEADLINE_EXCEEDED
    call or stream closed by us (or the transport closed)    CANCELLED
    stream ended by the server's handler returning           CANCELLED
    method unknown to the contract or to that server         UNIMPLEMENTED
    the handler raised (logged with traceback on the server) INTERNAL
    any other gRPC status (a request the server cannot read) INTERNAL

``status_for_grpc_code`` is the one place gRPC status codes become ``RpcStatus``.

Channel options (:class:`GrpcOptions`, shared with the server side): messages up to 128 MiB both
ways (a fetch response may carry ``fetch.max.bytes`` = 50 MiB plus framing); keepalive pings off
unless asked for; reconnect backoff capped at 2 s instead of gRPC's 120 s, so a restarted broker
is reachable again within seconds; gRPC's own retries off, because retry policy belongs to the
callers (one tenacity policy); and ``SO_REUSEPORT`` off on servers, so binding a port another
server holds fails instead of silently sharing it.

Not thread-safe: one event loop owns a transport, its channels and streams.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import grpc
from google.protobuf.message import Message

from kafkasim.common.errors import InvalidConfigError
from kafkasim.common.rpc import ResponseDecoder, RpcError, RpcStatus
from kafkasim.common.sasl import SaslCredentials, client_sasl
from kafkasim.common.security import (
    SASL_MECHANISM_METADATA,
    SASL_PASSWORD_METADATA,
    SASL_USERNAME_METADATA,
)
from kafkasim.common.tls import TlsMaterial, client_tls
from kafkasim.common.waits import Wakeup
from kafkasim.proto import EncodedMessage, MethodSpec, method_spec

__all__ = [
    "GrpcBidiStream",
    "GrpcOptions",
    "GrpcTransport",
    "client_transport",
    "serialize",
    "status_for_grpc_code",
]

_MIB = 1024 * 1024

_STATUS_BY_GRPC_CODE: dict[Any, RpcStatus] = {
    grpc.StatusCode.UNAVAILABLE: RpcStatus.UNAVAILABLE,
    grpc.StatusCode.DEADLINE_EXCEEDED: RpcStatus.DEADLINE_EXCEEDED,
    grpc.StatusCode.CANCELLED: RpcStatus.CANCELLED,
    grpc.StatusCode.UNIMPLEMENTED: RpcStatus.UNIMPLEMENTED,
    grpc.StatusCode.UNAUTHENTICATED: RpcStatus.UNAUTHENTICATED,
}


def status_for_grpc_code(code: Any) -> RpcStatus:
    """The ``RpcStatus`` for a ``grpc.StatusCode``; anything unlisted is INTERNAL."""
    return _STATUS_BY_GRPC_CODE.get(code, RpcStatus.INTERNAL)


def _rpc_error(error: Any) -> RpcError:
    """An ``RpcError`` for a ``grpc.aio.AioRpcError``."""
    return RpcError(status_for_grpc_code(error.code()), error.details() or "")


@dataclass(frozen=True, slots=True)
class GrpcOptions:
    """Channel and server settings (see the module doc for why each default)."""

    max_message_bytes: int = 128 * _MIB
    keepalive_time_ms: int | None = None  # None: no keepalive pings (gRPC's default)
    keepalive_timeout_ms: int = 20_000
    reconnect_backoff_initial_ms: int = 100
    reconnect_backoff_max_ms: int = 2_000

    def __post_init__(self) -> None:
        if self.max_message_bytes < 64 * _MIB:
            raise ValueError(f"max_message_bytes must be >= 64 MiB, got {self.max_message_bytes}")
        if self.keepalive_time_ms is not None and self.keepalive_time_ms <= 0:
            raise ValueError(f"keepalive_time_ms must be > 0, got {self.keepalive_time_ms}")
        if not 0 < self.reconnect_backoff_initial_ms <= self.reconnect_backoff_max_ms:
            raise ValueError("need 0 < reconnect_backoff_initial_ms <= reconnect_backoff_max_ms")

    def channel_options(self) -> list[tuple[str, int]]:
        options = [
            ("grpc.max_send_message_length", self.max_message_bytes),
            ("grpc.max_receive_message_length", self.max_message_bytes),
            ("grpc.enable_retries", 0),
            ("grpc.initial_reconnect_backoff_ms", self.reconnect_backoff_initial_ms),
            ("grpc.min_reconnect_backoff_ms", self.reconnect_backoff_initial_ms),
            ("grpc.max_reconnect_backoff_ms", self.reconnect_backoff_max_ms),
        ]
        if self.keepalive_time_ms is not None:
            options += [
                ("grpc.keepalive_time_ms", self.keepalive_time_ms),
                ("grpc.keepalive_timeout_ms", self.keepalive_timeout_ms),
                ("grpc.keepalive_permit_without_calls", 1),
            ]
        return options

    def server_options(self) -> list[tuple[str, int]]:
        options = [
            ("grpc.max_send_message_length", self.max_message_bytes),
            ("grpc.max_receive_message_length", self.max_message_bytes),
            ("grpc.so_reuseport", 0),
        ]
        if self.keepalive_time_ms is not None:
            # Servers reject pings more frequent than this; accept what our clients send.
            options += [
                ("grpc.http2.min_recv_ping_interval_without_data_ms", self.keepalive_time_ms),
                ("grpc.keepalive_permit_without_calls", 1),
            ]
        return options


def _spec(method: str, *, streaming: bool) -> MethodSpec:
    spec = method_spec(method, streaming=streaming)
    if spec is None:
        kind = "bidirectional-stream" if streaming else "unary"
        raise RpcError(RpcStatus.UNIMPLEMENTED, f"{method} is not a {kind} rpc of kafkasim.proto")
    return spec


def serialize(message: Message | EncodedMessage) -> bytes:
    """The wire bytes of a message (the serializer of every gRPC method handler); an
    :class:`EncodedMessage` (a handler's answer already in wire form) is its bytes, as is."""
    return message.SerializeToString()


class _Channel:
    """One channel to a target plus its multi-callables, built once per method."""

    def __init__(
        self,
        target: str,
        options: GrpcOptions,
        tls: TlsMaterial | None,
        decoders: Mapping[str, ResponseDecoder],
    ) -> None:
        self._decoders = decoders
        if tls is None:
            self.channel: Any = grpc.aio.insecure_channel(target, options=options.channel_options())
        else:
            self.channel = grpc.aio.secure_channel(
                target, channel_credentials(tls), options=options.channel_options()
            )
        self._unary: dict[str, Any] = {}
        self._streams: dict[str, Any] = {}

    def unary(self, spec: MethodSpec) -> Any:
        return self._multicallable(self._unary, self.channel.unary_unary, spec)

    def stream(self, spec: MethodSpec) -> Any:
        return self._multicallable(self._streams, self.channel.stream_stream, spec)

    def _multicallable(self, built: dict[str, Any], make: Any, spec: MethodSpec) -> Any:
        callable_ = built.get(spec.name)
        if callable_ is None:
            callable_ = make(
                spec.name,
                request_serializer=serialize,
                response_deserializer=self._decoders.get(spec.name, spec.response_cls.FromString),
            )
            built[spec.name] = callable_
        return callable_


def _cancelled_underneath() -> bool:
    """A CancelledError that did not come from cancelling the current task.

    grpc.aio raises ``asyncio.CancelledError`` out of a call whose channel was closed; that is
    a transport fault (CANCELLED) for the caller, unlike its own task being cancelled.
    """
    task = asyncio.current_task()
    return task is not None and task.cancelling() == 0


class GrpcBidiStream:
    """One client-side bidirectional stream; implements ``common.rpc.BidiStream``.

    From the first ``recv`` on, one reader task per stream reads the server's messages as they
    come and queues them; ``recv`` takes the oldest, at once and without yielding when one is
    queued, else sleeping on a :class:`~kafkasim.common.waits.Wakeup` (one future, one timer)
    until the reader queues one. Per message that is one loop step between gRPC's read and the
    caller, where a read task per ``recv`` cost four, and a task, a future and a done-callback
    each (issue 19: the ProduceStream client spent half again the CPU of a bare grpc.aio
    client). What is queued is bounded by the caller's requests: every stream of kafkasim.proto
    answers each request once (ProduceStream, ReplicaFetch).

    A grpc.aio read that is cancelled midway cancels the whole call, so the reader is never
    cancelled but by ``close``: a ``recv`` that times out (DEADLINE_EXCEEDED) or whose task is
    cancelled leaves the stream as it was, and the message that comes later is the next
    ``recv``'s, in order. A stream that ended or broke keeps failing with the same error once
    its queued messages are taken.
    """

    def __init__(self, transport: GrpcTransport, spec: MethodSpec, call: Any) -> None:
        self._transport = transport
        self._spec = spec
        self._call = call
        self._queued: deque[Message] = deque()
        self._arrived = Wakeup()
        self._reader: asyncio.Task[None] | None = None
        # How the stream ended (read by the reader), once it has: re-raised by every recv.
        self._end: BaseException | None = None
        self._closed = False

    async def send(self, message: Message) -> None:
        self._spec.check_request(message)
        if self._closed:
            raise RpcError(RpcStatus.CANCELLED, "stream closed")
        try:
            await self._call.write(message)
        except grpc.aio.AioRpcError as exc:
            raise _rpc_error(exc) from exc
        except asyncio.InvalidStateError:
            # grpc.aio refuses writes once the call has finished, whatever its status.
            raise await self._finished_error() from None
        except asyncio.CancelledError:
            if _cancelled_underneath():
                raise RpcError(RpcStatus.CANCELLED, "stream cancelled") from None
            raise

    async def recv(self, timeout_s: float | None = None) -> Message:
        if self._closed:
            raise RpcError(RpcStatus.CANCELLED, "stream closed")
        queued = self._queued
        if not queued and self._end is None:
            if self._reader is None:
                self._reader = asyncio.ensure_future(self._read())
            self._arrived.clear()
            if not await self._arrived.wait(timeout_s):
                raise RpcError(RpcStatus.DEADLINE_EXCEEDED, f"no message within {timeout_s} s")
            if self._closed:
                raise RpcError(RpcStatus.CANCELLED, "stream closed")
        if queued:
            return queued.popleft()
        end = self._end
        assert end is not None  # woken with nothing queued: the reader has ended
        if isinstance(end, RpcError):
            raise RpcError(end.status, end.message)  # a fresh error (and traceback) each time
        raise end

    async def _read(self) -> None:
        """The reader task: queue each message until the call ends, then note how it ended."""
        call, queued, arrived = self._call, self._queued, self._arrived
        try:
            while True:
                message = await call.read()
                if message is grpc.aio.EOF:
                    self._end = await self._finished_error()
                    break
                queued.append(message)
                arrived.set()
        except grpc.aio.AioRpcError as exc:
            self._end = _rpc_error(exc)
        except asyncio.CancelledError:
            # By close(), or by grpc.aio when its channel closes: a transport fault either way.
            self._end = RpcError(RpcStatus.CANCELLED, "stream cancelled")
        except Exception as exc:  # anything else reaches the caller as it was raised
            self._end = exc
        arrived.set()

    async def _finished_error(self) -> RpcError:
        """The error for a call that has finished: CANCELLED if the server's handler returned."""
        code = await self._call.code()
        if code == grpc.StatusCode.OK:
            return RpcError(RpcStatus.CANCELLED, "stream ended by the server")
        return RpcError(status_for_grpc_code(code), await self._call.details() or "")

    async def close(self) -> None:
        """Cancel the call (idempotent); the server's handler sees its requests end."""
        if self._closed:
            return
        self._closed = True
        self._transport._forget(self)
        self._call.cancel()
        reader, self._reader = self._reader, None
        if reader is not None:
            reader.cancel()
            await asyncio.wait({reader})
        self._arrived.set()  # a recv waiting in another task fails (closed) instead of hanging


def channel_credentials(tls: TlsMaterial) -> Any:
    """gRPC's channel credentials for ``tls``: the truststore (None: the system's), and our
    certificate when there is one (mutual TLS)."""
    return grpc.ssl_channel_credentials(
        root_certificates=tls.trusted_pem,
        private_key=tls.key_pem,
        certificate_chain=tls.chain_pem,
    )


def check_grpc_client_tls(tls: TlsMaterial, key: str) -> None:
    """gRPC channels always check that the server's certificate names the host: refuse a
    config that turns it off (``key``: how ssl.endpoint.identification.algorithm is spelled)."""
    if not tls.verify_hostname:
        raise InvalidConfigError(
            f"Invalid value (empty) for configuration {key}: gRPC always verifies the server's "
            "host name; kafkasim's gRPC connections need https"
        )


class GrpcTransport:
    """``common.rpc.ClientTransport`` over grpc.aio: channels, one per target, insecure or
    with ``tls`` (server verified against its truststore and host name; mTLS with a keystore).

    Channels are opened on first use and kept until ``close()``; gRPC reconnects them on its
    own (backoff capped by ``GrpcOptions``). ``open_stream`` must be called with the event loop
    running. After ``close()`` every call and stream fails with CANCELLED.

    ``response_decoders``: per full method name, what turns an answer's wire bytes into what
    ``call``/``recv`` return, instead of the contract's protobuf class (the broker's follower
    reads ``ReplicaFetch`` answers with ``node.fetcher_wire.decode_fetch_answer``, which leaves
    the records uncopied).
    """

    def __init__(
        self,
        options: GrpcOptions | None = None,
        *,
        tls: TlsMaterial | None = None,
        sasl: SaslCredentials | None = None,
        response_decoders: Mapping[str, ResponseDecoder] | None = None,
    ) -> None:
        if tls is not None:
            check_grpc_client_tls(tls, "ssl.endpoint.identification.algorithm")
        if sasl is not None and tls is None:
            raise InvalidConfigError(
                "SASL credentials are sent in call metadata: over TLS only (SASL_SSL)"
            )
        self._options = options or GrpcOptions()
        self._tls = tls
        self._decoders: Mapping[str, ResponseDecoder] = dict(response_decoders or {})
        # Every call and stream carries the SASL credentials (checked per call by the
        # listener, node.rpc_grpc).
        self._metadata: tuple[tuple[str, str], ...] | None = (
            None
            if sasl is None
            else (
                (SASL_MECHANISM_METADATA, sasl.mechanism),
                (SASL_USERNAME_METADATA, sasl.username),
                (SASL_PASSWORD_METADATA, sasl.password),
            )
        )
        self._channels: dict[str, _Channel] = {}
        self._streams: dict[GrpcBidiStream, None] = {}
        self._closed = False

    def _channel(self, target: str) -> _Channel:
        if self._closed:
            raise RpcError(RpcStatus.CANCELLED, "transport closed")
        channel = self._channels.get(target)
        if channel is None:
            channel = _Channel(target, self._options, self._tls, self._decoders)
            self._channels[target] = channel
        return channel

    async def call(
        self, target: str, method: str, request: Message, *, timeout_s: float
    ) -> Message:
        if timeout_s <= 0:
            raise ValueError(f"timeout_s must be > 0, got {timeout_s}")
        spec = _spec(method, streaming=False)
        spec.check_request(request)
        multicallable = self._channel(target).unary(spec)
        try:
            response: Message = await multicallable(
                request, timeout=timeout_s, metadata=self._metadata
            )
        except grpc.aio.AioRpcError as exc:
            raise _rpc_error(exc) from exc
        except asyncio.CancelledError:
            if _cancelled_underneath():
                raise RpcError(RpcStatus.CANCELLED, "call cancelled (channel closed)") from None
            raise
        return response

    def open_stream(self, target: str, method: str) -> GrpcBidiStream:
        spec = _spec(method, streaming=True)
        call = self._channel(target).stream(spec)(metadata=self._metadata)
        stream = GrpcBidiStream(self, spec, call)
        self._streams[stream] = None
        return stream

    def _forget(self, stream: GrpcBidiStream) -> None:
        self._streams.pop(stream, None)

    async def close(self) -> None:
        """Close every stream and channel (idempotent)."""
        self._closed = True
        for stream in list(self._streams):
            await stream.close()
        channels, self._channels = self._channels, {}
        for channel in channels.values():
            await channel.channel.close()


def client_transport(config: Mapping[str, object]) -> GrpcTransport:
    """The transport a client config asks for: ``security.protocol=SSL`` with Kafka's
    ``ssl.truststore.*``/``ssl.keystore.*`` keys makes TLS channels (mTLS with a keystore);
    SASL_SSL TLS channels whose calls carry the ``sasl.*`` credentials; PLAINTEXT (the
    default) plain ones. INVALID_CONFIG naming a bad key."""
    return GrpcTransport(tls=client_tls(config), sasl=client_sasl(config))
