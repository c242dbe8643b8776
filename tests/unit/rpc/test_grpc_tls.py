"""The gRPC front door over TLS (node.rpc_grpc, common.rpc_grpc_client): a client trusting the
broker's authority and presenting its own certificate is served and its handler sees the
certificate's principal (mTLS); a client without a certificate, with one from another
authority or an expired one, and a plaintext client are refused, and the server goes on
serving the others; the client checks the server's certificate names the host."""

from __future__ import annotations

import asyncio
import datetime
from pathlib import Path

import pytest
from google.protobuf.message import Message

from kafkasim import proto
from kafkasim.cluster.certs import CertificateAuthority, Issued, create_certs
from kafkasim.common.errors import InvalidConfigError
from kafkasim.common.rpc import RpcError, RpcStatus
from kafkasim.common.rpc_grpc_client import GrpcTransport
from kafkasim.common.security import ANONYMOUS, Caller, PasswordVerifier, current_caller
from kafkasim.common.tls import TlsMaterial, load_tls
from kafkasim.node.rpc_grpc import GrpcBrokerTransport
from kafkasim.proto import kafkasim_pb2 as pb


class Certs:
    def __init__(self, root: Path) -> None:
        self.ca, brokers, clients = create_certs(root / "ca", brokers=1, clients=("alice",))
        self.broker = brokers[1]
        self.alice = clients["alice"]
        _, _, other = create_certs(root / "other-ca", brokers=0, clients=("mallory",))
        self.mallory = other["mallory"]
        past = datetime.datetime.now(datetime.UTC) - datetime.timedelta(days=2)
        self.expired = self.ca.issue(
            "old", not_before=past, not_after=past + datetime.timedelta(days=1)
        )

    def server(self, client_auth: str, keystore: Issued | None = None) -> TlsMaterial:
        return tls(self.ca, keystore or self.broker, server=True, client_auth=client_auth)

    def client(self, keystore: Issued | None) -> TlsMaterial:
        return tls(self.ca, keystore, server=False)


def tls(
    ca: CertificateAuthority, keystore: Issued | None, *, server: bool, client_auth: str = "none"
) -> TlsMaterial:
    props: dict[str, object] = {
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(ca.certificate_path),
        "ssl.client.auth": client_auth,
    }
    if keystore is not None:
        props.update({"ssl.keystore.type": "PEM", "ssl.keystore.location": str(keystore.keystore)})
    return load_tls(props, server=server)


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return Certs(tmp_path_factory.mktemp("tls"))


def serve_and_call(
    server_tls: TlsMaterial | None,
    clients: list[GrpcTransport],
    host: str = "127.0.0.1",
    *,
    listener: str = "SSL",
    sasl: PasswordVerifier | None = None,
    detail: bool = False,
) -> tuple[list[Caller], list[str]]:
    """Call Produce once from each client, in order, on a server with ``server_tls`` (and
    ``sasl``: credentials checked per call); the callers the handler saw and each call's
    outcome ("ok", or the RpcError's status — with its message when ``detail``)."""

    async def main() -> tuple[list[Caller], list[str]]:
        seen: list[Caller] = []

        async def produce(request: Message) -> Message:
            seen.append(current_caller())
            return pb.ProduceResponse()

        server = GrpcBrokerTransport().server(
            "127.0.0.1:0",
            {proto.METHOD_PRODUCE: produce},
            {},
            tls=server_tls,
            listener=listener,
            sasl=sasl,
        )
        await server.start()
        port = server.address.rpartition(":")[2]
        outcomes: list[str] = []
        try:
            for client in clients:
                try:
                    await client.call(
                        f"{host}:{port}", proto.METHOD_PRODUCE, pb.ProduceRequest(), timeout_s=5
                    )
                    outcomes.append("ok")
                except RpcError as e:
                    outcomes.append(f"{e.status.name}: {e.message}" if detail else e.status.name)
                finally:
                    await client.close()
        finally:
            await server.stop()
        return seen, outcomes

    return asyncio.run(main())


def test_mutual_tls_gives_the_handler_the_certificates_principal(certs: Certs) -> None:
    seen, outcomes = serve_and_call(
        certs.server("required"),
        [
            GrpcTransport(tls=certs.client(certs.alice)),
            GrpcTransport(tls=certs.client(None)),  # no certificate
            GrpcTransport(tls=certs.client(certs.mallory)),  # another authority's
            GrpcTransport(tls=certs.client(certs.expired)),
            GrpcTransport(),  # plaintext on the TLS port
            GrpcTransport(tls=certs.client(certs.alice)),  # still served
        ],
    )
    assert outcomes == ["ok", "UNAVAILABLE", "UNAVAILABLE", "UNAVAILABLE", "UNAVAILABLE", "ok"]
    alice = Caller("User:CN=alice,OU=kafkasim", "127.0.0.1", "SSL")
    assert seen == [alice, alice]


def test_tls_without_client_auth_serves_anonymous_callers(certs: Certs) -> None:
    seen, outcomes = serve_and_call(
        certs.server("none"),
        [GrpcTransport(tls=certs.client(None)), GrpcTransport(tls=certs.client(certs.alice))],
    )
    assert outcomes == ["ok", "ok"]
    assert seen == [Caller(ANONYMOUS, "127.0.0.1", "SSL")] * 2


def test_the_client_verifies_the_servers_certificate_and_host_name(certs: Certs) -> None:
    # The broker's certificate names localhost and 127.0.0.1; alice's names no host.
    _, outcomes = serve_and_call(
        certs.server("none"), [GrpcTransport(tls=certs.client(None))], host="localhost"
    )
    assert outcomes == ["ok"]
    _, outcomes = serve_and_call(
        certs.server("none", keystore=certs.alice), [GrpcTransport(tls=certs.client(None))]
    )
    assert outcomes == ["UNAVAILABLE"]
    untrusting = tls(
        create_certs(certs.ca.directory.parent / "third", brokers=0)[0], None, server=False
    )
    _, outcomes = serve_and_call(certs.server("none"), [GrpcTransport(tls=untrusting)])
    assert outcomes == [RpcStatus.UNAVAILABLE.name]


def test_grpc_clients_refuse_to_turn_host_name_verification_off(certs: Certs) -> None:
    props = {
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(certs.ca.certificate_path),
        "ssl.endpoint.identification.algorithm": "",
    }
    with pytest.raises(InvalidConfigError, match="gRPC always verifies the server's host name"):
        GrpcTransport(tls=load_tls(props, server=False))
