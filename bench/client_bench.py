"""Issue 4's performance table: ``kafkasim producer-perf-test`` against a local cluster;
issue 19's: the client's bulk paths against its per-record ones on one broker.

First (issue 19), on one broker (acks=1, a topic of one partition): ``producer-perf-test``
with ``--send-mode many`` (``Producer.send_many``, a batch's worth of records per call, the
default) and ``--send-mode one`` (one ``send`` and callback per record, the path before), and
``consumer-perf-test`` with ``--poll-mode batch`` (``poll_batch``: columns, the default) and
``--poll-mode records`` (``poll``: a ConsumerRecord per record), for 100-byte and 1 KiB
records, interleaved, ``REPEATS`` times each; it prints the medians and the ratios.

Starts a real 3-broker cluster (``cluster.local.LocalCluster``: a real ZooKeeper and three
broker processes on loopback), creates a topic with 3 partitions, replication factor 3 and
min.insync.replicas=2, and runs the producer-perf-test CLI as a user would (a subprocess), for
100-byte and 1 KiB records with acks=1 and acks=all, as fast as the producer goes
(``--throughput -1``). It prints each run's records/s, MB/s and latency percentiles as Kafka's
tool reports them, in one table. Then the client-side encoder against a bare loop packing the
same bytes (``bench.record_sizes``), side by side in this run.

Everything started here is stopped here (by pid, through LocalCluster). Run:
``./dev bench clients [--quick]``.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from bench import record_sizes
from kafkasim.cluster.local import REPO_ROOT, LocalCluster

TOPIC = "perf"
SUMMARY = re.compile(
    r"(?P<records>\d+) records sent, (?P<rps>[\d.]+) records/sec \((?P<mbs>[\d.]+) MB/sec\), "
    r"(?P<avg>[\d.]+) ms avg latency, (?P<max>[\d.]+) ms max latency, (?P<p50>\d+) ms 50th, "
    r"(?P<p95>\d+) ms 95th, (?P<p99>\d+) ms 99th, (?P<p999>\d+) ms 99.9th\."
)


def kafkasim(*args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kafkasim.cli", *args],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
        timeout=timeout,
        check=False,
    )


def run_perf(
    bootstrap: str,
    topic: str,
    size: int,
    records: int,
    acks: str,
    *,
    throughput: int = -1,
    send_mode: str = "many",
) -> dict[str, str]:
    out = kafkasim(
        "producer-perf-test",
        "--topic", topic,
        "--num-records", str(records),
        "--record-size", str(size),
        "--throughput", str(throughput),
        "--send-mode", send_mode,
        "--producer-props", f"bootstrap.servers={bootstrap}", f"acks={acks}", "linger.ms=5",
    )  # fmt: skip
    if out.returncode != 0:
        raise RuntimeError(f"producer-perf-test failed: {out.stderr.strip()}")
    match = SUMMARY.search(out.stdout.strip().splitlines()[-1])
    if match is None:
        raise RuntimeError(f"unexpected producer-perf-test output: {out.stdout!r}")
    return match.groupdict()


REPEATS = 3


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[len(ordered) // 2]


def run_consumer_perf(bootstrap: str, topic: str, messages: int, mode: str) -> float:
    """consumer-perf-test's nMsg.sec for ``messages`` records of ``topic`` read with ``mode``."""
    out = kafkasim(
        "consumer-perf-test", "--bootstrap-server", bootstrap, "--topic", topic,
        "--messages", str(messages), "--poll-mode", mode, "--timeout", "20000",
    )  # fmt: skip
    if out.returncode != 0:
        raise RuntimeError(f"consumer-perf-test failed: {out.stderr.strip()}")
    fields = [f.strip() for f in out.stdout.strip().splitlines()[-1].split(",")]
    return float(fields[5])


