"""``kafkasim producer-perf-test``: Kafka's ProducerPerformance, on ``client.producer``.

Sends ``--num-records`` records of ``--record-size`` random uppercase bytes (one payload, as
Kafka does), or records drawn at random from the payloads of ``--payload-file`` (split on
``--payload-delimiter``, a newline by default), at most ``--throughput`` records/s (-1: as
fast as the producer takes them), and prints Kafka's lines: a window summary every 5 s while
running, then the total with latency percentiles; ``--print-metrics`` then prints the
producer's counters as Kafka's ``Metric Name`` / ``Value`` table. Latency is send() to
acknowledgement, in ms, on the ``SystemClock`` adapter (the command measures real time; it
reads no wall clock itself). The brokers come from ``--bootstrap-server`` (or ``--dir``),
which wins over a ``bootstrap.servers`` of ``--producer-props`` or ``--producer.config``.

Records go through ``Producer.send_many``, about one batch's worth per call (Kafka's tool
calls ``send`` per record; kafkasim's per-record future and callback cost more than the
records' bytes): a record's latency is its call's. ``--send-mode one`` keeps Kafka's loop,
one ``send`` and one callback per record, to compare the two in one run
(``bench/client_bench.py``).
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import random
import sys
from pathlib import Path
from typing import Any

from kafkasim.cli.connect import add_bootstrap_args, bootstrap_servers, security_properties
from kafkasim.client.producer import Producer, RecordMetadata, SendManyResult
from kafkasim.common.clock import Clock, SystemClock
from kafkasim.common.rpc_grpc_client import client_transport

REPORTING_INTERVAL_MS = 5_000
# Kafka's send() blocks once buffer.memory (32 MiB) is full; this bounds what is unacknowledged.
BUFFER_MEMORY_BYTES = 32 * 1024 * 1024
DEFAULT_BATCH_SIZE = 16_384  # Kafka's batch.size
RECORD_OVERHEAD_ESTIMATE = 12  # a v2 record's own bytes beside its value, unkeyed
MAX_CHUNK_RECORDS = 1_000
YIELD_EVERY_RECORDS = 256  # let the producer's sender run while we send flat out


def register(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "producer-perf-test", help="measure producer throughput and latency (Kafka's tool)"
    )
    p.add_argument("--topic", required=True, help="the topic to produce to")
    p.add_argument("--num-records", type=int, required=True, help="records to send")
    add_bootstrap_args(p)
    payload = p.add_mutually_exclusive_group(required=True)
    payload.add_argument("--record-size", type=int, help="bytes per record")
    payload.add_argument(
        "--payload-file",
        type=Path,
        help="a file of payloads (UTF-8), one picked at random per record",
    )
    p.add_argument(
        "--payload-delimiter",
        default="\\n",
        help="what separates --payload-file's payloads (default: a newline)",
    )
    p.add_argument("--throughput", type=float, required=True, help="max records/s; -1 for no limit")
    p.add_argument(
        "--producer-props",
        nargs="+",
        default=[],
        metavar="KEY=VALUE",
        help="producer configs, e.g. bootstrap.servers=host:port acks=all",
    )
    p.add_argument(
        "--producer.config", dest="producer_config", type=Path, help="a producer config file"
    )
    p.add_argument(
        "--print-metrics", action="store_true", help="print the producer's metrics at the end"
    )
    p.add_argument(
        "--send-mode",
        choices=("many", "one"),
        default="many",
        help="kafkasim's own: 'many' (default) sends a batch's worth of records per "
        "send_many call; 'one' calls send once per record with a callback (to compare)",
    )
    p.set_defaults(func=run)


def _parse_props(items: list[str], where: str) -> dict[str, object]:
    props: dict[str, object] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"{where}: expected KEY=VALUE, got {item!r}")
        props[key.strip()] = value.strip()
    return props


def _load_props(args: argparse.Namespace) -> dict[str, object]:
    """The config file first, then --producer-props over it (as Kafka merges them)."""
    props: dict[str, object] = security_properties(args)
    if args.producer_config is not None:
        lines = args.producer_config.read_text().splitlines()
        items = [line.strip() for line in lines if line.strip() and line.strip()[0] not in "#!"]
        props.update(_parse_props(items, str(args.producer_config)))
    props.update(_parse_props(args.producer_props, "--producer-props"))
    if args.bootstrap_server or args.dir:
        props["bootstrap.servers"] = ",".join(bootstrap_servers(args))
    if "bootstrap.servers" not in props:
        raise ValueError(
            "Either --bootstrap-server (or --dir) or bootstrap.servers in --producer-props "
            "or --producer.config must be specified"
        )
    return props


def read_payloads(path: Path, delimiter: str) -> list[bytes]:
    """Kafka's ``readPayloadFile``: the file split on ``delimiter`` (``\\n`` written as two
    characters on a command line means a newline), empty payloads dropped; ValueError when
    none is left."""
    delimiter = delimiter.encode().decode("unicode_escape")
    payloads = [p.encode() for p in path.read_text(encoding="utf-8").split(delimiter) if p]
    if not payloads:
        raise ValueError(f"File does not contain any payloads: {path}")
    print(f"Reading payloads from: {path.absolute()}")
    print(f"Number of messages read: {len(payloads)}")
    return payloads


class Stats:
    """Kafka's ProducerPerformance.Stats: totals, a 5 s reporting window, every latency."""

    def __init__(self, clock: Clock, out: Any = sys.stdout) -> None:
        self.clock = clock
        self.out = out
        self.start_ms = self.window_start_ms = clock.monotonic_ms()
        self.count = self.bytes = self.latency_total_ms = self.latency_max_ms = 0
        self.window_count = self.window_bytes = 0
        self.window_latency_total_ms = self.window_latency_max_ms = 0
        self.latencies_ms: list[int] = []
        self.size_max = 0

    def record(self, latency_ms: int, size: int, now_ms: int) -> None:
        self.record_many(latency_ms, 1, size, size, now_ms)

    def record_many(
        self, latency_ms: int, count: int, total_size: int, largest: int, now_ms: int
    ) -> None:
        """``count`` records acknowledged ``latency_ms`` after they were sent (one chunk)."""
        self.count += count
        self.bytes += total_size
        self.size_max = max(self.size_max, largest)
        self.latency_total_ms += latency_ms * count
        self.latency_max_ms = max(self.latency_max_ms, latency_ms)
        self.window_count += count
        self.window_bytes += total_size
        self.window_latency_total_ms += latency_ms * count
        self.window_latency_max_ms = max(self.window_latency_max_ms, latency_ms)
        self.latencies_ms.extend([latency_ms] * count)
        if now_ms - self.window_start_ms >= REPORTING_INTERVAL_MS:
            self.print_window(now_ms)
            self.window_start_ms = now_ms
            self.window_count = self.window_bytes = 0
            self.window_latency_total_ms = self.window_latency_max_ms = 0

    def print_window(self, now_ms: int) -> None:
        elapsed_ms = max(now_ms - self.window_start_ms, 1)
        records_per_s = 1000.0 * self.window_count / elapsed_ms
        mb_per_s = 1000.0 * self.window_bytes / elapsed_ms / (1024 * 1024)
        print(
            f"{self.window_count} records sent, {records_per_s:.1f} records/sec "
            f"({mb_per_s:.2f} MB/sec), "
            f"{self.window_latency_total_ms / max(self.window_count, 1):.1f} ms avg latency, "
            f"{float(self.window_latency_max_ms):.1f} ms max latency.",
            file=self.out,
            flush=True,
        )

    def total_line(self) -> str:
        elapsed_ms = max(self.clock.monotonic_ms() - self.start_ms, 1)
        records_per_s = 1000.0 * self.count / elapsed_ms
        mb_per_s = 1000.0 * self.bytes / elapsed_ms / (1024 * 1024)
        p50, p95, p99, p999 = percentiles(self.latencies_ms, (0.5, 0.95, 0.99, 0.999))
        return (
            f"{self.count} records sent, {records_per_s:f} records/sec ({mb_per_s:.2f} MB/sec), "
            f"{self.latency_total_ms / max(self.count, 1):.2f} ms avg latency, "
            f"{float(self.latency_max_ms):.2f} ms max latency, {p50} ms 50th, {p95} ms 95th, "
            f"{p99} ms 99th, {p999} ms 99.9th."
        )


