"""How an admin or client verb finds a cluster: Kafka's ``--bootstrap-server host:port[,…]``,
or ``--dir`` of a ``kafkasim cluster up`` directory (its ``cluster.json`` names the brokers);
and how it talks to it: Kafka's ``--command-config FILE`` (client properties such as
``security.protocol=SSL`` and the ``ssl.*`` keys), over what a ``cluster up --tls``
directory's ``cluster.json`` records."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from kafkasim.cluster.state_file import BACKEND as COMPOSE_BACKEND
from kafkasim.cluster.state_file import STATE_FILE
from kafkasim.common.config import read_properties
from kafkasim.common.rpc_grpc_client import GrpcTransport, client_transport
from kafkasim.common.zk_acl import ZkSecurity
from kafkasim.node.zk_security import zk_security_from_props


def add_bootstrap_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--bootstrap-server",
        metavar="HOST:PORT[,...]",
        help="the brokers to connect to (Kafka's flag)",
    )
    parser.add_argument(
        "--dir", type=Path, help="a 'kafkasim cluster up' directory, instead of --bootstrap-server"
    )
    parser.add_argument(
        "--command-config",
        type=Path,
        metavar="FILE",
        help="client properties, e.g. security.protocol=SSL and ssl.truststore.location "
        "(Kafka's flag)",
    )


def security_properties(args: argparse.Namespace) -> dict[str, object]:
    """The client properties of ``--dir``'s cluster (a ``cluster up --tls`` one records its
    TLS settings) with ``--command-config``'s over them."""
    props: dict[str, object] = {}
    if getattr(args, "dir", None) is not None:
        path = Path(args.dir) / STATE_FILE
        if path.exists():
            props.update(json.loads(path.read_text()).get("client_properties", {}))
    command_config = getattr(args, "command_config", None)
    if command_config is not None:
        if not Path(command_config).is_file():
            raise ValueError(f"--command-config {command_config}: no such file")
        props.update(read_properties(Path(command_config)))
    return props


def cluster_zookeeper(directory: Path) -> tuple[str, ZkSecurity]:
    """The ZooKeeper of a ``kafkasim cluster up`` directory: its connect string and the
    brokers' ZooKeeper credentials (``zookeeper.set.acl`` clusters); ValueError if none."""
    path = Path(directory) / STATE_FILE
    if not path.exists():
        raise ValueError(f"no cluster in {directory} (run 'kafkasim cluster up' first)")
    state = json.loads(path.read_text())
    if state.get("backend") == COMPOSE_BACKEND:
        raise ValueError(
            "the compose cluster's ZooKeeper is on its internal network: run this tool "
            "in a broker container (compose/README.md, secured mode)"
        )
    security = zk_security_from_props(state.get("overrides", {}))
    return str(state["zookeeper"]["connect"]), security


def transport_for(args: argparse.Namespace) -> GrpcTransport:
    """The gRPC transport the flags ask for (TLS with ``security.protocol=SSL``)."""
    return client_transport(security_properties(args))


def bootstrap_servers(args: argparse.Namespace) -> list[str]:
    """The bootstrap addresses from ``--bootstrap-server`` or ``--dir``; ValueError if
    neither (or both) is given or the directory holds no running cluster's state."""
    if args.bootstrap_server and args.dir:
        raise ValueError("give --bootstrap-server or --dir, not both")
    if args.bootstrap_server:
        servers = [s.strip() for s in str(args.bootstrap_server).split(",") if s.strip()]
        bad = [s for s in servers if not s.rpartition(":")[2].isdigit()]
        if not servers or bad:
            raise ValueError(
                f"--bootstrap-server expects host:port[,...], got {args.bootstrap_server!r}"
            )
        return servers
    if args.dir is not None:
        path = Path(args.dir) / STATE_FILE
        if not path.exists():
            raise ValueError(f"no cluster in {args.dir} (run 'kafkasim cluster up' first)")
        state = json.loads(path.read_text())
        return [str(b["address"]) for b in state["brokers"]]
    raise ValueError("missing required argument: --bootstrap-server (or --dir)")
