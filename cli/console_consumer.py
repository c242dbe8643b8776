"""``kafkasim console-consumer``: print records of a topic, as kafka-console-consumer.

Without ``--partition`` every partition of the topic is read; ``--offset`` (earliest, latest
or a number, the latter two need ``--partition``) or ``--from-beginning`` say where to start
(default: latest). Each record is printed as Kafka's ``DefaultMessageFormatter`` prints it:
the enabled columns in the order timestamp (``CreateTime:<ms>``), ``Partition:<p>``,
``Offset:<o>``, key, value, separated by ``key.separator`` (default a tab). At the end
``Processed a total of N messages`` goes to stderr.

With ``--group G`` (and no ``--partition``) the consumer subscribes as a member of group G:
partitions come from the group, reading starts at the group's committed offsets (or per
``--from-beginning``/latest where it has none), and the offsets after the last record printed
are committed after every batch (so ``--max-messages`` never commits a record it did not
print). Without a group the partitions are assigned directly and nothing is committed (Kafka
would make up a throwaway group; we leave none behind).

``--isolation-level read_committed`` (as Kafka's tool) reads only the records of committed
transactions and of non-transactional producers, up to the last stable offset.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys
from collections.abc import Coroutine
from typing import Any, TextIO, TypeVar

from kafkasim.cli.connect import add_bootstrap_args, bootstrap_servers, security_properties
from kafkasim.cli.console_producer import parse_properties
from kafkasim.client.consumer import Consumer, ConsumerRecord
from kafkasim.common.clock import SystemClock
from kafkasim.common.errors import RequestTimedOutError
from kafkasim.common.rpc_grpc_client import client_transport
from kafkasim.common.types import TopicPartition
from kafkasim.storage.records.batch import TimestampType

T = TypeVar("T")

FORMATTER_PROPERTIES = (
    "print.timestamp",
    "print.partition",
    "print.offset",
    "print.key",
    "print.value",
    "key.separator",
    "line.separator",
)


def register(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "console-consumer", help="print records of a topic (kafka-console-consumer)"
    )
    add_bootstrap_args(p)
    p.add_argument("--topic", required=True, help="the topic to read")
    p.add_argument("--partition", type=int, help="read only this partition")
    p.add_argument("--offset", help="earliest, latest (default) or an offset; needs --partition")
    p.add_argument("--from-beginning", action="store_true", help="start at the earliest offset")
    p.add_argument("--max-messages", type=int, help="exit after this many records")
    p.add_argument("--timeout-ms", type=int, help="exit when no record came for this long")
    p.add_argument("--group", help="read as a member of this consumer group (commits offsets)")
    p.add_argument(
        "--isolation-level",
        choices=("read_uncommitted", "read_committed"),
        help="read_committed: only records of committed transactions (and non-transactional "
        "ones), up to the last stable offset; read_uncommitted (default): every record",
    )
    p.add_argument(
        "--property",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="formatter property: print.key, print.offset, print.timestamp, print.partition, "
        "print.value, key.separator, line.separator (repeatable)",
    )
    p.add_argument(
        "--consumer-property",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a consumer config key (repeatable)",
    )
    p.set_defaults(func=cmd_console_consumer)


class MessageFormatter:
    """Kafka's DefaultMessageFormatter: the enabled columns, ``key.separator`` between them."""

    def __init__(self, props: dict[str, str]) -> None:
        unknown = sorted(set(props) - set(FORMATTER_PROPERTIES))
        if unknown:
            raise ValueError(
                f"unknown --property {', '.join(unknown)} "
                f"(known: {', '.join(FORMATTER_PROPERTIES)})"
            )

        def flag(name: str, default: bool = False) -> bool:
            return props.get(name, str(default)).strip().lower() == "true"

        self.print_timestamp = flag("print.timestamp")
        self.print_partition = flag("print.partition")
        self.print_offset = flag("print.offset")
        self.print_key = flag("print.key")
        self.print_value = flag("print.value", True)
        self.key_separator = _unescape(props.get("key.separator", "\t"))
        self.line_separator = _unescape(props.get("line.separator", "\n"))

    def format(self, record: ConsumerRecord) -> str:
        columns: list[str] = []
        if self.print_timestamp:
            if record.timestamp_type is TimestampType.NO_TIMESTAMP_TYPE:
                columns.append("NO_TIMESTAMP")
            else:
                columns.append(f"{record.timestamp_type.kafka_name}:{record.timestamp}")
        if self.print_partition:
            columns.append(f"Partition:{record.partition}")
        if self.print_offset:
            columns.append(f"Offset:{record.offset}")
        if self.print_key:
            columns.append(_text(record.key))
        if self.print_value:
            columns.append(_text(record.value))
        # Kafka ends the line after the value, or after the last column if there is none.
        return self.key_separator.join(columns) + self.line_separator


def _text(data: bytes | None) -> str:
    return "null" if data is None else data.decode("utf-8", errors="replace")


def _unescape(text: str) -> str:
    """``\\t`` and ``\\n`` as typed on a command line mean tab and newline."""
    return text.replace("\\t", "\t").replace("\\n", "\n")


