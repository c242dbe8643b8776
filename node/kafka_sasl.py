"""SASL on the Kafka-protocol listener, as Kafka's ``SaslServerAuthenticator``: a connection of
a SASL_PLAINTEXT or SASL_SSL listener (after its TLS handshake) authenticates before any other
request is served.

1. The client may ask ApiVersions, then sends SaslHandshake naming a mechanism. One not
   enabled on the listener is answered UNSUPPORTED_SASL_MECHANISM with the enabled ones, and
   the connection is closed.
2. After SaslHandshake v1 the mechanism's tokens travel in SaslAuthenticate requests (what
   librdkafka, kafka-python and Java clients send); after v0, as bare size-prefixed tokens
   (Kafka's older framing; a refusal can only close the connection then).
3. A failed authentication is answered SASL_AUTHENTICATION_FAILED with a message, logged as
   ``Failed authentication with /IP (...)`` and the connection closed. Success sets the
   connection's principal ``User:<name>`` on the seam (``common.security.CALLER``).
4. Any other request before authentication closes the connection (Kafka's
   ILLEGAL_SASL_STATE: "Unexpected Kafka request of type … during SASL handshake").

Bounded: the whole exchange within :data:`SASL_AUTHENTICATION_TIMEOUT_S`, and each message at
most ``sasl.server.max.receive.size`` bytes. After authentication, SaslHandshake and
SaslAuthenticate are answered ILLEGAL_SASL_STATE by ``node.kafka_apis.sasl_table`` (Kafka's
``KafkaApis``; re-authentication, KIP-368, is not offered); on a listener without SASL too.
"""

from __future__ import annotations

import asyncio
import logging
import struct
from typing import TYPE_CHECKING, Any, Final

from kafkasim.common.errors import error_for_name
from kafkasim.common.sasl import SaslAuthenticationError
from kafkasim.common.scram import ScramError
from kafkasim.node.kafka_apis import SASL_AUTHENTICATE, SASL_HANDSHAKE
from kafkasim.node.kafka_codec import (
    API_VERSIONS_KEY,
    InvalidRequestFrameError,
    KafkaRequest,
    UnsupportedVersionError,
    build,
    decode_request,
    encode_response,
    response_schema,
)
from kafkasim.node.sasl_auth import ListenerAuthenticator, SaslServer

if TYPE_CHECKING:
    from kafkasim.node.kafka_apis import KafkaProtocolApis

logger = logging.getLogger(__name__)

SASL_AUTHENTICATION_TIMEOUT_S: Final = 10.0
UNSUPPORTED_SASL_MECHANISM = error_for_name("UNSUPPORTED_SASL_MECHANISM").code
SASL_AUTHENTICATION_FAILED = error_for_name("SASL_AUTHENTICATION_FAILED").code
_SIZE = struct.Struct(">i")


class _RefusedError(Exception):
    """The exchange failed: logged by the caller, the connection closed."""


