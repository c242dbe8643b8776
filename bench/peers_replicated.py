"""Issue 19's replication aim with each system's own producer perf tool: three brokers, a
topic of RF=3 with min.insync.replicas=2 and acks=all, against one broker with acks=1
(``./dev bench peers --replicated [--quick] [--partitions N] [--sizes 100 1024]
[--grpc-replication]``).

Four setups, all up for the whole run: kafkasim's ``LocalCluster`` with one broker and with
three, and Apache Kafka 0.9.0.1's (``bench.apache_kafka.ApacheKafkaCluster``) with one and with
three. kafkasim runs its ``producer-perf-test`` (the Python client over gRPC), Kafka its
``org.apache.kafka.tools.ProducerPerformance`` (the Java client), as fast as each goes
(throughput -1); one broker: a topic of RF=1 and acks=1; three brokers: RF=3,
min.insync.replicas=2 and acks=all (``-1`` for Kafka's tool). Topics have 1 partition by
default, as ``./dev bench peers`` has (Kafka's own 2014 benchmark, whose three-broker RF=3
acks=all figure was 0.51 of its one-broker one, used 6 partitions: ``--partitions 6``); the
same count on both systems.

kafkasim's followers fetch over replication listeners (``LocalCluster``'s default);
``--grpc-replication`` adds a fifth setup, kafkasim's three brokers with followers fetching
over gRPC, and prints its RF=3 / one-broker ratio beside the other.

Every run gets a fresh topic: created, its ISR waited for (every replica in it), one record
acknowledged in each partition with the setup's acks (connections made and the followers
fetching before the tool starts; a follower that backs off after its first fetch would
otherwise hold the first acks=all produces), the ISR waited for again, then the tool. After
the run the partitions' end offsets (high watermarks) must add up to the tool's records and
the warm-up's, and the ISR is read again: a run during which a follower dropped out waited
for fewer replicas, and its line says so.

Each setup first runs once with every batching in ``bench.peers_bench.CANDIDATES`` (batch.size,
linger.ms) and keeps the fastest for each record size (its "best batching"); then the four
setups run one after another, ``rounds`` times (3 with ``--quick``, 5 otherwise), each round
starting one setup further along so that none always goes first. The medians of records/s are
printed with three ratios per record size: kafkasim's RF=3 / one-broker figure, Kafka's on this
machine, and kafkasim / Kafka at RF=3.

Everything started here is stopped here by pid (the clusters' context managers), also on
Ctrl-C or SIGTERM.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import logging
import signal
import statistics
import tempfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient

from bench.apache_kafka import KAFKA_VERSION, ApacheKafkaCluster, quiet_logger, wait_for_topic
from bench.client_bench import kafkasim
from bench.kafka_bench import KafkasimTarget, KafkaTarget, Target, _producer, _warm_up
from bench.peers_bench import (
    FULL,
    QUICK,
    SIZES,
    Batching,
    Counts,
    _records_s,
    best_batching,
    kafka_perf,
    kafkasim_perf_argv,
)
from kafkasim.cluster.local import LocalCluster

T = TypeVar("T")
MIN_INSYNC = 2
ONE_BROKER = "1 broker acks=1"
REPLICATED = "RF=3 acks=all"


@dataclass(frozen=True)
class Setup:
    """One system's cluster and how its tool produces there."""

    system: str  # "kafkasim" or "Kafka"
    label: str  # ONE_BROKER or REPLICATED
    brokers: int
    acks: str  # as the system's tool is given it
    # kafkasim's followers fetch over replication listeners (LocalCluster's default), or gRPC.
    framed_replication: bool = True

    @property
    def name(self) -> str:
        return f"{self.system} {self.label}"

    @property
    def topic_configs(self) -> dict[str, Any]:
        return {"min.insync.replicas": MIN_INSYNC} if self.brokers > 1 else {}


SETUPS = (
    Setup("kafkasim", ONE_BROKER, 1, "1"),
    Setup("kafkasim", REPLICATED, 3, "all"),
    Setup("Kafka", ONE_BROKER, 1, "1"),
    Setup("Kafka", REPLICATED, 3, "-1"),
)
# With --grpc-replication, a fifth setup: kafkasim's RF=3 with its followers fetching over gRPC.
GRPC_REPLICATED = Setup("kafkasim", f"{REPLICATED} (gRPC replication)", 3, "all", False)


def rotated(items: Sequence[T], round_: int) -> list[T]:
    """``items`` starting at ``round_`` (modulo their count): each leads one round in turn."""
    start = round_ % len(items)
    return [*items[start:], *items[:start]]


