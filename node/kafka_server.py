"""The Kafka-protocol listener: Kafka's size-prefixed request frames over TCP (asyncio
streams), the adapter of the Kafka front door as ``node.rpc_grpc`` is gRPC's.

Per connection, as Kafka's socket server does with its muted channels: one request is read,
answered, and only then is the next one read, so responses go out in request order (a client
may pipeline; its requests wait in the socket). What is wrong with a connection closes that
connection, with one log line, and nothing else: a frame over ``socket.request.max.bytes``
(checked on the size prefix, before a byte of the body is read), an unknown API key or
version (ApiVersions excepted: it is answered v0 with UNSUPPORTED_VERSION), a request that
does not parse, a handler that fails, a peer that goes away mid-request, and a connection idle
for ``connections.max.idle.ms``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import struct
from collections.abc import Awaitable, Callable

from kafkasim.common.security import CALLER, Caller
from kafkasim.common.tls import TlsMaterial, server_handshake
from kafkasim.node.kafka_apis import CloseConnectionError, KafkaProtocolApis
from kafkasim.node.kafka_codec import (
    API_VERSIONS_KEY,
    InvalidRequestFrameError,
    UnsupportedVersionError,
    decode_request,
    encode_response,
)
from kafkasim.node.kafka_sasl import SaslConnection
from kafkasim.node.sasl_auth import ListenerAuthenticator

logger = logging.getLogger(__name__)

_SIZE = struct.Struct(">i")


class KafkaListener:
    """One Kafka-protocol listener of a broker, bound to ``host:port`` (0: a free port)."""

    def __init__(
        self,
        host: str,
        port: int,
        apis: KafkaProtocolApis,
        *,
        max_request_bytes: int,
        idle_timeout_ms: int,
        ready: Callable[[], Awaitable[object]] | None = None,
        listener: str = "",
        tls: TlsMaterial | None = None,
        sasl: ListenerAuthenticator | None = None,
        sasl_max_receive_size: int = 524_288,
    ) -> None:
        self._host = host
        # Over TLS (an SSL listener): each connection's handshake first, then its requests.
        self._ssl_context = tls.server_context() if tls is not None else None
        self._listener = listener
        # A SASL listener: each connection authenticates first (node.kafka_sasl).
        self._sasl = sasl
        self._sasl_max_receive_size = sasl_max_receive_size
        self._port = port
        self._apis = apis
        self._max_request_bytes = max_request_bytes
        self._idle_timeout_s = idle_timeout_ms / 1000
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task[None]] = set()
        # Awaited before a connection's first request is read (the broker: until the
        # controller has told it about the cluster, bounded).
        self._ready = ready

    @property
    def address(self) -> str:
        if self._server is None or not self._server.sockets:
            raise RuntimeError("the Kafka listener is not serving")
        host, port = self._server.sockets[0].getsockname()[:2]
        return f"{host}:{port}"

    async def start(self) -> None:
        try:
            self._server = await asyncio.start_server(self._serve, self._host, self._port)
        except OSError as e:
            # Kafka's SocketServer wording, naming the address.
            raise OSError(
                f"Socket server failed to bind to {self._host}:{self._port}: {e.strerror or e}."
            ) from e

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            for task in list(self._connections):
                task.cancel()
            for task in list(self._connections):
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
            await self._server.wait_closed()
            self._server = None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        peer = writer.get_extra_info("peername")
        where = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        host = f"/{peer[0]}" if isinstance(peer, tuple) else ""
        # Every request of this connection is handled in this task: its caller is set once
        # (anonymous until the listener authenticates the connection; common.security).
        caller = Caller(host=peer[0] if isinstance(peer, tuple) else "", listener=self._listener)
        CALLER.set(caller)
        try:
            if self._ssl_context is not None:
                principal = await server_handshake(
                    writer, self._ssl_context, where=where, what="kafka listener", log=logger
                )
                if principal is None:
                    return
                caller = Caller(principal, caller.host, caller.listener)
                CALLER.set(caller)
            if self._sasl is not None:
                principal = await SaslConnection(
                    reader,
                    writer,
                    self._apis,
                    self._sasl,
                    max_receive_size=self._sasl_max_receive_size,
                    where=where,
                    host=host,
                ).authenticate()
                if principal is None:
                    return
                CALLER.set(Caller(principal, caller.host, caller.listener))
            await self._connection(reader, writer, where, host)
        except OSError as e:
            # The peer went away, or broke the TLS session (ssl.SSLError: a bad record).
            logger.info("kafka listener: %s went away: %s", where, e)
        finally:
            self._connections.discard(task)
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _connection(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, where: str, host: str
    ) -> None:
        apis = self._apis
        if self._ready is not None:
            await self._ready()
        while True:
            try:
                # asyncio.timeout, not wait_for: no task is made for each request.
                async with asyncio.timeout(self._idle_timeout_s):
                    prefix = await reader.readexactly(4)
            except TimeoutError:
                logger.info(
                    "kafka listener: closing %s, idle for connections.max.idle.ms (%d ms)",
                    where,
                    int(self._idle_timeout_s * 1000),
                )
                return
            except asyncio.IncompleteReadError as e:
                if e.partial:
                    logger.info("kafka listener: %s closed inside a size prefix", where)
                return
            (size,) = _SIZE.unpack(prefix)
            if size < 0 or size > self._max_request_bytes:
                logger.warning(
                    "kafka listener: closing %s: a request of %d bytes is over "
                    "socket.request.max.bytes (%d) (InvalidReceiveException)",
                    where,
                    size,
                    self._max_request_bytes,
                )
                return
            try:
                frame = await reader.readexactly(size)
            except asyncio.IncompleteReadError as e:
                logger.info(
                    "kafka listener: %s closed inside a request (%d of %d bytes sent)",
                    where,
                    len(e.partial),
                    size,
                )
                return
            try:
                request = decode_request(frame, apis.versions, host)
            except UnsupportedVersionError as e:
                if e.api_key != API_VERSIONS_KEY:
                    logger.warning(
                        "kafka listener: closing %s (client %r): %s (UNSUPPORTED_VERSION)",
                        where,
                        e.client_id,
                        e,
                    )
                    return
                writer.write(encode_response(e, apis.unsupported_api_versions(e)))
                await writer.drain()
                continue
            except InvalidRequestFrameError as e:
                logger.warning(
                    "kafka listener: closing %s: an invalid request (INVALID_REQUEST): %s",
                    where,
                    e,
                )
                return
            try:
                body = await apis.handle(request)
            except CloseConnectionError as e:
                logger.info("kafka listener: closing %s: %s", where, e)
                return
            except Exception:
                logger.exception(
                    "kafka listener: closing %s: %s v%d (correlation id %d) failed",
                    where,
                    request.api_name,
                    request.api_version,
                    request.correlation_id,
                )
                return
            if body is not None:
                writer.write(encode_response(request, body))
                await writer.drain()