class SaslConnection:
    """The authentication of one connection; :meth:`authenticate` returns its principal, or
    None when it failed (logged; the caller closes the connection)."""

    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        apis: KafkaProtocolApis,
        authenticator: ListenerAuthenticator,
        *,
        max_receive_size: int,
        where: str,
        host: str,
    ) -> None:
        self._reader = reader
        self._writer = writer
        self._apis = apis
        self._authenticator = authenticator
        self._max = max_receive_size
        self._where = where
        self._host = host
        self._mechanism = ""

    async def authenticate(self) -> str | None:
        try:
            async with asyncio.timeout(SASL_AUTHENTICATION_TIMEOUT_S):
                username = await self._exchange()
        except _RefusedError as e:
            logger.info("kafka listener: Failed authentication with %s (%s)", self._host, e)
            return None
        except TimeoutError:
            logger.info(
                "kafka listener: Failed authentication with %s (SASL authentication not "
                "finished within %.0f s)",
                self._host,
                SASL_AUTHENTICATION_TIMEOUT_S,
            )
            return None
        except asyncio.IncompleteReadError:
            logger.info("kafka listener: %s closed during SASL authentication", self._where)
            return None
        logger.debug("kafka listener: %s authenticated as User:%s", self._where, username)
        return f"User:{username}"

    async def _read(self) -> bytes:
        (size,) = _SIZE.unpack(await self._reader.readexactly(4))
        if size < 0 or size > self._max:
            raise _RefusedError(
                f"a message of {size} bytes during SASL authentication is over "
                f"sasl.server.max.receive.size ({self._max}) (InvalidReceiveException)"
            )
        return await self._reader.readexactly(size)

    async def _answer(self, request: KafkaRequest | UnsupportedVersionError, body: Any) -> None:
        self._writer.write(encode_response(request, body))
        await self._writer.drain()

    async def _request(self, stage: str) -> KafkaRequest:
        """The next request; ApiVersions answered on the way (before the handshake only)."""
        while True:
            frame = await self._read()
            try:
                request = decode_request(frame, self._apis.versions, self._host)
            except UnsupportedVersionError as e:
                if e.api_key != API_VERSIONS_KEY or stage != "handshake":
                    raise _RefusedError(f"{e} during SASL {stage} (UNSUPPORTED_VERSION)") from None
                await self._answer(e, self._apis.unsupported_api_versions(e))
                continue
            except InvalidRequestFrameError as e:
                raise _RefusedError(f"an invalid request during SASL {stage}: {e}") from None
            if request.api_key == API_VERSIONS_KEY and stage == "handshake":
                await self._answer(request, await self._apis.handle(request))
                continue
            return request

    async def _exchange(self) -> str:
        request = await self._request("handshake")
        if request.api_key != SASL_HANDSHAKE:
            raise _RefusedError(
                f"Unexpected Kafka request of type {request.api_name} during SASL handshake "
                "(ILLEGAL_SASL_STATE)"
            )
        mechanism = str(request.body.mechanism)
        enabled = list(self._authenticator.mechanisms)
        if mechanism not in enabled:
            await self._answer(
                request,
                build(
                    response_schema(request),
                    error_code=UNSUPPORTED_SASL_MECHANISM,
                    mechanisms=enabled,
                ),
            )
            raise _RefusedError(
                f"Unsupported SASL mechanism {mechanism} (UNSUPPORTED_SASL_MECHANISM; "
                f"enabled: {', '.join(enabled)})"
            )
        self._mechanism = mechanism
        await self._answer(
            request, build(response_schema(request), error_code=0, mechanisms=enabled)
        )
        server = self._authenticator.server(mechanism)
        if request.api_version == 0:
            return await self._raw_tokens(server)
        return await self._authenticate_requests(server)

    def _evaluate(self, server: SaslServer, token: bytes) -> tuple[bytes, str]:
        """The server's answer and, for the client, "" or why it was refused."""
        try:
            return server.evaluate(token), ""
        except SaslAuthenticationError as e:
            return b"", str(e)
        except ScramError as e:
            logger.info("kafka listener: %s: SCRAM: %s", self._where, e)
            return b"", (
                "Authentication failed during authentication due to invalid credentials with "
                f"SASL mechanism {self._mechanism}"
            )

    async def _authenticate_requests(self, server: SaslServer) -> str:
        while True:
            request = await self._request("authentication")
            if request.api_key != SASL_AUTHENTICATE:
                raise _RefusedError(
                    f"Unexpected Kafka request of type {request.api_name} during SASL "
                    "authentication (ILLEGAL_SASL_STATE)"
                )
            answer, refused = self._evaluate(server, bytes(request.body.auth_bytes))
            await self._answer(
                request,
                build(
                    response_schema(request),
                    error_code=SASL_AUTHENTICATION_FAILED if refused else 0,
                    error_message=refused or None,
                    auth_bytes=answer,
                    session_lifetime=0,
                ),
            )
            if refused:
                raise _RefusedError(f"{refused} (SASL_AUTHENTICATION_FAILED)")
            if server.username is not None:
                return server.username

    async def _raw_tokens(self, server: SaslServer) -> str:
        while True:
            answer, refused = self._evaluate(server, await self._read())
            if refused:
                raise _RefusedError(f"{refused} (SASL_AUTHENTICATION_FAILED)")
            self._writer.write(_SIZE.pack(len(answer)) + answer)
            await self._writer.drain()
            if server.username is not None:
                return server.username
