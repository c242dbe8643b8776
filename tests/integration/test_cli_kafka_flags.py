"""The Kafka flags a Kafka user types (issue 18, items 4 and 6), run as a user runs them:
subprocesses against one real ``kafkasim cluster up`` cluster shared by the module. Each test
checks Kafka's output lines, the one-line errors and the exit codes."""

from __future__ import annotations

import functools
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cli_run import cluster_up
from tests.cli_run import kafkasim as run_kafkasim

kafkasim = functools.partial(run_kafkasim, timeout=90)
TOPIC = "flags"
README = Path(__file__).resolve().parents[2] / "README.md"


def wait_led(d: str, topic: str) -> None:
    deadline = time.monotonic() + 20
    while True:
        out = kafkasim("topics", "--dir", d, "--describe", "--topic", topic)
        if out.returncode == 0 and "Leader: none" not in out.stdout:
            return
        assert time.monotonic() < deadline, out.stdout + out.stderr
        time.sleep(0.2)


@pytest.fixture(scope="module")
def d(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A 3-broker cluster; topic ``flags`` (2 partitions, RF 3, min.insync.replicas=3) holds
    4 records; group ``readers`` committed offsets 2 of partition 0 and 0 of partition 1,
    so ``__consumer_offsets`` exists too."""
    with cluster_up(tmp_path_factory.mktemp("flags") / "c", "--brokers", "3") as root:
        d = str(root)
        created = kafkasim(
            "topics", "--dir", d, "--create", "--topic", TOPIC, "--partitions", "2",
            "--replication-factor", "3", "--config", "min.insync.replicas=3",
        )  # fmt: skip
        assert created.returncode == 0, created.stderr
        wait_led(d, TOPIC)
        produced = kafkasim(
            "console-producer", "--dir", d, "--topic", TOPIC, "--property", "parse.key=true",
            "--property", "key.separator=:", stdin="a:1\nb:2\nc:3\nd:4\n",
        )  # fmt: skip
        assert produced.returncode == 0, produced.stderr
        committed = {("flags", "0"): "2", ("flags", "1"): "0"}
        csv = "".join(f"{t},{p},{o}\n" for (t, p), o in committed.items())
        (root / "start.csv").write_text(csv)
        reset = kafkasim(
            "consumer-groups", "--dir", d, "--reset-offsets", "--group", "readers",
            "--from-file", str(root / "start.csv"), "--execute",
        )  # fmt: skip
        assert reset.returncode == 0, reset.stderr
        yield d


def offsets(d: str, group: str = "readers") -> dict[tuple[str, str], str]:
    out = kafkasim("consumer-groups", "--dir", d, "--describe", "--group", group)
    assert out.returncode == 0, out.stderr
    rows = [line.split() for line in out.stdout.splitlines() if line.startswith(group)]
    return {(r[1], r[2]): r[3] for r in rows}


def ends(d: str) -> dict[str, int]:
    out = kafkasim("consumer-groups", "--dir", d, "--describe", "--group", "readers")
    rows = [line.split() for line in out.stdout.splitlines() if line.startswith("readers")]
    return {r[2]: int(r[4]) for r in rows}


# -- the parser ----------------------------------------------------------------------------------


def test_an_unknown_flag_gets_the_subcommands_usage_and_version_prints() -> None:
    out = kafkasim("consumer-groups", "--bogus")
    assert out.returncode == 2
    assert out.stderr.startswith("usage: kafkasim consumer-groups "), out.stderr
    assert out.stderr.splitlines()[-1] == (
        "kafkasim consumer-groups: error: unrecognized arguments: --bogus"
    )
    nested = kafkasim("cluster", "status", "--bogus")
    assert nested.stderr.startswith("usage: kafkasim cluster status "), nested.stderr
    version = kafkasim("--version")
    assert version.returncode == 0
    assert re.fullmatch(r"kafkasim \d+\.\d+\.\d+\S*\n", version.stdout), version.stdout


# -- consumer-groups -----------------------------------------------------------------------------


def groups(d: str, *args: str) -> tuple[int, str, str]:
    out = kafkasim("consumer-groups", "--dir", d, *args)
    return out.returncode, out.stdout, out.stderr


def test_a_reset_needs_a_scope_and_without_execute_warns_and_changes_nothing(d: str) -> None:
    code, _, err = groups(d, "--reset-offsets", "--group", "readers", "--to-earliest")
    assert code == 1
    assert err.strip().endswith("One of the reset scopes should be defined: --all-topics, --topic.")
    before = offsets(d)
    code, out, err = groups(d, "--reset-offsets", "--group", "readers", "--all-topics",
                            "--to-latest")  # fmt: skip
    assert code == 0, err
    assert err.startswith("WARN: No action will be performed as the --execute option is missing.")
    rows = [line.split() for line in out.splitlines() if line.strip()]
    assert rows[0] == ["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"]
    assert {(r[1], r[2]) for r in rows[1:]} == set(before)
    assert offsets(d) == before
    code, out, err = groups(d, "--reset-offsets", "--group", "readers", "--all-topics",
                            "--to-latest", "--dry-run")  # fmt: skip
    assert (code, err) == (0, "")
    assert offsets(d) == before


def test_export_then_from_file_round_trips_and_time_targets(d: str, tmp_path: Path) -> None:
    end = ends(d)
    code, out, _ = groups(d, "--reset-offsets", "--group", "readers", "--topic", TOPIC,
                          "--shift-by", "-1", "--dry-run", "--export")  # fmt: skip
    assert code == 0
    before = offsets(d)
    expected = sorted(f"{TOPIC},{p},{max(int(o) - 1, 0)}" for (_, p), o in before.items())
    assert sorted(out.splitlines()) == expected
    plan = tmp_path / "plan.csv"
    plan.write_text(out)
    code, _, err = groups(d, "--reset-offsets", "--group", "readers", "--from-file", str(plan),
                          "--execute")  # fmt: skip
    assert code == 0, err
    assert offsets(d) == {(TOPIC, line.split(",")[1]): line.split(",")[2] for line in expected}
    # A time after every record: the log end; a day back: the first record.
    code, out, _ = groups(d, "--reset-offsets", "--group", "readers", "--all-topics",
                          "--to-datetime", "2999-01-01T00:00:00.000", "--export",
                          "--dry-run")  # fmt: skip
    assert code == 0
    assert sorted(out.splitlines()) == sorted(f"{TOPIC},{p},{o}" for p, o in end.items())
    code, out, _ = groups(d, "--reset-offsets", "--group", "readers", "--all-topics",
                          "--by-duration", "P1D", "--export", "--dry-run")  # fmt: skip
    assert code == 0
    assert sorted(out.splitlines()) == [f"{TOPIC},0,0", f"{TOPIC},1,0"]
    code, _, err = groups(d, "--reset-offsets", "--group", "readers", "--all-topics",
                          "--by-duration", "5 minutes")  # fmt: skip
    assert code == 1 and "Error parsing duration '5 minutes'" in err


def test_verbose_is_only_for_describe(d: str) -> None:
    code, _, err = groups(d, "--list", "--verbose")
    assert code == 1 and "Option [verbose] can be used only with [describe]" in err
    code, out, _ = groups(d, "--describe", "--group", "readers", "--members", "--verbose")
    assert code == 0 and "Consumer group 'readers' has no active members." in out


def status_rows(out: str) -> list[list[str]]:
    """The rows of --delete-offsets' table, split at Kafka's fixed columns (30, 15, rest)."""
    return [
        [line[:30].strip(), line[31:46].strip(), line[47:].strip()] for line in out.splitlines()[2:]
    ]


def test_delete_offsets_prints_kafkas_table_and_errors(d: str, tmp_path: Path) -> None:
    plan = tmp_path / "pruned.csv"
    plan.write_text(f"{TOPIC},0,1\n{TOPIC},1,1\n")
    code, _, err = groups(d, "--reset-offsets", "--group", "pruned", "--from-file", str(plan),
                          "--execute")  # fmt: skip
    assert code == 0, err
    code, out, err = groups(d, "--delete-offsets", "--group", "pruned", "--topic", f"{TOPIC}:0")
    assert (code, err) == (0, ""), err
    assert out.splitlines() == [
        f"Request succeed for deleting offsets with topic {TOPIC}:0 group pruned",
        "",
        f"{'TOPIC':<30} {'PARTITION':<15} {'STATUS':<15}",
        f"{TOPIC:<30} {'0':<15} {'Successful':<15}",
    ]
    assert offsets(d, "pruned") == {(TOPIC, "1"): "1"}
    # A partition the cluster does not have, a topic it does not know: partition-level errors.
    code, out, err = groups(d, "--delete-offsets", "--group", "pruned", "--topic", f"{TOPIC}:7",
                            "--topic", "nosuch")  # fmt: skip
    assert code == 1
    assert err == "Error: Encounter some partition level error, see the follow-up details:\n"
    rows = status_rows(out)
    assert [r[:2] for r in rows] == [[TOPIC, "7"], ["nosuch", "Not Provided"]]
    assert all(r[2].startswith("Error: UNKNOWN_TOPIC_OR_PARTITION") for r in rows)
    code, out, err = groups(d, "--delete-offsets", "--group", "nogroup", "--topic", TOPIC)
    assert (code, err) == (1, "Error: 'nogroup' does not exist.\n")
    code, _, err = groups(d, "--delete-offsets", "--group", "pruned")
    assert code == 1 and "Option [delete-offsets] takes the following options" in err


def test_delete_offsets_of_a_live_groups_topic_is_refused(d: str) -> None:
    """A member of group ``live`` consumes TOPIC: its offsets cannot be deleted
    (GROUP_SUBSCRIBED_TO_TOPIC), as Kafka refuses them."""
    consumer = subprocess.Popen(
        [sys.executable, "-m", "kafkasim.cli", "console-consumer", "--dir", d, "--topic", TOPIC,
         "--group", "live", "--from-beginning"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "PYTHONPATH": str(README.parent)},
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while True:
            code, out, _ = groups(d, "--describe", "--group", "live")
            if code == 0 and re.search(rf"^live\s+{TOPIC}\s+\d+\s+\d+", out, re.MULTILINE):
                break  # a member, and its first commit
            assert time.monotonic() < deadline, out
            time.sleep(0.5)
        code, out, err = groups(d, "--delete-offsets", "--group", "live", "--topic", TOPIC)
        assert code == 1
        assert err == "Error: Encounter some partition level error, see the follow-up details:\n"
        rows = status_rows(out)
        assert [r[:2] for r in rows] == [[TOPIC, "0"], [TOPIC, "1"]]
        assert all(r[2].startswith("Error: GROUP_SUBSCRIBED_TO_TOPIC") for r in rows)
    finally:
        consumer.terminate()
        consumer.wait(timeout=60)


# -- topics and cluster status -------------------------------------------------------------------


def test_topics_min_isr_reports_and_exclude_internal(d: str) -> None:
    at = kafkasim("topics", "--dir", d, "--describe", "--at-min-isr-partitions")
    assert at.returncode == 0, at.stderr
    assert [line.split("\t")[1:3] for line in at.stdout.splitlines()] == [
        [f"Topic: {TOPIC}", "Partition: 0"],
        [f"Topic: {TOPIC}", "Partition: 1"],
    ]
    under = kafkasim("topics", "--dir", d, "--describe", "--under-min-isr-partitions")
    assert (under.returncode, under.stdout) == (0, "")
    listed = kafkasim("topics", "--dir", d, "--list")
    assert "__consumer_offsets" in listed.stdout.split()
    kept = kafkasim("topics", "--dir", d, "--list", "--exclude-internal")
    assert kept.stdout.split() == [TOPIC]
    described = kafkasim("topics", "--dir", d, "--describe", "--exclude-internal")
    assert "__consumer_offsets" not in described.stdout and TOPIC in described.stdout
    both = kafkasim("topics", "--dir", d, "--describe", "--at-min-isr-partitions",
                    "--under-replicated-partitions")  # fmt: skip
    assert both.returncode == 2 and "not allowed with argument" in both.stderr


def test_cluster_status_hides_internal_topics_and_filters(d: str) -> None:
    plain = kafkasim("cluster", "status", "--dir", d)
    assert plain.returncode == 0, plain.stderr
    assert "__consumer_offsets" not in plain.stdout and f"Topic: {TOPIC}\t" in plain.stdout
    internal = kafkasim("cluster", "status", "--dir", d, "--include-internal")
    assert "Topic: __consumer_offsets\tPartitionCount: 50" in internal.stdout
    one = kafkasim("cluster", "status", "--dir", d, "--topic", "__consumer_offsets")
    assert {line.split("\t")[0] for line in one.stdout.splitlines() if "Topic:" in line} <= {
        "Topic: __consumer_offsets",
        "",
    }
    assert TOPIC not in one.stdout
    healthy = kafkasim("cluster", "status", "--dir", d, "--under-replicated")
    assert healthy.returncode == 0
    assert "Topic:" not in healthy.stdout and "Controller: broker" in healthy.stdout
    unknown = kafkasim("cluster", "status", "--dir", d, "--topic", "nope")
    assert unknown.returncode == 1
    assert unknown.stderr == "kafkasim cluster: error: Topic 'nope' does not exist\n"
    watched = kafkasim("cluster", "status", "--dir", d, "--watch", "0.2", "--iterations", "2")
    assert watched.returncode == 0, watched.stderr
    headers = [line for line in watched.stdout.splitlines() if line.startswith("Every 0.2s: ")]
    assert len(headers) == 2
    assert watched.stdout.count("Controller: broker") == 2


# -- configs --entity-type brokers ---------------------------------------------------------------


def configs(d: str, *args: str) -> tuple[int, str, str]:
    out = kafkasim("configs", "--dir", d, *args)
    return out.returncode, out.stdout, out.stderr


def test_dynamic_broker_configs_are_stored_described_and_applied_live(d: str) -> None:
    code, out, err = configs(d, "--entity-type", "brokers", "--entity-default", "--alter",
                             "--add-config", "log.retention.ms=123456789")  # fmt: skip
    assert (code, out) == (0, "Completed updating default config for brokers in the cluster.\n"), (
        err
    )
    code, out, err = configs(d, "--entity-type", "brokers", "--entity-name", "2", "--alter",
                             "--add-config", "log.segment.bytes=2097152")  # fmt: skip
    assert (code, out) == (0, "Completed updating config for broker 2.\n"), err
    code, out, _ = configs(d, "--entity-type", "brokers", "--entity-default", "--describe")
    assert out.splitlines() == [
        "Default configs for brokers in the cluster are:",
        "  log.retention.ms=123456789 sensitive=false "
        "synonyms={DYNAMIC_DEFAULT_BROKER_CONFIG:log.retention.ms=123456789}",
    ]
    code, out, _ = configs(d, "--entity-type", "brokers", "--entity-name", "2", "--describe")
    assert out.splitlines() == [
        "Dynamic configs for broker 2 are:",
        "  log.segment.bytes=2097152 sensitive=false "
        "synonyms={DYNAMIC_BROKER_CONFIG:log.segment.bytes=2097152}",
    ]
    code, out, _ = configs(d, "--broker", "2", "--describe", "--all")
    assert out.splitlines()[0] == "All configs for broker 2 are:"
    assert "  log.retention.ms=123456789 sensitive=false synonyms={DYNAMIC_DEFAULT_BROKER_CONFIG:" \
        "log.retention.ms=123456789}" in out.splitlines()  # fmt: skip
    # Applied live: the topic's effective retention is the new broker default on every
    # broker (each answers for itself), with no restart.
    deadline = time.monotonic() + 20
    while True:
        code, out, _ = configs(d, "--topic", TOPIC, "--describe", "--all")
        if "  retention.ms=123456789 " in out:
            break
        assert time.monotonic() < deadline, out
        time.sleep(0.3)
    assert out.splitlines()[0] == f"All configs for topic {TOPIC} are:"
    assert "  min.insync.replicas=3 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:" \
        "min.insync.replicas=3}" in out.splitlines()  # fmt: skip
    code, _, err = configs(d, "--broker", "1", "--alter", "--add-config", "log.dirs=/tmp/x")
    assert code == 1
    assert err.strip().endswith("Cannot update these configs dynamically: log.dirs"), err
    code, _, err = configs(d, "--broker", "1", "--alter", "--add-config", "log.retention.ms=x")
    assert code == 1 and "log.retention.ms" in err and len(err.strip().splitlines()) == 1
    code, _, err = configs(d, "--broker", "1", "--alter", "--delete-config", "log.retention.ms")
    assert (code, err) == (1, "Invalid config(s): log.retention.ms\n")
    code, out, err = configs(d, "--entity-type", "brokers", "--entity-default", "--alter",
                             "--delete-config", "log.retention.ms")  # fmt: skip
    assert code == 0, err
    code, out, _ = configs(d, "--entity-type", "brokers", "--entity-default", "--describe")
    assert out == "Default configs for brokers in the cluster are:\n"


# -- producer-perf-test and leader-election ------------------------------------------------------


def test_producer_perf_test_payload_file_bootstrap_and_metrics(d: str, tmp_path: Path) -> None:
    payloads = tmp_path / "payloads.txt"
    payloads.write_text("alpha\nbeta\ngamma\n")
    created = kafkasim("topics", "--dir", d, "--create", "--topic", "perf-payloads",
                       "--partitions", "1", "--replication-factor", "3")  # fmt: skip
    assert created.returncode == 0, created.stderr
    wait_led(d, "perf-payloads")
    out = kafkasim(
        "producer-perf-test", "--dir", d, "--topic", "perf-payloads", "--num-records", "30",
        "--payload-file", str(payloads), "--throughput", "-1", "--print-metrics",
        "--producer-props", "acks=all",
    )  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == f"Reading payloads from: {payloads}"
    assert lines[1] == "Number of messages read: 3"
    assert any(line.startswith("30 records sent, ") for line in lines)
    metrics = dict(
        (name.strip().split(":")[1], value.strip())
        for name, _, value in (line.partition(" : ") for line in lines)
        if name.startswith("producer-metrics:")
    )
    assert metrics["record-send-total"] == "30.000"
    assert metrics["record-error-total"] == "0.000"
    assert metrics["record-size-max"] == "5.000"
    read = kafkasim("console-consumer", "--dir", d, "--topic", "perf-payloads",
                    "--from-beginning", "--max-messages", "30")  # fmt: skip
    assert set(read.stdout.split()) <= {"alpha", "beta", "gamma"}, read.stdout + read.stderr
    both = kafkasim("producer-perf-test", "--dir", d, "--topic", "x", "--num-records", "1",
                    "--record-size", "1", "--payload-file", str(payloads),
                    "--throughput", "-1")  # fmt: skip
    assert both.returncode == 2 and "not allowed with argument" in both.stderr


def test_leader_election_reads_kafkas_json_file(d: str, tmp_path: Path) -> None:
    wanted = tmp_path / "election.json"
    wanted.write_text(json.dumps({"partitions": [{"topic": TOPIC, "partition": 1}]}))
    out = kafkasim("leader-election", "--dir", d, "--election-type", "preferred",
                   "--path-to-json-file", str(wanted))  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert out.stdout in (
        f"Valid replica already elected for partitions {TOPIC}-1\n",
        f"Successfully completed leader election (PREFERRED) for partitions {TOPIC}-1\n",
    )
    twice = {"partitions": [{"topic": TOPIC, "partition": 1}] * 2}
    wanted.write_text(json.dumps(twice))
    out = kafkasim("leader-election", "--dir", d, "--election-type", "preferred",
                   "--path-to-json-file", str(wanted))  # fmt: skip
    assert out.returncode == 1
    assert out.stderr == (
        "kafkasim leader-election: error: Replica election data contains duplicate "
        f"partitions: {TOPIC}-1\n"
    )


# -- the README's block --------------------------------------------------------------------------


def test_readme_kafka_flags_block_runs(d: str, tmp_path: Path) -> None:
    """The README's ``kafka-flags`` block, as written, with ``D`` the cluster's directory
    and ``.venv/bin/kafkasim`` this interpreter's: every command exits 0."""
    block = re.search(
        r"<!-- readme-block: kafka-flags -->\n```sh\n(.*?)```", README.read_text(), re.DOTALL
    )
    assert block is not None
    created = kafkasim("topics", "--dir", d, "--create", "--topic", "events", "--partitions",
                       "2", "--replication-factor", "3")  # fmt: skip
    assert created.returncode == 0, created.stderr
    wait_led(d, "events")
    script = block.group(1).replace(" --dir D ", f" --dir {d} ")
    script = script.replace(".venv/bin/kafkasim", f"{sys.executable} -m kafkasim.cli")
    out = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(README.parent)},
        timeout=300,
        check=False,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "Completed updating default config for brokers in the cluster." in out.stdout
    assert (tmp_path / "plan.csv").read_text().splitlines() == ["events,0,0", "events,1,0"]
