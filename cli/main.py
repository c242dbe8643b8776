"""``kafkasim`` — the command line. Each verb lives in its own module under ``cli/``."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from importlib import metadata

from kafkasim.cli import (
    acls,
    broker,
    certs,
    chaos,
    check,
    cluster,
    configs,
    console,
    console_consumer,
    console_producer,
    consumer_groups,
    consumer_perf,
    delete_records,
    demo,
    dump_log,
    examples,
    leader_election,
    producer_perf,
    sim,
    topics,
    transactions,
    verify_log,
)
from kafkasim.cli.pipes import CLOSED_PIPE_STATUS, stdout_closed
from kafkasim.common.errors import KafkasimError


class SubcommandParser(argparse.ArgumentParser):
    """A subcommand's parser: an argument it does not know is answered with ITS usage
    (``usage: kafkasim consumer-groups ...``), as Kafka's tools print their own options,
    rather than passed up to the top-level parser, which would print
    ``usage: kafkasim [-h] [-v] COMMAND ...``. A subcommand with verbs (``cluster``) makes
    its verbs' parsers of this class too (argparse's default), so the innermost one answers."""

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        parsed, extras = super().parse_known_args(args, namespace)
        if extras:
            self.error(f"unrecognized arguments: {' '.join(extras)}")
        return parsed, extras


def version() -> str:
    """The installed distribution's version (the source tree's pyproject when not installed)."""
    try:
        return metadata.version("kafkasim")
    except metadata.PackageNotFoundError:
        return "unknown"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kafkasim",
        description="A Kafka-style replicated commit log: storage, replication, failure runs.",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log at INFO level")
    parser.add_argument(
        "--version", action="version", version=f"%(prog)s {version()}", help="print the version"
    )
    sub = parser.add_subparsers(
        dest="command", required=True, metavar="COMMAND", parser_class=SubcommandParser
    )
    broker.register(sub)
    cluster.register(sub)
    dump_log.register(sub)
    verify_log.register(sub)
    demo.register(sub)
    console_producer.register(sub)
    console_consumer.register(sub)
    topics.register(sub)
    consumer_groups.register(sub)
    transactions.register(sub)
    leader_election.register(sub)
    delete_records.register(sub)
    configs.register(sub)
    producer_perf.register(sub)
    sim.register(sub)
    chaos.register(sub)
    consumer_perf.register(sub)
    check.register(sub)
    acls.register(sub)
    certs.register(sub)
    console.register(sub)
    examples.attach(sub.choices)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(levelname)s %(name)s: %(message)s",
    )
    try:
        code: int = args.func(args)
        sys.stdout.flush()
    except BrokenPipeError:
        # The reader of our output went away (`kafkasim ... | head`): stop quietly.
        stdout_closed()
        return CLOSED_PIPE_STATUS
    except (KafkasimError, OSError, ValueError) as e:
        print(f"kafkasim {args.command}: error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    return code


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
