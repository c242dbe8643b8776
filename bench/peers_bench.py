"""Each system's own producer and consumer perf tools, side by side (issue 19): kafkasim's
``producer-perf-test`` and ``consumer-perf-test`` (the Python client over gRPC) against Apache
Kafka 0.9.0.1's ``org.apache.kafka.tools.ProducerPerformance`` and
``kafka.tools.ConsumerPerformance --new-consumer`` (the Java clients).

One broker each (kafkasim: ``LocalCluster``; Kafka: ``bench.apache_kafka.ApacheKafkaCluster``,
both up for the whole run), a fresh 1-partition topic per run, acks=1, 100 B and 1 KiB records,
as fast as the tool goes (throughput -1). Each tool first runs once with every batching in its
``CANDIDATES`` (batch.size, linger.ms) and keeps the fastest for each record size (its "best
batching"); then the two tools run alternately, ``rounds`` times each (3 with ``--quick``, 5
otherwise), and the medians of records/s and their ratio (kafkasim / Kafka) are printed.

The consumer part reads, with each system's own consumer perf tool, a topic its producer tool
filled (the last producer round's: 1,000,000 x 100 B and 200,000 x 1 KiB records, fewer with
``--quick``) from the beginning, 1 MiB per partition fetch, alternately, ``rounds`` times each;
the medians of nMsg.sec (each tool's records/s over its own clock) and their ratio are
printed. Both clocks include the consumer's set-up but not the process's start: Kafka's tool
starts its clock before joining its throwaway ``perf-consumer-N`` group; kafkasim's, without
``--group``, before describing the topic and assigning its partitions. Kafka 0.9's tool reads
with ``check.crcs=false``; kafkasim's consumer checks every batch's CRC-32C.
``--consumer-only`` skips the producer measurements: each tool fills one topic per size with
``FILL_BATCHING`` instead. Kafka's JIT needs the full record counts to warm up, so ``--quick``
figures understate Kafka (the output says so).

``--profile DIR`` adds one more kafkasim run per size under py-spy: the producer-perf-test
process and the broker are sampled for the whole run, the raw (collapsed) stacks are written
to DIR and the top frames of each (by own samples, and by samples with the frame on the stack)
are printed.

``--replicated`` runs ``bench.peers_replicated`` instead: the producer tools on three brokers
(RF=3, acks=all, min.insync.replicas=2) against one broker (acks=1), both systems.

Everything started here is stopped here by pid (the clusters' context managers; py-spy
by its own pid), also on Ctrl-C. Run:
``./dev bench peers [--quick] [--consumer-only] [--profile DIR] [--replicated]``.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import functools
import importlib
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from bench.apache_kafka import KAFKA_VERSION, PERFORMANCE_JVM, ApacheKafkaCluster
from bench.client_bench import SUMMARY, kafkasim
from kafkasim.cluster.local import LocalCluster

# Kafka's kafka-producer-perf-test.sh heap, with kafka-run-class.sh's performance options.
PERF_TOOL_JVM = ("-Xmx512M", *PERFORMANCE_JVM)
# (batch.size, linger.ms) tried by each tool; the fastest per record size is kept.
CANDIDATES = ((16_384, 0), (65_536, 5), (262_144, 5), (1_048_576, 10))
SIZES = (100, 1024)
FILL_BATCHING = (65_536, 5)  # --consumer-only: how each producer tool fills the topics
FETCH_BYTES = 1_048_576  # both consumer tools' default max.partition.fetch.bytes
CONSUMER_HEADER = "start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg"
PROFILE_TOP = 25


@dataclass(frozen=True)
class Counts:
    records: dict[int, int]  # records per run, by record size
    rounds: int


FULL = Counts({100: 1_000_000, 1024: 200_000}, rounds=5)
QUICK = Counts({100: 300_000, 1024: 60_000}, rounds=3)


def _run_kafka_tool(
    cluster: ApacheKafkaCluster, args: list[str]
) -> subprocess.CompletedProcess[str]:
    """One of Kafka's tools (its main class and arguments in ``args``) on the perf tools' JVM
    settings and the cluster's classpath and logging, its output captured."""
    return subprocess.run(
        [
            "java",
            *PERF_TOOL_JVM,
            "-cp",
            cluster.classpath,
            f"-Dlog4j.configuration=file:{cluster.root / 'log4j.properties'}",
            "-Dlog.name=perf-tool",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


def kafka_perf(cluster: ApacheKafkaCluster, topic: str, size: int, records: int,
               batch: tuple[int, int], *, acks: str = "1") -> float:  # fmt: skip
    """Kafka 0.9's ProducerPerformance: records/s of its total line."""
    done = _run_kafka_tool(
        cluster,
        [
            "org.apache.kafka.tools.ProducerPerformance",
            "--topic",
            topic,
            "--num-records",
            str(records),
            "--record-size",
            str(size),
            "--throughput",
            "-1",
            "--producer-props",
            f"bootstrap.servers={cluster.bootstrap}",
            f"acks={acks}",
            f"batch.size={batch[0]}",
            f"linger.ms={batch[1]}",
        ],
    )
    return _records_s("ProducerPerformance", done)


def kafkasim_perf_argv(bootstrap: str, topic: str, size: int, records: int,
                       batch: tuple[int, int], *, acks: str = "1") -> list[str]:  # fmt: skip
    return [
        "producer-perf-test", "--topic", topic, "--num-records", str(records),
        "--record-size", str(size), "--throughput", "-1",
        "--producer-props", f"bootstrap.servers={bootstrap}", f"acks={acks}",
        f"batch.size={batch[0]}", f"linger.ms={batch[1]}",
    ]  # fmt: skip


def _records_s(tool: str, done: subprocess.CompletedProcess[str]) -> float:
    # The total line is the last of the tool's own (py-spy, when it wraps the tool, adds more).
    matches = [m for line in done.stdout.splitlines() if (m := SUMMARY.search(line))]
    match = matches[-1] if matches else None
    if done.returncode != 0 or match is None:
        raise RuntimeError(
            f"{tool} failed ({done.returncode}): {(done.stdout + done.stderr)[-2000:]}"
        )
    return float(match["rps"])


def consumer_summary(stdout: str) -> tuple[int, float] | None:
    """From a consumer perf tool's output (Kafka 0.9's six fields or kafkasim's ten, which
    add the rebalance and fetch times): the records read and the records/s (nMsg.sec) of
    the summary, the first line after the header with a record count in its fifth field
    (kafkasim puts its timeout warning between them); None when there is none."""
    lines = stdout.splitlines()
    starts = [i for i, line in enumerate(lines) if line.startswith(CONSUMER_HEADER)]
    if not starts:
        return None
    for line in lines[starts[-1] + 1 :]:
        fields = [field.strip() for field in line.split(",")]
        if len(fields) >= 6 and fields[4].isdigit():
            try:
                return int(fields[4]), float(fields[5])
            except ValueError:
                return None
    return None


def consumed_rate(tool: str, done: subprocess.CompletedProcess[str], records: int) -> float:
    summary = consumer_summary(done.stdout)
    if done.returncode != 0 or summary is None or summary[0] < records:
        read = "no summary" if summary is None else f"{summary[0]} of {records} records read"
        raise RuntimeError(
            f"{tool} failed ({done.returncode}, {read}): {(done.stdout + done.stderr)[-2000:]}"
        )
    return summary[1]


def kafka_consumer_perf(cluster: ApacheKafkaCluster, topic: str, records: int) -> float:
    """Kafka 0.9's ConsumerPerformance with the new (Java) consumer: its nMsg.sec."""
    done = _run_kafka_tool(
        cluster,
        [
            "kafka.tools.ConsumerPerformance",
            "--new-consumer",
            "--broker-list",
            cluster.bootstrap,
            "--topic",
            topic,
            "--messages",
            str(records),
            "--fetch-size",
            str(FETCH_BYTES),
        ],
    )
    return consumed_rate("ConsumerPerformance", done, records)


class Peers:
    """Both clusters, up for the whole run; a fresh topic for every measurement."""

    def __init__(self, kafka: ApacheKafkaCluster, ours: LocalCluster) -> None:
        self.kafka = kafka
        self.ours = ours
        self.bootstrap = ",".join(ours.bootstrap)
        self.topics = 0
        # The last topic each producer tool filled, by (system, record size): what is read.
        self.filled: dict[tuple[str, int], tuple[str, int]] = {}

    def _topic(self) -> str:
        self.topics += 1
        return f"peers-{self.topics}"

    def kafka_run(self, size: int, records: int, batch: tuple[int, int]) -> float:
        topic = self._topic()
        self.kafka.create_topic(topic, partitions=1, replication_factor=1)
        rate = kafka_perf(self.kafka, topic, size, records, batch)
        self.filled["Kafka", size] = (topic, records)
        return rate

    def ours_topic(self) -> str:
        topic = self._topic()
        created = kafkasim(
            "topics", "--bootstrap-server", self.bootstrap, "--create", "--topic", topic,
            "--partitions", "1", "--replication-factor", "1",
        )  # fmt: skip
        if created.returncode != 0:
            raise RuntimeError(f"kafkasim topics --create {topic}: {created.stderr.strip()}")
        return topic

    def ours_run(self, size: int, records: int, batch: tuple[int, int]) -> float:
        topic = self.ours_topic()
        argv = kafkasim_perf_argv(self.bootstrap, topic, size, records, batch)
        rate = _records_s("producer-perf-test", kafkasim(*argv))
        self.filled["kafkasim", size] = (topic, records)
        return rate

    def kafka_read(self, size: int) -> float:
        topic, records = self.filled["Kafka", size]
        return kafka_consumer_perf(self.kafka, topic, records)

    def ours_read_argv(self, size: int) -> tuple[list[str], int]:
        topic, records = self.filled["kafkasim", size]
        argv = [
            "consumer-perf-test", "--bootstrap-server", self.bootstrap, "--topic", topic,
            "--messages", str(records), "--fetch-size", str(FETCH_BYTES),
        ]  # fmt: skip
        return argv, records

    def ours_read(self, size: int) -> float:
        argv, records = self.ours_read_argv(size)
        return consumed_rate("consumer-perf-test", kafkasim(*argv), records)


@contextlib.contextmanager
def peers(root: Path) -> Iterator[Peers]:
    ours = LocalCluster(root / "kafkasim", brokers=1)
    with ApacheKafkaCluster(root / "kafka", brokers=1) as kafka:
        try:
            ours.start()
            yield Peers(kafka, ours)
        finally:
            ours.stop()


Batching = tuple[int, int]  # (batch.size, linger.ms)
Run = Callable[[int, int, Batching], float]


def best_batching(run: Run, size: int, records: int) -> tuple[tuple[int, int], list[str]]:
    """One run per candidate; the fastest (batch.size, linger.ms) and a line per candidate."""
    rates = {batch: run(size, records, batch) for batch in CANDIDATES}
    best = max(rates, key=lambda b: rates[b])
    lines = [f"batch.size={b[0]} linger.ms={b[1]}: {rates[b]:.0f}" for b in CANDIDATES]
    return best, lines


# -- profiling ----------------------------------------------------------------------------


def _py_spy() -> str:
    path = Path(sys.executable).parent / "py-spy"
    if not path.exists():
        raise RuntimeError("py-spy is not installed: pip install py-spy")
    return str(path)


def top_frames(raw: Path, top: int = PROFILE_TOP) -> list[str]:
    """From py-spy's collapsed stacks: the frames with most own samples, and with most
    samples on the stack (each counted once per stack); imports left out."""
    own: collections.Counter[str] = collections.Counter()
    total: collections.Counter[str] = collections.Counter()
    samples = 0
    for line in raw.read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack:
            continue
        if "_find_and_load" in stack:
            continue  # importing modules: the process's start-up, before the tool's clock
        count = int(count_text)
        # "function (file:line)": the line dropped, so that a function's samples add up.
        frames = [frame.rpartition(":")[0] + ")" if ":" in frame else frame
                  for frame in stack.split(";")]  # fmt: skip
        samples += count
        own[frames[-1]] += count
        for frame in set(frames):
            total[frame] += count
    out = [f"  {samples} samples; own:"]
    out += [f"  {100 * n / samples:5.1f}%  {f}" for f, n in own.most_common(top)]
    out.append("  on the stack:")
    out += [f"  {100 * n / samples:5.1f}%  {f}" for f, n in total.most_common(top)]
    return out


Rate = Callable[[subprocess.CompletedProcess[str]], float]


def profile(peers_: Peers, label: str, argv: list[str], rate: Rate, out: Path) -> None:
    """One kafkasim tool run (``argv``) with py-spy on the tool and on the broker; prints
    the records/s under py-spy and the top frames of both, raw stacks in ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    py_spy = _py_spy()
    broker_pid = next(b.pid for b in peers_.ours.brokers.values() if b.pid is not None)
    tool_raw, broker_raw = out / f"{label}-tool.txt", out / f"{label}-broker.txt"
    broker_spy = subprocess.Popen(
        [py_spy, "record", "--pid", str(broker_pid), "--format", "raw", "-o", str(broker_raw),
         "--rate", "200", "--nonblocking"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        time.sleep(1.0)  # attached before the load starts
        done = subprocess.run(
            [py_spy, "record", "--format", "raw", "-o", str(tool_raw), "--rate", "200", "--",
             sys.executable, "-m", "kafkasim.cli", *argv],
            capture_output=True,
            text=True,
            env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)},
            timeout=600,
            check=False,
        )  # fmt: skip
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(broker_spy.pid, signal.SIGINT)  # py-spy writes its file on SIGINT
        try:
            broker_spy.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.kill(broker_spy.pid, signal.SIGKILL)
            broker_spy.wait()
    print(f"profile, {label} (records/s under py-spy: {rate(done):.0f})")
    for name, raw in ((argv[0], tool_raw), ("broker", broker_raw)):
        print(f" {name} ({raw}):")
        print("\n".join(top_frames(raw) if raw.exists() else ["  (no samples written)"]))


def profile_all(peers_: Peers, counts: Counts, best: dict[tuple[str, int], Batching],
                out: Path) -> None:  # fmt: skip
    """Per record size: producer-perf-test filling a topic, then consumer-perf-test reading it."""
    for size in SIZES:
        records = counts.records[size]
        topic = peers_.ours_topic()
        argv = kafkasim_perf_argv(peers_.bootstrap, topic, size, records, best["kafkasim", size])
        rate = functools.partial(_records_s, "producer-perf-test")
        profile(peers_, f"producer-{size}", argv, rate, out)
        peers_.filled["kafkasim", size] = (topic, records)
        argv, records = peers_.ours_read_argv(size)
        rate = functools.partial(consumed_rate, "consumer-perf-test", records=records)
        profile(peers_, f"consumer-{size}", argv, rate, out)


# -- the run ------------------------------------------------------------------------------


def _medians_table(title: str, rates: dict[tuple[str, int], list[float]],
                   extra: dict[str, Callable[[int], str]]) -> list[str]:  # fmt: skip
    """The medians per record size and system, with ``extra`` columns (name: text by size)."""
    lines = [title, f"{'record':>7} {'kafkasim':>10} {'Kafka':>10} {'ratio':>6}"
             + "".join(f" {name:>16}" for name in extra)]  # fmt: skip
    for size in SIZES:
        ours = statistics.median(rates["kafkasim", size])
        theirs = statistics.median(rates["Kafka", size])
        lines.append(f"{size:>6}B {ours:>10.0f} {theirs:>10.0f} {ours / theirs:>6.2f}"
                     + "".join(f" {column(size):>16}" for column in extra.values()))  # fmt: skip
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer records, 3 rounds")
    parser.add_argument(
        "--consumer-only", action="store_true", help="skip the producer measurements"
    )
    parser.add_argument("--profile", type=Path, help="also profile kafkasim with py-spy into DIR")
    parser.add_argument(
        "--profile-only", action="store_true", help="with --profile: skip the measurements"
    )
    parser.add_argument(
        "--replicated",
        action="store_true",
        help="3 brokers RF=3 acks=all against 1 broker acks=1, both systems "
        "(bench.peers_replicated: --partitions N, --sizes)",
    )
    if "--replicated" in sys.argv[1:]:
        # Its own module and options (--help there lists them); imported by name since it
        # imports this module's helpers.
        replicated = importlib.import_module("bench.peers_replicated")
        replicated.main(sys.argv[1:])
        return
    args = parser.parse_args()
    counts = QUICK if args.quick else FULL
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    print(
        "perf tools, 1 broker each, 1-partition topic, acks=1: kafkasim producer-perf-test and "
        f"consumer-perf-test (Python client, gRPC) vs Kafka {KAFKA_VERSION} ProducerPerformance "
        "and ConsumerPerformance --new-consumer (Java clients)",
        flush=True,
    )
    if args.quick:
        print(
            "--quick: fewer records than Kafka's JIT needs to warm up; Kafka's figures here "
            "understate it (run without --quick for the ratios that count)",
            flush=True,
        )
    produced: dict[tuple[str, int], list[float]] = collections.defaultdict(list)
    consumed: dict[tuple[str, int], list[float]] = collections.defaultdict(list)
    best: dict[tuple[str, int], Batching] = {}
    with (
        tempfile.TemporaryDirectory(prefix="kafkasim-peers-bench-") as tmp,
        peers(Path(tmp)) as both,
    ):
        tools: dict[str, Run] = {"kafkasim": both.ours_run, "Kafka": both.kafka_run}
        readers: dict[str, Callable[[int], float]] = {
            "kafkasim": both.ours_read,
            "Kafka": both.kafka_read,
        }
        for size in SIZES:
            calibrate = counts.records[size]
            for name, run in tools.items():
                if args.consumer_only:
                    best[name, size] = FILL_BATCHING
                    run(size, calibrate, FILL_BATCHING)
                    continue
                best[name, size], lines = best_batching(run, size, calibrate)
                print(f"{name} {size} B, {calibrate} records: " + "; ".join(lines), flush=True)
        if args.profile is not None:
            profile_all(both, counts, best, args.profile)
            if args.profile_only:
                return
        for round_ in range(0 if args.consumer_only else counts.rounds):
            for size in SIZES:
                for name, run in tools.items() if round_ % 2 == 0 else reversed(tools.items()):
                    rate = run(size, counts.records[size], best[name, size])
                    produced[name, size].append(rate)
                    print(f"round {round_ + 1}, {size} B, {name}: {rate:.0f} records/s", flush=True)
        for round_ in range(counts.rounds):
            for size in SIZES:
                for name, read in readers.items() if round_ % 2 == 0 else reversed(readers.items()):
                    rate = read(size)
                    consumed[name, size].append(rate)
                    print(f"round {round_ + 1}, {size} B, read {both.filled[name, size][1]} "
                          f"records, {name}: {rate:.0f} records/s", flush=True)  # fmt: skip
    print()
    if produced:
        batching = {f"{n} batching": (lambda s, n=n: f"{best[n, s][0]}/{best[n, s][1]}ms")
                    for n in ("kafkasim", "Kafka")}  # fmt: skip
        title = (f"producers: medians of {counts.rounds} interleaved rounds (records/s), each "
                 "with its best batching:")  # fmt: skip
        print("\n".join(_medians_table(title, produced, batching)))
        print()
    records = {"records": lambda s: str(counts.records[s])}
    title = (f"consumers from the beginning: medians of {counts.rounds} interleaved rounds "
             "(nMsg.sec, records/s):")  # fmt: skip
    print("\n".join(_medians_table(title, consumed, records)))


if __name__ == "__main__":
    main()
