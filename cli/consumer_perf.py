"""``kafkasim consumer-perf-test``: Kafka's ConsumerPerformance, on ``client.consumer``.

Reads ``--messages`` records of ``--topic`` from the beginning, polling until that many have
arrived or no record came for ``--timeout`` ms, and prints Kafka's two lines: the header
(:data:`SUMMARY_HEADER`, ``start.time, end.time, data.consumed.in.MB, MB.sec, ...``) and the
result, e.g. ``2024-05-01 12:00:00:000, 2024-05-01 12:00:02:500, 9.5367, 3.8147, 100000,
40000.0000, 0, 2500, 3.8147, 40000.0000`` on one line.

As in Kafka: every record of the last poll counts (so nMsg may pass ``--messages``); data is
key plus value bytes, MB are MiB; times are the wall clock, in the local time zone, as
``yyyy-MM-dd HH:mm:ss:SSS``; figures have four decimals, rounded half up. With
``--show-detailed-stats`` a progress line (``time, threadId, ...`` header) is printed every
``--reporting-interval`` ms instead of the summary. When fewer records arrive before the
timeout, Kafka's ``WARNING: Exiting before consuming the expected number of messages`` line
comes before the summary (the exit status stays 0, as Kafka's).

With ``--group G`` the consumer subscribes as a member of group G, as Kafka's tool does:
rebalance.time.ms is the time the group took to give it its partitions, reading starts at the
group's committed offsets (earliest where it has none) and offsets are auto-committed unless
``enable.auto.commit=false``. Without ``--group`` every partition is assigned directly from
its beginning and nothing is committed (Kafka would join a throwaway ``perf-consumer-N``
group; we leave none behind). See :func:`start_consuming`.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import sys
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path
from typing import Any, Protocol, TextIO

from kafkasim.cli.connect import add_bootstrap_args, bootstrap_servers, security_properties
from kafkasim.cli.console_producer import parse_properties
from kafkasim.client.admin import AdminClient
from kafkasim.client.consumer import Consumer, ConsumerRebalanceListener
from kafkasim.common.clock import Clock, SystemClock
from kafkasim.common.config import read_properties
from kafkasim.common.rpc_grpc_client import client_transport
from kafkasim.common.types import TopicPartition

_TIMING_FIELDS = (
    "rebalance.time.ms",
    "fetch.time.ms",
    "fetch.MB.sec",
    "fetch.nMsg.sec",
)
SUMMARY_HEADER = ", ".join(
    (
        "start.time",
        "end.time",
        "data.consumed.in.MB",
        "MB.sec",
        "data.consumed.in.nMsg",
        "nMsg.sec",
        *_TIMING_FIELDS,
    )
)
DETAILED_HEADER = ", ".join(
    (
        "time",
        "threadId",
        "data.consumed.in.MB",
        "MB.sec",
        "data.consumed.in.nMsg",
        "nMsg.sec",
        *_TIMING_FIELDS,
    )
)
POLL_TIMEOUT_MS = 100  # Kafka's tool polls in 100 ms steps
FETCH_SIZE_BYTES_DEFAULT = 1024 * 1024
TIMEOUT_MS_DEFAULT = 10_000
REPORTING_INTERVAL_MS_DEFAULT = 5_000
CLIENT_ID_DEFAULT = "perf-consumer-client"
_MIB = 1024 * 1024
_FOUR_PLACES = Decimal("0.0001")


def register(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "consumer-perf-test", help="measure consumer throughput (Kafka's tool)"
    )
    add_bootstrap_args(p)
    p.add_argument("--topic", help="the topic to consume from")
    p.add_argument("--messages", metavar="COUNT", help="REQUIRED: the number of records to consume")
    p.add_argument(
        "--timeout",
        metavar="MS",
        default=str(TIMEOUT_MS_DEFAULT),
        help=f"longest time between records (default {TIMEOUT_MS_DEFAULT})",
    )
    p.add_argument(
        "--fetch-size",
        metavar="BYTES",
        help="max.partition.fetch.bytes "
        f"(default: the consumer config's, else {FETCH_SIZE_BYTES_DEFAULT})",
    )
    p.add_argument(
        "--reporting-interval",
        metavar="MS",
        default=str(REPORTING_INTERVAL_MS_DEFAULT),
        help="time between progress lines with --show-detailed-stats "
        f"(default {REPORTING_INTERVAL_MS_DEFAULT})",
    )
    p.add_argument(
        "--show-detailed-stats",
        action="store_true",
        help="print a progress line every reporting interval instead of the summary",
    )
    p.add_argument("--hide-header", action="store_true", help="do not print the header line")
    p.add_argument("--group", help="read as a member of this consumer group (default: no group)")
    p.add_argument(
        "--consumer.config", dest="consumer_config", type=Path, help="a consumer config file"
    )
    p.add_argument(
        "--consumer-props",
        nargs="+",
        default=[],
        metavar="KEY=VALUE",
        help="consumer configs over those of --consumer.config",
    )
    p.add_argument(
        "--poll-mode",
        choices=("batch", "records"),
        default="batch",
        help="kafkasim's own: 'batch' (default) reads columns with poll_batch; 'records' "
        "reads one ConsumerRecord per record with poll (to compare)",
    )
    p.set_defaults(func=run)


# -- Kafka's output ------------------------------------------------------------------------------


def format_time(epoch_ms: int) -> str:
    """Java's ``SimpleDateFormat("yyyy-MM-dd HH:mm:ss:SSS")``, in the local time zone."""
    seconds, millis = divmod(epoch_ms, 1000)
    return f"{datetime.fromtimestamp(seconds):%Y-%m-%d %H:%M:%S}:{millis:03d}"


