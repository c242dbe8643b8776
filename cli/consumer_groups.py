"""``kafkasim consumer-groups``: kafka-consumer-groups.sh's --list, --describe (offsets,
--members, --state; ``--verbose`` adds the members' assignments), --delete, --delete-offsets
(a group's committed offsets of some topics or partitions, with Kafka's TOPIC PARTITION STATUS
table) and --reset-offsets (``cli.consumer_groups_reset``: scopes, targets, dry run, CSV).

The tables are Kafka's: ``--describe --group G`` prints, per partition the group has a member
on or a committed offset for, GROUP TOPIC PARTITION CURRENT-OFFSET LOG-END-OFFSET LAG
CONSUMER-ID HOST CLIENT-ID; ``-`` where there is no commit or no member. LOG-END-OFFSET is the
high watermark (what a consumer can read) and LAG its distance from the committed offset.
Failures print ``Error: <message>`` on stderr and exit 1.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Sequence
from typing import Any

from kafkasim.cli.connect import add_bootstrap_args, bootstrap_servers, transport_for
from kafkasim.cli.consumer_groups_reset import (
    NO_EXECUTE_WARNING,
    Plan,
    ResetError,
    add_reset_args,
    check_reset_args,
    plan_reset,
    read_plan_file,
)
from kafkasim.client.admin import AdminClient
from kafkasim.client.admin_groups import GroupDescription
from kafkasim.common.clock import SystemClock
from kafkasim.common.errors import KafkaError, KafkasimError
from kafkasim.common.sentinels import LATEST_TIMESTAMP
from kafkasim.common.types import TopicPartition


class GroupCommandError(KafkasimError):
    """A group command that cannot be done as asked."""


def register(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "consumer-groups",
        help="list, describe, delete consumer groups and reset their offsets "
        "(kafka-consumer-groups)",
    )
    add_bootstrap_args(p)
    p.add_argument("--list", action="store_true", help="list every group")
    p.add_argument("--describe", action="store_true", help="describe groups")
    p.add_argument("--delete", action="store_true", help="delete empty groups")
    p.add_argument("--reset-offsets", action="store_true", help="reset a group's offsets")
    p.add_argument(
        "--delete-offsets",
        action="store_true",
        help="delete a group's committed offsets of --topic T[:P1,P2]",
    )
    p.add_argument("--group", action="append", default=[], help="a group (repeatable)")
    p.add_argument("--all-groups", action="store_true", help="every group")
    p.add_argument("--members", action="store_true", help="--describe: the members")
    p.add_argument("--state", action="store_true", help="--describe: the group's state")
    p.add_argument("--offsets", action="store_true", help="--describe: offsets (the default)")
    p.add_argument(
        "--verbose",
        dest="group_verbose",  # not the top-level -v/--verbose (logging)
        action="store_true",
        help="--describe --members: also each member's assigned partitions",
    )
    p.add_argument(
        "--topic",
        action="append",
        default=[],
        help="--reset-offsets, --delete-offsets: TOPIC or TOPIC:P1,P2 (repeatable)",
    )
    add_reset_args(p)
    p.set_defaults(func=run)


ACTIONS = ("list", "describe", "delete", "reset_offsets", "delete_offsets")


def run(args: argparse.Namespace) -> int:
    actions = [a for a in ACTIONS if getattr(args, a)]
    if len(actions) != 1:
        raise ValueError(
            "Command must include exactly one action: --list, --describe, --delete, "
            "--reset-offsets, --delete-offsets"
        )
    action = actions[0]
    if action == "delete_offsets":
        if len(args.group) != 1 or args.all_groups or not args.topic:
            raise ValueError(
                "Option [delete-offsets] takes the following options: [bootstrap-server], "
                "[group], [topic] (one --group, at least one --topic)"
            )
        return _run_delete_offsets(args, bootstrap_servers(args))
    if action != "list" and not args.group and not args.all_groups:
        raise ValueError(f"--{action.replace('_', '-')} requires --group or --all-groups")
    if action == "reset_offsets":
        check_reset_args(args)
    if args.group_verbose and action != "describe":
        raise ValueError("Option [verbose] can be used only with [describe]")
    bootstrap = bootstrap_servers(args)
    try:
        lines = asyncio.run(_run(action, args, bootstrap))
    except (KafkaError, GroupCommandError, ResetError) as e:
        # A Kafka error with its name (GROUP_ID_NOT_FOUND: group 'g'), as Kafka's tool prints
        # the exception class.
        print(f"Error: {e}", file=sys.stderr)
        return 1
    for line in lines:
        print(line)
    return 0


async def _run(action: str, args: argparse.Namespace, bootstrap: list[str]) -> list[str]:
    transport = transport_for(args)
    admin = AdminClient(bootstrap, transport=transport, clock=SystemClock(), timeout_ms=30_000)
    try:
        if action == "list":
            return [g.group_id for g in await admin.list_groups()]
        groups = list(args.group)
        if args.all_groups:
            groups = [g.group_id for g in await admin.list_groups()]
        if action == "delete":
            await admin.delete_groups(groups)
            quoted = ", ".join(f"'{g}'" for g in groups)
            return [f"Deletion of requested consumer groups ({quoted}) was successful."]
        if action == "reset_offsets":
            from_file = None if args.from_file is None else read_plan_file(args.from_file)
            plans = {group: await plan_reset(admin, group, args, from_file) for group in groups}
            return plan_lines(plans, args)
        lines: list[str] = []
        for description in await admin.describe_groups(groups):
            if args.members:
                lines.extend(_members(description, verbose=args.group_verbose))
            elif args.state:
                lines.extend(await _state(admin, description))
            else:
                lines.extend(await _offsets(admin, description))
        return lines
    finally:
        await transport.close()


# -- --delete-offsets (Kafka's ConsumerGroupCommand.deleteOffsets) -----------------------------

# The group-level error lines, by error name (other names: "Encounter some unknown error").
_DELETE_OFFSETS_ERRORS = {
    "INVALID_GROUP_ID": "'{group}' is not valid.",
    "GROUP_ID_NOT_FOUND": "'{group}' does not exist.",
    "GROUP_AUTHORIZATION_FAILED": "Access to '{group}' is not authorized.",
    "NON_EMPTY_GROUP": (
        "Deleting offsets of a consumer group '{group}' is forbidden if the group is not empty."
    ),
}
_PARTITION_LEVEL = ("GROUP_SUBSCRIBED_TO_TOPIC", "TOPIC_AUTHORIZATION_FAILED")


def _run_delete_offsets(args: argparse.Namespace, bootstrap: list[str]) -> int:
    """Kafka's output: a first line (success, or ``Error: ...`` on stderr and exit 1), then
    TOPIC PARTITION STATUS per partition (``Not Provided`` for a topic that could not be
    described)."""
    group, topics = args.group[0], list(args.topic)
    try:
        top, results = asyncio.run(_delete_offsets(group, topics, bootstrap))
    except (KafkaError, GroupCommandError) as e:
        print(f"Error: {e}", file=sys.stderr)
        return 1
    if top is None:
        print(f"Request succeed for deleting offsets with topic {', '.join(topics)} group {group}")
    else:
        name = top.error_name
        if name in _DELETE_OFFSETS_ERRORS:
            message = _DELETE_OFFSETS_ERRORS[name].format(group=group)
        elif name in (*_PARTITION_LEVEL, "UNKNOWN_TOPIC_OR_PARTITION"):
            message = "Encounter some partition level error, see the follow-up details:"
        else:
            message = f"Encounter some unknown error: {name}"
        print(f"Error: {message}", file=sys.stderr)
    print(f"\n{'TOPIC':<30} {'PARTITION':<15} {'STATUS':<15}")
    for tp in sorted(results, key=lambda tp: tp.topic + str(tp.partition)):
        error = results[tp]
        partition = str(tp.partition) if tp.partition >= 0 else "Not Provided"
        status = "Successful" if error is None else f"Error: {error}"
        print(f"{tp.topic:<30} {partition:<15} {status:<15}")
    return 0 if top is None else 1


async def _delete_offsets(
    group: str, topics: list[str], bootstrap: list[str]
) -> tuple[KafkaError | None, dict[TopicPartition, KafkaError | None]]:
    """The group-level error (a partition's, when only partitions failed) and the outcome of
    each partition; a topic named without partitions is described for them (failing: its
    error under partition -1)."""
    results: dict[TopicPartition, KafkaError | None] = {}
    partitions: list[TopicPartition] = []
    async with AdminClient(
        {"bootstrap.servers": bootstrap, "default.api.timeout.ms": 30_000}
    ) as admin:
        for topic_arg in topics:
            topic, _, listed = topic_arg.partition(":")
            if listed:
                try:
                    partitions.extend(TopicPartition(topic, int(p)) for p in listed.split(","))
                except ValueError:
                    raise GroupCommandError(
                        f"--topic expects TOPIC or TOPIC:P1,P2, got {topic_arg!r}"
                    ) from None
                continue
            try:
                [described] = await admin.describe_topics([topic])
            except KafkaError as e:
                results[TopicPartition(topic, -1)] = e
                continue
            partitions.extend(TopicPartition(topic, p.partition) for p in described.partitions)
        try:
            outcome = await admin.delete_consumer_group_offsets(group, partitions)
        except KafkaError as e:
            return e, results
    results.update(outcome)
    failed = [e for e in outcome.values() if e is not None]
    return (failed[0] if failed else None), results


def table(rows: Sequence[Sequence[str]], fixed: dict[int, int] | None = None) -> list[str]:
    """Columns left-aligned, each as wide as its widest cell (Kafka's format strings)."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for column, width in (fixed or {}).items():
        widths[column] = max(widths[column], width)
    return [
        " ".join(cell.ljust(widths[i]) for i, cell in enumerate(row[:-1])) + " " + row[-1]
        for row in rows
    ]


def _missing(description: GroupDescription) -> None:
    if description.state == "Dead":
        raise GroupCommandError(f"Consumer group '{description.group_id}' does not exist.")


async def _offsets(admin: AdminClient, description: GroupDescription) -> list[str]:
    _missing(description)
    group = description.group_id
    committed = await admin.list_group_offsets(group)
    owner: dict[TopicPartition, tuple[str, str, str]] = {}
    for m in description.members:
        for tp in m.assignment:
            owner[tp] = (m.member_id, m.host, m.client_id)
    partitions = sorted(set(committed) | set(owner))
    ends = await admin.list_offsets(partitions, LATEST_TIMESTAMP) if partitions else {}
    lines = [""]
    if not description.members:
        lines.append(f"Consumer group '{group}' has no active members.")
        lines.append("")
    header = (
        "GROUP",
        "TOPIC",
        "PARTITION",
        "CURRENT-OFFSET",
        "LOG-END-OFFSET",
        "LAG",
        "CONSUMER-ID",
        "HOST",
        "CLIENT-ID",
    )
    rows: list[tuple[str, ...]] = [header]
    for tp in partitions:
        current = committed.get(tp)
        end = ends.get(tp)
        lag = "-" if current is None or end is None else str(max(0, end - current))
        member_id, host, client_id = owner.get(tp, ("-", "-", "-"))
        rows.append(
            (
                group,
                tp.topic,
                str(tp.partition),
                "-" if current is None else str(current),
                "-" if end is None else str(end),
                lag,
                member_id,
                host,
                client_id,
            )
        )
    return lines + table(rows, {2: 10, 3: 15, 4: 15, 5: 15})


def _members(description: GroupDescription, *, verbose: bool = False) -> list[str]:
    """Kafka's members table; ``verbose`` adds ASSIGNMENT: ``topic(p1,p2)`` per topic, or
    ``-`` for a member without partitions."""
    _missing(description)
    lines = [""]
    if not description.members:
        return [*lines, f"Consumer group '{description.group_id}' has no active members."]
    header = ("GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS")
    rows: list[tuple[str, ...]] = [(*header, "ASSIGNMENT") if verbose else header]
    for m in sorted(description.members, key=lambda m: m.member_id):
        row = (description.group_id, m.member_id, m.host, m.client_id, str(len(m.assignment)))
        rows.append((*row, _assignment(m.assignment)) if verbose else row)
    return lines + table(rows)


def _assignment(partitions: Sequence[TopicPartition]) -> str:
    by_topic: dict[str, list[int]] = {}
    for tp in sorted(partitions):
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    if not by_topic:
        return "-"
    return ",".join(f"{t}({','.join(map(str, ps))})" for t, ps in by_topic.items())


async def _state(admin: AdminClient, description: GroupDescription) -> list[str]:
    _missing(description)
    cluster = await admin.describe_cluster()
    host = next(
        (f"{b.host}:{b.port}" for b in cluster.brokers if b.node_id == description.coordinator),
        "-",
    )
    rows: list[tuple[str, ...]] = [
        ("GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS"),
        (
            description.group_id,
            f"{host} ({description.coordinator})",
            description.assignor or "",
            description.state,
            str(len(description.members)),
        ),
    ]
    return ["", *table(rows)]


def plan_lines(plans: Plan, args: argparse.Namespace) -> list[str]:
    """The reset plan as Kafka prints it: a table per group, or the CSV of ``--export``;
    Kafka's warning (stderr) first when neither --execute nor --dry-run was given."""
    if not args.execute and not args.dry_run:
        print(NO_EXECUTE_WARNING, file=sys.stderr)
    if args.export:
        several = len(plans) > 1
        return [
            (f"{group}," if several else "") + f"{tp.topic},{tp.partition},{offset}"
            for group, new in plans.items()
            for tp, offset in sorted(new.items())
        ]
    lines: list[str] = []
    for group, new in plans.items():
        rows: list[tuple[str, ...]] = [("GROUP", "TOPIC", "PARTITION", "NEW-OFFSET")]
        rows += [(group, tp.topic, str(tp.partition), str(o)) for tp, o in sorted(new.items())]
        lines += ["", *table(rows, {2: 10})]
    return lines
