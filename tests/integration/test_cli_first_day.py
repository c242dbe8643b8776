"""What a new user meets first, run as a user runs it against a `kafkasim cluster up`
cluster: a console consumer creates the topic it asks for (Kafka's allow.auto.create.topics),
a compacted topic's refusal of keyless records is one warning per partition and one error,
and SIGTERM to a group's console consumer ends it as Ctrl-C does."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cli_run import ROOT, cluster_up, kafkasim


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    with cluster_up(tmp_path_factory.mktemp("firstday") / "c", "--brokers", "1") as root:
        yield root


def _topics(root: Path) -> list[str]:
    listed = kafkasim("topics", "--dir", str(root), "--list")
    assert listed.returncode == 0, listed.stderr
    return listed.stdout.split()


def test_console_consumer_creates_the_topic_it_asks_for(cluster: Path) -> None:
    read = kafkasim(
        "console-consumer", "--dir", str(cluster), "--topic", "made-by-reading",
        "--timeout-ms", "5000",
    )  # fmt: skip
    assert read.returncode == 0, read.stderr
    assert read.stderr == "Processed a total of 0 messages\n"
    assert "made-by-reading" in _topics(cluster)


def test_without_auto_creation_an_unknown_topic_times_out_in_kafkas_words(cluster: Path) -> None:
    read = kafkasim(
        "console-consumer", "--dir", str(cluster), "--topic", "never-made",
        "--timeout-ms", "3000", "--consumer-property", "allow.auto.create.topics=false",
    )  # fmt: skip
    assert read.returncode == 1
    assert read.stderr == (
        "kafkasim console-consumer: error: REQUEST_TIMED_OUT: "
        "Topic never-made not present in metadata after 3000 ms.\n"
    )
    assert "never-made" not in _topics(cluster)


def test_a_compacted_topic_refusing_keyless_records_warns_once_per_partition(
    cluster: Path,
) -> None:
    created = kafkasim(
        "topics", "--dir", str(cluster), "--create", "--topic", "compacted",
        "--partitions", "2", "--replication-factor", "1", "--config", "cleanup.policy=compact",
    )  # fmt: skip
    assert created.returncode == 0, created.stderr
    lines = "".join(f"{i}\n" for i in range(500))
    sent = kafkasim(
        "console-producer", "--dir", str(cluster), "--topic", "compacted",
        "--producer-property", "batch.size=100",
        stdin=lines,
    )  # fmt: skip
    assert sent.returncode == 1
    stderr = sent.stderr.splitlines()
    warnings = [line for line in stderr if line.startswith("WARNING")]
    errors = [line for line in stderr if line.startswith("Error when sending")]
    assert len(warnings) <= 2, sent.stderr  # one per partition at most
    assert len(errors) == 1, sent.stderr
    assert "compacted topic cannot accept message without key" in errors[0]
    assert errors[0].endswith("(500 records failed with this error)")
    assert len(stderr) == len(warnings) + len(errors), sent.stderr


def test_sigterm_ends_a_group_consumer_as_ctrl_c_does(cluster: Path) -> None:
    sent = kafkasim(
        "console-producer", "--dir", str(cluster), "--topic", "terminated", stdin="a\nb\nc\n"
    )
    assert sent.returncode == 0, sent.stderr
    with subprocess.Popen(
        [
            sys.executable, "-m", "kafkasim.cli", "console-consumer", "--dir", str(cluster),
            "--topic", "terminated", "--group", "stoppers", "--from-beginning",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        cwd=ROOT,
    ) as process:  # fmt: skip
        assert process.stdout is not None
        read = [process.stdout.readline() for _ in range(3)]
        assert read == ["a\n", "b\n", "c\n"]
        process.send_signal(signal.SIGTERM)
        _, err = process.communicate(timeout=60)
    assert process.returncode == 0, err
    assert err.endswith("Processed a total of 3 messages\n"), err
    # It left the group (LeaveGroup), so the group is empty at once, not after its session
    # timeout; its offsets were committed.
    described = kafkasim("consumer-groups", "--dir", str(cluster), "--describe", "--group",
                         "stoppers", "--state")  # fmt: skip
    assert described.returncode == 0, described.stderr
    state = next(line.split() for line in described.stdout.splitlines() if "stoppers" in line)
    assert state[-2:] == ["Empty", "0"], described.stdout
    offsets = kafkasim("consumer-groups", "--dir", str(cluster), "--describe", "--group",
                       "stoppers")  # fmt: skip
    row = next(line.split() for line in offsets.stdout.splitlines() if "terminated" in line)
    assert row[3:6] == ["3", "3", "0"], offsets.stdout  # CURRENT-OFFSET, LOG-END-OFFSET, LAG