def format_figure(value: float) -> str:
    """Java's ``%.4f``: half-up rounding of the shortest decimal form of the double, and
    ``NaN``/``Infinity`` where a rate divides by zero elapsed time."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    return f"{Decimal(repr(value)).quantize(_FOUR_PLACES, rounding=ROUND_HALF_UP):f}"


def _ratio(numerator: float, denominator: float) -> float:
    """Java's double division: x/0 is ±Infinity, 0/0 is NaN."""
    if denominator == 0:
        if numerator == 0:
            return math.nan
        return math.copysign(math.inf, numerator)
    return numerator / denominator


def summary_line(
    *, start_ms: int, end_ms: int, bytes_read: int, messages_read: int, rebalance_ms: int
) -> str:
    """The result line: totals over the whole run; fetch.* leave the rebalance time out."""
    elapsed_s = (end_ms - start_ms) / 1000.0
    fetch_ms = end_ms - start_ms - rebalance_ms
    mb_read = bytes_read / _MIB
    return ", ".join(
        (
            format_time(start_ms),
            format_time(end_ms),
            format_figure(mb_read),
            format_figure(_ratio(mb_read, elapsed_s)),
            str(messages_read),
            format_figure(_ratio(messages_read, elapsed_s)),
            str(rebalance_ms),
            str(fetch_ms),
            format_figure(_ratio(mb_read, fetch_ms / 1000.0)),
            format_figure(_ratio(messages_read, fetch_ms / 1000.0)),
        )
    )


@dataclass(frozen=True, slots=True)
class Progress:
    """Totals at the end of a reporting interval, and at its start (``last_*``)."""

    bytes_read: int
    last_bytes_read: int
    messages_read: int
    last_messages_read: int
    start_ms: int
    end_ms: int
    rebalance_ms: int = 0


def progress_line(p: Progress, thread_id: int = 0) -> str:
    """A --show-detailed-stats line: totals so far, rates over the interval (the fetch rates
    leave the interval's rebalance time out, and are 0 when nothing else is left)."""
    elapsed_ms = p.end_ms - p.start_ms
    interval_mb = (p.bytes_read - p.last_bytes_read) / _MIB
    interval_messages = p.messages_read - p.last_messages_read
    fetch_ms = elapsed_ms - p.rebalance_ms
    fetch_mb_per_s = 0.0 if fetch_ms <= 0 else 1000.0 * interval_mb / fetch_ms
    fetch_messages_per_s = 0.0 if fetch_ms <= 0 else 1000.0 * interval_messages / fetch_ms
    return ", ".join(
        (
            format_time(p.end_ms),
            str(thread_id),
            format_figure(p.bytes_read / _MIB),
            format_figure(_ratio(1000.0 * interval_mb, elapsed_ms)),
            str(p.messages_read),
            format_figure(_ratio(interval_messages, elapsed_ms) * 1000.0),
            str(p.rebalance_ms),
            str(fetch_ms),
            format_figure(fetch_mb_per_s),
            format_figure(fetch_messages_per_s),
        )
    )


