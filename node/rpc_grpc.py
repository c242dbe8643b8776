"""The server side of the Rpc port over gRPC (grpc.aio): a broker's server and transport.

No generated ``_grpc`` stubs: servers register generic method handlers built from the method
table ``proto.METHODS``. The client side (channels, calls, streams, :class:`GrpcOptions`, the
status mapping) is ``common/rpc_grpc_client.py``; with it, the only modules that import
``grpc``. :class:`GrpcBrokerTransport` is the client transport plus ``server()``: what a broker
process runs on (it serves, and its fetchers and controller call other brokers).

What a caller sees of a server's trouble:

    the handler raised (logged with traceback here)          INTERNAL
    a request body that is not a message of the method       INVALID_ARGUMENT, no traceback
    (not protobuf, or not the method's request type; or      (``RpcStatus.INTERNAL`` to our
    refused by the method's request decoder)                 clients, like any other status)

A handler is handed the request protobuf parsed, or, for a method given a request decoder
(``GrpcBrokerTransport(request_decoders=...)``), what that decoder made of the bytes.

Not thread-safe: one event loop owns a server and its handlers.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from typing import Any

import grpc
from google.protobuf.message import DecodeError, Message

from kafkasim.common.rpc import ResponseDecoder, StreamHandler, UnaryHandler
from kafkasim.common.rpc_grpc_client import GrpcOptions, GrpcTransport, serialize
from kafkasim.common.sasl import SaslCredentials
from kafkasim.common.security import (
    ANONYMOUS,
    CALLER,
    SASL_MECHANISM_METADATA,
    SASL_PASSWORD_METADATA,
    SASL_USERNAME_METADATA,
    Caller,
    PasswordVerifier,
)
from kafkasim.common.tls import TlsMaterial, principal_of_certificate
from kafkasim.proto import METHODS, EncodedMessage, MethodSpec, check_servable

__all__ = ["GrpcBrokerTransport", "GrpcServer"]

_log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class _Undecodable:
    """What the deserializer hands on for bytes that are not a message of the method: the
    behaviour answers INVALID_ARGUMENT (gRPC itself would answer UNKNOWN and log a traceback)."""

    method: str
    message_type: str
    reason: str

    def describe(self) -> str:
        return (
            f"{self.method}: the request body is not a valid {self.message_type} message "
            f"({self.reason})"
        )


class _UndecodableRequestError(Exception):
    """Raised into a stream handler by its requests iterator for an undecodable message."""


# Wire bytes of a request -> what the handler is handed, instead of the contract's protobuf
# message (GrpcBrokerTransport's request_decoders); a ValueError for bytes it cannot read.
RequestDecoder = Callable[[bytes], Any]


def _deserializer(spec: MethodSpec, decode: RequestDecoder | None = None) -> Callable[[bytes], Any]:
    parse = spec.request_cls.FromString if decode is None else decode

    def deserialize(data: bytes) -> Any:
        try:
            return parse(data)
        except (DecodeError, ValueError) as exc:
            return _Undecodable(
                spec.name, spec.request_cls.DESCRIPTOR.full_name, str(exc) or "undecodable"
            )

    return deserialize


def peer_host(peer: str) -> str:
    """The client's IP address from gRPC's peer string (``ipv4:127.0.0.1:5000``,
    ``ipv6:[::1]:5000``); "" for any other kind of peer."""
    kind, _, rest = peer.partition(":")
    if kind == "ipv4":
        return rest.rpartition(":")[0]
    if kind == "ipv6":
        return rest.rpartition(":")[0].strip("[]")
    return ""


def peer_principal(context: Any) -> str:
    """The principal of a call's client: ``User:<subject DN>`` of the certificate it presented
    over TLS (Kafka's default principal builder), else ``User:ANONYMOUS``."""
    certificates = context.auth_context().get("x509_pem_cert")
    if not certificates:
        return ANONYMOUS
    return principal_of_certificate(bytes(certificates[0]))


class _Identify:
    """Sets the caller of each call, for the task that runs its handler (common.security):
    the client's address, this server's listener and, over TLS, the client certificate's
    principal — or, on a SASL_SSL listener (``sasl``), the user of the call's SASL
    credentials (metadata: mechanism, username, password), which it must carry.

    A password travels in metadata only over TLS: a SASL listener must be SASL_SSL (the
    broker config refuses SASL_PLAINTEXT for gRPC), and credentials sent to a listener
    without SASL are refused too (over plaintext they have already been exposed: the caller
    is told so, never served as if nothing happened)."""

    def __init__(self, listener: str, tls: bool, sasl: PasswordVerifier | None = None) -> None:
        self.listener = listener
        self.tls = tls
        self.sasl = sasl

    def __call__(self, context: Any) -> str | None:
        """Set the caller; the reason to refuse the call (UNAUTHENTICATED), or None."""
        host = peer_host(context.peer())
        metadata = {k: v for k, v in (context.invocation_metadata() or ()) if k in _SASL_KEYS}
        if self.sasl is None:
            CALLER.set(
                Caller(peer_principal(context) if self.tls else ANONYMOUS, host, self.listener)
            )
            if metadata:
                return f"listener {self.listener} does not take SASL credentials" + (
                    "" if self.tls else " (and they were sent over a plaintext connection)"
                )
            return None
        CALLER.set(Caller(ANONYMOUS, host, self.listener))
        mechanism = str(metadata.get(SASL_MECHANISM_METADATA, ""))
        username = str(metadata.get(SASL_USERNAME_METADATA, ""))
        password = str(metadata.get(SASL_PASSWORD_METADATA, ""))
        if not mechanism or not username:
            return f"listener {self.listener} is SASL_SSL: the call carries no SASL credentials"
        if mechanism not in self.sasl.mechanisms:
            return (
                f"Unsupported SASL mechanism {mechanism} (UNSUPPORTED_SASL_MECHANISM; enabled: "
                f"{', '.join(self.sasl.mechanisms)})"
            )
        if not self.sasl.password_matches(mechanism, username, password):
            _log.info(
                "grpc listener %s: Failed authentication with /%s (Authentication failed: "
                "Invalid username or password, SASL mechanism %s)",
                self.listener,
                host,
                mechanism,
            )
            return (
                "Authentication failed: Invalid username or password (SASL_AUTHENTICATION_FAILED)"
            )
        CALLER.set(Caller(f"User:{username}", host, self.listener))
        return None


_SASL_KEYS = frozenset((SASL_MECHANISM_METADATA, SASL_USERNAME_METADATA, SASL_PASSWORD_METADATA))


def _unary_behaviour(spec: MethodSpec, handler: UnaryHandler, identify: _Identify) -> Any:
    async def behaviour(request: Any, context: Any) -> Message | EncodedMessage:
        refused = identify(context)
        if refused is not None:
            await context.abort(grpc.StatusCode.UNAUTHENTICATED, refused)
        if isinstance(request, _Undecodable):
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, request.describe())
        try:
            return spec.check_response(await handler(request))
        except Exception as exc:
            _log.exception("handler for %s raised; the caller gets INTERNAL", spec.name)
            await context.abort(grpc.StatusCode.INTERNAL, f"{type(exc).__name__}: {exc}")
            raise  # abort() always raises; this keeps the function total

    return behaviour


