"""``kafkasim certs create``: a throw-away certificate authority and broker/client certificates
for a test cluster (cluster.certs; ``cluster up --tls`` makes its own), and the properties
that point brokers and clients at them."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

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
