"""consumer-perf-test run as a user runs it: a subprocess against a real local cluster
(``kafkasim cluster up``, one broker, shared by the module and stopped at its end) holding a
topic that producer-perf-test filled with a known number of records of a known size."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from kafkasim.cli.consumer_perf import DETAILED_HEADER, SUMMARY_HEADER
from tests.cli_run import cluster_up, kafkasim
from tests.integration.test_cli_admin import describe_until_led

TOPIC = "perf"
RECORDS = 3000
RECORD_SIZE = 100  # keyless: data.consumed.in.MB is RECORDS * RECORD_SIZE / 2**20
_TIME = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d:\d{3}"
_FIGURE = r"(?:\d+\.\d{4}|NaN|Infinity)"
SUMMARY = re.compile(
    rf"^({_TIME}), ({_TIME}), ({_FIGURE}), {_FIGURE}, (\d+), {_FIGURE}, (\d+), (\d+), "
    rf"{_FIGURE}, {_FIGURE}$"
)
PROGRESS = re.compile(
    rf"^{_TIME}, 0, {_FIGURE}, {_FIGURE}, \d+, {_FIGURE}, 0, -?\d+, {_FIGURE}, {_FIGURE}$"
)


@pytest.fixture(scope="module")
def cluster_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    with cluster_up(tmp_path_factory.mktemp("consumer-perf") / "c", "--brokers", "1") as root:
        yield root


@pytest.fixture(scope="module")
def bootstrap(cluster_dir: Path) -> str:
    """The cluster's address once ``perf`` (3 partitions) holds RECORDS records."""
    state = json.loads((cluster_dir / "cluster.json").read_text())
    servers = ",".join(b["address"] for b in state["brokers"])
    created = kafkasim(
        "topics", "--bootstrap-server", servers, "--create", "--topic", TOPIC,
        "--partitions", "3", "--replication-factor", "1",
    )  # fmt: skip
    assert created.returncode == 0, created.stderr
    describe_until_led(servers, TOPIC)
    produced = kafkasim(
        "producer-perf-test", "--topic", TOPIC, "--num-records", str(RECORDS),
        "--record-size", str(RECORD_SIZE), "--throughput", "-1",
        "--producer-props", f"bootstrap.servers={servers}", "acks=all",
    )  # fmt: skip
    assert produced.returncode == 0, produced.stdout + produced.stderr
    return servers


def perf_test(*args: str) -> tuple[int, list[str], str]:
    out = kafkasim("consumer-perf-test", "--topic", TOPIC, *args)
    return out.returncode, out.stdout.splitlines(), out.stderr


def test_reading_every_record_prints_kafkas_header_and_one_result_line(bootstrap: str) -> None:
    code, lines, err = perf_test("--bootstrap-server", bootstrap, "--messages", str(RECORDS))
    assert (code, err) == (0, "")
    assert len(lines) == 2, lines
    assert lines[0] == SUMMARY_HEADER
    result = SUMMARY.match(lines[1])
    assert result, lines[1]
    start, end, mb, messages, rebalance_ms, fetch_ms = result.groups()
    assert int(messages) == RECORDS
    assert mb == f"{RECORDS * RECORD_SIZE / 2**20:.4f}"  # 0.2861: not a tie, any rounding
    assert start <= end  # the same fixed-width format sorts by time
    assert int(rebalance_ms) == 0  # partitions are assigned, no group is joined
    assert int(fetch_ms) >= 0


def test_with_a_group_the_tool_joins_it_and_commits_what_it_read(bootstrap: str) -> None:
    """--group subscribes: rebalance.time.ms is the join, and the group's offsets are
    committed on exit (auto commit), so consumer-groups shows no lag."""
    code, lines, err = perf_test(
        "--bootstrap-server", bootstrap, "--messages", str(RECORDS), "--group", "perf"
    )
    assert (code, err) == (0, "")
    result = SUMMARY.match(lines[1])
    assert result, lines[1]
    assert int(result.group(4)) == RECORDS
    assert int(result.group(5)) > 0  # the group took some time to assign the partitions
    described = kafkasim("consumer-groups", "--bootstrap-server", bootstrap, "--describe",
                         "--group", "perf")  # fmt: skip
    rows = [line.split() for line in described.stdout.splitlines() if line.startswith("perf ")]
    assert rows and all(row[5] == "0" for row in rows), described.stdout + described.stderr
    assert sum(int(row[3]) for row in rows) == RECORDS


def test_fewer_records_than_asked_print_kafkas_warning_then_the_summary(
    cluster_dir: Path, bootstrap: str
) -> None:
    """--dir finds the cluster like the other verbs; --hide-header drops the header."""
    code, lines, err = perf_test(
        "--dir", str(cluster_dir), "--messages", str(RECORDS + 1), "--timeout", "1500",
        "--hide-header",
    )  # fmt: skip
    assert (code, err) == (0, "")
    assert lines[0] == (
        "WARNING: Exiting before consuming the expected number of messages: timeout "
        "(1500 ms) exceeded. You can use the --timeout option to increase the timeout."
    )
    assert len(lines) == 2, lines
    result = SUMMARY.match(lines[1])
    assert result and int(result.group(4)) == RECORDS, lines[1]


def test_detailed_stats_print_progress_lines_instead_of_the_summary(bootstrap: str) -> None:
    code, lines, err = perf_test(
        "--bootstrap-server", bootstrap, "--messages", str(RECORDS), "--show-detailed-stats",
        "--reporting-interval", "1", "--fetch-size", "4096",
    )  # fmt: skip
    assert (code, err) == (0, "")
    assert lines[0] == DETAILED_HEADER
    assert len(lines) >= 2, lines
    assert all(PROGRESS.match(line) for line in lines[1:]), lines


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--topic", "no-such-topic", "--messages", "5"], "Topic 'no-such-topic' does not exist"),
        (["--topic", TOPIC, "--messages", "many"], "--messages expects a whole number"),
        (["--topic", TOPIC], 'Missing required argument "[messages]"'),
        (["--topic", TOPIC, "--messages", "5", "--consumer-props", "fetch.max.wait=1"], "fetch"),
    ],
)
def test_bad_input_gives_one_clear_line_and_a_non_zero_exit(
    bootstrap: str, args: list[str], message: str
) -> None:
    out = kafkasim("consumer-perf-test", "--bootstrap-server", bootstrap, *args)
    assert out.returncode != 0
    assert out.stdout == ""
    assert out.stderr.count("\n") == 1, out.stderr
    assert out.stderr.startswith("kafkasim consumer-perf-test: error: ")
    assert message in out.stderr
