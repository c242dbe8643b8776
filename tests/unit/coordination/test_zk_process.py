"""ZooKeeperProcess: a real server as a child process, found from Debian's package, stopped by
its own pid; and what a user is told when the package is missing."""

from __future__ import annotations

import os
import shutil
import socket
from pathlib import Path

import pytest

from kafkasim.controller import zk_process
from kafkasim.controller.zk_process import (
    ZooKeeperProcess,
    ZooKeeperUnavailableError,
    four_letter_word,
    free_loopback_port,
    zookeeper_available,
)
from tests.unit.coordination.harness import requires_zookeeper


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


@requires_zookeeper
def test_server_starts_on_the_given_port_answers_and_stops_by_pid(tmp_path: Path) -> None:
    port = free_loopback_port()
    with ZooKeeperProcess(tmp_path, port, force_sync=False) as zk:
        assert zk.connect_string == f"127.0.0.1:{port}"
        assert zk.pid is not None and zk.running
        assert "Mode: standalone" in four_letter_word(port, "srvr")
        assert four_letter_word(port, "ruok") == "imok"
        pid = zk.pid
        config = (tmp_path / "zoo.cfg").read_text()
        assert "clientPortAddress=127.0.0.1" in config
        assert "admin.enableServer=false" in config
    assert _gone(pid)
    stopped = zk  # a fresh name: mypy still holds the narrowing from inside the block
    assert not stopped.running
    assert stopped.pid is None
    zk.stop()  # idempotent


def test_missing_package_names_what_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(zk_process, "DEBIAN_ZOOKEEPER_JAR", tmp_path / "no" / "zookeeper.jar")
    monkeypatch.setattr(zk_process, "UPSTREAM_ZOOKEEPER_LIB", tmp_path / "no" / "lib")
    reason = zookeeper_available()
    assert reason is not None and "apt-get install zookeeper" in reason
    with pytest.raises(ZooKeeperUnavailableError, match="apt-get install zookeeper"):
        ZooKeeperProcess(tmp_path).start()


def test_missing_java_names_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shutil, "which", lambda _: None)
    if zk_process._classpath() is None:
        pytest.skip("ZooKeeper's jars are missing too; covered by the test above")
    reason = zookeeper_available()
    assert reason is not None and "apt-get install" in reason and "java" in reason


@requires_zookeeper
def test_a_port_taken_between_choice_and_bind_is_retried_on_another(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """port=0 picks a free port and hands it to the JVM: someone may take it in between."""
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        ports = iter([squatter.getsockname()[1], free_loopback_port()])
        monkeypatch.setattr(zk_process, "free_loopback_port", lambda: next(ports))
        with ZooKeeperProcess(tmp_path, force_sync=False) as zk:
            assert zk.port != squatter.getsockname()[1]
            assert "Mode: standalone" in four_letter_word(zk.port, "srvr")
        assert "Address already in use" in (tmp_path / "zookeeper.log").read_text()
