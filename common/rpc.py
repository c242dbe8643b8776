"""The Rpc port: how brokers, the controller and clients call each other.

Messages are the protobuf classes generated from ``proto/kafkasim.proto``. A method is named
as gRPC names it: ``/kafkasim.<Service>/<Method>`` (``METHOD_PRODUCE`` …, see ``proto``'s
method table). A :class:`ClientTransport` calls; a :class:`Transport` (a broker's) also serves.
Three implementations, and nothing else imports a transport:

* grpc.aio over TCP (the only modules that import ``grpc``): ``common/rpc_grpc_client.py``
  calls (clients, tools, Spark, cluster backends), ``node/rpc_grpc.py`` serves;
* framed TCP for bidirectional streams only (``node/rpc_framed.py``): the replication
  listener's, over which followers fetch when ``replica.fetch.listener.name`` names one;
* ``sim/network.py`` — in-memory, on the virtual-time loop, with seeded delays, loss and
  partitions (the simulation's SimNetwork).

Failures of the transport itself (peer unreachable, deadline passed, stream broken) raise
:class:`RpcError`; a handler's Kafka error travels inside the response as an error code.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from enum import Enum
from typing import TYPE_CHECKING, Any, Protocol

from google.protobuf.message import Message

from kafkasim.common.errors import KafkasimError
from kafkasim.proto import EncodedMessage

if TYPE_CHECKING:
    from kafkasim.common.security import PasswordVerifier
    from kafkasim.common.tls import TlsMaterial


class RpcStatus(Enum):
    """Transport outcomes, named as gRPC names them."""

    UNAVAILABLE = "UNAVAILABLE"  # peer down, refused, partitioned away
    DEADLINE_EXCEEDED = "DEADLINE_EXCEEDED"  # no answer within the timeout
    CANCELLED = "CANCELLED"  # the caller or the stream was closed
    INTERNAL = "INTERNAL"  # the handler crashed (a bug, logged on the server)
    UNIMPLEMENTED = "UNIMPLEMENTED"  # no such method on that server
    UNAUTHENTICATED = "UNAUTHENTICATED"  # the listener refused the call's SASL credentials


class RpcError(KafkasimError):
    """A call did not complete at the transport level. ``retriable`` except for bugs."""

    def __init__(self, status: RpcStatus, message: str = "") -> None:
        super().__init__(f"{status.value}: {message}" if message else status.value)
        self.status = status
        self.message = message

    @property
    def retriable(self) -> bool:
        return self.status in (
            RpcStatus.UNAVAILABLE,
            RpcStatus.DEADLINE_EXCEEDED,
            RpcStatus.CANCELLED,
        )


# A handler answers a message, or the message already in wire form (``proto.EncodedMessage``).
UnaryHandler = Callable[[Message], Awaitable[Message | EncodedMessage]]
StreamHandler = Callable[[AsyncIterator[Message]], AsyncIterator[Message | EncodedMessage]]
# Wire bytes of an answer -> what the caller is handed, instead of the contract's protobuf
# class (a transport's ``response_decoders``: the follower's fetch answers, records uncopied).
ResponseDecoder = Callable[[bytes | bytearray], Any]


class BidiStream(Protocol):
    """One open bidirectional stream (the follower's fetch stream to a leader broker)."""

    async def send(self, message: Message) -> None:
        """Queue a message to the server; RpcError once the stream is broken."""
        ...

    async def recv(self, timeout_s: float | None = None) -> Message:
        """The next message from the server; RpcError when the stream ends or breaks."""
        ...

    async def close(self) -> None:
        """End the stream (idempotent)."""
        ...


class RpcServer(Protocol):
    @property
    def address(self) -> str:
        """``host:port`` actually bound (port 0 asks for a free one)."""
        ...

    async def start(self) -> None: ...

    async def stop(self, grace_s: float = 0.0) -> None:
        """Stop accepting calls; callers and open streams see UNAVAILABLE (as gRPC reports)."""
        ...


class ClientTransport(Protocol):
    """The client side of network access: what clients and tools need to call brokers."""

    async def call(
        self, target: str, method: str, request: Message, *, timeout_s: float
    ) -> Message:
        """One unary call to ``target`` (``host:port``)."""
        ...

    def open_stream(self, target: str, method: str) -> BidiStream:
        """Open a bidirectional stream to ``target``; failures surface on send/recv."""
        ...

    async def close(self) -> None:
        """Close every channel this transport opened."""
        ...


class Transport(ClientTransport, Protocol):
    """Client and server side of one node's network access (a broker's)."""

    def server(
        self,
        address: str,
        unary: Mapping[str, UnaryHandler],
        streams: Mapping[str, StreamHandler],
        *,
        tls: TlsMaterial | None = None,
        listener: str = "",
        sasl: PasswordVerifier | None = None,
    ) -> RpcServer:
        """A server for these handlers, keyed by full method name; not started yet. With
        ``tls`` it speaks TLS (a transport without TLS, the simulation's, ignores it);
        ``listener`` is the listener name its callers are told they came in on; ``sasl``:
        the users of a SASL_SSL listener, whose callers must carry credentials (the
        simulation's transport has no credentials and ignores it)."""
        ...
