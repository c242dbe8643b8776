"""Each system's own producer perf tool, side by side (issue 19): kafkasim's
``producer-perf-test`` (the Python client over gRPC) against Apache Kafka 0.9.0.1's
``org.apache.kafka.tools.ProducerPerformance`` (the Java client).

One broker each (kafkasim: ``LocalCluster``; Kafka: ``bench.apache_kafka.ApacheKafkaCluster``,
both up for the whole run), a fresh 1-partition topic per run, acks=1, 100 B and 1 KiB records,
as fast as the tool goes (throughput -1). Each tool first runs once with every batching in its
``CANDIDATES`` (batch.size, linger.ms) and keeps the fastest for each record size (its "best
batching"); then the two tools run alternately, ``rounds`` times each (3 with ``--quick``, 5
otherwise), and the medians of records/s and their ratio (kafkasim / Kafka) are printed.

``--profile DIR`` adds one more kafkasim run per size under py-spy: the producer-perf-test
process and the broker are sampled for the whole run, the raw (collapsed) stacks are written
to DIR and the top frames of each (by own samples, and by samples with the frame on the stack)
are printed.

Everything started here is stopped here by pid (the clusters' context managers; py-spy
by its own pid), also on Ctrl-C. Run: ``./dev bench peers [--quick] [--profile DIR]``.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
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
PROFILE_TOP = 25


@dataclass(frozen=True)
class Counts:
    records: dict[int, int]  # records per run, by record size
    rounds: int


FULL = Counts({100: 1_000_000, 1024: 200_000}, rounds=5)
QUICK = Counts({100: 300_000, 1024: 60_000}, rounds=3)


def kafka_perf(cluster: ApacheKafkaCluster, topic: str, size: int, records: int,
               batch: tuple[int, int]) -> float:  # fmt: skip
    """Kafka 0.9's ProducerPerformance: records/s of its total line."""
    done = subprocess.run(
        [
            "java",
            *PERF_TOOL_JVM,
            "-cp",
            cluster.classpath,
            f"-Dlog4j.configuration=file:{cluster.root / 'log4j.properties'}",
            "-Dlog.name=perf-tool",
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
            "acks=1",
            f"batch.size={batch[0]}",
            f"linger.ms={batch[1]}",
        ],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    return _records_s("ProducerPerformance", done)


def kafkasim_perf_argv(bootstrap: str, topic: str, size: int, records: int,
                       batch: tuple[int, int]) -> list[str]:  # fmt: skip
    return [
        "producer-perf-test", "--topic", topic, "--num-records", str(records),
        "--record-size", str(size), "--throughput", "-1",
        "--producer-props", f"bootstrap.servers={bootstrap}", "acks=1",
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


class Peers:
    """Both clusters, up for the whole run; a fresh topic for every measurement."""

    def __init__(self, kafka: ApacheKafkaCluster, ours: LocalCluster) -> None:
        self.kafka = kafka
        self.ours = ours
        self.bootstrap = ",".join(ours.bootstrap)
        self.topics = 0

    def _topic(self) -> str:
        self.topics += 1
        return f"peers-{self.topics}"

    def kafka_run(self, size: int, records: int, batch: tuple[int, int]) -> float:
        topic = self._topic()
        self.kafka.create_topic(topic, partitions=1, replication_factor=1)
        return kafka_perf(self.kafka, topic, size, records, batch)

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
        argv = kafkasim_perf_argv(self.bootstrap, self.ours_topic(), size, records, batch)
        return _records_s("producer-perf-test", kafkasim(*argv))


@contextlib.contextmanager
def peers(root: Path) -> Iterator[Peers]:
    ours = LocalCluster(root / "kafkasim", brokers=1)
    with ApacheKafkaCluster(root / "kafka", brokers=1) as kafka:
        try:
            ours.start()
            yield Peers(kafka, ours)
        finally:
            ours.stop()


Run = Callable[[int, int, tuple[int, int]], float]


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


def profile(peers_: Peers, size: int, records: int, batch: tuple[int, int], out: Path) -> None:
    """One kafkasim run with py-spy on the perf tool and on the broker; prints top frames."""
    out.mkdir(parents=True, exist_ok=True)
    py_spy = _py_spy()
    broker_pid = next(b.pid for b in peers_.ours.brokers.values() if b.pid is not None)
    tool_raw, broker_raw = out / f"producer-{size}.txt", out / f"broker-{size}.txt"
    argv = kafkasim_perf_argv(peers_.bootstrap, peers_.ours_topic(), size, records, batch)
    broker_spy = subprocess.Popen(
        [
            py_spy,
            "record",
            "--pid",
            str(broker_pid),
            "--format",
            "raw",
            "-o",
            str(broker_raw),
            "--rate",
            "200",
            "--nonblocking",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        time.sleep(1.0)  # attached before the load starts
        done = subprocess.run(
            [
                py_spy,
                "record",
                "--format",
                "raw",
                "-o",
                str(tool_raw),
                "--rate",
                "200",
                "--",
                sys.executable,
                "-m",
                "kafkasim.cli",
                *argv,
            ],
            capture_output=True,
            text=True,
            env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)},
            timeout=600,
            check=False,
        )
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(broker_spy.pid, signal.SIGINT)  # py-spy writes its file on SIGINT
        try:
            broker_spy.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.kill(broker_spy.pid, signal.SIGKILL)
            broker_spy.wait()
    print(
        f"profile, {size} B (records/s under py-spy: {_records_s('producer-perf-test', done):.0f})"
    )
    for name, raw in (("producer-perf-test", tool_raw), ("broker", broker_raw)):
        print(f" {name} ({raw}):")
        print("\n".join(top_frames(raw) if raw.exists() else ["  (no samples written)"]))


# -- the run ------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer records, 3 rounds")
    parser.add_argument("--profile", type=Path, help="also profile kafkasim with py-spy into DIR")
    parser.add_argument(
        "--profile-only", action="store_true", help="with --profile: skip the measurements"
    )
    args = parser.parse_args()
    counts = QUICK if args.quick else FULL
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    print(
        f"producer perf tools, 1 broker each, 1-partition topic, acks=1: kafkasim "
        f"producer-perf-test (Python client, gRPC) vs Kafka {KAFKA_VERSION} ProducerPerformance "
        "(Java client)",
        flush=True,
    )
    rates: dict[tuple[str, int], list[float]] = collections.defaultdict(list)
    best: dict[tuple[str, int], tuple[int, int]] = {}
    with (
        tempfile.TemporaryDirectory(prefix="kafkasim-peers-bench-") as tmp,
        peers(Path(tmp)) as both,
    ):
        tools: dict[str, Run] = {"kafkasim": both.ours_run, "Kafka": both.kafka_run}
        for size in SIZES:
            calibrate = counts.records[size]
            for name, run in tools.items():
                best[name, size], lines = best_batching(run, size, calibrate)
                print(f"{name} {size} B, {calibrate} records: " + "; ".join(lines), flush=True)
        if args.profile is not None:
            for size in SIZES:
                profile(both, size, counts.records[size], best["kafkasim", size], args.profile)
            if args.profile_only:
                return
        for round_ in range(counts.rounds):
            for size in SIZES:
                for name, run in tools.items() if round_ % 2 == 0 else reversed(tools.items()):
                    rate = run(size, counts.records[size], best[name, size])
                    rates[name, size].append(rate)
                    print(f"round {round_ + 1}, {size} B, {name}: {rate:.0f} records/s", flush=True)
    print()
    print(
        f"medians of {counts.rounds} interleaved rounds (records/s), each with its best batching:"
    )
    print(f"{'record':>7} {'kafkasim':>10} {'batching':>16} {'Kafka':>10} {'batching':>16} "
          f"{'ratio':>6}")  # fmt: skip
    for size in SIZES:
        ours, theirs = (
            statistics.median(rates["kafkasim", size]),
            statistics.median(rates["Kafka", size]),
        )
        batchings = [f"{best[n, size][0]}/{best[n, size][1]}ms" for n in ("kafkasim", "Kafka")]
        print(f"{size:>6}B {ours:>10.0f} {batchings[0]:>16} {theirs:>10.0f} {batchings[1]:>16} "
              f"{ours / theirs:>6.2f}")  # fmt: skip


if __name__ == "__main__":
    main()
