"""The README's command blocks, run as written by bash (``.venv/bin/kafkasim`` being this
interpreter's ``-m kafkasim.cli``, placeholders such as ``D`` and ``HOST:PORT`` filled in):
the local cluster and its broker verbs, Kafka's tools on that cluster, a broker started from
the README's ``server.properties``, the failure runs that need no containers, and the storage
tools. What a block holds that cannot run here (Docker, 200-seed sweeps, a real-process chaos
run) is parsed with the real parser instead; ``tests/unit/test_readme.py`` lists every block
and where it runs."""

from __future__ import annotations

import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kafkasim.cli.main import build_parser
from kafkasim.client.sync import SyncProducer
from kafkasim.controller.zk_process import ZooKeeperProcess, zookeeper_available
from tests.cli_run import ROOT
from tests.unit.test_readme import readme_block

KAFKASIM = f"{shlex.quote(sys.executable)} -m kafkasim.cli"


def bash(script: str, cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    """``script`` under ``bash -euo pipefail`` with the README's command spelled for here."""
    return subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script.replace(".venv/bin/kafkasim", KAFKASIM)],
        capture_output=True,
        text=True,
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        timeout=timeout,
        check=False,
    )


def commands(block: str) -> list[str]:
    """The block's commands, continuation lines joined, comments dropped."""
    joined = block.replace("\\\n", " ")
    return [line.split("  #")[0].strip() for line in joined.splitlines() if line.strip()]


def parse(command: str) -> None:
    """``command`` (a ``kafkasim ...`` line) is accepted as written by the CLI's parser."""
    argv = shlex.split(command)
    assert argv[0] == ".venv/bin/kafkasim", command
    build_parser().parse_args(argv[1:])


def need_zookeeper() -> None:
    reason = zookeeper_available()
    if reason is not None:
        pytest.skip(f"real ZooKeeper unavailable: {reason}")


def test_the_cluster_blocks_and_kafkas_tools_run_on_a_cluster(tmp_path: Path) -> None:
    """``cluster up`` and ``status`` from the first cluster block, the Kafka's-tools block on
    that cluster (``D`` its directory; transactional id ``app-1`` given a transaction first),
    the one-broker block, then the first block's ``down``."""
    need_zookeeper()
    up, status, down = commands(readme_block("cluster"))
    down = down.replace("[--wipe]", "--wipe")
    started = bash(f"{up}\n{status}", tmp_path)
    try:
        assert started.returncode == 0, started.stdout + started.stderr
        assert "bootstrap.servers (kafkasim tools, gRPC)" in started.stdout
        grpc = re.search(r"bootstrap\.servers \(kafkasim tools, gRPC\)\s+(\S+)", started.stdout)
        assert grpc is not None
        bootstrap = grpc.group(1)
        with SyncProducer(
            {"bootstrap.servers": bootstrap, "transactional.id": "app-1"}
        ) as producer:
            producer.init_transactions()
            producer.begin_transaction()
            producer.send("app-events", b"one")
            producer.commit_transaction()
        tools = readme_block("kafka-tools").replace(" --dir D ", " --dir ./my-cluster ")
        tools = tools.replace("HOST:PORT", bootstrap.split(",")[0])
        ran = bash(tools, tmp_path)
        assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr[-3000:]
        out = ran.stdout
        assert "Topic: events\tTopicId:" in out or "Topic: events" in out
        assert "100000 records sent" in out
        assert "low_watermark: 5" in out
        assert "app-1" in out and "CompleteCommit" in out
        kafka = re.search(r"bootstrap\.servers \(Kafka clients\)\s+(\S+)", started.stdout)
        assert kafka is not None
        kcat = readme_block("kcat").replace("127.0.0.1:47709", kafka.group(1).split(",")[0])
        # The tools block made `events` compacted, which refuses kcat's keyless records
        # (INVALID_RECORD, as Kafka): kcat writes to a topic of its own.
        kcat = kcat.replace("-t events", "-t kcat-events")
        ran = bash(kcat, tmp_path, timeout=120)
        assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr[-3000:]
        assert "one" in ran.stdout and "two" in ran.stdout
        broker = readme_block("cluster-broker").replace(" [-f]", "")
        ran = bash(broker, tmp_path)
        assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr[-3000:]
        assert "broker 2 paused" in ran.stdout
    finally:
        stopped = bash(down, tmp_path)
    assert stopped.returncode == 0, stopped.stdout + stopped.stderr
    assert not (tmp_path / "my-cluster" / "cluster.json").exists()


