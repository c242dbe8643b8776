"""``broker.id=-1`` on real processes and a real ZooKeeper: each new broker takes the next id
above reserved.broker.max.id from /brokers/seqid, registers under it, and keeps it across a
restart (meta.properties) — what lets `docker compose --scale` start brokers from one
service definition."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from kafkasim.controller.zk_process import ZooKeeperProcess, free_loopback_port, zookeeper_available
from kafkasim.storage.checkpoints import read_meta_properties

ROOT = Path(__file__).resolve().parents[2]
START_TIMEOUT_S = 90.0  # a bound, not an expectation: two shared cores


def serve_once(config: Path) -> str:
    """Start `kafkasim broker`, wait for its serving line, stop it (SIGTERM: a controlled
    shutdown); the serving line."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    with subprocess.Popen(
        [sys.executable, "-m", "kafkasim.cli", "broker", "--config", str(config)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=env,
        cwd=ROOT,
    ) as process:
        try:
            assert process.stdout is not None
            line = process.stdout.readline()  # blocks until the broker serves (or exits)
            assert "serving on" in line, f"broker did not serve: {line!r}"
            return line.strip()
        finally:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=START_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def test_brokers_without_an_id_take_one_from_zookeeper_and_keep_it(tmp_path: Path) -> None:
    reason = zookeeper_available()
    if reason is not None:
        pytest.skip(f"real ZooKeeper unavailable: {reason}")
    with ZooKeeperProcess(tmp_path / "zk", force_sync=False) as zk:
        configs = []
        for name in ("a", "b"):
            config = tmp_path / f"{name}.properties"
            config.write_text(
                "broker.id=-1\n"
                f"listeners=PLAINTEXT://127.0.0.1:{free_loopback_port()}\n"
                f"log.dirs={tmp_path / name / 'logs'}\n"
                f"zookeeper.connect={zk.connect_string}\n"
                "zookeeper.session.timeout.ms=6000\n"
            )
            configs.append(config)
        first = serve_once(configs[0])
        second = serve_once(configs[1])
        again = serve_once(configs[0])
    assert first.startswith("kafkasim broker 1001 serving on")
    assert second.startswith("kafkasim broker 1002 serving on")
    assert again.startswith("kafkasim broker 1001 serving on")
    stored = read_meta_properties(tmp_path / "a" / "logs")
    assert stored is not None and stored["broker.id"] == "1001"
