"""delete-records and configs run as a user runs them: subprocesses against one real
``kafkasim cluster up`` cluster (retention checked every second), shared by the module and
stopped at its end. Each test checks Kafka's output lines and exit codes, that the effect is
real on every broker process (log start offsets, segment files, a changed
min.insync.replicas refusing produces without a restart), and the bad inputs that must print
one clear line and exit non-zero."""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from kafkasim.client.simple import MinimalClient
from kafkasim.common.clock import SystemClock
from kafkasim.common.errors import error_for_name
from kafkasim.common.rpc_grpc_client import GrpcTransport
from kafkasim.common.types import TopicPartition
from tests.cli_run import cluster_up
from tests.integration.test_cli_admin import describe_until_led, one_error_line
from tests.integration.test_cli_console import kafkasim

NOT_ENOUGH_REPLICAS = error_for_name("NOT_ENOUGH_REPLICAS").code


@pytest.fixture(scope="module")
def cluster_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    root = tmp_path_factory.mktemp("records") / "c"
    override = ("--override", "log.retention.check.interval.ms=1000")
    with cluster_up(root, "--brokers", "3", *override) as up:
        yield up


@pytest.fixture(scope="module")
def bootstrap(cluster_dir: Path) -> str:
    state = json.loads((cluster_dir / "cluster.json").read_text())
    return ",".join(b["address"] for b in state["brokers"])


def log_starts(cluster_dir: Path, topic: str, partition: int) -> list[int]:
    """Each replica's log start offset as ``cluster status`` prints it."""
    status = kafkasim("cluster", "status", "--dir", str(cluster_dir))
    assert status.returncode == 0, status.stderr
    lines = status.stdout.splitlines()
    start = lines.index(
        next(line for line in lines if f"Topic: {topic}\tPartition: {partition}\t" in line)
    )
    starts = []
    for line in lines[start + 1 : start + 4]:
        found = re.search(r"log start (\d+)", line)
        assert found, line
        starts.append(int(found.group(1)))
    return starts


def segment_bases(cluster_dir: Path, topic: str, partition: int) -> list[list[int]]:
    """Per broker, the base offsets of the partition's segment files on disk."""
    dirs = sorted(cluster_dir.glob(f"**/{topic}-{partition}"))
    assert len(dirs) == 3, dirs
    return [sorted(int(f.stem) for f in d.glob("*.log")) for d in dirs]


def offsets_file(tmp_path: Path, entries: list[tuple[str, int, int]]) -> Path:
    path = tmp_path / "offsets.json"
    partitions = [{"topic": t, "partition": p, "offset": o} for t, p, o in entries]
    path.write_text(json.dumps({"partitions": partitions, "version": 1}))
    return path


def test_delete_records_moves_every_replica_and_consumers_start_there(
    bootstrap: str, cluster_dir: Path, tmp_path: Path
) -> None:
    created = kafkasim(
        "topics", "--bootstrap-server", bootstrap, "--create", "--topic", "purge",
        "--partitions", "1", "--replication-factor", "3", "--config", "segment.bytes=400",
    )  # fmt: skip
    assert created.returncode == 0, created.stderr
    describe_until_led(bootstrap, "purge")
    produced = kafkasim(
        "console-producer", "--bootstrap-server", bootstrap, "--topic", "purge",
        "--producer-property", "batch.size=1", stdin="".join(f"v{i}\n" for i in range(30)),
    )  # fmt: skip
    assert produced.returncode == 0, produced.stderr
    segments_before = segment_bases(cluster_dir, "purge", 0)
    assert all(len(bases) > 3 for bases in segments_before), segments_before

    out = kafkasim(
        "delete-records", "--bootstrap-server", bootstrap, "--offset-json-file",
        str(offsets_file(tmp_path, [("purge", 0, 10), ("purge", 5, 0)])),
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [
        "Executing records delete operation",
        "Records delete operation completed:",
        "partition: purge-0\tlow_watermark: 10",
        "partition: purge-5\terror: Partition purge-5 does not exist.",
    ]
    assert log_starts(cluster_dir, "purge", 0) == [10, 10, 10]

    consumed = kafkasim(
        "console-consumer", "--dir", str(cluster_dir), "--topic", "purge", "--from-beginning",
        "--max-messages", "1", "--property", "print.offset=true",
    )  # fmt: skip
    assert consumed.returncode == 0, consumed.stderr
    assert consumed.stdout.splitlines()[0] == "Offset:10\tv10"

    deadline = time.monotonic() + 20  # retention runs every second on every broker
    while True:
        bases = segment_bases(cluster_dir, "purge", 0)
        if all(
            b[0] > 0 and len(b) < len(before)
            for b, before in zip(bases, segments_before, strict=True)
        ):
            break
        assert time.monotonic() < deadline, (bases, segments_before)
        time.sleep(0.5)
    assert all(b[0] <= 10 for b in bases), bases


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "kafkasim delete-records: error: cannot read the offset JSON file"),
        ("{oops", "kafkasim delete-records: error: the offset JSON file is not valid JSON"),
        ('{"version":3,"partitions":[]}', "Not supported version field value 3"),
    ],
)
def test_delete_records_bad_file_prints_one_line_and_fails(
    bootstrap: str, tmp_path: Path, content: str | None, message: str
) -> None:
    path = tmp_path / "offsets.json"
    if content is not None:
        path.write_text(content)
    out = kafkasim(
        "delete-records", "--bootstrap-server", bootstrap, "--offset-json-file", str(path)
    )
    assert out.returncode == 1 and out.stdout == ""
    assert message in one_error_line(out.stderr)


