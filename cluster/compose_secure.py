"""The compose cluster's secured mode: what ``kafkasim cluster up --tls`` with
``zookeeper.set.acl=true`` is for local processes, as a compose file layered over
compose/docker-compose.yml (``kafkasim certs compose --dir DIR``; compose/README.md).

:func:`prepare` writes, under a directory of the host:

* ``certs/``: a throw-away CA, a certificate per broker (``cluster.certs``: subject
  ``CN=broker-N,OU=kafkasim``; SANs broker-N, broker-N.cluster, localhost, 127.0.0.1) and the
  tools' client certificate ``admin``; private keys 0600;
* ``zookeeper-client.jaas`` (0600): the JAAS ``Client`` section the brokers authenticate to
  ZooKeeper with (digest, user ``kafka``, a random password);
* ``compose-secured.yml``: the override, as JSON (which YAML reads as it is);
* ``cluster.json``: the state a ``--dir`` client tool reads (the brokers' published
  addresses and the TLS client properties), marked ``"backend": "compose"``.

The override makes every listener of brokers 1-3 TLS with client certificates required
(``ssl.client.auth=required``: INTERNAL, the inter-broker and controller one, and
REPLICATION, where followers fetch and present their broker certificate, included),
``zookeeper.set.acl=true`` with the JAAS file, and, when asked, Kafka's ACL authorizer with
the brokers' certificate principals as ``super.users``. Each broker gets its own keystore,
the CA and the JAAS file as read-only bind mounts in ``/run/kafkasim-secrets`` (never the
CA's key or another broker's). Those files are 0600 and owned by the host's user, which the
image's unprivileged user cannot read: the broker starts as root only to copy them into the
tmpfs ``/run/kafkasim/secrets`` (owned by that user, still 0600), then drops to it for good
(compose/broker-entrypoint.sh). A one-shot service, ``zookeeper-acl``, locks ZooKeeper's root
znode to the brokers' identity (as ``LocalCluster`` does) before any broker starts. Ports
stay as the base file has them: nothing new is published, and INTERNAL and REPLICATION stay
on the ``cluster`` network.

Not covered: the scalable ``broker`` service (profile ``scale``) has no certificate and
cannot join a secured cluster; the metrics endpoints stay plain HTTP on loopback, as for
``cluster up --tls``.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from kafkasim.cluster.certs import (
    ORGANIZATIONAL_UNIT,
    broker_dns_names,
    broker_name,
    load_or_create_ca,
)
from kafkasim.cluster.compose import (
    BROKER_IDS,
    COMPOSE_FILE,
    ComposeCluster,
    Runner,
    config_environment,
    run_command,
)
from kafkasim.cluster.state_file import BACKEND, STATE_FILE
from kafkasim.common.private_files import write_private
from kafkasim.common.zk_acl import jaas_client_text
from kafkasim.controller.zk_kazoo import secure_root
from kafkasim.node.zk_security import zk_security_from_props

__all__ = [
    "ACL_SERVICE",
    "AUTHORIZER_CLASS",
    "BACKEND",
    "CLIENT_CERT",
    "LISTENERS",
    "SECRETS_DIR",
    "SECRETS_MOUNT",
    "STATE_FILE",
    "SecuredCompose",
    "attached_cluster",
    "broker_principal",
    "default_ports",
    "default_project",
    "lock_zookeeper_root",
    "prepare",
    "secured_override",
    "state",
]

SECRETS_MOUNT: Final = "/run/kafkasim-secrets"  # the read-only bind mounts (host's owner)
SECRETS_DIR: Final = "/run/kafkasim/secrets"  # the entrypoint's copies (tmpfs, kafkasim's)
TMPFS: Final = "/run/kafkasim"
KEYSTORE: Final = "broker.keystore.pem"
TRUSTSTORE: Final = "ca.crt"
JAAS: Final = "zookeeper-client.jaas"
OVERRIDE_FILE: Final = "compose-secured.yml"
CLIENT_CERT: Final = "admin"  # the tools' certificate, as LocalCluster's
ZOOKEEPER_USER: Final = "kafka"
ZOOKEEPER_CONNECT: Final = "zookeeper:2181"
ACL_SERVICE: Final = "zookeeper-acl"
AUTHORIZER_CLASS: Final = "kafka.security.authorizer.AclAuthorizer"
# The base file's listeners (compose/docker-compose.yml): every one TLS here.
LISTENERS: Final = ("INTERNAL", "EXTERNAL", "KAFKA_INTERNAL", "KAFKA_EXTERNAL", "REPLICATION")
# The base file's published host ports (its ${VAR:-default}s), by broker id.
_DEFAULT_BASES: Final = {"PORT": 19091, "KAFKA_PORT": 29091, "METRICS_PORT": 39091}


def save_state(root: Path, state: dict[str, Any]) -> None:
    """Write a cluster's state file (``STATE_FILE``: pids, ports, client properties) in
    ``root``, which the --dir tools and 'cluster down' read."""
    (root / STATE_FILE).write_text(json.dumps(state, indent=2) + "\n")


def broker_principal(broker_id: int) -> str:
    """The principal of broker N's certificate (Kafka's default principal builder)."""
    return f"User:CN={broker_name(broker_id)},OU={ORGANIZATIONAL_UNIT}"


@dataclass(frozen=True)
class SecuredCompose:
    """The files of a secured compose cluster under ``directory``."""

    directory: Path
    authorizer: bool = False

    @property
    def certs(self) -> Path:
        return self.directory / "certs"

    @property
    def jaas(self) -> Path:
        return self.directory / JAAS

    @property
    def override(self) -> Path:
        return self.directory / OVERRIDE_FILE

    def keystore(self, name: str) -> Path:
        return self.certs / f"{name}.keystore.pem"

    def client_properties(self, client: str = CLIENT_CERT) -> dict[str, str]:
        """Kafka's client properties for a client on the host, with ``client``'s certificate
        (as ``LocalCluster.client_properties`` for ``cluster up --tls``)."""
        return {
            "security.protocol": "SSL",
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(self.certs / TRUSTSTORE),
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(self.keystore(client)),
        }


def prepare(
    directory: Path, *, authorizer: bool = False, brokers: Sequence[int] = BROKER_IDS
) -> SecuredCompose:
    """Make (or complete) a secured compose cluster's files under ``directory``: the CA and
    certificates that are missing (the CA is reused, so earlier certificates stay trusted),
    the ZooKeeper JAAS file if there is none, and the override for ``brokers``."""
    secured = SecuredCompose(directory.resolve(), authorizer)
    secured.directory.mkdir(parents=True, exist_ok=True)
    ca = load_or_create_ca(secured.certs)
    for broker_id in brokers:
        if not secured.keystore(broker_name(broker_id)).exists():
            ca.issue(broker_name(broker_id), dns=broker_dns_names(broker_id), ips=("127.0.0.1",))
    if not secured.keystore(CLIENT_CERT).exists():
        ca.issue(CLIENT_CERT)
    if not secured.jaas.exists():
        write_private(secured.jaas, jaas_client_text(ZOOKEEPER_USER, secrets.token_urlsafe(24)))
    override = secured_override(secured, brokers)
    secured.override.write_text(
        "# Generated by kafkasim certs compose: the secured mode (compose/README.md).\n"
        + json.dumps(override, indent=2)
        + "\n"
    )
    return secured


def broker_settings(secured: SecuredCompose, brokers: Sequence[int]) -> dict[str, object]:
    """The broker keys of the secured mode, with the files at their container paths."""
    props: dict[str, object] = {
        "listener.security.protocol.map": ",".join(f"{name}:SSL" for name in LISTENERS),
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": f"{SECRETS_DIR}/{KEYSTORE}",
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": f"{SECRETS_DIR}/{TRUSTSTORE}",
        "ssl.client.auth": "required",
        "zookeeper.set.acl": True,
        "zookeeper.jaas.config.file": f"{SECRETS_DIR}/{JAAS}",
    }
    if secured.authorizer:
        props["authorizer.class.name"] = AUTHORIZER_CLASS
        props["super.users"] = ";".join(broker_principal(b) for b in brokers)
    return props


def _mount(host: Path, name: str) -> str:
    return f"{host}:{SECRETS_MOUNT}/{name}:ro"


def secured_override(
    secured: SecuredCompose, brokers: Sequence[int] = BROKER_IDS
) -> dict[str, object]:
    """The compose override (a dict; written as JSON): the secured brokers and the
    ``zookeeper-acl`` service they wait for."""
    environment = config_environment(broker_settings(secured, brokers))
    jaas = _mount(secured.jaas, JAAS)
    services: dict[str, object] = {
        ACL_SERVICE: {
            "image": "${KAFKASIM_BROKER_IMAGE:-kafkasim-broker:latest}",
            "user": "0:0",
            "restart": "no",
            "networks": ["cluster"],
            "depends_on": {"zookeeper": {"condition": "service_healthy"}},
            "tmpfs": [TMPFS],
            "volumes": [jaas],
            "command": [
                "python",
                "-m",
                "kafkasim.cluster.compose_secure",
                ZOOKEEPER_CONNECT,
                f"{SECRETS_DIR}/{JAAS}",
            ],
        }
    }
    for broker_id in brokers:
        name = broker_name(broker_id)
        services[name] = {
            # Root only to copy the secrets; the entrypoint then drops to the image's user.
            "user": "0:0",
            "tmpfs": [TMPFS],
            "volumes": [
                _mount(secured.keystore(name), KEYSTORE),
                _mount(secured.certs / TRUSTSTORE, TRUSTSTORE),
                jaas,
            ],
            "environment": environment,
            "depends_on": {
                "zookeeper": {"condition": "service_healthy"},
                ACL_SERVICE: {"condition": "service_completed_successfully"},
            },
        }
    return {"services": services}


def default_ports(env: Mapping[str, str] | None = None) -> tuple[dict[int, int], ...]:
    """The host ports compose/docker-compose.yml publishes brokers 1-3 on, as it reads them
    from ``env`` (default: this process's environment): gRPC, Kafka's protocol, metrics."""
    values = os.environ if env is None else env
    return tuple(
        {b: int(values.get(f"KAFKASIM_BROKER_{b}_{kind}", str(base + b))) for b in BROKER_IDS}
        for kind, base in _DEFAULT_BASES.items()
    )


def state(
    secured: SecuredCompose,
    ports: Mapping[int, int],
    kafka_ports: Mapping[int, int],
    metrics_ports: Mapping[int, int],
    *,
    project: str | None = None,
) -> dict[str, object]:
    """What ``--dir`` client tools read (the shape of ``cluster up``'s ``cluster.json``:
    ``brokers`` with their addresses, ``tls``, ``client_properties``), marked as a compose
    cluster's so that ``kafkasim cluster`` verbs, which manage processes, refuse it."""
    return {
        "backend": BACKEND,
        "dir": str(secured.directory),
        "project": project,
        "compose_override": str(secured.override),
        "tls": True,
        "authorizer": secured.authorizer,
        "client_properties": secured.client_properties(),
        "brokers": [
            {
                "id": b,
                "address": f"127.0.0.1:{ports[b]}",
                "kafka_address": f"127.0.0.1:{kafka_ports[b]}",
                "metrics": f"http://127.0.0.1:{metrics_ports[b]}/metrics",
            }
            for b in sorted(ports)
        ],
    }


def default_project(env: Mapping[str, str] | None = None) -> str:
    """The project name compose gives ``compose/docker-compose.yml`` without ``-p``:
    COMPOSE_PROJECT_NAME, else the name of the first file's directory (lower case, only
    letters, digits, ``_`` and ``-``)."""
    values = os.environ if env is None else env
    named = values.get("COMPOSE_PROJECT_NAME")
    if named:
        return named
    return re.sub(r"[^a-z0-9_-]", "", COMPOSE_FILE.parent.name.lower())


def _port(broker: Mapping[str, Any], key: str) -> int | None:
    address = broker.get(key)
    if address is None:
        return None
    text = str(address).removeprefix("http://").removesuffix("/metrics")
    _, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"broker {broker.get('id')}: {key} {address!r} is not HOST:PORT")
    return int(port)


