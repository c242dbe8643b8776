"""The compose cluster's secured mode on real containers (``kafkasim certs compose``: mTLS on
every listener, inter-broker included; ``zookeeper.set.acl=true`` with the mounted JAAS
credentials; ZooKeeper's root locked by the ``zookeeper-acl`` service).

A project of its own (not the session's plaintext one) on free 127.0.0.1 ports, with
compose/docker-compose.yml, the tests' override and the secured override. kafkasim's client on
the host, with the generated admin certificate, creates an RF 3 topic, produces and reads it
back to the high watermark (the followers replicated over the TLS replication listener), and the
``--dir`` state serves ``kafkasim topics``; confluent-kafka with the same certificate reaches
the published Kafka listeners. A plaintext client and a TLS client without a certificate are
refused on both protocols, and the brokers keep serving. ZooKeeper is not published to the
host (it is on the internal network only), so the anonymous kazoo client runs in a broker's
container, on that network: its writes are refused with NoAuth.

Every wait is bounded; none is an assertion on how fast something happens.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import time
from collections.abc import Iterator

import pytest

from tests.compose.conftest import (
    BROKER_IDS,
    COMPOSE_FILE,
    TEST_COMPOSE_FILE,
    ComposeCluster,
    compose_unavailable,
    replication_connections,
)

_REASON = compose_unavailable()
if _REASON is not None:
    pytest.skip(_REASON, allow_module_level=True)

from kafkasim.client.simple import MinimalClient  # noqa: E402 - after the skip
from kafkasim.cluster import compose_secure  # noqa: E402
from kafkasim.cluster.compose import (  # noqa: E402
    CLUSTER_START_TIMEOUT_S,
    compose_command,
    free_broker_ports,
)
from kafkasim.cluster.compose_secure import SecuredCompose  # noqa: E402
from kafkasim.common.clock import SystemClock  # noqa: E402
from kafkasim.common.rpc_grpc_client import GrpcTransport, client_transport  # noqa: E402
from kafkasim.common.types import TopicPartition  # noqa: E402
from tests.cli_run import kafkasim  # noqa: E402
from tests.interop.test_tls import ck_metadata_error  # noqa: E402

pytestmark = pytest.mark.slow

TP = TopicPartition("secured", 0)
DEADLINE_S = 120.0

# Run in broker-1's container (python and kazoo are in the image): an anonymous session on the
# compose ZooKeeper tries writes Kafka's ACLs and the locked root must refuse.
_ANONYMOUS_WRITES = """
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError

zk = KazooClient(hosts="zookeeper:2181", timeout=10)
zk.start(timeout=30)
attempts = {
    "create /squatter": lambda: zk.create("/squatter"),
    "set /controller_epoch": lambda: zk.set("/controller_epoch", b"999999"),
    "delete /controller": lambda: zk.delete("/controller"),
    "create /admin/delete_topics/secured": lambda: zk.create("/admin/delete_topics/secured"),
    "set /brokers/topics/secured": lambda: zk.set("/brokers/topics/secured", b"{}"),
}
for name, attempt in attempts.items():
    try:
        attempt()
        print("ALLOWED", name)
    except NoAuthError:
        print("REFUSED", name)
zk.stop()
"""


@pytest.fixture(scope="module")
def secured(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[ComposeCluster, SecuredCompose]]:
    """The secured project, once every broker answers Metadata over TLS; ``down -v`` at the
    end, its logs saved to secured-compose-logs.txt in pytest's base temporary directory."""
    command = compose_command()
    assert command is not None  # compose_unavailable() said so before any test ran
    files = compose_secure.prepare(tmp_path_factory.mktemp("secured-compose"))
    ports = free_broker_ports()
    cluster = ComposeCluster(
        command,
        [str(COMPOSE_FILE), str(TEST_COMPOSE_FILE), str(files.override)],
        f"kafkasim-secured-{os.getpid()}",
        *ports,
        client_properties=files.client_properties(),
    )
    compose_secure.write_state(files, compose_secure.state(files, *ports, project=cluster.project))
    try:
        cluster.compose("up", "-d", "--no-build", timeout_s=CLUSTER_START_TIMEOUT_S)
        deadline = time.monotonic() + CLUSTER_START_TIMEOUT_S
        while not asyncio.run(cluster.serving()):
            assert time.monotonic() < deadline, "the secured brokers did not all serve"
            time.sleep(1.0)
        yield cluster, files
    finally:
        logs = tmp_path_factory.getbasetemp() / "secured-compose-logs.txt"
        with contextlib.suppress(RuntimeError, subprocess.TimeoutExpired, OSError):
            logs.write_text(cluster.compose("logs", "--no-color", "--timestamps"))
        cluster.compose("down", "-v", "--remove-orphans", "--timeout", "20")