def check_count(name: str, topic: str, end_offsets: int, expected: int) -> None:
    """The topic's end offsets, summed over its partitions, against the records produced."""
    if end_offsets != expected:
        raise RuntimeError(
            f"{name}: {topic} holds {end_offsets} records (its partitions' end offsets), "
            f"{expected} were produced and acknowledged"
        )


def ratio_lines(medians: dict[tuple[str, int], float], sizes: Sequence[int]) -> list[str]:
    """Per record size: the four medians (records/s, keyed by (setup name, size)) and the
    ratios RF=3 / one broker of each system and kafkasim / Kafka at RF=3."""
    names = [setup.name for setup in SETUPS]
    lines = [f"{'record':>7}" + "".join(f" {name:>24}" for name in names)
             + f" {'kafkasim RF3/1':>15} {'Kafka RF3/1':>12} {'RF3 ks/Kafka':>13}"]  # fmt: skip
    for size in sizes:
        ks_one, ks_rf3, kafka_one, kafka_rf3 = (medians[name, size] for name in names)
        lines.append(
            f"{size:>6}B" + "".join(f" {medians[name, size]:>24.0f}" for name in names)
            + f" {ks_rf3 / ks_one:>15.2f} {kafka_rf3 / kafka_one:>12.2f}"
            f" {ks_rf3 / kafka_rf3:>13.2f}"
        )  # fmt: skip
    return lines


def end_offsets(config: dict[str, Any], topic: str, partitions: int) -> int:
    """The sum of the partitions' high watermarks (ListOffsets, through confluent-kafka)."""
    consumer = Consumer(
        {**config, "group.id": "peers-replicated-offsets", "logger": quiet_logger()}
    )
    try:
        return sum(
            consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1]
            for p in range(partitions)
        )
    finally:
        consumer.close()


def smallest_isr(config: dict[str, Any], topic: str) -> int:
    """The fewest in-sync replicas of any partition of ``topic`` in the cluster's metadata."""
    admin = AdminClient({**config, "logger": quiet_logger()})
    meta = admin.list_topics(topic=topic, timeout=30).topics[topic]
    return min(len(p.isrs) for p in meta.partitions.values())


Perf = Callable[[str, int, int, Batching, str], float]  # (topic, size, records, batch, acks)


class Side:
    """One setup's running cluster: a fresh topic per run, its tool, its checks."""

    def __init__(self, setup: Setup, target: Target, partitions: int, perf: Perf) -> None:
        self.setup = setup
        self.target = target
        self.partitions = partitions
        self.perf = perf
        self.topics = 0
        self.notes: list[str] = []

    def _fresh_topic(self) -> str:
        self.topics += 1
        topic = f"replicated-{self.topics}"
        replicas = self.setup.brokers
        # Returns once every partition has a leader and all `replicas` in its ISR.
        self.target.create_topic(
            topic, partitions=self.partitions, replication_factor=replicas,
            configs=self.setup.topic_configs,
        )  # fmt: skip
        _warm_up(_producer(self.target, self.setup.acks), topic, self.partitions)
        wait_for_topic(self.target.client_config(), topic, self.partitions, replicas)
        return topic

    def run(self, size: int, records: int, batch: Batching) -> float:
        topic = self._fresh_topic()
        rate = self.perf(topic, size, records, batch, self.setup.acks)
        config = self.target.client_config()
        check_count(self.setup.name, topic, end_offsets(config, topic, self.partitions),
                    records + self.partitions)  # fmt: skip
        isr = smallest_isr(config, topic)
        if isr < self.setup.brokers:
            note = (f"{self.setup.name}, {size} B, {topic}: a partition's ISR was {isr} of "
                    f"{self.setup.brokers} after the run")  # fmt: skip
            self.notes.append(note)
            print(f"  note: {note}", flush=True)
        return rate


def kafkasim_perf(cluster: LocalCluster) -> Perf:
    bootstrap = ",".join(cluster.bootstrap)

    def perf(topic: str, size: int, records: int, batch: Batching, acks: str) -> float:
        argv = kafkasim_perf_argv(bootstrap, topic, size, records, batch, acks=acks)
        return _records_s("producer-perf-test", kafkasim(*argv))

    return perf


def kafka_tool_perf(cluster: ApacheKafkaCluster) -> Perf:
    def perf(topic: str, size: int, records: int, batch: Batching, acks: str) -> float:
        return kafka_perf(cluster, topic, size, records, batch, acks=acks)

    return perf


