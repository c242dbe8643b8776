"""``kafkasim console-producer``: lines from stdin as records, as kafka-console-producer.

Each line (without its newline) is one record's value; with ``--property parse.key=true`` the
line is split at the first ``key.separator`` (default a tab) into key and value, and a line
without the separator is an error (Kafka's text), unless ``ignore.error=true`` makes it a
keyless record. Everything read is flushed at end of input; a record that could not be
delivered is reported on stderr and makes the exit status non-zero.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import Any, TextIO

from kafkasim.cli.connect import add_bootstrap_args, bootstrap_servers, security_properties
from kafkasim.client.producer import Producer, RecordMetadata
from kafkasim.common.clock import SystemClock
from kafkasim.common.errors import KafkasimError
from kafkasim.common.rpc_grpc_client import client_transport

READER_PROPERTIES = ("parse.key", "key.separator", "ignore.error")


def register(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "console-producer", help="send lines from stdin as records (kafka-console-producer)"
    )
    add_bootstrap_args(p)
    p.add_argument("--topic", required=True, help="the topic to produce to")
    p.add_argument(
        "--property",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="line reader property: parse.key, key.separator, ignore.error (repeatable)",
    )
    p.add_argument(
        "--producer-property",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a producer config key, e.g. acks=all (repeatable)",
    )
    p.add_argument("--request-required-acks", help="acks of the produce requests (overrides acks)")
    p.add_argument(
        "--max-block-ms",
        type=int,
        help="how long a record waits for its topic's metadata (max.block.ms, default 60000)",
    )
    p.set_defaults(func=cmd_console_producer)


def parse_properties(items: list[str], flag: str) -> dict[str, str]:
    """``KEY=VALUE`` items of a repeatable flag (the value may contain '=')."""
    props: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"{flag} expects KEY=VALUE, got {item!r}")
        props[key.strip()] = value
    return props


def cmd_console_producer(args: argparse.Namespace) -> int:
    reader = parse_properties(args.property, "--property")
    unknown = sorted(set(reader) - set(READER_PROPERTIES))
    if unknown:
        raise ValueError(
            f"unknown --property {', '.join(unknown)} (known: {', '.join(READER_PROPERTIES)})"
        )
    config: dict[str, object] = {
        **security_properties(args),
        "bootstrap.servers": ",".join(bootstrap_servers(args)),
        **parse_properties(args.producer_property, "--producer-property"),
    }
    if args.request_required_acks is not None:
        config["acks"] = args.request_required_acks
    if args.max_block_ms is not None:
        config["max.block.ms"] = args.max_block_ms
    return asyncio.run(produce_lines(args.topic, config, reader, sys.stdin, sys.stderr))


async def produce_lines(
    topic: str,
    config: dict[str, object],
    reader: dict[str, str],
    lines: TextIO,
    err: TextIO,
) -> int:
    """Send every line of ``lines``; returns the exit status (1 if a record failed)."""
    parse_key = reader.get("parse.key", "false").strip().lower() == "true"
    ignore_error = reader.get("ignore.error", "false").strip().lower() == "true"
    separator = reader.get("key.separator", "\t")
    if parse_key and not separator:
        raise ValueError("key.separator must not be empty")
    loop = asyncio.get_running_loop()
    transport = client_transport(config)
    futures: list[asyncio.Future[RecordMetadata]] = []
    try:
        async with Producer(config, transport=transport, clock=SystemClock()) as producer:
            line_number = 0
            while True:
                # Read in a thread: the producer's sender runs on this loop meanwhile.
                line = await loop.run_in_executor(None, lines.readline)
                if not line:
                    break
                line_number += 1
                text = line.removesuffix("\n").removesuffix("\r")
                key: bytes | None = None
                value = text
                if parse_key:
                    k, sep, v = text.partition(separator)
                    if sep:
                        key, value = k.encode(), v
                    elif not ignore_error:
                        raise KafkasimError(
                            f"No key separator found on line number {line_number}: '{text}'"
                        )
                futures.append(producer.send(topic, value.encode(), key=key))
            await producer.flush()
    finally:
        await transport.close()
    # One line per kind of error, not one per record: a topic that rejects every record
    # (e.g. a compacted one, for records without a key) would print thousands.
    failures: dict[str, tuple[BaseException, int]] = {}
    for future in futures:
        error = future.exception()
        if error is not None:
            kind = f"{type(error).__name__}:{getattr(error, 'error_name', '')}"
            first, count = failures.get(kind, (error, 0))
            failures[kind] = (first, count + 1)
    for error, count in failures.values():
        also = f" ({count} records failed with this error)" if count > 1 else ""
        print(f"Error when sending message to topic {topic} with error: {error}{also}", file=err)
    return 1 if failures else 0
