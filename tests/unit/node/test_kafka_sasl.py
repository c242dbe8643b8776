"""SASL on the Kafka-protocol listener (node.kafka_sasl, in process): PLAIN and SCRAM through
SaslHandshake v1 + SaslAuthenticate and through v0's bare tokens; the principal the requests
see afterwards; refusals (wrong password, unknown mechanism, a request before the handshake,
a message over sasl.server.max.receive.size, a client too slow) close the connection."""

from __future__ import annotations

import asyncio
import logging
import struct
from collections.abc import Awaitable, Callable
from typing import Any, cast

import pytest

from kafkasim.common.sasl import jaas_config, parse_jaas_config, plain_message
from kafkasim.common.scram import MECHANISMS, ScramClient, credential_from_password
from kafkasim.common.security import current_caller
from kafkasim.node import kafka_sasl
from kafkasim.node.kafka_apis import (
    SASL_AUTHENTICATE,
    SASL_HANDSHAKE,
    KafkaProtocolApis,
    sasl_table,
)
from kafkasim.node.kafka_server import KafkaListener
from kafkasim.node.sasl_auth import ListenerAuthenticator
from kafkasim.node.sasl_config import ListenerSasl
from kafkasim.node.scram_cache import ScramCredentialCache
from tests.kafka_wire import API_VERSIONS, METADATA, read_response, request_frame, sized

SCRAM_256 = MECHANISMS["SCRAM-SHA-256"]
_SIZE = struct.Struct(">i")
Conn = tuple[asyncio.StreamReader, asyncio.StreamWriter]


def authenticator() -> ListenerAuthenticator:
    plain = parse_jaas_config(jaas_config("PLAIN", "admin", "a", admin="a", alice="alice-pw"))
    cache = ScramCredentialCache()
    cache.update("bob", {"SCRAM-SHA-256": credential_from_password(SCRAM_256, "bob-pw", 4096)})
    return ListenerAuthenticator(ListenerSasl(("PLAIN", "SCRAM-SHA-256"), {"PLAIN": plain}), cache)


def with_listener(client: Callable[[Conn], Awaitable[Any]], max_receive: int = 4096) -> Any:
    """Run ``client`` against a SASL listener; its result and the principals of the requests
    served after authentication (ApiVersions)."""
    from tests.unit.node.test_kafka_apis import FakeBroker

    async def main() -> Any:
        listener = KafkaListener(
            "127.0.0.1",
            0,
            Recording(cast(Any, FakeBroker()), "SASL", (sasl_table(),)),
            max_request_bytes=1 << 20,
            idle_timeout_ms=10_000,
            listener="SASL",
            sasl=authenticator(),
            sasl_max_receive_size=max_receive,
        )
        await listener.start()
        try:
            host, port = listener.address.rsplit(":", 1)
            reader, writer = await asyncio.open_connection(host, int(port))
            try:
                return await asyncio.wait_for(client((reader, writer)), 10)
            finally:
                writer.close()
        finally:
            await listener.stop()

    return asyncio.run(main())


class Recording(KafkaProtocolApis):
    async def handle(self, request: Any) -> Any:
        if request.api_key == API_VERSIONS and request.correlation_id == 99:
            seen.append(current_caller().principal)
        return await super().handle(request)


seen: list[str] = []


async def call(conn: Conn, api_key: int, version: int, cid: int = 1, **values: Any) -> Any:
    reader, writer = conn
    writer.write(sized(request_frame(api_key, version, cid, "c", **values)))
    await writer.drain()
    (size,) = _SIZE.unpack(await reader.readexactly(4))
    return read_response(await reader.readexactly(size), api_key, version)[1]


async def closed(conn: Conn) -> bool:
    return await conn[0].read(1) == b""


async def whoami(conn: Conn) -> str:
    seen.clear()
    await call(conn, API_VERSIONS, 3, 99)
    return seen[-1]


def test_plain_over_sasl_authenticate_sets_the_principal() -> None:
    async def client(conn: Conn) -> tuple[Any, ...]:
        versions = await call(conn, API_VERSIONS, 3)
        handshake = await call(conn, SASL_HANDSHAKE, 1, mechanism="PLAIN")
        auth = await call(conn, SASL_AUTHENTICATE, 2, auth_bytes=plain_message("alice", "alice-pw"))
        again = await call(conn, SASL_HANDSHAKE, 1, mechanism="PLAIN")
        return versions, handshake, auth, await whoami(conn), again

    versions, handshake, auth, principal, again = with_listener(client)
    keys = {k.api_key: (k.min_version, k.max_version) for k in versions.api_keys}
    assert keys[SASL_HANDSHAKE] == (0, 1) and keys[SASL_AUTHENTICATE] == (0, 2)
    assert handshake.error_code == 0 and list(handshake.mechanisms) == ["PLAIN", "SCRAM-SHA-256"]
    assert auth.error_code == 0 and auth.error_message is None
    assert principal == "User:alice"
    assert again.error_code == 34  # ILLEGAL_SASL_STATE: no re-authentication


def test_scram_over_sasl_authenticate() -> None:
    async def client(conn: Conn) -> str:
        await call(conn, SASL_HANDSHAKE, 1, mechanism="SCRAM-SHA-256")
        scram = ScramClient(SCRAM_256, "bob", "bob-pw")
        first = await call(conn, SASL_AUTHENTICATE, 1, auth_bytes=scram.first())
        final = await call(conn, SASL_AUTHENTICATE, 1, auth_bytes=scram.final(first.auth_bytes))
        assert final.error_code == 0
        scram.check(final.auth_bytes)
        return await whoami(conn)

    assert with_listener(client) == "User:bob"