def timeout_warning(timeout_ms: int) -> str:
    return (
        "WARNING: Exiting before consuming the expected number of messages: timeout "
        f"({timeout_ms} ms) exceeded. You can use the --timeout option to increase the timeout."
    )


# -- the measurement -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PerfSettings:
    """The validated command line."""

    topic: str
    messages: int
    timeout_ms: int
    reporting_interval_ms: int
    show_detailed_stats: bool
    hide_header: bool
    group: str | None
    poll_records: bool = False  # --poll-mode records: poll() instead of poll_batch()


class Columns(Protocol):
    """What the measurement reads of a poll's records: one partition's keys and values as
    columns (a ``RecordColumns`` of ``Consumer.poll_batch`` has them)."""

    @property
    def keys(self) -> Sequence[bytes | None]: ...

    @property
    def values(self) -> Sequence[bytes | None]: ...


def _data_bytes(column: Sequence[bytes | None]) -> int:
    return sum(map(len, filter(None, column)))


@dataclass(frozen=True, slots=True)
class Totals:
    messages_read: int
    bytes_read: int


async def consume_loop(
    poll: Callable[[int], Awaitable[Sequence[Columns]]],
    clock: Clock,
    settings: PerfSettings,
    on_progress: Callable[[Progress], None],
) -> Totals:
    """Kafka's loop: poll in 100 ms steps until ``messages`` records have come or none came
    for longer than ``timeout_ms``; every record of a poll counts. ``poll`` returns columns
    (``Consumer.poll_batch``): records are counted per column, not one by one. Kafka checks
    the reporting interval per record against the poll's time, so a report due in a poll
    comes after its first record: ``on_progress`` gets those totals, as Kafka prints them."""
    messages_read = bytes_read = last_messages_read = last_bytes_read = 0
    now_ms = last_report_ms = last_consumed_ms = clock.time_ms()
    while messages_read < settings.messages and now_ms - last_consumed_ms <= settings.timeout_ms:
        parts = await poll(POLL_TIMEOUT_MS)
        now_ms = clock.time_ms()
        for part in parts:
            count = len(part.values)
            if not count:
                continue
            last_consumed_ms = now_ms
            if now_ms - last_report_ms >= settings.reporting_interval_ms:
                messages_read += 1
                bytes_read += len(part.keys[0] or b"") + len(part.values[0] or b"")
                on_progress(
                    Progress(
                        bytes_read,
                        last_bytes_read,
                        messages_read,
                        last_messages_read,
                        last_report_ms,
                        now_ms,
                    )
                )
                last_report_ms = now_ms
                last_messages_read = messages_read
                last_bytes_read = bytes_read
                count -= 1
                bytes_read -= len(part.keys[0] or b"") + len(part.values[0] or b"")
            messages_read += count
            bytes_read += _data_bytes(part.keys) + _data_bytes(part.values)
    return Totals(messages_read, bytes_read)


def _poll_records(consumer: Consumer) -> Callable[[int], Awaitable[Sequence[Columns]]]:
    """``poll`` (one ConsumerRecord per record) seen as one part of columns."""

    async def poll(timeout_ms: int) -> Sequence[Columns]:
        records = await consumer.poll(timeout_ms)
        return [_Part([r.key for r in records], [r.value for r in records])]

    return poll


@dataclass(frozen=True, slots=True)
class _Part:
    keys: list[bytes | None]
    values: list[bytes | None]


class JoinTimer(ConsumerRebalanceListener):
    """rebalance.time.ms: from the subscription to each assignment, summed (Kafka's joinTime)."""

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self.joining_since: int | None = clock.monotonic_ms()
        self.join_ms = 0

    async def on_partitions_revoked(self, partitions: list[TopicPartition]) -> None:
        self.joining_since = self._clock.monotonic_ms()

    async def on_partitions_assigned(self, partitions: list[TopicPartition]) -> None:
        if self.joining_since is not None:
            self.join_ms += self._clock.monotonic_ms() - self.joining_since
            self.joining_since = None


