"""``kafkasim consumer-groups --reset-offsets``: Kafka's reset plan, its scopes and targets,
its dry run, and its CSV (``--export`` and ``--from-file``).

A reset needs a scope: ``--all-topics`` (every topic the group has committed offsets for),
``--topic TOPIC[:P1,P2]`` (repeatable), or ``--from-file`` (a CSV of the offsets to set,
which is scope and target at once). The target is one of ``--to-earliest``, ``--to-latest``,
``--to-offset N``, ``--shift-by N`` (from the committed offset), ``--to-datetime`` (the first
offset whose timestamp is at or after it; ``YYYY-MM-DDTHH:mm:SS.sss`` with an optional zone,
local time without one) and ``--by-duration PnDTnHnMnS`` (that long before now). As Kafka, a
target beyond the log is moved to its nearest end, and a time after the last record means the
log end. The plan (``GROUP TOPIC PARTITION NEW-OFFSET``) is printed; only ``--execute``
commits it. Without ``--execute`` or ``--dry-run`` Kafka's warning that nothing was done is
printed on stderr first; ``--dry-run`` is the same without the warning.

``--export`` prints the plan as Kafka's CSV instead: ``topic,partition,offset`` lines for one
group, ``group,topic,partition,offset`` for several; ``--from-file`` reads either form back.
"""

from __future__ import annotations

import argparse
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

from kafkasim.client.admin import AdminClient
from kafkasim.common.errors import KafkasimError
from kafkasim.common.sentinels import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP
from kafkasim.common.types import TopicPartition

NO_EXECUTE_WARNING = (
    "WARN: No action will be performed as the --execute option is missing. In a future major "
    "release, the default behavior of this command will be to prompt the user before executing "
    "the reset rather than doing a dry run. You should add the --dry-run option explicitly if "
    "you are scripting this command and want to keep the current default behavior without "
    "prompting."
)
TARGETS = ("to_earliest", "to_latest", "to_offset", "shift_by", "to_datetime", "by_duration")
_DURATION = re.compile(
    r"P(?:(?P<days>\d+)D)?(?:T(?:(?P<hours>\d+)H)?(?:(?P<minutes>\d+)M)?"
    r"(?:(?P<seconds>\d+(?:\.\d+)?)S)?)?",
    re.IGNORECASE,
)
Plan = dict[str, dict[TopicPartition, int]]


class ResetError(KafkasimError):
    """A reset that cannot be done as asked."""


def add_reset_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--all-topics",
        action="store_true",
        help="--reset-offsets: every topic the group has committed offsets for",
    )
    target = p.add_mutually_exclusive_group()
    target.add_argument("--to-earliest", action="store_true", help="to the log start")
    target.add_argument("--to-latest", action="store_true", help="to the log end")
    target.add_argument("--to-offset", type=int, metavar="OFFSET", help="to this offset")
    target.add_argument("--shift-by", type=int, metavar="N", help="committed offset + N (N<0 ok)")
    target.add_argument(
        "--to-datetime",
        metavar="YYYY-MM-DDTHH:mm:SS.sss",
        help="to the first record at or after this time (local time unless a zone is given)",
    )
    target.add_argument(
        "--by-duration", metavar="PnDTnHnMnS", help="to the first record this long ago"
    )
    target.add_argument(
        "--from-file", type=Path, metavar="CSV", help="the offsets of an --export CSV"
    )
    p.add_argument("--export", action="store_true", help="--reset-offsets: print the plan as CSV")
    p.add_argument("--execute", action="store_true", help="--reset-offsets: do it")
    p.add_argument("--dry-run", action="store_true", help="--reset-offsets: only show (default)")


def check_reset_args(args: argparse.Namespace) -> None:
    """ValueError, in Kafka's words, for a reset asked wrongly."""
    if args.execute and args.dry_run:
        raise ValueError("Option [reset-offsets] takes only one of --execute, --dry-run")
    if args.from_file is None:
        if not any(getattr(args, t) not in (None, False) for t in TARGETS):
            raise ValueError(
                "Option [reset-offsets] takes one of these options: --to-datetime, "
                "--by-duration, --to-earliest, --to-latest, --shift-by, --from-file, "
                "--to-offset"
            )
        if args.all_topics == bool(args.topic):
            raise ValueError("One of the reset scopes should be defined: --all-topics, --topic.")
    elif args.all_topics or args.topic:
        raise ValueError("--from-file takes its partitions from the file: no --all-topics, --topic")
    if args.to_offset is not None and args.to_offset < 0:
        raise ValueError(f"--to-offset must not be negative: {args.to_offset}")
    if args.to_datetime is not None:
        parse_datetime(args.to_datetime)
    if args.by_duration is not None:
        parse_duration(args.by_duration)