class _Requests:
    """A stream handler's requests. ``BidiStream`` has no half-close, so their end means the
    client closed the stream or went away: the handler is cancelled then, as gRPC itself does
    when the handler is busy elsewhere, instead of seeing a clean end of its requests."""

    def __init__(self, requests: AsyncIterator[Any]) -> None:
        self._requests = requests
        self.undecodable: _Undecodable | None = None

    def __aiter__(self) -> _Requests:
        return self

    async def __anext__(self) -> Any:
        try:
            request = await self._requests.__anext__()
        except StopAsyncIteration:
            task = asyncio.current_task()
            if task is not None:
                task.cancel()
                await asyncio.sleep(0)  # raises CancelledError here
            raise
        if isinstance(request, _Undecodable):
            self.undecodable = request
            raise _UndecodableRequestError(request.describe())
        return request


def _stream_behaviour(spec: MethodSpec, handler: StreamHandler, identify: _Identify) -> Any:
    async def behaviour(
        requests: AsyncIterator[Any], context: Any
    ) -> AsyncIterator[Message | EncodedMessage]:
        refused = identify(context)
        if refused is not None:
            await context.abort(grpc.StatusCode.UNAUTHENTICATED, refused)
        wrapped = _Requests(requests)
        responses = handler(wrapped)
        try:
            async for response in responses:
                yield spec.check_response(response)
        except Exception as exc:
            if wrapped.undecodable is not None:  # however the handler passed it on
                await context.abort(
                    grpc.StatusCode.INVALID_ARGUMENT, wrapped.undecodable.describe()
                )
            _log.exception("stream handler for %s raised; the caller gets INTERNAL", spec.name)
            await context.abort(grpc.StatusCode.INTERNAL, f"{type(exc).__name__}: {exc}")
            raise
        finally:
            # Close the handler's generator now rather than whenever it is collected.
            aclose = getattr(responses, "aclose", None)
            if aclose is not None:
                await aclose()

    return behaviour