async def start_consuming(
    consumer: Consumer, admin: AdminClient, topic: str, group: str | None, clock: Clock
) -> JoinTimer | None:
    """Where the records come from: with ``group``, the group's share of ``topic``
    (subscribe; the returned timer measures the rebalances); else every partition of
    ``topic`` from its beginning. An unknown topic fails at once."""
    (description,) = await admin.describe_topics([topic])
    if group is not None:
        timer = JoinTimer(clock)
        consumer.subscribe([topic], listener=timer)
        return timer
    partitions = [TopicPartition(topic, p.partition) for p in description.partitions]
    consumer.assign(partitions)
    consumer.seek_to_beginning(partitions)
    return None


async def measure(
    settings: PerfSettings,
    config: dict[str, object],
    bootstrap: list[str],
    clock: Clock,
    out: TextIO,
) -> None:
    def report(progress: Progress) -> None:
        if settings.show_detailed_stats:
            print(progress_line(progress), file=out, flush=True)

    transport = client_transport(config)
    try:
        admin = AdminClient(bootstrap, transport=transport, clock=clock)
        consumer = Consumer(config, transport=transport, clock=clock)
        try:
            start_ms = clock.time_ms()
            timer = await start_consuming(consumer, admin, settings.topic, settings.group, clock)
            # After the topic is known to exist: bad input gets its one error line only.
            if not settings.hide_header:
                print(DETAILED_HEADER if settings.show_detailed_stats else SUMMARY_HEADER, file=out)
            poll = _poll_records(consumer) if settings.poll_records else consumer.poll_batch
            totals = await consume_loop(poll, clock, settings, report)
            end_ms = clock.time_ms()
        finally:
            await consumer.close()
    finally:
        await transport.close()
    if totals.messages_read < settings.messages:
        print(timeout_warning(settings.timeout_ms), file=out)
    if not settings.show_detailed_stats:
        print(
            summary_line(
                start_ms=start_ms,
                end_ms=end_ms,
                bytes_read=totals.bytes_read,
                messages_read=totals.messages_read,
                rebalance_ms=timer.join_ms if timer is not None else 0,
            ),
            file=out,
            flush=True,
        )


# -- the command line ----------------------------------------------------------------------------


def _whole_number(flag: str, text: str | None, *, low: int) -> int:
    if text is None:
        raise ValueError(f'Missing required argument "[{flag.lstrip("-")}]"')
    try:
        value = int(text)
    except ValueError:
        raise ValueError(f"{flag} expects a whole number, got {text!r}") from None
    if value < low:
        raise ValueError(f"{flag} must be at least {low}, got {value}")
    return value


def settings_from(args: argparse.Namespace) -> PerfSettings:
    if not args.topic:
        raise ValueError('Missing required argument "[topic]"')
    return PerfSettings(
        topic=args.topic,
        messages=_whole_number("--messages", args.messages, low=0),
        timeout_ms=_whole_number("--timeout", args.timeout, low=0),
        reporting_interval_ms=_whole_number("--reporting-interval", args.reporting_interval, low=1),
        show_detailed_stats=args.show_detailed_stats,
        hide_header=args.hide_header,
        group=args.group,
        poll_records=getattr(args, "poll_mode", "batch") == "records",
    )


def consumer_config(args: argparse.Namespace, bootstrap: list[str]) -> dict[str, object]:
    """The config file, then --consumer-props over it, then the tool's own settings (as Kafka
    puts its flags over the file): the bootstrap servers, reading from the earliest offset,
    --fetch-size when given (else the config's, else 1 MiB), client.id unless set."""
    config: dict[str, object] = security_properties(args)
    if args.consumer_config is not None:
        config.update(read_properties(args.consumer_config))
    config.update(parse_properties(args.consumer_props, "--consumer-props"))
    config["bootstrap.servers"] = ",".join(bootstrap)
    config["auto.offset.reset"] = "earliest"
    if args.group is not None:
        config["group.id"] = args.group
    if args.fetch_size is not None:
        config["max.partition.fetch.bytes"] = _whole_number("--fetch-size", args.fetch_size, low=0)
    config.setdefault("max.partition.fetch.bytes", FETCH_SIZE_BYTES_DEFAULT)
    if not config.get("client.id"):
        config["client.id"] = CLIENT_ID_DEFAULT
    return config


def run(args: argparse.Namespace, out: TextIO | None = None) -> int:
    settings = settings_from(args)
    bootstrap = bootstrap_servers(args)
    config = consumer_config(args, bootstrap)
    asyncio.run(measure(settings, config, bootstrap, SystemClock(), out or sys.stdout))
    return 0
