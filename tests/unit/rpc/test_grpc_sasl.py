"""SASL credentials on the gRPC front door (node.rpc_grpc, common.rpc_grpc_client): on a
SASL_SSL listener each call carries its credentials in metadata and the handler sees
``User:<name>``; a call without credentials, with a wrong password or an unknown mechanism is
refused UNAUTHENTICATED; credentials sent to a listener without SASL are refused too; a client
never sends them without TLS."""

from __future__ import annotations

import pytest

from kafkasim.common.errors import InvalidConfigError
from kafkasim.common.rpc_grpc_client import GrpcTransport, client_transport
from kafkasim.common.sasl import SaslCredentials, jaas_config, parse_jaas_config
from kafkasim.common.security import Caller
from kafkasim.common.tls import TlsMaterial
from kafkasim.node.sasl_auth import ListenerAuthenticator
from kafkasim.node.sasl_config import ListenerSasl
from kafkasim.node.scram_cache import ScramCredentialCache
from tests.unit.rpc.test_grpc_tls import Certs, certs, serve_and_call  # noqa: F401 - the module fixture

USERS = ListenerAuthenticator(
    ListenerSasl(
        ("PLAIN",), {"PLAIN": parse_jaas_config(jaas_config("PLAIN", "a", "b", alice="pw"))}
    ),
    ScramCredentialCache(),
)


def call_each(
    server_tls: TlsMaterial | None, sasl: ListenerAuthenticator | None, clients: list[GrpcTransport]
) -> tuple[list[Caller], list[str]]:
    """Produce from each client on a SASL_SSL listener; callers seen and outcomes with their
    messages."""
    return serve_and_call(server_tls, clients, listener="SASL_SSL", sasl=sasl, detail=True)


def test_a_sasl_ssl_listener_authenticates_each_call(certs: Certs) -> None:  # noqa: F811
    client_tls = certs.client(None)
    seen, outcomes = call_each(
        certs.server("none"),
        USERS,
        [
            GrpcTransport(tls=client_tls, sasl=SaslCredentials("PLAIN", "alice", "pw")),
            GrpcTransport(tls=client_tls, sasl=SaslCredentials("PLAIN", "alice", "nope")),
            GrpcTransport(tls=client_tls, sasl=SaslCredentials("SCRAM-SHA-256", "alice", "pw")),
            GrpcTransport(tls=client_tls),
        ],
    )
    assert outcomes[0] == "ok"
    assert outcomes[1] == (
        "UNAUTHENTICATED: Authentication failed: Invalid username or password "
        "(SASL_AUTHENTICATION_FAILED)"
    )
    assert outcomes[2].startswith("UNAUTHENTICATED: Unsupported SASL mechanism SCRAM-SHA-256")
    assert outcomes[3] == (
        "UNAUTHENTICATED: listener SASL_SSL is SASL_SSL: the call carries no SASL credentials"
    )
    assert seen == [Caller("User:alice", "127.0.0.1", "SASL_SSL")]


def test_credentials_to_a_listener_without_sasl_are_refused(certs: Certs) -> None:  # noqa: F811
    _, outcomes = call_each(
        certs.server("none"),
        None,
        [GrpcTransport(tls=certs.client(None), sasl=SaslCredentials("PLAIN", "alice", "pw"))],
    )
    assert outcomes == ["UNAUTHENTICATED: listener SASL_SSL does not take SASL credentials"]


def test_a_client_never_sends_credentials_without_tls() -> None:
    with pytest.raises(InvalidConfigError, match="over TLS only"):
        GrpcTransport(sasl=SaslCredentials("PLAIN", "alice", "pw"))
    with pytest.raises(InvalidConfigError, match="speak PLAINTEXT, SSL or SASL_SSL"):
        client_transport(
            {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
             "sasl.username": "alice", "sasl.password": "pw"}
        )  # fmt: skip