def client_paths(scale: int) -> list[str]:
    """Issue 19's table: the bulk and the per-record client paths on one broker."""
    sizes = [(100, 200_000 // scale), (1024, 60_000 // scale)]
    produced: dict[tuple[str, int], list[float]] = {}
    consumed: dict[tuple[str, int], list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="kafkasim-client-paths-") as tmp:
        cluster = LocalCluster(Path(tmp), brokers=1)
        cluster.start()
        try:
            bootstrap = ",".join(cluster.bootstrap)
            for size, records in sizes:
                topic = f"paths-{size}"
                created = kafkasim(
                    "topics", "--bootstrap-server", bootstrap, "--create", "--topic", topic,
                    "--partitions", "1", "--replication-factor", "1",
                )  # fmt: skip
                if created.returncode != 0:
                    raise RuntimeError(created.stderr.strip())
                for _ in range(REPEATS):  # interleaved: the machine is shared and noisy
                    for mode in ("one", "many"):
                        result = run_perf(bootstrap, topic, size, records, "1", send_mode=mode)
                        produced.setdefault((mode, size), []).append(float(result["rps"]))
                    for mode in ("records", "batch"):
                        rate = run_consumer_perf(bootstrap, topic, records, mode)
                        consumed.setdefault((mode, size), []).append(rate)
        finally:
            cluster.stop()
    lines = [
        f"client paths, 1 broker, acks=1, 1 partition, linger.ms=5, medians of {REPEATS} "
        "interleaved runs (records/s):",
        f"{'record':>7} {'send (one)':>11} {'send_many':>11} {'ratio':>6} "
        f"{'poll':>11} {'poll_batch':>11} {'ratio':>6}",
    ]
    for size, _ in sizes:
        one, many = _median(produced["one", size]), _median(produced["many", size])
        rec, col = _median(consumed["records", size]), _median(consumed["batch", size])
        lines.append(
            f"{size:>6}B {one:>11.0f} {many:>11.0f} {many / one:>6.2f} "
            f"{rec:>11.0f} {col:>11.0f} {col / rec:>6.2f}"
        )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer records (a smoke run)")
    parser.add_argument(
        "--paths-only", action="store_true", help="only the one-broker client paths table"
    )
    args = parser.parse_args()
    scale = 10 if args.quick else 1
    for line in client_paths(scale):
        print(line, flush=True)
    print()
    if args.paths_only:
        return
    runs = [(100, 200_000 // scale), (1024, 60_000 // scale)]
    with tempfile.TemporaryDirectory(prefix="kafkasim-client-bench-") as tmp:
        cluster = LocalCluster(Path(tmp), brokers=3)
        cluster.start()
        try:
            bootstrap = ",".join(cluster.bootstrap)
            rows = []
            # Flat out (latency is then mostly queueing in the producer), then at a fixed
            # 2000 records/s (the latency of one request round trip with replication).
            plan = [(size, records, acks, -1) for size, records in runs for acks in ("1", "all")]
            plan += [(100, 20_000 // scale, acks, 2000) for acks in ("1", "all")]
            for size, records, acks, throughput in plan:
                topic = f"{TOPIC}-{size}-{acks}-{'max' if throughput < 0 else throughput}"
                created = kafkasim(
                    "topics", "--bootstrap-server", bootstrap, "--create", "--topic", topic,
                    "--partitions", "3", "--replication-factor", "3",
                    "--config", "min.insync.replicas=2",
                )  # fmt: skip
                if created.returncode != 0:
                    raise RuntimeError(created.stderr.strip())
                result = run_perf(bootstrap, topic, size, records, acks, throughput=throughput)
                rows.append((size, acks, throughput, result))
        finally:
            cluster.stop()
    print("producer-perf-test, 3 brokers, topic 3 partitions RF=3 min.insync.replicas=2,")
    print("linger.ms=5, idempotence on (the default), one producer process:")
    print(f"{'record':>7} {'acks':>4} {'target':>7} {'records':>8} {'records/s':>10} "
          f"{'MB/s':>7} {'p50 ms':>7} {'p99 ms':>7} {'max ms':>7}")  # fmt: skip
    for size, acks, throughput, r in rows:
        target = "max" if throughput < 0 else str(throughput)
        print(
            f"{size:>6}B {acks:>4} {target:>7} {r['records']:>8} {float(r['rps']):>10.0f} "
            f"{float(r['mbs']):>7.2f} {r['p50']:>7} {r['p99']:>7} {float(r['max']):>7.0f}"
        )
    print()
    print("client-side record encoding (one v2 batch of 1000 records), side by side:")
    for line in record_sizes.throughput():
        print(line)


if __name__ == "__main__":
    main()
