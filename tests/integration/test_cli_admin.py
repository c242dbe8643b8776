"""The admin verbs (topics, leader-election, producer-perf-test) run as a user runs them:
subprocesses against one real ``kafkasim cluster up`` cluster, shared by the module and stopped
at its end. Each test checks Kafka's output lines and exit codes, and one bad input per verb
that must print one clear line and exit non-zero."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cli_run import cluster_up, kafkasim


@pytest.fixture(scope="module")
def cluster_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    with cluster_up(tmp_path_factory.mktemp("admin") / "c", "--brokers", "3") as root:
        yield root


@pytest.fixture(scope="module")
def bootstrap(cluster_dir: Path) -> str:
    state = json.loads((cluster_dir / "cluster.json").read_text())
    return ",".join(b["address"] for b in state["brokers"])


def one_error_line(out: str) -> str:
    lines = out.strip().splitlines()
    assert len(lines) == 1, out
    return lines[0]


def describe_until_led(bootstrap: str, topic: str) -> list[str]:
    """``--describe`` once every partition shows a leader (metadata reaches brokers later)."""
    deadline = time.monotonic() + 20
    while True:
        out = kafkasim("topics", "--bootstrap-server", bootstrap, "--describe", "--topic", topic)
        if out.returncode == 0 and "Leader: none" not in out.stdout:
            return out.stdout.splitlines()
        assert time.monotonic() < deadline, out.stdout + out.stderr
        time.sleep(0.2)


def test_topics_create_describe_list_alter_delete(bootstrap: str, cluster_dir: Path) -> None:
    created = kafkasim(
        "topics", "--bootstrap-server", bootstrap, "--create", "--topic", "orders",
        "--partitions", "2", "--replication-factor", "3", "--config", "min.insync.replicas=2",
    )  # fmt: skip
    assert (created.returncode, created.stdout) == (0, "Created topic orders.\n"), created.stderr
    lines = describe_until_led(bootstrap, "orders")
    assert lines[0] == (
        "Topic: orders\tPartitionCount: 2\tReplicationFactor: 3\tConfigs: min.insync.replicas=2"
    )
    partition_line = re.compile(
        r"^\tTopic: orders\tPartition: (\d)\tLeader: (\d)\tReplicas: (\d,\d,\d)\tIsr: (\d,\d,\d)$"
    )
    matches = [partition_line.match(line) for line in lines[1:]]
    assert len(matches) == 2 and all(matches), lines
    assert [m.group(1) for m in matches if m] == ["0", "1"]
    assert all(m.group(2) == m.group(3)[0] for m in matches if m), "leader is first replica"

    listed = kafkasim("topics", "--dir", str(cluster_dir), "--list")
    assert listed.returncode == 0 and "orders" in listed.stdout.splitlines()
    healthy = kafkasim(
        "topics", "--dir", str(cluster_dir), "--describe", "--under-replicated-partitions"
    )
    assert (healthy.returncode, healthy.stdout) == (0, "")

    altered = kafkasim(
        "topics", "--bootstrap-server", bootstrap, "--alter", "--topic", "orders",
        "--partitions", "3",
    )  # fmt: skip
    assert (altered.returncode, altered.stdout) == (0, ""), altered.stderr
    deadline = time.monotonic() + 20
    while len(describe_until_led(bootstrap, "orders")) != 4:
        assert time.monotonic() < deadline
        time.sleep(0.2)

    again = kafkasim(
        "topics", "--bootstrap-server", bootstrap, "--create", "--topic", "orders",
        "--partitions", "1",
    )  # fmt: skip
    assert again.returncode == 1
    assert one_error_line(again.stderr) == (
        "Error while executing topic command : Topic 'orders' already exists."
    )
    quiet = kafkasim(
        "topics", "--bootstrap-server", bootstrap, "--create", "--topic", "orders",
        "--if-not-exists",
    )  # fmt: skip
    assert (quiet.returncode, quiet.stdout) == (0, "")

    deleted = kafkasim("topics", "--bootstrap-server", bootstrap, "--delete", "--topic", "orders")
    assert (deleted.returncode, deleted.stdout) == (0, ""), deleted.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--describe", "--topic", "missing"],
            "Error while executing topic command : Topic 'missing' does not exist as expected",
        ),
        (
            ["--delete", "--topic", "missing"],
            "Error while executing topic command : Topic 'missing' does not exist as expected",
        ),
        (
            ["--list", "--describe"],
            "kafkasim topics: error: Command must include exactly one action: --list, "
            "--describe, --create, --alter or --delete",
        ),
    ],
)
def test_topics_bad_input_prints_one_line_and_fails(
    bootstrap: str, args: list[str], message: str
) -> None:
    out = kafkasim("topics", "--bootstrap-server", bootstrap, *args)
    assert out.returncode == 1
    assert one_error_line(out.stderr) == message


def test_leader_election_reports_partitions_already_led_and_unknown_ones(bootstrap: str) -> None:
    kafkasim(
        "topics", "--bootstrap-server", bootstrap, "--create", "--topic", "elect",
        "--partitions", "2", "--replication-factor", "3",
    )  # fmt: skip
    describe_until_led(bootstrap, "elect")
    one = kafkasim(
        "leader-election", "--bootstrap-server", bootstrap, "--election-type", "preferred",
        "--topic", "elect", "--partition", "1",
    )  # fmt: skip
    assert one.returncode == 0, one.stderr
    assert one.stdout == "Valid replica already elected for partitions elect-1\n"
    everything = kafkasim(
        "leader-election", "--bootstrap-server", bootstrap, "--election-type", "PREFERRED",
        "--all-topic-partitions",
    )  # fmt: skip
    assert everything.returncode == 0, everything.stderr
    assert "elect-0, elect-1" in everything.stdout

    unknown = kafkasim(
        "leader-election", "--bootstrap-server", bootstrap, "--election-type", "preferred",
        "--topic", "missing", "--partition", "0",
    )  # fmt: skip
    assert unknown.returncode == 1
    assert unknown.stdout.startswith(
        "Error completing leader election (PREFERRED) for partition: missing-0: "
        "UNKNOWN_TOPIC_OR_PARTITION"
    )
    assert one_error_line(unknown.stderr) == "1 replica(s) could not be elected"

    both = kafkasim(
        "leader-election", "--bootstrap-server", bootstrap, "--election-type", "preferred",
        "--all-topic-partitions", "--topic", "elect", "--partition", "0",
    )  # fmt: skip
    assert both.returncode == 1
    assert "exactly one of --all-topic-partitions" in one_error_line(both.stderr)


FINAL_LINE = re.compile(
    r"^(\d+) records sent, \d+\.\d{6} records/sec \(\d+\.\d\d MB/sec\), \d+\.\d\d ms avg "
    r"latency, \d+\.\d\d ms max latency, \d+ ms 50th, \d+ ms 95th, \d+ ms 99th, "
    r"\d+ ms 99\.9th\.$"
)
WINDOW_LINE = re.compile(
    r"^\d+ records sent, \d+\.\d records/sec \(\d+\.\d\d MB/sec\), \d+\.\d ms avg latency, "
    r"\d+\.\d ms max latency\.$"
)


def test_producer_perf_test_prints_progress_and_kafkas_summary(
    bootstrap: str, tmp_path: Path
) -> None:
    """Throttled to 2000 records/s for 5.5 s: one progress line, then the summary."""
    kafkasim(
        "topics", "--bootstrap-server", bootstrap, "--create", "--topic", "perf",
        "--partitions", "3", "--replication-factor", "3",
    )  # fmt: skip
    describe_until_led(bootstrap, "perf")
    config = tmp_path / "producer.properties"
    config.write_text(f"# as Kafka's --producer.config\nbootstrap.servers={bootstrap}\n")
    out = kafkasim(
        "producer-perf-test", "--topic", "perf", "--num-records", "11000", "--record-size",
        "100", "--throughput", "2000", "--producer.config", str(config), "--producer-props",
        "acks=all", "linger.ms=5",
    )  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    lines = out.stdout.splitlines()
    assert len(lines) >= 2 and all(WINDOW_LINE.match(line) for line in lines[:-1]), lines
    final = FINAL_LINE.match(lines[-1])
    assert final and final.group(1) == "11000", lines[-1]

    missing = kafkasim(
        "producer-perf-test", "--topic", "perf", "--num-records", "10", "--record-size", "10",
        "--throughput", "-1", "--producer-props", "acks=all",
    )  # fmt: skip
    assert missing.returncode == 1
    assert "Either --bootstrap-server (or --dir) or bootstrap.servers" in one_error_line(
        missing.stderr
    )