def cmd_console_consumer(args: argparse.Namespace) -> int:
    if args.group is not None and args.offset is not None:
        raise ValueError("Options group and offset cannot be specified together.")
    if args.group is not None and not args.group.strip():
        raise ValueError("--group must not be empty")
    if args.from_beginning and args.offset is not None:
        raise ValueError("Options from-beginning and offset cannot be specified together.")
    offset = args.offset
    if offset is not None:
        if args.partition is None:
            raise ValueError("The partition is required when offset is specified.")
        if offset not in ("earliest", "latest") and not (offset.isdigit()):
            raise ValueError(
                f"The provided offset value '{offset}' is incorrect. Valid values are "
                "'earliest', 'latest', or a non-negative long."
            )
    if args.max_messages is not None and args.max_messages < 1:
        raise ValueError("--max-messages must be at least 1")
    formatter = MessageFormatter(parse_properties(args.property, "--property"))
    config: dict[str, object] = {
        **security_properties(args),
        **parse_properties(args.consumer_property, "--consumer-property"),
        "bootstrap.servers": ",".join(bootstrap_servers(args)),
        "auto.offset.reset": "earliest" if args.from_beginning else "latest",
    }
    if args.isolation_level is not None:
        config["isolation.level"] = args.isolation_level
    if args.group is not None:
        config["group.id"] = args.group
        # Commit exactly what was printed (see consume), not positions past a --max-messages cut.
        config["enable.auto.commit"] = False
    start = "earliest" if args.from_beginning else (offset or "latest")
    return asyncio.run(consume(args, config, start, formatter, out=sys.stdout, err=sys.stderr))


async def consume(
    args: argparse.Namespace,
    config: dict[str, object],
    start: str,
    formatter: MessageFormatter,
    *,
    out: TextIO,
    err: TextIO,
) -> int:
    transport = client_transport(config)
    clock = SystemClock()
    processed = 0
    # --timeout-ms bounds the wait for the first record from the start, as Kafka's first
    # poll does: looking the topic up counts (an unreachable broker fails within it).
    deadline_ms = None if args.timeout_ms is None else clock.monotonic_ms() + args.timeout_ms
    # SIGTERM and Ctrl-C stop the reading between two batches: what was printed is counted
    # and committed, then the consumer leaves its group (close) and the count is printed.
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        async with Consumer(config, transport=transport, clock=clock) as consumer:
            try:
                async with asyncio.timeout(
                    None if args.timeout_ms is None else args.timeout_ms / 1000
                ):
                    started = await _unless_stopped(_start(consumer, args, start), stop)
            except TimeoutError:
                raise RequestTimedOutError(
                    f"Topic {args.topic} not present in metadata after {args.timeout_ms} ms."
                ) from None
            while started and (args.max_messages is None or processed < args.max_messages):
                wait_ms = args.timeout_ms or 1000
                if deadline_ms is not None:  # the first poll: what is left of it
                    wait_ms = max(deadline_ms - clock.monotonic_ms(), 0)
                    deadline_ms = None
                polled = await _unless_stopped(consumer.poll(wait_ms), stop)
                if polled is None:
                    break
                records = polled[0]
                if not records and args.timeout_ms is not None:
                    break
                if args.max_messages is not None:
                    records = records[: args.max_messages - processed]
                for record in records:
                    out.write(formatter.format(record))
                out.flush()
                processed += len(records)
                if args.group is not None and records:
                    printed = {r.topic_partition: r.offset + 1 for r in records}
                    await consumer.commit(printed)
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)
        await transport.close()
    print(f"Processed a total of {processed} messages", file=err)
    return 0


async def _unless_stopped(work: Coroutine[Any, Any, T], stop: asyncio.Event) -> tuple[T] | None:
    """``work``'s result (in a 1-tuple), or None if ``stop`` was set first (``work`` is then
    cancelled)."""
    task = asyncio.ensure_future(work)
    stopped = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait({task, stopped}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopped.cancel()
        if not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
    return (task.result(),) if task.done() and not task.cancelled() else None


async def _start(consumer: Consumer, args: argparse.Namespace, start: str) -> None:
    """Subscribe (``--group``) or assign the partitions and seek to ``start``."""
    partitions: list[int] = []
    if args.group is not None and args.partition is None:
        await consumer.partitions_for(args.topic)  # an unknown topic fails here
        consumer.subscribe([args.topic])
        return
    if args.partition is not None:
        partitions = [args.partition]
        known = await consumer.partitions_for(args.topic)
        if args.partition not in known:
            raise ValueError(
                f"partition {args.partition} of topic {args.topic} does not exist "
                f"(partitions: {', '.join(map(str, known))})"
            )
    else:
        partitions = await consumer.partitions_for(args.topic)
    tps = [TopicPartition(args.topic, p) for p in partitions]
    consumer.assign(tps)
    if start == "earliest":
        consumer.seek_to_beginning(tps)
    elif start == "latest":
        consumer.seek_to_end(tps)
    else:
        consumer.seek(tps[0], int(start))
