"""``kafkasim transactions``: kafka-transactions.sh's ``list``, ``describe`` and
``describe-producers``.

The commands are Kafka's (``kafkasim transactions describe-producers --topic T --partition
P``), and also accepted as flags (``--list``, ``--describe --transactional-id X``,
``--describe-producers --topic T --partition P [--broker-id N]``). The tables are Kafka's
``prettyPrintTable``: a header row and one row per item, every column padded to its widest
value and followed by a tab:

* ``describe-producers``: ProducerId ProducerEpoch LatestCoordinatorEpoch LastSequence
  LastTimestamp CurrentTransactionStartOffset (``-1`` when no marker was written for the
  producer yet, ``None`` when no transaction is open), from the partition's leader or from
  ``--broker-id``'s replica;
* ``list``: TransactionalId Coordinator ProducerId TransactionState, from every broker;
* ``describe``: CoordinatorId TransactionalId ProducerId ProducerEpoch TransactionState
  TransactionTimeoutMs CurrentTransactionStartTimeMs TransactionDurationMs TopicPartitions
  (``None`` for the time columns when no transaction is open), from the id's coordinator.

Failures print Kafka's one line on stderr (``Failed to describe transaction state of
transactional-id `X`: TRANSACTIONAL_ID_NOT_FOUND: TransactionalId X not found.``) and exit 1.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Sequence
from typing import Any, Protocol

from kafkasim.cli.connect import add_bootstrap_args, bootstrap_servers, transport_for
from kafkasim.client.admin import AdminClient
from kafkasim.client.admin_txn import ProducerState, TransactionDescription, TransactionListing
from kafkasim.common.clock import SystemClock
from kafkasim.common.errors import KafkaError
from kafkasim.common.types import TopicPartition

COMMANDS = ("list", "describe", "describe-producers")

PRODUCER_HEADERS = (
    "ProducerId",
    "ProducerEpoch",
    "LatestCoordinatorEpoch",
    "LastSequence",
    "LastTimestamp",
    "CurrentTransactionStartOffset",
)
LIST_HEADERS = ("TransactionalId", "Coordinator", "ProducerId", "TransactionState")
DESCRIBE_HEADERS = (
    "CoordinatorId",
    "TransactionalId",
    "ProducerId",
    "ProducerEpoch",
    "TransactionState",
    "TransactionTimeoutMs",
    "CurrentTransactionStartTimeMs",
    "TransactionDurationMs",
    "TopicPartitions",
)


class TransactionsAdmin(Protocol):
    """What the tool uses of :class:`~client.admin.AdminClient` (tests give a fake)."""

    async def describe_producers(
        self, partitions: Sequence[TopicPartition], *, broker_id: int | None = None
    ) -> dict[TopicPartition, list[ProducerState]]: ...

    async def list_transactions(self) -> dict[int, list[TransactionListing]]: ...

    async def describe_transactions(
        self, transactional_ids: Sequence[str]
    ) -> list[TransactionDescription]: ...


class CommandFailedError(Exception):
    """The one line the tool prints on stderr before exiting 1."""


def register(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "transactions",
        help="list and describe transactions and the producers of a partition (kafka-transactions)",
    )
    add_bootstrap_args(p)
    p.add_argument(
        "txn_command",
        nargs="?",
        choices=COMMANDS,
        metavar="COMMAND",
        help="Kafka's command form: list, describe, describe-producers (or the flags below)",
    )
    p.add_argument("--list", action="store_true", help="list transactions")
    p.add_argument(
        "--describe", action="store_true", help="describe the state of a transactional id"
    )
    p.add_argument(
        "--describe-producers",
        action="store_true",
        help="describe the states of active producers for a topic partition",
    )
    p.add_argument("--transactional-id", help="describe: transactional id")
    p.add_argument("--topic", help="describe-producers: topic name")
    p.add_argument("--partition", type=int, help="describe-producers: partition number")
    p.add_argument(
        "--broker-id",
        type=int,
        help="describe-producers: the producer state on this broker's replica (default: "
        "the leader's)",
    )
    p.set_defaults(func=run)


def command_of(args: argparse.Namespace) -> str:
    """The one command asked, by position or by flag; ValueError naming what is wrong."""
    asked = [c for c in COMMANDS if getattr(args, c.replace("-", "_"))]
    if args.txn_command is not None:
        asked.append(args.txn_command)
    if len(set(asked)) != 1:
        raise ValueError(
            "Command must include exactly one action: --list, --describe, --describe-producers"
        )
    command = asked[0]
    if command == "describe" and not args.transactional_id:
        raise ValueError("--describe requires --transactional-id")
    if command == "describe-producers" and (args.topic is None or args.partition is None):
        raise ValueError("--describe-producers requires --topic and --partition")
    return command


def run(args: argparse.Namespace) -> int:
    command = command_of(args)
    bootstrap = bootstrap_servers(args)
    try:
        lines = asyncio.run(_with_admin(command, args, bootstrap))
    except CommandFailedError as e:
        print(str(e), file=sys.stderr)
        return 1
    for line in lines:
        print(line)
    return 0


async def _with_admin(command: str, args: argparse.Namespace, bootstrap: list[str]) -> list[str]:
    transport = transport_for(args)
    admin = AdminClient(bootstrap, transport=transport, clock=SystemClock(), timeout_ms=30_000)
    try:
        return await execute(command, args, admin, now_ms=SystemClock().time_ms())
    finally:
        await transport.close()


async def execute(
    command: str, args: argparse.Namespace, admin: TransactionsAdmin, *, now_ms: int
) -> list[str]:
    """The lines the command prints; CommandFailedError with Kafka's message when it fails."""
    if command == "describe-producers":
        tp = TopicPartition(args.topic, args.partition)
        try:
            result = await admin.describe_producers([tp], broker_id=args.broker_id)
        except KafkaError as e:
            where = "leader" if args.broker_id is None else f"broker {args.broker_id}"
            raise CommandFailedError(
                f"Failed to describe producers for partition {tp} on {where}: {e}."
            ) from e
        return producers_table(result[tp])
    if command == "list":
        try:
            listings = await admin.list_transactions()
        except KafkaError as e:
            raise CommandFailedError(f"Failed to list transactions: {e}.") from e
        return list_table(listings)
    transactional_id: str = args.transactional_id
    try:
        (description,) = await admin.describe_transactions([transactional_id])
    except KafkaError as e:
        raise CommandFailedError(
            f"Failed to describe transaction state of transactional-id `{transactional_id}`: {e}."
        ) from e
    return describe_table(transactional_id, description, now_ms)


