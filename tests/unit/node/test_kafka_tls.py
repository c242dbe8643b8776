"""The Kafka-protocol listener over TLS (node.kafka_server): the handshake comes first, then
the requests, whose caller carries the client certificate's principal (``requested``: the
certificate if the client has one, else anonymous); a plaintext client, an untrusted and an
expired certificate fail the handshake, logged as Kafka's "Failed authentication", and the
listener goes on serving."""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import logging
import os
import ssl
from pathlib import Path
from typing import Any, cast

import pytest

from kafkasim.cluster.certs import Issued, create_certs
from kafkasim.common.security import ANONYMOUS, Caller, current_caller
from kafkasim.common.tls import TlsMaterial, load_tls
from kafkasim.node.kafka_apis import KafkaProtocolApis
from kafkasim.node.kafka_server import KafkaListener
from tests.kafka_wire import API_VERSIONS, read_response, request_frame, sized


def material(
    ca: Path, keystore: Issued | None, client_auth: str = "none", *, server: bool = True
) -> TlsMaterial:
    props: dict[str, object] = {
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(ca),
        "ssl.client.auth": client_auth,
    }
    if keystore is not None:
        props |= {"ssl.keystore.type": "PEM", "ssl.keystore.location": str(keystore.keystore)}
    return load_tls(props, server=server)


def run(client_auth: str, clients: list[ssl.SSLContext | None]) -> tuple[list[Caller], list[str]]:
    """Connect each client in turn (None: plaintext) and ask ApiVersions; the callers the
    listener's handler saw and each client's outcome."""
    from tests.unit.node.test_kafka_apis import FakeBroker

    seen: list[Caller] = []

    class Recording(KafkaProtocolApis):
        async def handle(self, request: Any) -> Any:
            seen.append(current_caller())
            return await super().handle(request)

    async def main() -> list[str]:
        listener = KafkaListener(
            "127.0.0.1",
            0,
            Recording(cast(Any, FakeBroker()), "SSL"),
            max_request_bytes=1 << 20,
            idle_timeout_ms=10_000,
            listener="SSL",
            tls=SERVER[client_auth],
        )
        await listener.start()
        outcomes: list[str] = []
        try:
            host, port = listener.address.rsplit(":", 1)
            for context in clients:
                outcomes.append(await api_versions(host, int(port), context))
        finally:
            await listener.stop()
        return outcomes

    return seen, asyncio.run(main())


async def api_versions(host: str, port: int, context: ssl.SSLContext | None) -> str:
    """Connect (TLS with ``context``, else plaintext) and ask ApiVersions: "ok" or the error."""
    writer: asyncio.StreamWriter | None = None
    try:
        reader, writer = await asyncio.open_connection(
            host, port, ssl=context, server_hostname=context and host
        )
        writer.write(sized(request_frame(API_VERSIONS, 3, 7)))
        await writer.drain()
        size = int.from_bytes(await asyncio.wait_for(reader.readexactly(4), 5), "big")
        read_response(await reader.readexactly(size), API_VERSIONS, 3)
        return "ok"
    except (ssl.SSLError, ConnectionError, asyncio.IncompleteReadError) as e:
        return type(e).__name__
    finally:
        if writer is not None:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()


SERVER: dict[str, TlsMaterial] = {}


@pytest.fixture(scope="module")
def clients(tmp_path_factory: pytest.TempPathFactory) -> dict[str, ssl.SSLContext | None]:
    root = tmp_path_factory.mktemp("kafka-tls")
    ca, brokers, issued = create_certs(root / "ca", brokers=1, clients=("alice",))
    _, _, other = create_certs(root / "other", brokers=0, clients=("mallory",))
    past = datetime.datetime.now(datetime.UTC) - datetime.timedelta(days=2)
    expired = ca.issue("old", not_before=past, not_after=past + datetime.timedelta(days=1))
    for auth in ("required", "requested", "none"):
        SERVER[auth] = material(ca.certificate_path, brokers[1], auth)

    def client(keystore: Issued | None) -> ssl.SSLContext:
        return material(ca.certificate_path, keystore, server=False).client_context()

    return {
        "alice": client(issued["alice"]),
        "anonymous": client(None),
        "mallory": client(other["mallory"]),
        "expired": client(expired),
        "plaintext": None,
    }


def test_mutual_tls_sets_the_certificates_principal_and_refuses_the_rest(
    clients: dict[str, ssl.SSLContext | None], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "kafkasim.node.kafka_server")
    order = ["alice", "anonymous", "mallory", "expired", "plaintext", "alice"]
    seen, outcomes = run("required", [clients[name] for name in order])
    assert outcomes[0] == outcomes[-1] == "ok"
    assert "ok" not in outcomes[1:-1]
    alice = Caller("User:CN=alice,OU=kafkasim", "127.0.0.1", "SSL")
    assert seen == [alice, alice]
    failures = [r.getMessage() for r in caplog.records if "Failed authentication" in r.message]
    assert len(failures) == 4, failures
    assert any("certificate has expired" in f for f in failures), failures
    assert any("certificate signature failure" in f for f in failures), failures  # other CA
    assert any("PEER_DID_NOT_RETURN_A_CERTIFICATE" in f for f in failures), failures
    assert any("WRONG_VERSION_NUMBER" in f for f in failures), failures  # plaintext


def test_requested_client_auth_takes_a_certificate_when_there_is_one(
    clients: dict[str, ssl.SSLContext | None],
) -> None:
    seen, outcomes = run("requested", [clients["alice"], clients["anonymous"]])
    assert outcomes == ["ok", "ok"]
    assert [c.principal for c in seen] == ["User:CN=alice,OU=kafkasim", ANONYMOUS]
    seen, outcomes = run("none", [clients["alice"]])
    assert outcomes == ["ok"] and seen[0].principal == ANONYMOUS


def test_a_broken_tls_record_ends_only_that_connection_quietly(
    clients: dict[str, ssl.SSLContext | None], caplog: pytest.LogCaptureFixture
) -> None:
    """A peer that writes a forged TLS record into its session (ssl.SSLError on the listener:
    an OSError, not a ConnectionError) loses its connection with one INFO line, no error from
    asyncio, and the listener goes on serving."""
    forged = b"\x17\x03\x03\x00\x20" + bytes(32)  # application data that cannot decrypt
    from tests.unit.node.test_kafka_apis import FakeBroker

    async def main() -> str:
        listener = KafkaListener(
            "127.0.0.1",
            0,
            KafkaProtocolApis(cast(Any, FakeBroker()), "SSL"),
            max_request_bytes=1 << 20,
            idle_timeout_ms=10_000,
            listener="SSL",
            tls=SERVER["none"],
        )
        await listener.start()
        try:
            host, port = listener.address.rsplit(":", 1)
            reader, writer = await asyncio.open_connection(
                host, int(port), ssl=clients["anonymous"], server_hostname=host
            )
            os.write(writer.get_extra_info("socket").fileno(), forged)
            assert await asyncio.wait_for(reader.read(), 5) == b""  # closed
            writer.transport.abort()
            return await api_versions(host, int(port), clients["anonymous"])
        finally:
            await listener.stop()

    with caplog.at_level(logging.INFO):
        assert asyncio.run(main()) == "ok"
    loud = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert not loud, loud