@contextlib.contextmanager
def sides(root: Path, partitions: int, setups: Sequence[Setup]) -> Iterator[list[Side]]:
    """The clusters of ``setups``, started in turn and stopped (by pid) on the way out."""
    with contextlib.ExitStack() as stack:
        out: list[Side] = []
        for number, setup in enumerate(setups):
            where = root / f"{number}-{setup.system}-{setup.brokers}"
            print(f"starting {setup.name} ({setup.brokers} broker(s)) ...", flush=True)
            if setup.system == "Kafka":
                kafka = stack.enter_context(ApacheKafkaCluster(where, brokers=setup.brokers))
                target: Target = KafkaTarget(kafka)
                perf = kafka_tool_perf(kafka)
            else:
                ours = LocalCluster(
                    where, brokers=setup.brokers, framed_replication=setup.framed_replication
                )
                stack.callback(ours.stop)
                ours.start()
                target, perf = KafkasimTarget(ours), kafkasim_perf(ours)
            out.append(Side(setup, target, partitions, perf))
        yield out


def run(
    counts: Counts, partitions: int, sizes: Sequence[int], *, grpc_replication: bool = False
) -> None:
    """Calibrate each setup's batching, measure ``counts.rounds`` rotated rounds, print (with
    ``grpc_replication``, kafkasim's RF=3 with followers over gRPC too)."""
    setups = [*SETUPS, GRPC_REPLICATED] if grpc_replication else list(SETUPS)
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    # The warm-up producers' librdkafka warnings (Kafka 0.9's deprecated fallback settings).
    logging.basicConfig(level=logging.ERROR, format="%(name)s: %(message)s")
    print(
        f"perf tools, each setup with its best batching, {partitions}-partition topics: kafkasim "
        f"producer-perf-test (Python client, gRPC) vs Kafka {KAFKA_VERSION} ProducerPerformance "
        f"(Java client); 1 broker RF=1 acks=1 and 3 brokers RF=3 min.insync.replicas="
        f"{MIN_INSYNC} acks=all",
        flush=True,
    )
    rates: dict[tuple[str, int], list[float]] = collections.defaultdict(list)
    best: dict[tuple[str, int], Batching] = {}
    notes: list[str] = []
    with (
        tempfile.TemporaryDirectory(prefix="kafkasim-peers-replicated-") as tmp,
        sides(Path(tmp), partitions, setups) as all_sides,
    ):
        for size in sizes:
            for side in all_sides:
                records = counts.records[size]
                best[side.setup.name, size], lines = best_batching(side.run, size, records)
                print(f"{side.setup.name} {size} B, {records} records: " + "; ".join(lines),
                      flush=True)  # fmt: skip
        for round_ in range(counts.rounds):
            for size in sizes:
                for side in rotated(all_sides, round_):
                    name = side.setup.name
                    rate = side.run(size, counts.records[size], best[name, size])
                    rates[name, size].append(rate)
                    print(f"round {round_ + 1}, {size} B, {name}: {rate:.0f} records/s", flush=True)
        for side in all_sides:
            notes += side.notes
    medians = {key: statistics.median(values) for key, values in rates.items()}
    print()
    print(f"medians of {counts.rounds} rotated rounds (records/s), each setup with its best "
          "batching (batch.size/linger.ms):")  # fmt: skip
    for size in sizes:
        chosen = (f"{s.name} {best[s.name, size][0]}/{best[s.name, size][1]}ms" for s in setups)
        print(f"  {size} B: " + ", ".join(chosen))
    print("\n".join(ratio_lines(medians, sizes)))
    if grpc_replication:
        for size in sizes:
            grpc = medians[GRPC_REPLICATED.name, size]
            one = medians[SETUPS[0].name, size]
            framed = medians[SETUPS[1].name, size]
            print(
                f"  {size} B, kafkasim RF=3 with followers over gRPC: {grpc:.0f} records/s, "
                f"RF3/1 {grpc / one:.2f} (over replication listeners: {framed / one:.2f})"
            )
    print(
        "aims (issue 19): kafkasim RF3/1 >= 0.6 (Kafka's 2014 benchmark: 0.51, 6 partitions); "
        "kafkasim/Kafka at RF=3 >= 0.5"
    )
    if notes:
        print(f"{len(notes)} run(s) ended with a follower out of the ISR (listed above)")


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--replicated", action="store_true", help="(this comparison)")
    parser.add_argument("--quick", action="store_true", help="fewer records, 3 rounds")
    parser.add_argument(
        "--grpc-replication",
        action="store_true",
        help="also kafkasim's RF=3 with followers over gRPC instead of replication listeners",
    )
    parser.add_argument("--partitions", type=int, default=1, help="partitions per topic (1)")
    parser.add_argument("--sizes", type=int, nargs="+", default=list(SIZES), choices=SIZES,
                        help="record sizes in bytes (100 1024)")  # fmt: skip
    args = parser.parse_args(argv)
    if args.partitions < 1:
        parser.error(f"--partitions must be >= 1, got {args.partitions}")
    run(
        QUICK if args.quick else FULL,
        args.partitions,
        args.sizes,
        grpc_replication=args.grpc_replication,
    )


if __name__ == "__main__":
    main()