def producers_table(producers: Sequence[ProducerState]) -> list[str]:
    return pretty_table(
        PRODUCER_HEADERS,
        [
            (
                str(p.producer_id),
                str(p.producer_epoch),
                str(-1 if p.coordinator_epoch is None else p.coordinator_epoch),
                str(p.last_sequence),
                str(p.last_timestamp),
                _or_none(p.current_transaction_start_offset),
            )
            for p in producers
        ],
    )


def list_table(listings: dict[int, list[TransactionListing]]) -> list[str]:
    return pretty_table(
        LIST_HEADERS,
        [
            (t.transactional_id, str(broker), str(t.producer_id), t.state)
            for broker, items in sorted(listings.items())
            for t in items
        ],
    )


def describe_table(transactional_id: str, d: TransactionDescription, now_ms: int) -> list[str]:
    start = d.transaction_start_time_ms
    return pretty_table(
        DESCRIBE_HEADERS,
        [
            (
                str(d.coordinator_id),
                transactional_id,
                str(d.producer_id),
                str(d.producer_epoch),
                d.state,
                str(d.transaction_timeout_ms),
                _or_none(start),
                _or_none(None if start is None else now_ms - start),
                ",".join(str(tp) for tp in d.topic_partitions),
            )
        ],
    )


def pretty_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    """Kafka's ``prettyPrintTable``: each value padded to its column's width, then a tab."""
    widths = [max([len(h), *(len(r[i]) for r in rows)]) for i, h in enumerate(headers)]
    return [
        "".join(v.ljust(w) + "\t" for v, w in zip(r, widths, strict=True)) for r in [headers, *rows]
    ]


def _or_none(value: int | None) -> str:
    return "None" if value is None else str(value)