def attached_cluster(
    recorded: Mapping[str, Any], command: str, runner: Runner = run_command
) -> ComposeCluster:
    """The running project a compose cluster's state describes (``state``): its name (as
    compose gave it when the state has none), its files, the brokers' published ports and
    the client properties. ValueError naming what is wrong with the state."""
    if recorded.get("backend") != BACKEND:
        raise ValueError(f"not a compose cluster's state (backend {recorded.get('backend')!r})")
    brokers = recorded.get("brokers")
    if not isinstance(brokers, list) or not brokers:
        raise ValueError("a compose cluster's state names no brokers")
    ports: dict[int, int] = {}
    kafka_ports: dict[int, int] = {}
    metrics_ports: dict[int, int] = {}
    for broker in brokers:
        broker_id = broker.get("id") if isinstance(broker, dict) else None
        if not isinstance(broker_id, int) or isinstance(broker_id, bool) or broker_id in ports:
            raise ValueError(f"a compose cluster's state has a bad broker entry: {broker!r}")
        for key, found in (
            ("address", ports),
            ("kafka_address", kafka_ports),
            ("metrics", metrics_ports),
        ):
            port = _port(broker, key)
            if port is not None:
                found[broker_id] = port
        if broker_id not in ports:
            raise ValueError(f"broker {broker_id}: no address in the compose cluster's state")
    override = recorded.get("compose_override")
    files = [str(COMPOSE_FILE), *([str(override)] if override else [])]
    project = recorded.get("project") or default_project()
    properties = {str(k): str(v) for k, v in (recorded.get("client_properties") or {}).items()}
    return ComposeCluster(
        command,
        files,
        str(project),
        ports,
        kafka_ports,
        metrics_ports,
        # Each container looked up once: a refresh looks them up again if one was re-created.
        remember_containers=True,
        client_properties=properties,
        runner=runner,
    )


def write_state(secured: SecuredCompose, recorded: Mapping[str, object]) -> Path:
    path = secured.directory / STATE_FILE
    path.write_text(json.dumps(recorded, indent=2) + "\n")
    return path


def lock_zookeeper_root(connect: str, jaas: Path) -> None:
    """Give ZooKeeper's root znode the brokers' ACLs (their JAAS identity ALL, the world
    READ), as ``LocalCluster`` does for its own ZooKeeper with ``zookeeper.set.acl``."""
    security = zk_security_from_props(
        {"zookeeper.set.acl": "true", "zookeeper.jaas.config.file": str(jaas)}
    )
    secure_root(connect, security)


def main(argv: Sequence[str]) -> int:
    """``python -m kafkasim.cluster.compose_secure ZOOKEEPER_CONNECT JAAS_FILE``."""
    if len(argv) != 2:
        print("usage: python -m kafkasim.cluster.compose_secure CONNECT JAAS_FILE", file=sys.stderr)
        return 2
    lock_zookeeper_root(argv[0], Path(argv[1]))
    print(f"kafkasim: ZooKeeper's root znode at {argv[0]} locked to the brokers' identity")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