def _generic_handlers(
    unary: Mapping[str, UnaryHandler],
    streams: Mapping[str, StreamHandler],
    identify: _Identify,
    decoders: Mapping[str, RequestDecoder],
) -> list[Any]:
    by_service: dict[str, dict[str, Any]] = {}
    for method, unary_handler in unary.items():
        spec = METHODS[method]
        by_service.setdefault(spec.service, {})[spec.short_name] = (
            grpc.unary_unary_rpc_method_handler(
                _unary_behaviour(spec, unary_handler, identify),
                request_deserializer=_deserializer(spec, decoders.get(method)),
                response_serializer=serialize,
            )
        )
    for method, stream_handler in streams.items():
        spec = METHODS[method]
        by_service.setdefault(spec.service, {})[spec.short_name] = (
            grpc.stream_stream_rpc_method_handler(
                _stream_behaviour(spec, stream_handler, identify),
                request_deserializer=_deserializer(spec, decoders.get(method)),
                response_serializer=serialize,
            )
        )
    return [
        grpc.method_handlers_generic_handler(service, handlers)
        for service, handlers in by_service.items()
    ]


class GrpcServer:
    """One grpc.aio server for a fixed set of handlers; implements ``common.rpc.RpcServer``.

    Lifecycle: created unbound; ``start()`` binds (port 0 picks a free port, reported by
    ``address``) and serves; ``stop(grace_s)`` refuses new calls, lets running ones finish for
    up to ``grace_s`` and then cancels them — callers of cancelled calls and peers of open
    streams see UNAVAILABLE. A stopped server cannot be started again; make a new one.
    """

    def __init__(
        self,
        address: str,
        unary: Mapping[str, UnaryHandler],
        streams: Mapping[str, StreamHandler],
        options: GrpcOptions,
        *,
        tls: TlsMaterial | None = None,
        listener: str = "",
        sasl: PasswordVerifier | None = None,
        request_decoders: Mapping[str, RequestDecoder] | None = None,
    ) -> None:
        check_servable(unary, streams)
        self._requested_address = address
        self._address = address
        self._handlers = _generic_handlers(
            unary, streams, _Identify(listener, tls is not None, sasl), request_decoders or {}
        )
        self._options = options
        self._tls = tls
        self._server: Any = None
        self._stopped = False

    @property
    def address(self) -> str:
        """``host:port`` actually bound once started; the requested address before."""
        return self._address

    async def start(self) -> None:
        if self._stopped or self._server is not None:
            raise RuntimeError(f"server {self._address} was already started")
        server = grpc.aio.server(options=self._options.server_options())
        server.add_generic_rpc_handlers(self._handlers)
        try:
            if self._tls is None:
                port = server.add_insecure_port(self._requested_address)
            else:
                port = server.add_secure_port(
                    self._requested_address, server_credentials(self._tls)
                )
        except RuntimeError as exc:
            port = 0
            cause: Exception | None = exc
        else:
            cause = None
        if port == 0:
            await server.stop(None)
            reason = _bind_error(self._requested_address) or cause or "gRPC could not bind it"
            # Kafka's SocketServer wording, naming the address.
            raise OSError(f"Socket server failed to bind to {self._requested_address}: {reason}.")
        host = self._requested_address.rpartition(":")[0]
        self._address = f"{host}:{port}"
        self._server = server
        await server.start()

    async def stop(self, grace_s: float = 0.0) -> None:
        """Stop serving (idempotent); see the class doc for what peers see."""
        self._stopped = True
        server, self._server = self._server, None
        if server is not None:
            await server.stop(grace_s)