def percentiles(latencies_ms: list[int], ps: tuple[float, ...]) -> list[int]:
    """Kafka's way: the element at ``int(size * p)`` of the sorted latencies (0 if none)."""
    ordered = sorted(latencies_ms)
    if not ordered:
        return [0 for _ in ps]
    return [ordered[min(int(len(ordered) * p), len(ordered) - 1)] for p in ps]


def run(args: argparse.Namespace) -> int:
    if args.num_records < 0 or (args.record_size is not None and args.record_size < 0):
        raise ValueError("--num-records and --record-size must not be negative")
    props = _load_props(args)
    rng = random.Random(0)
    if args.payload_file is not None:
        payloads = read_payloads(args.payload_file, args.payload_delimiter)
    else:
        payloads = [bytes(rng.randrange(26) + 65 for _ in range(args.record_size))]
    failures = asyncio.run(_perf(args, props, payloads, SystemClock()))
    return 1 if failures else 0


def metrics_lines(producer: Producer, stats: Stats, errors: int) -> list[str]:
    """Kafka's ``--print-metrics`` table, of the producer-metrics this client counts."""
    tags = f"{{client-id={producer.client_id}}}"
    elapsed_s = max(stats.clock.monotonic_ms() - stats.start_ms, 1) / 1000
    values = {
        "record-send-total": float(producer.records_sent),
        "record-send-rate": producer.records_sent / elapsed_s,
        "record-retry-total": float(producer.retries),
        "record-error-total": float(errors),
        "record-size-avg": stats.bytes / max(stats.count, 1),
        "record-size-max": float(stats.size_max),
        "request-total": float(producer.requests_sent),
        "batch-total": float(producer.batches_sent),
        "records-per-request-avg": producer.records_sent / max(producer.requests_sent, 1),
    }
    names = [f"producer-metrics:{name}:{tags}" for name in sorted(values)]
    width = max(len(n) for n in names)
    lines = ["", f"{'Metric Name':<{width}} : Value"]
    for name, key in zip(names, sorted(values), strict=True):
        lines.append(f"{name:<{width}} : {values[key]:.3f}")
    return lines