async def _produce_and_read(cluster: ComposeCluster) -> list[bytes | None]:
    transport = client_transport(cluster.client_properties)
    try:
        client = MinimalClient(transport, cluster.bootstrap, SystemClock())
        await client.create_topic(TP.topic, 1, 3)
        await client.wait_for_leaders(TP.topic, 1)
        assert (await client.produce(TP, [b"one", b"two"])).ok
        return [r.value for r in await client.read_all(TP)]
    finally:
        await transport.close()


async def _refused_everywhere(cluster: ComposeCluster, transport: GrpcTransport) -> bool:
    """No broker answers Metadata on its published gRPC listener through ``transport``."""
    try:
        return all([await cluster.metadata(transport, b) is None for b in BROKER_IDS])
    finally:
        await transport.close()


def test_tls_clients_with_the_certificate_are_served_and_others_refused(
    secured: tuple[ComposeCluster, SecuredCompose],
) -> None:
    cluster, files = secured
    values = asyncio.run(asyncio.wait_for(_produce_and_read(cluster), DEADLINE_S))
    assert values == [b"one", b"two"]
    assert replication_connections(cluster) >= 2  # the followers' fetch streams, over TLS
    listed = kafkasim("topics", "--dir", str(files.directory), "--list")
    assert listed.returncode == 0, listed.stdout + listed.stderr
    assert TP.topic in listed.stdout.split()

    certs = files.certs
    good = {
        "bootstrap.servers": cluster.kafka_bootstrap,
        "security.protocol": "SSL",
        "ssl.ca.location": str(certs / "ca.crt"),
        "ssl.certificate.location": str(certs / "admin.crt"),
        "ssl.key.location": str(certs / "admin.key"),
    }
    assert ck_metadata_error(good) == ""
    # Plaintext, and TLS without a client certificate (ssl.client.auth=required): refused.
    assert ck_metadata_error({"bootstrap.servers": cluster.kafka_bootstrap}) != ""
    anonymous_tls = {k: v for k, v in good.items() if not k.startswith(("ssl.cert", "ssl.key"))}
    assert ck_metadata_error(anonymous_tls) != ""
    assert asyncio.run(_refused_everywhere(cluster, GrpcTransport()))
    without_keystore = {
        k: v for k, v in cluster.client_properties.items() if not k.startswith("ssl.keystore")
    }
    assert asyncio.run(_refused_everywhere(cluster, client_transport(without_keystore)))
    assert asyncio.run(cluster.serving())
    assert set(cluster.statuses().values()) == {"running"}


def test_anonymous_zookeeper_writes_are_refused_on_the_compose_network(
    secured: tuple[ComposeCluster, SecuredCompose],
) -> None:
    cluster, _ = secured
    # ZooKeeper publishes nothing to the host.
    published = cluster.docker(
        "inspect", "--format", "{{json .NetworkSettings.Ports}}", _zookeeper(cluster)
    )
    assert "HostPort" not in published, published
    # The topic of the other test, or made here when this one runs alone.
    asyncio.run(asyncio.wait_for(_topic_exists(cluster), DEADLINE_S))
    out = cluster.compose("exec", "-T", "broker-1", "python", "-c", _ANONYMOUS_WRITES)
    lines = sorted(line for line in out.splitlines() if line.strip())
    assert lines == [
        "REFUSED create /admin/delete_topics/secured",
        "REFUSED create /squatter",
        "REFUSED delete /controller",
        "REFUSED set /brokers/topics/secured",
        "REFUSED set /controller_epoch",
    ]
    assert asyncio.run(cluster.serving())


def _zookeeper(cluster: ComposeCluster) -> str:
    (container,) = cluster.compose("ps", "-q", "zookeeper").split()
    return container


async def _topic_exists(cluster: ComposeCluster) -> None:
    transport = client_transport(cluster.client_properties)
    try:
        client = MinimalClient(transport, cluster.bootstrap, SystemClock())
        metadata = await client.refresh_metadata()
        if TP.topic not in {t.name for t in metadata.topics}:
            await client.create_topic(TP.topic, 1, 3)
        await client.wait_for_leaders(TP.topic, 1)
    finally:
        await transport.close()
