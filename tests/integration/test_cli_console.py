"""console-producer and console-consumer run as a user runs them, against one real local
cluster (``kafkasim cluster up``) shared by the module and stopped at its end."""

from __future__ import annotations

import asyncio
import functools
import json
import re
import subprocess
from collections.abc import Iterator

import pytest

from kafkasim.client.simple import MinimalClient
from kafkasim.common.clock import SystemClock
from kafkasim.common.rpc_grpc_client import GrpcTransport
from kafkasim.controller.zk_process import zookeeper_available
from tests.cli_run import TEST_OVERRIDES
from tests.cli_run import kafkasim as run_kafkasim

kafkasim = functools.partial(run_kafkasim, timeout=60)

TOPIC = "lines"
SCRATCH = "scratch"  # where the failing producer runs write


async def _create_topic(bootstrap: list[str], topics: list[str]) -> None:
    transport = GrpcTransport()
    try:
        client = MinimalClient(transport, bootstrap, SystemClock())
        for topic in topics:
            await client.create_topic(topic, 1, 3, {"min.insync.replicas": "2"})
            await client.wait_for_leaders(topic, 1)
    finally:
        await transport.close()


@pytest.fixture(scope="module")
def bootstrap(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A 3-broker cluster with topics ``lines`` (filled by one producer run) and ``scratch``,
    1 partition and RF 3 each."""
    reason = zookeeper_available()
    if reason is not None:
        pytest.skip(f"real ZooKeeper unavailable: {reason}")
    root = tmp_path_factory.mktemp("console") / "c"
    up = kafkasim(
        "cluster", "up", *TEST_OVERRIDES, "--brokers", "3", "--dir", str(root), timeout=120
    )
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        state = json.loads((root / "cluster.json").read_text())
        servers = [b["address"] for b in state["brokers"]]
        asyncio.run(_create_topic(servers, [TOPIC, SCRATCH]))
        produced = kafkasim(
            "console-producer",
            "--bootstrap-server",
            ",".join(servers),
            "--topic",
            TOPIC,
            "--property",
            "parse.key=true",
            "--property",
            "key.separator=:",
            "--producer-property",
            "acks=all",
            stdin="k1:v1\nk2:v2:with:colons\nk3:v3\n",
        )
        assert (produced.returncode, produced.stderr) == (0, ""), produced.stderr
        yield ",".join(servers)
    finally:
        down = kafkasim("cluster", "down", "--dir", str(root))
        assert down.returncode == 0, down.stderr


def consume(bootstrap: str, *args: str) -> subprocess.CompletedProcess[str]:
    return kafkasim("console-consumer", "--bootstrap-server", bootstrap, "--topic", TOPIC, *args)


def test_lines_with_keys_read_back_from_the_beginning_with_key_and_offset(
    bootstrap: str,
) -> None:
    """The value keeps everything after the first separator; columns are tab-separated."""
    out = consume(
        bootstrap,
        "--from-beginning",
        "--max-messages",
        "3",
        "--timeout-ms",
        "20000",
        "--property",
        "print.key=true",
        "--property",
        "print.offset=true",
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout == "Offset:0\tk1\tv1\nOffset:1\tk2\tv2:with:colons\nOffset:2\tk3\tv3\n"
    assert out.stderr == "Processed a total of 3 messages\n"


def test_timestamp_and_partition_come_first_in_kafkas_order(bootstrap: str) -> None:
    """Kafka's DefaultMessageFormatter order: CreateTime, Partition, Offset, key, value."""
    out = consume(
        bootstrap,
        "--partition",
        "0",
        "--offset",
        "1",
        "--max-messages",
        "2",
        "--timeout-ms",
        "20000",
        "--property",
        "print.timestamp=true",
        "--property",
        "print.partition=true",
        "--property",
        "print.offset=true",
        "--property",
        "print.key=true",
        "--property",
        "key.separator=|",
    )
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert len(lines) == 2
    assert re.fullmatch(r"CreateTime:\d{13}\|Partition:0\|Offset:1\|k2\|v2:with:colons", lines[0])
    assert re.fullmatch(r"CreateTime:\d{13}\|Partition:0\|Offset:2\|k3\|v3", lines[1])


def test_values_only_by_default_and_timeout_ends_an_idle_read(bootstrap: str) -> None:
    out = consume(bootstrap, "--from-beginning", "--timeout-ms", "3000")
    assert out.returncode == 0, out.stderr
    assert out.stdout == "v1\nv2:with:colons\nv3\n"
    assert out.stderr == "Processed a total of 3 messages\n"
    latest = consume(bootstrap, "--timeout-ms", "1000")
    assert (latest.returncode, latest.stdout) == (0, "")
    assert latest.stderr == "Processed a total of 0 messages\n"


@pytest.mark.parametrize(
    ("args", "stdin", "message"),
    [
        (
            ["console-producer", "--property", "parse.key=true"],
            "k\tv\nnokey\n",  # the default separator is a tab
            "No key separator found on line number 2: 'nokey'",
        ),
        (["console-producer", "--producer-property", "acks=most"], "v\n", "acks"),
        (["console-producer", "--producer-property", "lingr.ms=5"], "v\n", "lingr.ms"),
        (["console-producer", "--property", "parse.keys=true"], "v\n", "parse.keys"),
        (["console-consumer", "--group", "g", "--offset", "1"], "", "group and offset cannot"),
        (["console-consumer", "--offset", "5"], "", "partition is required"),
        (["console-consumer", "--offset", "x", "--partition", "0"], "", "'x' is incorrect"),
        (["console-consumer", "--from-beginning", "--offset", "1"], "", "cannot be specified"),
        (["console-consumer", "--property", "print.keys=true"], "", "print.keys"),
        (["console-consumer", "--partition", "7", "--timeout-ms", "500"], "", "partition 7"),
    ],
)
def test_bad_input_gives_one_clear_line_and_a_non_zero_exit(
    bootstrap: str, args: list[str], stdin: str, message: str
) -> None:
    # The producer cases write to a topic of their own, so that the lines sent before a bad
    # one never show up in the other tests' reads of ``lines``.
    topic = SCRATCH if args[0] == "console-producer" else TOPIC
    out = kafkasim(
        args[0], "--bootstrap-server", bootstrap, "--topic", topic, *args[1:], stdin=stdin
    )
    assert out.returncode != 0
    assert out.stderr.count("\n") == 1, out.stderr
    assert message in out.stderr
    assert out.stderr.startswith(f"kafkasim {args[0]}: error: ")


def groups(bootstrap: str, *args: str) -> subprocess.CompletedProcess[str]:
    return kafkasim("consumer-groups", "--bootstrap-server", bootstrap, *args)


def table(text: str) -> list[list[str]]:
    return [line.split() for line in text.splitlines() if line.strip()]


def test_a_group_reads_on_from_its_committed_offset_and_describe_shows_the_lag(
    bootstrap: str,
) -> None:
    """console-consumer --group commits what it printed; consumer-groups --describe shows
    CURRENT-OFFSET, LOG-END-OFFSET and LAG; the next run of the group starts after it;
    --reset-offsets and --delete work on the group once it is empty."""
    first = consume(bootstrap, "--group", "readers", "--from-beginning", "--max-messages", "2")
    assert first.returncode == 0, first.stderr
    assert first.stdout == "v1\nv2:with:colons\n"
    described = groups(bootstrap, "--describe", "--group", "readers")
    assert described.returncode == 0, described.stderr
    rows = table(described.stdout)
    assert rows[0] == ["Consumer", "group", "'readers'", "has", "no", "active", "members."]
    assert rows[1] == [
        "GROUP",
        "TOPIC",
        "PARTITION",
        "CURRENT-OFFSET",
        "LOG-END-OFFSET",
        "LAG",
        "CONSUMER-ID",
        "HOST",
        "CLIENT-ID",
    ]
    assert rows[2] == ["readers", TOPIC, "0", "2", "3", "1", "-", "-", "-"]
    listed = groups(bootstrap, "--list")
    assert "readers" in listed.stdout.split(), listed.stdout + listed.stderr
    state = groups(bootstrap, "--describe", "--group", "readers", "--state")
    assert table(state.stdout)[1][-2:] == ["Empty", "0"], state.stdout
    rest = consume(bootstrap, "--group", "readers", "--from-beginning", "--timeout-ms", "3000")
    assert (rest.returncode, rest.stdout) == (0, "v3\n"), rest.stderr
    reset = groups(
        bootstrap,
        "--reset-offsets",
        "--group",
        "readers",
        "--all-topics",
        "--to-earliest",
        "--execute",
    )
    assert reset.returncode == 0, reset.stderr
    assert table(reset.stdout)[1] == ["readers", TOPIC, "0", "0"]
    again = consume(bootstrap, "--group", "readers", "--max-messages", "1")
    assert (again.returncode, again.stdout) == (0, "v1\n"), again.stderr
    deleted = groups(bootstrap, "--delete", "--group", "readers")
    assert deleted.stdout.strip() == (
        "Deletion of requested consumer groups ('readers') was successful."
    ), deleted.stderr
    gone = groups(bootstrap, "--describe", "--group", "readers")
    assert gone.returncode == 1
    assert gone.stderr == "Error: Consumer group 'readers' does not exist.\n"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--describe"], "requires --group"),
        (["--list", "--describe", "--group", "g"], "exactly one action"),
        (["--reset-offsets", "--group", "g", "--all-topics"], "takes one of these options"),
        (["--reset-offsets", "--group", "g", "--to-earliest"], "One of the reset scopes"),
        (["--delete", "--group", "nobody-here"], "GROUP_ID_NOT_FOUND"),
    ],
)
def test_consumer_groups_bad_input_gives_one_line_and_a_non_zero_exit(
    bootstrap: str, args: list[str], message: str
) -> None:
    out = groups(bootstrap, *args)
    assert out.returncode != 0
    assert out.stderr.count("\n") == 1, out.stderr
    assert message in out.stderr
