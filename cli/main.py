"""``kafkasim`` — the command line. Each verb lives in its own module under ``cli/``.

A process that runs one verb imports that verb's module only. Every broker of a local cluster
and every tool the tests start is a ``kafkasim`` process, and the verbs' modules between them
import most of the code base (the simulation, the web console's server, the Spark helpers):
loading them all cost each process ~0.3 s of CPU it did not use. The full parser (every verb)
is built for what has to list or judge the verbs: ``kafkasim --help``, no verb, a name that is
not a verb, ``--version``.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from collections.abc import Callable, Sequence
from importlib import metadata
from typing import Any

from kafkasim.cli import examples
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


# Each verb's name and the module under cli/ that registers it, in the order of the help's list.
VERBS: dict[str, str] = {
    "broker": "broker",
    "cluster": "cluster",
    "dump-log": "dump_log",
    "verify-log": "verify_log",
    "demo": "demo",
    "console-producer": "console_producer",
    "console-consumer": "console_consumer",
    "topics": "topics",
    "consumer-groups": "consumer_groups",
    "transactions": "transactions",
    "leader-election": "leader_election",
    "delete-records": "delete_records",
    "configs": "configs",
    "producer-perf-test": "producer_perf",
    "sim": "sim",
    "chaos": "chaos",
    "consumer-perf-test": "consumer_perf",
    "check": "check",
    "acls": "acls",
    "certs": "certs",
    "console": "console",
}
# The options that may come before the verb and leave the verb's parse to the verb alone.
# Any other (``-h``, ``--version``, ``--``) takes the full parser, which knows every verb.
_LEADING_FLAGS = frozenset(("-v", "--verbose"))


def build_parser(verbs: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The command line's parser: with every verb, or with ``verbs`` (names in ``VERBS``) only,
    whose modules alone are then imported."""
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
    chosen = set(VERBS if verbs is None else verbs)
    unknown = sorted(chosen - VERBS.keys())
    if unknown:
        raise ValueError(f"not verbs of kafkasim: {', '.join(unknown)}")
    for name, module_name in VERBS.items():
        if name in chosen:
            module = importlib.import_module(f"kafkasim.cli.{module_name}")
            register: Callable[[Any], None] = module.register
            register(sub)
    examples.attach(sub.choices)
    return parser


def verb_named(argv: Sequence[str]) -> str | None:
    """The verb ``argv`` runs, when the parser of that verb alone parses it as the full parser
    would: the first argument, after ``-v``/``--verbose`` only, is a verb's name (the verb's
    parser takes everything after it). None sends ``argv`` to the full parser."""
    for arg in argv:
        if arg in _LEADING_FLAGS:
            continue
        return arg if arg in VERBS else None
    return None


def main(argv: Sequence[str] | None = None) -> int:
    arguments = sys.argv[1:] if argv is None else list(argv)
    verb = verb_named(arguments)
    parser = build_parser(None if verb is None else [verb])
    args = parser.parse_args(arguments)
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
