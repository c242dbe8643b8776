"""``kafkasim topics``: kafka-topics.sh's --create/--list/--describe/--alter/--delete.

Flags, output lines and error lines are Kafka 3.x's, so a Kafka user's scripts and habits
carry over. A failed action prints ``Error while executing topic command : <message>`` (on
stderr: the one line a script needs) and exits 1; a bad flag combination prints one line
and exits 1 too.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import Any

from kafkasim.cli.connect import add_bootstrap_args, bootstrap_servers, transport_for
from kafkasim.client.admin import AdminClient, NewTopic, PartitionDescription, TopicDescription
from kafkasim.common.clock import SystemClock
from kafkasim.common.errors import (
    KafkaError,
    KafkasimError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)
from kafkasim.controller.api import INTERNAL_TOPICS

ACTIONS = ("create", "list", "describe", "alter", "delete")


class TopicCommandError(KafkasimError):
    """A topic command that cannot be done as asked (Kafka's IllegalArgumentException)."""


def register(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "topics", help="create, list, describe, alter and delete topics (kafka-topics)"
    )
    add_bootstrap_args(p)
    for action in ACTIONS:
        p.add_argument(f"--{action}", action="store_true", help=f"{action} topic(s)")
    p.add_argument("--topic", help="the topic to act on")
    p.add_argument("--partitions", type=int, help="partition count (create, alter)")
    p.add_argument("--replication-factor", type=int, help="replication factor (create)")
    p.add_argument(
        "--replica-assignment",
        metavar="B1:B2,B3:B4",
        help="manual assignment: per partition, colon-separated broker ids (create)",
    )
    p.add_argument(
        "--config", action="append", default=[], metavar="KEY=VALUE", help="a topic config"
    )
    p.add_argument("--if-not-exists", action="store_true", help="create only if absent")
    p.add_argument("--if-exists", action="store_true", help="alter/delete/describe if present")
    p.add_argument(
        "--exclude-internal",
        action="store_true",
        help="leave internal topics out of --list and --describe (listed by default)",
    )
    # Kafka allows one partition report at a time; each prints matching partitions only.
    report = p.add_mutually_exclusive_group()
    report.add_argument(
        "--under-replicated-partitions",
        action="store_true",
        help="--describe: partitions whose ISR is smaller than their replicas",
    )
    report.add_argument(
        "--unavailable-partitions",
        action="store_true",
        help="--describe: partitions without a leader",
    )
    report.add_argument(
        "--under-min-isr-partitions",
        action="store_true",
        help="--describe: partitions whose ISR is smaller than min.insync.replicas",
    )
    report.add_argument(
        "--at-min-isr-partitions",
        action="store_true",
        help="--describe: partitions whose ISR is exactly min.insync.replicas",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    chosen = [a for a in ACTIONS if getattr(args, a)]
    if len(chosen) != 1:
        raise ValueError(
            "Command must include exactly one action: --list, --describe, --create, --alter "
            "or --delete"
        )
    action = chosen[0]
    if action in ("create", "alter", "delete") and not args.topic:
        raise ValueError(f"--{action} requires --topic")
    if action == "alter" and args.partitions is None:
        raise ValueError("--alter requires --partitions (the new total partition count)")
    if args.replica_assignment and (
        args.partitions is not None or args.replication_factor is not None
    ):
        raise ValueError(
            "--replica-assignment cannot be used with --partitions or --replication-factor"
        )
    bootstrap = bootstrap_servers(args)
    try:
        for line in asyncio.run(_run(action, args, bootstrap)):
            print(line)
    except (KafkaError, TopicCommandError) as e:
        message = e.message if isinstance(e, KafkaError) else str(e)
        print(f"Error while executing topic command : {message}", file=sys.stderr)
        return 1
    return 0


async def _run(action: str, args: argparse.Namespace, bootstrap: list[str]) -> list[str]:
    transport = transport_for(args)
    admin = AdminClient(bootstrap, transport=transport, clock=SystemClock())
    try:
        if action == "create":
            return await _create(admin, args)
        if action == "list":
            names = await admin.list_topics()
            if args.exclude_internal:
                names = [n for n in names if n not in INTERNAL_TOPICS]
            return names
        if action == "describe":
            return await _describe(admin, args)
        try:
            if action == "alter":
                await admin.create_partitions(args.topic, args.partitions)
            else:
                await admin.delete_topics([args.topic])
        except UnknownTopicOrPartitionError:
            if not args.if_exists:
                raise TopicCommandError(
                    f"Topic '{args.topic}' does not exist as expected"
                ) from None
        return []  # Kafka 3.x prints nothing when an alter or delete succeeds
    finally:
        await transport.close()


def _parse_configs(items: list[str]) -> dict[str, str]:
    configs: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise TopicCommandError(
                f"Invalid topic config: all configs must be KEY=VALUE, got {item!r}"
            )
        configs[key.strip()] = value.strip()
    return configs


def _parse_assignment(text: str) -> dict[int, list[int]]:
    """Kafka's ``--replica-assignment 1:2,2:3``: partition 0 on brokers 1 and 2, and so on."""
    try:
        return {
            partition: [int(b) for b in brokers.split(":")]
            for partition, brokers in enumerate(text.split(","))
        }
    except ValueError:
        raise TopicCommandError(f"Invalid --replica-assignment {text!r}") from None


async def _create(admin: AdminClient, args: argparse.Namespace) -> list[str]:
    spec = NewTopic(
        args.topic,
        -1 if args.partitions is None else args.partitions,
        -1 if args.replication_factor is None else args.replication_factor,
        _parse_assignment(args.replica_assignment) if args.replica_assignment else None,
        _parse_configs(args.config),
    )
    try:
        await admin.create_topics([spec])
    except TopicAlreadyExistsError:
        if args.if_not_exists:
            return []
        raise
    return [f"Created topic {args.topic}."]


async def _describe(admin: AdminClient, args: argparse.Namespace) -> list[str]:
    try:
        topics = await admin.describe_topics([args.topic] if args.topic else None)
    except UnknownTopicOrPartitionError:
        if args.if_exists:
            return []
        raise TopicCommandError(f"Topic '{args.topic}' does not exist as expected") from None
    if args.exclude_internal:
        topics = [t for t in topics if not t.is_internal]
    # Kafka prints the topic line only when no partition report is asked for.
    reports = ("under_replicated_partitions", "unavailable_partitions")
    min_isr_reports = ("under_min_isr_partitions", "at_min_isr_partitions")
    filtered = any(getattr(args, r) for r in (*reports, *min_isr_reports))
    lines: list[str] = []
    for topic in topics:
        if not filtered:
            lines.append(await _topic_line(admin, topic))
        min_isr = None
        if any(getattr(args, r) for r in min_isr_reports):
            min_isr = await _min_isr(admin, topic.name)
        for p in topic.partitions:
            if not _reported(args, p, min_isr):
                continue
            leader = str(p.leader) if p.leader >= 0 else "none"
            lines.append(
                f"\tTopic: {topic.name}\tPartition: {p.partition}\tLeader: {leader}\t"
                f"Replicas: {_ids(p.replicas)}\tIsr: {_ids(p.isr)}"
            )
    return lines


def _reported(args: argparse.Namespace, p: PartitionDescription, min_isr: int | None) -> bool:
    """Whether the partition report asked for (if any) shows ``p``: Kafka's
    ``PartitionDescription`` tests (a leaderless partition is under its min ISR too)."""
    if args.under_replicated_partitions:
        return p.under_replicated
    if args.unavailable_partitions:
        return p.unavailable
    if args.under_min_isr_partitions:
        return p.unavailable or (min_isr is not None and len(p.isr) < min_isr)
    if args.at_min_isr_partitions:
        return min_isr is not None and len(p.isr) == min_isr
    return True


async def _min_isr(admin: AdminClient, topic: str) -> int | None:
    """The topic's effective min.insync.replicas (None when the broker does not say)."""
    for c in await admin.describe_configs(topic):
        if c.name == "min.insync.replicas":
            return int(c.value)
    return None


async def _topic_line(admin: AdminClient, topic: TopicDescription) -> str:
    # Kafka 3.x prints "TopicId: <uuid>" after the name; kafkasim topics have no id (as in
    # ZooKeeper-mode Kafka before 2.8), so the field is left out rather than faked.
    overrides = [c for c in await admin.describe_configs(topic.name) if not c.is_default]
    configs = ",".join(f"{c.name}={c.value}" for c in overrides)
    return (
        f"Topic: {topic.name}\tPartitionCount: {len(topic.partitions)}\t"
        f"ReplicationFactor: {topic.replication_factor}\tConfigs: {configs}"
    )


def _ids(ids: tuple[int, ...]) -> str:
    return ",".join(str(i) for i in ids)