async def raw(conn: Conn, token: bytes) -> bytes:
    reader, writer = conn
    writer.write(sized(token))
    await writer.drain()
    (size,) = _SIZE.unpack(await reader.readexactly(4))
    return await reader.readexactly(size)


def test_handshake_v0_then_bare_tokens() -> None:
    async def plain(conn: Conn) -> str:
        assert (await call(conn, SASL_HANDSHAKE, 0, mechanism="PLAIN")).error_code == 0
        assert await raw(conn, plain_message("alice", "alice-pw")) == b""
        return await whoami(conn)

    async def scram(conn: Conn) -> str:
        await call(conn, SASL_HANDSHAKE, 0, mechanism="SCRAM-SHA-256")
        client = ScramClient(SCRAM_256, "bob", "bob-pw")
        client.check(await raw(conn, client.final(await raw(conn, client.first()))))
        return await whoami(conn)

    async def wrong(conn: Conn) -> bool:
        await call(conn, SASL_HANDSHAKE, 0, mechanism="PLAIN")
        conn[1].write(sized(plain_message("alice", "nope")))
        return await closed(conn)

    assert with_listener(plain) == "User:alice"
    assert with_listener(scram) == "User:bob"
    assert with_listener(wrong)


def test_wrong_credentials_are_answered_then_closed(caplog: pytest.LogCaptureFixture) -> None:
    async def plain(conn: Conn) -> tuple[Any, bool]:
        await call(conn, SASL_HANDSHAKE, 1, mechanism="PLAIN")
        auth = await call(conn, SASL_AUTHENTICATE, 2, auth_bytes=plain_message("alice", "x"))
        return auth, await closed(conn)

    async def scram(conn: Conn) -> tuple[Any, bool]:
        await call(conn, SASL_HANDSHAKE, 1, mechanism="SCRAM-SHA-256")
        client = ScramClient(SCRAM_256, "bob", "not-bobs")
        first = await call(conn, SASL_AUTHENTICATE, 2, auth_bytes=client.first())
        auth = await call(conn, SASL_AUTHENTICATE, 2, auth_bytes=client.final(first.auth_bytes))
        return auth, await closed(conn)

    caplog.set_level(logging.INFO, logger="kafkasim.node.kafka_sasl")
    auth, was_closed = with_listener(plain)
    assert (auth.error_code, auth.error_message) == (
        58,  # SASL_AUTHENTICATION_FAILED
        "Authentication failed: Invalid username or password",
    )
    assert was_closed
    auth, was_closed = with_listener(scram)
    assert auth.error_code == 58 and was_closed
    assert auth.error_message == (
        "Authentication failed during authentication due to invalid credentials with SASL "
        "mechanism SCRAM-SHA-256"
    )
    assert "Failed authentication with /127.0.0.1 (Authentication failed" in caplog.text


def test_refusals_close_the_connection(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    caplog.set_level(logging.INFO, logger="kafkasim.node.kafka_sasl")

    async def unsupported(conn: Conn) -> tuple[Any, bool]:
        answer = await call(conn, SASL_HANDSHAKE, 1, mechanism="GSSAPI")
        return answer, await closed(conn)

    answer, was_closed = with_listener(unsupported)
    assert answer.error_code == 33 and list(answer.mechanisms) == ["PLAIN", "SCRAM-SHA-256"]
    assert was_closed

    async def metadata_first(conn: Conn) -> bool:
        conn[1].write(sized(request_frame(METADATA, 9, 1, "c", topics=None)))
        return await closed(conn)

    assert with_listener(metadata_first)
    assert "Unexpected Kafka request of type Metadata during SASL handshake" in caplog.text
    assert "ILLEGAL_SASL_STATE" in caplog.text

    async def metadata_mid_exchange(conn: Conn) -> bool:
        await call(conn, SASL_HANDSHAKE, 1, mechanism="PLAIN")
        conn[1].write(sized(request_frame(METADATA, 9, 1, "c", topics=None)))
        return await closed(conn)

    assert with_listener(metadata_mid_exchange)
    assert "during SASL authentication (ILLEGAL_SASL_STATE)" in caplog.text

    async def too_big(conn: Conn) -> bool:
        await call(conn, SASL_HANDSHAKE, 1, mechanism="PLAIN")
        conn[1].write(_SIZE.pack(5000) + b"\0" * 100)
        return await closed(conn)

    assert with_listener(too_big, max_receive=4096)
    assert "over sasl.server.max.receive.size (4096)" in caplog.text

    monkeypatch.setattr(kafka_sasl, "SASL_AUTHENTICATION_TIMEOUT_S", 0.2)

    async def silent(conn: Conn) -> bool:
        await call(conn, SASL_HANDSHAKE, 1, mechanism="PLAIN")
        return await closed(conn)

    assert with_listener(silent)
    assert "SASL authentication not finished within" in caplog.text


def test_plain_users_come_from_the_listeners_jaas_entry() -> None:
    auth = authenticator()
    assert auth.password_matches("PLAIN", "alice", "alice-pw")
    assert not auth.password_matches("PLAIN", "alice", "alice-p")
    assert not auth.password_matches("PLAIN", "nobody", "")
    assert auth.password_matches("SCRAM-SHA-256", "bob", "bob-pw")
    assert auth.password_matches("SCRAM-SHA-256", "bob", "bob-pw")  # remembered
    assert not auth.password_matches("SCRAM-SHA-256", "bob", "alice-pw")
    assert not auth.password_matches("SCRAM-SHA-512", "bob", "bob-pw")  # not enabled