def produce_acks_all(bootstrap: str, topic: str) -> int:
    """One acks=all produce without retries; its error code."""

    async def go() -> int:
        transport = GrpcTransport()
        try:
            client = MinimalClient(transport, bootstrap.split(","), SystemClock())
            result = await client.produce(TopicPartition(topic, 0), [b"x"], acks=-1, retry=False)
            return result.error_code
        finally:
            await transport.close()

    return asyncio.run(go())


def test_configs_alter_and_describe_take_effect_on_every_broker_without_restart(
    bootstrap: str, cluster_dir: Path
) -> None:
    created = kafkasim(
        "topics", "--bootstrap-server", bootstrap, "--create", "--topic", "tuned",
        "--partitions", "1", "--replication-factor", "3",
    )  # fmt: skip
    assert created.returncode == 0, created.stderr
    describe_until_led(bootstrap, "tuned")
    assert produce_acks_all(bootstrap, "tuned") == 0

    altered = kafkasim(
        "configs", "--bootstrap-server", bootstrap, "--entity-type", "topics",
        "--entity-name", "tuned", "--alter",
        "--add-config", "min.insync.replicas=4,cleanup.policy=[compact,delete],retention.ms=60000",
    )  # fmt: skip
    assert (altered.returncode, altered.stdout) == (
        0,
        "Completed updating config for topic tuned.\n",
    ), altered.stderr
    described = kafkasim(
        "configs", "--dir", str(cluster_dir), "--entity-type", "topics", "--entity-name",
        "tuned", "--describe",
    )  # fmt: skip
    assert described.returncode == 0, described.stderr
    assert described.stdout.splitlines() == [
        "Dynamic configs for topic tuned are:",
        "  cleanup.policy=compact,delete sensitive=false "
        "synonyms={DYNAMIC_TOPIC_CONFIG:cleanup.policy=compact,delete}",
        "  min.insync.replicas=4 sensitive=false "
        "synonyms={DYNAMIC_TOPIC_CONFIG:min.insync.replicas=4}",
        "  retention.ms=60000 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:retention.ms=60000}",
    ]
    # min.insync.replicas=4 > 3 replicas: the leader, whichever broker it is, now refuses.
    deadline = time.monotonic() + 20
    while produce_acks_all(bootstrap, "tuned") != NOT_ENOUGH_REPLICAS:
        assert time.monotonic() < deadline
        time.sleep(0.5)

    removed = kafkasim(
        "configs", "--bootstrap-server", bootstrap, "--topic", "tuned", "--alter",
        "--delete-config", "min.insync.replicas,cleanup.policy",
    )  # fmt: skip
    assert removed.returncode == 0, removed.stderr
    deadline = time.monotonic() + 20
    while produce_acks_all(bootstrap, "tuned") != 0:
        assert time.monotonic() < deadline
        time.sleep(0.5)
    listed = kafkasim("topics", "--bootstrap-server", bootstrap, "--describe", "--topic", "tuned")
    assert "Configs: retention.ms=60000" in listed.stdout.splitlines()[0]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--topic", "tuned2", "--alter", "--add-config", "retention.mss=5"],
            "Unknown topic config name: retention.mss",
        ),
        (
            ["--topic", "tuned2", "--alter", "--add-config", "retention.ms=soon"],
            "Invalid value 'soon' for configuration retention.ms",
        ),
        (
            ["--topic", "tuned2", "--alter", "--delete-config", "flush.ms"],
            "Invalid config(s): flush.ms",
        ),
        (
            ["--topic", "missing", "--alter", "--add-config", "retention.ms=5"],
            "Error while executing config command : ",
        ),
        (["--topic", "tuned2", "--alter"], "At least one of --add-config"),
    ],
)
def test_configs_bad_input_prints_one_line_and_fails(
    bootstrap: str, args: list[str], message: str
) -> None:
    kafkasim(
        "topics", "--bootstrap-server", bootstrap, "--create", "--topic", "tuned2",
        "--partitions", "1", "--replication-factor", "1", "--if-not-exists",
    )  # fmt: skip
    out = kafkasim("configs", "--bootstrap-server", bootstrap, *args)
    assert out.returncode == 1 and out.stdout == ""
    assert message in one_error_line(out.stderr)
