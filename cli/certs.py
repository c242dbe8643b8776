"""``kafkasim certs create``: a throw-away certificate authority and broker/client certificates
for a test cluster (cluster.certs; ``cluster up --tls`` makes its own), and the properties
that point brokers and clients at them. ``kafkasim certs compose``: the same for the compose
cluster's secured mode (cluster.compose_secure), with its ZooKeeper credentials, the compose
override that mounts them, and a ``cluster.json`` for the client tools' ``--dir``."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from kafkasim.cluster import compose_secure
from kafkasim.cluster.certs import create_certs


def register(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "certs", help="make a throw-away CA and broker/client certificates (PEM)"
    )
    verbs = p.add_subparsers(dest="verb", required=True, metavar="VERB")
    create = verbs.add_parser("create", help="a CA (reused if DIR has one) and certificates")
    create.add_argument("--dir", type=Path, required=True, help="where the files go")
    create.add_argument(
        "--brokers", type=int, default=3, help="certificates for brokers 1..N (default 3)"
    )
    create.add_argument(
        "--clients",
        default="",
        metavar="NAME[,NAME...]",
        help="client certificates (subject CN=NAME,OU=kafkasim)",
    )
    create.set_defaults(func=cmd_create)
    compose = verbs.add_parser(
        "compose",
        help="the compose cluster's secured mode: mTLS everywhere, zookeeper.set.acl",
    )
    compose.add_argument("--dir", type=Path, required=True, help="where the files go")
    compose.add_argument(
        "--authorizer",
        action="store_true",
        help="Kafka's ACL authorizer too (super.users: the brokers' certificates)",
    )
    compose.add_argument(
        "--project", help="the compose project name (-p) it will run under, for the record"
    )
    compose.set_defaults(func=cmd_compose)


def cmd_create(args: argparse.Namespace) -> int:
    if args.brokers < 0:
        raise ValueError("--brokers must not be negative")
    clients = tuple(c.strip() for c in args.clients.split(",") if c.strip())
    ca, brokers, issued = create_certs(args.dir, brokers=args.brokers, clients=clients)
    print(f"CA: {ca.certificate_path} (key {ca.directory / 'ca.key'}, 0600)")
    for broker_id, cert in brokers.items():
        print(f"broker {broker_id}: {cert.keystore}")
    for name, cert in issued.items():
        print(f"client {name}: {cert.keystore} (principal {cert.principal})")
    print("broker properties (server.properties):")
    print("  ssl.keystore.type=PEM")
    print("  ssl.keystore.location=<the broker's keystore above>")
    print("  ssl.truststore.type=PEM")
    print(f"  ssl.truststore.location={ca.certificate_path}")
    print("client properties (--command-config):")
    print("  security.protocol=SSL")
    print("  ssl.truststore.type=PEM")
    print(f"  ssl.truststore.location={ca.certificate_path}")
    print("  ssl.keystore.type=PEM")
    print("  ssl.keystore.location=<the client's keystore above, for mutual TLS>")
    return 0


def cmd_compose(args: argparse.Namespace) -> int:
    secured = compose_secure.prepare(args.dir, authorizer=args.authorizer)
    # The host ports the compose file publishes, as this environment sets them.
    recorded = compose_secure.state(secured, *compose_secure.default_ports(), project=args.project)
    state_path = compose_secure.write_state(secured, recorded)
    project = f" -p {args.project}" if args.project else ""
    print(f"certificates: {secured.certs} (keys 0600)")
    print(f"ZooKeeper credentials: {secured.jaas} (0600)")
    print(f"compose override: {secured.override}")
    print(f"client state: {state_path}")
    print("start it:")
    print(f"  docker compose -f compose/docker-compose.yml -f {secured.override}{project} up -d")
    print("then, from the host (TLS with the admin certificate):")
    print(f"  kafkasim topics --dir {args.dir} --list")
    return 0
