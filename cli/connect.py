"""How an admin or client verb finds a cluster: Kafka's ``--bootstrap-server host:port[,…]``,
or ``--dir`` of a ``kafkasim cluster up`` directory (its ``cluster.json`` names the brokers)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from kafkasim.cli.cluster import STATE_FILE


def add_bootstrap_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--bootstrap-server",
        metavar="HOST:PORT[,...]",
        help="the brokers to connect to (Kafka's flag)",
    )
    parser.add_argument(
        "--dir", type=Path, help="a 'kafkasim cluster up' directory, instead of --bootstrap-server"
    )


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