def test_a_broker_starts_from_the_readmes_server_properties(tmp_path: Path) -> None:
    """The README's first ``server.properties`` (its ZooKeeper, port and log dir moved to
    this test's), then the broker block's command: it serves, and SIGTERM stops it cleanly."""
    need_zookeeper()
    properties = readme_block("server-properties")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    zookeeper = ZooKeeperProcess(tmp_path / "zookeeper")
    zookeeper.start()
    try:
        config = (
            properties.replace("127.0.0.1:9092", f"127.0.0.1:{port}")
            .replace("127.0.0.1:2181", zookeeper.connect_string)
            .replace("/tmp/kafkasim/broker-1", str(tmp_path / "broker-1"))
        )
        (tmp_path / "server.properties").write_text(config)
        [command] = commands(readme_block("broker"))
        with subprocess.Popen(
            ["bash", "-c", f"exec {command.replace('.venv/bin/kafkasim', KAFKASIM)}"],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            cwd=tmp_path,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        ) as broker:
            try:
                assert broker.stdout is not None
                deadline = time.monotonic() + 60
                line = ""
                while "serving on" not in line:
                    assert time.monotonic() < deadline, line
                    line = broker.stdout.readline()
                    assert line or broker.poll() is None, "the broker exited"
                assert f"kafkasim broker 1 serving on 127.0.0.1:{port}" in line
                broker.send_signal(signal.SIGTERM)
                assert broker.wait(timeout=60) == 0
            finally:
                if broker.poll() is None:
                    broker.kill()
                    broker.wait()
    finally:
        zookeeper.stop()


def test_the_failure_run_block_runs_what_needs_no_containers(tmp_path: Path) -> None:
    """The simulated runs, ``check`` and ``sim show`` run as written; the 200-seed sweep
    (minutes), the real-process and librdkafka chaos runs (a cluster per run; their code is
    run by tests/integration/test_chaos*.py) and the compose backend (Docker) are parsed."""
    ran_commands: list[str] = []
    for command in commands(readme_block("failure-runs")):
        if " sweep " in command or ("chaos run" in command and "--backend sim" not in command):
            parse(command)
        else:
            ran_commands.append(command)
    assert len(ran_commands) == 5
    ran = bash("\n".join(ran_commands), tmp_path)
    assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr[-3000:]
    assert (tmp_path / "h.jsonl").stat().st_size > 0
    assert (tmp_path / "r.html").read_text().startswith("<!")


def test_the_storage_tools_block_runs(tmp_path: Path) -> None:
    """The demo's log, dumped and verified (``/tmp/demo`` moved to this test's directory);
    the ``.txnindex`` line names a transactional log's file the demo has none of: parsed."""
    block = readme_block("engine-tools").replace("/tmp/demo", str(tmp_path / "demo"))
    runnable = [c for c in block.splitlines() if "T.txnindex" not in c]
    [txn_line] = [c for c in commands(block) if "T.txnindex" in c]
    parse(txn_line)
    ran = bash("\n".join(runnable), tmp_path)
    assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr[-3000:]
    assert "baseOffset: 2270" in ran.stdout
    assert ran.stdout.rstrip().endswith("no problems found")


def test_the_dev_block_names_the_scripts_commands() -> None:
    """``./dev run`` and ``./dev test`` set up a machine and run everything (this suite
    included), so they are not run from a test: their commands must be the script's."""
    block = commands(readme_block("dev"))
    script = (ROOT / "dev").read_text()
    for command in block:
        verb = command.split()[1]
        assert re.search(rf"^\s+{verb}\)", script, re.MULTILINE), verb


def test_the_secured_cluster_block_runs(tmp_path: Path) -> None:
    """The secured-cluster walkthrough as written: every command succeeds but alice's delete,
    refused with TOPIC_AUTHORIZATION_FAILED (the topic stays); alice.properties is the
    README's."""
    need_zookeeper()
    (tmp_path / "alice.properties").write_text(readme_block("secured-alice-properties"))
    *setup, refused, down = commands(readme_block("secured-cluster"))
    try:
        ran = bash("\n".join(setup), tmp_path)
        assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr[-3000:]
        assert "principal User:CN=alice,OU=kafkasim" in ran.stdout
        denied = bash(refused, tmp_path)
        assert denied.returncode != 0
        assert "TOPIC_AUTHORIZATION_FAILED" in denied.stdout + denied.stderr
        listed = bash(f"{KAFKASIM} topics --dir ./secure --list", tmp_path)
        assert "orders" in listed.stdout.split(), listed.stdout + listed.stderr
    finally:
        stopped = bash(down, tmp_path)
    assert stopped.returncode == 0, stopped.stdout + stopped.stderr