class GrpcBrokerTransport(GrpcTransport):
    """``common.rpc.Transport`` over grpc.aio: the client transport plus servers.

    ``request_decoders``: per full method name, what turns a request's wire bytes into what
    its handler is handed, instead of the contract's protobuf class (the broker reads
    ``Produce``/``ProduceStream`` requests with ``node.produce_wire.decode_produce_request``,
    which leaves the records uncopied); a decoder raises ``ValueError`` for bytes it cannot
    read (the caller gets INVALID_ARGUMENT, as for bytes protobuf cannot parse).
    """

    def __init__(
        self,
        options: GrpcOptions | None = None,
        *,
        tls: TlsMaterial | None = None,
        sasl: SaslCredentials | None = None,
        response_decoders: Mapping[str, ResponseDecoder] | None = None,
        request_decoders: Mapping[str, RequestDecoder] | None = None,
    ) -> None:
        super().__init__(options, tls=tls, sasl=sasl, response_decoders=response_decoders)
        self._request_decoders: Mapping[str, RequestDecoder] = dict(request_decoders or {})

    def server(
        self,
        address: str,
        unary: Mapping[str, UnaryHandler],
        streams: Mapping[str, StreamHandler],
        *,
        tls: TlsMaterial | None = None,
        listener: str = "",
        sasl: PasswordVerifier | None = None,
    ) -> GrpcServer:
        """A server for these handlers (``ValueError`` for a method not in the contract);
        over TLS with ``tls``; ``listener`` names it to the callers it serves; ``sasl``: the
        users of a SASL_SSL listener, whose calls must carry credentials."""
        return GrpcServer(
            address,
            unary,
            streams,
            self._options,
            tls=tls,
            listener=listener,
            sasl=sasl,
            request_decoders=self._request_decoders,
        )


def server_credentials(tls: TlsMaterial) -> Any:
    """gRPC's server credentials for ``tls``: its keystore, and with ``ssl.client.auth`` other
    than none the truststore that client certificates are checked against. gRPC's Python API
    either requires a client certificate or does not ask for one: ``requested`` asks for none
    here, so its callers are anonymous (on the Kafka-protocol listener it asks)."""
    assert tls.key_pem is not None and tls.chain_pem is not None
    required = tls.client_auth == "required"
    return grpc.ssl_server_credentials(
        [(tls.key_pem, tls.chain_pem)],
        root_certificates=tls.trusted_pem if required else None,
        require_client_auth=required,
    )


def _bind_error(address: str) -> str | None:
    """Why ``host:port`` cannot be bound (gRPC does not say): the OS's reason, found by
    trying to bind it once; None if that bind worked."""
    host, _, port = address.rpartition(":")
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.bind((host.strip("[]"), int(port)))
    except (OSError, ValueError) as e:
        return getattr(e, "strerror", None) or str(e)
    return None