def chunk_records(props: dict[str, object], largest: int) -> int:
    """Records per ``send_many`` call: about one batch's worth (batch.size over a record's
    encoded size), so that a chunk's acknowledgement is its records' own."""
    batch_size = int(str(props.get("batch.size", DEFAULT_BATCH_SIZE)))
    return max(1, min(MAX_CHUNK_RECORDS, batch_size // (largest + RECORD_OVERHEAD_ESTIMATE)))


async def _perf(
    args: argparse.Namespace, props: dict[str, object], payloads: list[bytes], clock: Clock
) -> int:
    """Kafka's loop, a chunk of records per ``send_many`` call rather than one per ``send``
    (one future and one completion per chunk; no per-record callback). Each record's latency
    is its chunk's: from the call to the acknowledgement of the chunk's last record. With
    ``--send-mode one``: one ``send`` per record and a callback each (Kafka's own loop)."""
    rng = random.Random(0)
    largest = max(len(p) for p in payloads)
    max_unacked = max(1, BUFFER_MEMORY_BYTES // max(largest, 1))
    one_by_one = getattr(args, "send_mode", "many") == "one"
    chunk = 1 if one_by_one else chunk_records(props, largest)
    transport = client_transport(props)
    producer = Producer(props, transport=transport, clock=clock)
    stats = Stats(clock)
    errors = 0
    unacked = 0
    room = asyncio.Event()

    def on_done(send_ms: int, sizes: list[int], done: asyncio.Future[SendManyResult]) -> None:
        nonlocal unacked, errors
        unacked -= len(sizes)
        room.set()
        result = done.result()
        now_ms = clock.monotonic_ms()
        if result.errors:
            if not errors:
                first = result.errors[min(result.errors)]
                print(f"Error when sending message to topic {args.topic}: {first}", file=sys.stderr)
            errors += len(result.errors)
            sizes = [size for i, size in enumerate(sizes) if i not in result.errors]
        if sizes:
            stats.record_many(now_ms - send_ms, len(sizes), sum(sizes), max(sizes), now_ms)

    def on_record_done(
        send_ms: int, size: int, _metadata: RecordMetadata | None, error: BaseException | None
    ) -> None:
        nonlocal unacked, errors
        unacked -= 1
        room.set()
        if error is not None:
            if not errors:
                print(f"Error when sending message to topic {args.topic}: {error}", file=sys.stderr)
            errors += 1
            return
        now_ms = clock.monotonic_ms()
        stats.record(now_ms - send_ms, size, now_ms)

    try:
        start_ms = clock.monotonic_ms()
        sent = yielded_at = 0
        while sent < args.num_records:
            count = min(chunk, args.num_records - sent)
            if args.throughput > 0:
                due = int((clock.monotonic_ms() - start_ms) * args.throughput / 1000) + 1
                if due <= sent:
                    due_ms = start_ms + (sent * 1000.0 / args.throughput)
                    await asyncio.sleep(max(due_ms - clock.monotonic_ms(), 0) / 1000)
                    continue
                count = min(count, due - sent)
            if len(payloads) == 1:
                values = [payloads[0]] * count
            else:
                values = [rng.choice(payloads) for _ in range(count)]
            send_ms = clock.monotonic_ms()
            unacked += count
            if one_by_one:
                for value in values:
                    callback = functools.partial(on_record_done, send_ms, len(value))
                    producer.send(args.topic, value, callback=callback)
            else:
                future = producer.send_many(args.topic, values)
                sizes = [len(v) for v in values]
                future.add_done_callback(functools.partial(on_done, send_ms, sizes))
            sent += count
            if args.throughput <= 0 and sent - yielded_at >= YIELD_EVERY_RECORDS:
                yielded_at = sent
                await asyncio.sleep(0)  # let the sender run while we send flat out
            while unacked >= max_unacked:
                room.clear()
                await room.wait()
        await producer.flush()
        await asyncio.sleep(0)  # the last chunks' done-callbacks
    finally:
        await producer.close()
        await transport.close()
    print(stats.total_line(), flush=True)
    if args.print_metrics:
        print("\n".join(metrics_lines(producer, stats, errors)), flush=True)
    return errors