def parse_datetime(text: str) -> datetime:
    """Kafka's ``--to-datetime`` formats: ``YYYY-MM-DDTHH:mm:SS[.sss]`` optionally followed by
    ``Z`` or ``±HH:mm``; no zone means the local one."""
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(
            f"Error parsing timestamp {text!r}: expected YYYY-MM-DDTHH:mm:SS.sss, optionally "
            f"followed by Z or +HH:mm"
        ) from None
    if "T" not in text:
        raise ValueError(f"Error parsing timestamp {text!r}: the time (THH:mm:SS) is missing")
    return moment if moment.tzinfo is not None else moment.astimezone()


def parse_duration(text: str) -> timedelta:
    """ISO 8601's ``PnDTnHnMnS`` (Java's ``Duration.parse``), e.g. ``PT15M``, ``P1DT2H``."""
    match = _DURATION.fullmatch(text)
    if match is None or not any(match.groupdict().values()):
        raise ValueError(f"Error parsing duration {text!r}: expected PnDTnHnMnS, e.g. PT15M")
    parts = {k: float(v) for k, v in match.groupdict().items() if v}
    return timedelta(**parts)


def read_plan_file(path: Path) -> Plan:
    """An ``--export`` CSV: ``topic,partition,offset`` (the group is '') or
    ``group,topic,partition,offset`` lines; ResetError naming the first bad line."""
    plan: Plan = {}
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        cells = [c.strip() for c in line.split(",")]
        try:
            if len(cells) == 3:
                group, (topic, partition, offset) = "", cells
            elif len(cells) == 4:
                group, topic, partition, offset = cells
            else:
                raise ValueError
            plan.setdefault(group, {})[TopicPartition(topic, int(partition))] = int(offset)
        except ValueError:
            raise ResetError(
                f"{path}:{number}: expected topic,partition,offset or "
                f"group,topic,partition,offset, got {line!r}"
            ) from None
    if not plan:
        raise ResetError(f"{path}: no offsets in the file")
    return plan


async def plan_reset(
    admin: AdminClient, group: str, args: argparse.Namespace, from_file: Plan | None
) -> dict[TopicPartition, int]:
    """The new offset of each partition the reset covers, for an inactive ``group``."""
    [description] = await admin.describe_groups([group])
    if description.state not in ("Empty", "Dead"):
        raise ResetError(
            f"Assignments can only be reset if the group '{group}' is inactive, but the "
            f"current state is {description.state}."
        )
    committed = await admin.list_group_offsets(group)
    wanted: dict[TopicPartition, int] = {}
    if from_file is not None:
        wanted = from_file.get(group, from_file.get("", {}))
        if not wanted:
            raise ResetError(f"the file has no offsets for group '{group}'")
        partitions = sorted(wanted)
    elif args.all_topics:
        partitions = sorted(committed)
    else:
        partitions = []
        for topic_arg in args.topic:
            partitions += await _topic_partitions(admin, topic_arg)
    if not partitions:
        raise ResetError(f"no partitions to reset for group '{group}'")
    earliest = await admin.list_offsets(partitions, EARLIEST_TIMESTAMP)
    latest = await admin.list_offsets(partitions, LATEST_TIMESTAMP)
    by_time: dict[TopicPartition, int] = {}
    if args.to_datetime is not None or args.by_duration is not None:
        moment = (
            parse_datetime(args.to_datetime)
            if args.to_datetime is not None
            else datetime.now(UTC) - parse_duration(args.by_duration)
        )
        by_time = await admin.list_offsets(partitions, int(moment.timestamp() * 1000))
    new: dict[TopicPartition, int] = {}
    for tp in partitions:
        if from_file is not None:
            target = wanted[tp]
        elif args.to_earliest:
            target = earliest[tp]
        elif args.to_latest:
            target = latest[tp]
        elif args.to_offset is not None:
            target = args.to_offset
        elif args.shift_by is not None:
            target = committed.get(tp, latest[tp]) + args.shift_by
        else:  # a time: no record at or after it means the log end
            target = by_time[tp] if by_time.get(tp, -1) >= 0 else latest[tp]
        # As Kafka: a target outside the log is moved to its nearest end.
        new[tp] = min(max(target, earliest[tp]), latest[tp])
    if args.execute:
        await admin.alter_group_offsets(group, new)
    return new


async def _topic_partitions(admin: AdminClient, topic_arg: str) -> list[TopicPartition]:
    topic, _, listed = topic_arg.partition(":")
    if listed:
        try:
            return [TopicPartition(topic, int(p)) for p in listed.split(",")]
        except ValueError:
            raise ResetError(f"--topic expects TOPIC or TOPIC:P1,P2, got {topic_arg!r}") from None
    [described] = await admin.describe_topics([topic])
    return [TopicPartition(topic, p.partition) for p in described.partitions]
