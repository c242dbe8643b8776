"""Transactions against idempotence, on kafkasim, through one real Kafka client (issue 14).

One 3-broker ``LocalCluster`` (RF=3, min.insync.replicas=2, acks=all), reached on its Kafka
listeners by confluent-kafka (librdkafka), in this one process and run; the figures that mean
something on this shared machine are the ratios measured side by side, round by round:

- **produce**: the same records (100 B and 1 KiB) by an idempotent producer and by a
  transactional one that commits every ``--transaction-ms`` (100 ms and 1,000 ms, as Kafka's
  ``ProducerPerformance --transaction-duration-ms``): records/s and their ratio;
- **commit latency**: p50/p99 of ``commit_transaction()`` in those runs (the EndTxn round trip:
  PrepareCommit written acks=all to ``__transaction_state``; the markers follow after it);
- **consume**: a read_committed consumer against a read_uncommitted one over the same
  transactional topic: records/s and their ratio.

Everything started here is stopped here. Run: ``./dev bench txn [--quick]``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition

from bench.kafka_bench import (
    CONSUMER_QUEUE_BACKOFF_MS,
    FLUSH_TIMEOUT_S,
    LINGER_MS,
    KafkasimTarget,
    Setup,
    kafkasim_cluster,
    logger,
    percentile,
)

PARTITIONS = 3
SIZES = (100, 1024)
TRANSACTION_MS = (100, 1000)
CONSUME_TIMEOUT_S = 300.0


@dataclass
class Results:
    produce: dict[tuple[str, int], list[float]] = field(default_factory=dict)
    commits: dict[tuple[str, int], list[float]] = field(default_factory=dict)
    consume: dict[tuple[str, int], list[float]] = field(default_factory=dict)


def _config(target: KafkasimTarget, **settings: object) -> dict[str, object]:
    return target.client_config(
        **{"acks": "all", "linger.ms": LINGER_MS, "enable.idempotence": True},
        logger=logger,
        **settings,
    )


def _produce(
    target: KafkasimTarget, topic: str, size: int, count: int, transaction_ms: int | None
) -> tuple[float, list[float]]:
    """``count`` records; with ``transaction_ms`` in transactions committed that often.
    Records/s until all are acknowledged (committed) and the commit times in ms."""
    errors: list[KafkaError] = []

    def on_delivery(err: KafkaError | None, _msg: object) -> None:
        if err is not None:
            errors.append(err)

    settings: dict[str, object] = {"on_delivery": on_delivery}
    if transaction_ms is not None:
        settings["transactional.id"] = f"bench-{uuid.uuid4().hex[:8]}"
    producer = Producer(_config(target, **settings))
    payload = os.urandom(size)
    commits: list[float] = []
    # Connections, metadata and (transactional) the producer id and the partitions' first
    # AddPartitionsToTxn settled before the clock runs.
    if transaction_ms is not None:
        producer.init_transactions(60)
        producer.begin_transaction()
    for partition in range(PARTITIONS):
        producer.produce(topic, b"warm-up", partition=partition)
    if transaction_ms is not None:
        producer.commit_transaction(60)
        producer.begin_transaction()
    elif producer.flush(60) != 0:
        raise RuntimeError(f"warm-up produce to {topic} failed")
    produce, poll = producer.produce, producer.poll
    start = time.perf_counter()
    window_end = start + (transaction_ms or 0) / 1000
    for _ in range(count):
        while True:
            try:
                produce(topic, payload)
                break
            except BufferError:
                poll(0.01)
        if transaction_ms is not None and time.perf_counter() >= window_end:
            began = time.perf_counter()
            producer.commit_transaction(60)
            commits.append((time.perf_counter() - began) * 1000)
            producer.begin_transaction()
            window_end = time.perf_counter() + transaction_ms / 1000
    if transaction_ms is not None:
        began = time.perf_counter()
        producer.commit_transaction(60)
        commits.append((time.perf_counter() - began) * 1000)
    left = producer.flush(FLUSH_TIMEOUT_S)
    seconds = time.perf_counter() - start
    if left or errors:
        raise RuntimeError(f"{left} records unacknowledged, errors {errors[:3]}")
    return count / seconds, commits


def _consume(target: KafkasimTarget, topic: str, count: int, isolation: str) -> float:
    """Records/s reading ``count`` data records of ``topic`` from the beginning (plus the
    warm-up records)."""
    consumer = Consumer(
        target.client_config(
            **{
                "group.id": f"bench-{uuid.uuid4().hex[:8]}",
                "enable.auto.commit": False,
                "isolation.level": isolation,
                "fetch.queue.backoff.ms": CONSUMER_QUEUE_BACKOFF_MS,
            },
            logger=logger,
        )
    )
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
    seen = 0
    start = time.perf_counter()
    deadline = start + CONSUME_TIMEOUT_S
    try:
        while seen < count:
            if time.perf_counter() > deadline:
                raise RuntimeError(f"read {seen} of {count} records of {topic}")
            for message in consumer.consume(10_000, 1.0):
                if message.error() is None:
                    seen += 1
        return seen / (time.perf_counter() - start)
    finally:
        consumer.close()


def run(quick: bool, rounds: int) -> Results:
    count = 20_000 if quick else 200_000
    results = Results()
    with (
        tempfile.TemporaryDirectory(prefix="kafkasim-txn-bench-") as tmp,
        kafkasim_cluster(Path(tmp), Setup("3 brokers", 3, "all")) as target,
    ):
        for round_ in range(rounds):
            for size in SIZES:
                modes: list[int | None] = [None, *TRANSACTION_MS]
                if round_ % 2:
                    modes.reverse()  # alternate who goes first
                for mode in modes:
                    topic = f"txn-{size}-{mode}-{round_}"
                    target.create_topic(
                        topic,
                        partitions=PARTITIONS,
                        replication_factor=3,
                        configs={"min.insync.replicas": 2},
                    )
                    rate, commits = _produce(target, topic, size, count, mode)
                    key = ("idempotent" if mode is None else f"txn {mode} ms", size)
                    results.produce.setdefault(key, []).append(rate)
                    results.commits.setdefault(key, []).extend(commits)
                    if mode == TRANSACTION_MS[0]:
                        for isolation in ("read_uncommitted", "read_committed")[
                            :: -1 if round_ % 2 else 1
                        ]:
                            got = _consume(target, topic, count, isolation)
                            results.consume.setdefault((isolation, size), []).append(got)
                    print(f"round {round_ + 1} {key[0]:<11} {size:>5} B: {rate:>10,.0f} rec/s")
    return results


def report(results: Results) -> None:
    print("\n## Produce, 3 brokers RF=3 acks=all (confluent-kafka; medians over rounds)\n")
    print("| records | idempotent rec/s | txn 100 ms rec/s | ratio | txn 1000 ms rec/s | ratio |")
    print("|---|---:|---:|---:|---:|---:|")
    for size in SIZES:
        base = statistics.median(results.produce[("idempotent", size)])
        cells = [f"{size} B", f"{base:,.0f}"]
        for mode in TRANSACTION_MS:
            rate = statistics.median(results.produce[(f"txn {mode} ms", size)])
            cells += [f"{rate:,.0f}", f"{rate / base:.2f}"]
        print("| " + " | ".join(cells) + " |")
    print("\n## commit_transaction() latency (ms)\n")
    print("| transactions of | records | commits | p50 | p99 |")
    print("|---|---|---:|---:|---:|")
    for (mode, size), values in sorted(results.commits.items()):
        if not values:
            continue
        ordered = sorted(values)
        p50, p99 = percentile(ordered, 0.5), percentile(ordered, 0.99)
        print(f"| {mode} | {size} B | {len(values)} | {p50:.1f} | {p99:.1f} |")
    print("\n## Consume a transactional topic (100 ms transactions)\n")
    print("| records | read_uncommitted rec/s | read_committed rec/s | ratio |")
    print("|---|---:|---:|---:|")
    for size in SIZES:
        uncommitted = statistics.median(results.consume[("read_uncommitted", size)])
        committed = statistics.median(results.consume[("read_committed", size)])
        print(
            f"| {size} B | {uncommitted:,.0f} | {committed:,.0f} | {committed / uncommitted:.2f} |"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="./dev bench txn", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="20,000 records per run")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    report(run(args.quick, args.rounds))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
