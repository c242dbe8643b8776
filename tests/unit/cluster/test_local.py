"""LocalCluster's bookkeeping without starting a process: a metrics port per broker, the state
``kafkasim cluster up`` records, and attaching to it again."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kafkasim.cluster.local import LocalCluster, process_alive, process_state


def _config(cluster: LocalCluster, broker_id: int) -> dict[str, str]:
    broker = cluster.brokers[broker_id]
    cluster._write_config(broker)
    lines = broker.config_path.read_text().splitlines()
    return dict(line.split("=", 1) for line in lines)


def test_every_broker_gets_a_metrics_port_of_its_own(tmp_path: Path) -> None:
    cluster = LocalCluster(tmp_path, brokers=3)
    ports = [b.metrics_port for b in cluster.brokers.values()]
    assert None not in ports and len(set(ports)) == 3
    assert _config(cluster, 2)["metrics.port"] == str(cluster.brokers[2].metrics_port)
    assert cluster.brokers[2].metrics_url == f"http://127.0.0.1:{ports[1]}/metrics"


def test_a_fixed_metrics_port_is_the_first_broker_s_and_the_next_ones_follow(
    tmp_path: Path,
) -> None:
    """One port for all would let one broker bind it and the others fail to start."""
    cluster = LocalCluster(tmp_path, brokers=3, broker_props={"metrics.port": "9500"})
    assert [b.metrics_port for b in cluster.brokers.values()] == [9500, 9501, 9502]
    assert _config(cluster, 3)["metrics.port"] == "9502"


def test_metrics_port_minus_one_serves_no_metrics(tmp_path: Path) -> None:
    cluster = LocalCluster(tmp_path, brokers=2, broker_props={"metrics.port": -1})
    assert all(b.metrics_url is None for b in cluster.brokers.values())
    assert _config(cluster, 1)["metrics.port"] == "-1"


def test_a_bad_metrics_port_is_named(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"metrics\.port must be an integer, got 'x'"):
        LocalCluster(tmp_path, brokers=1, broker_props={"metrics.port": "x"})


def test_attaching_to_the_recorded_state_keeps_ports_overrides_and_pids(tmp_path: Path) -> None:
    cluster = LocalCluster(tmp_path, brokers=2, broker_props={"log.retention.hours": "1"})
    state = cluster.state()
    again = LocalCluster.attach(state)
    assert again.state() == state
    assert _config(again, 2)["log.retention.hours"] == "1"
    assert _config(again, 2)["metrics.port"] == str(cluster.brokers[2].metrics_port)
    # Nothing started: no pid, not running.
    assert not any(b.running for b in again.brokers.values())


def test_brokers_get_a_replication_listener_unless_the_props_lay_out_listeners(
    tmp_path: Path,
) -> None:
    """Followers fetch over a REPLICATION listener (framed TCP; TLS on a TLS cluster) of the
    inter-broker listener's security, recorded in the state and kept by attach; props that lay
    the listeners out themselves are taken as they are."""
    from kafkasim.node.config import BrokerConfig

    cluster = LocalCluster(tmp_path / "default", brokers=2)
    broker = cluster.brokers[2]
    props = _config(cluster, 2)
    assert broker.replication_address is not None
    assert props["listeners"].endswith(f",REPLICATION://{broker.replication_address}")
    assert props["listener.wire.protocol.map"] == "REPLICATION:replication"
    assert props["replica.fetch.listener.name"] == "REPLICATION"
    config = BrokerConfig.from_props(props)
    assert config.replica_fetch_listener == "REPLICATION"
    assert config.security_protocols["REPLICATION"] == "PLAINTEXT"
    again = LocalCluster.attach(cluster.state())
    assert again.framed_replication
    assert again.brokers[2].replication_port == broker.replication_port
    tls = _config(LocalCluster(tmp_path / "tls", brokers=1, tls=True), 1)
    assert "REPLICATION:SSL" in tls["listener.security.protocol.map"]
    own = LocalCluster(
        tmp_path / "own", brokers=1, broker_props={"listeners": "PLAINTEXT://127.0.0.1:0"}
    )
    assert not own.framed_replication
    assert own.brokers[1].replication_address is None
    assert "replica.fetch.listener.name" not in _config(own, 1)
    assert not LocalCluster(
        tmp_path / "off", brokers=1, framed_replication=False
    ).framed_replication


def test_an_adopted_process_is_known_by_pid_and_command_line(tmp_path: Path) -> None:
    """Alive while its command line names the broker's config; paused after SIGSTOP."""
    cluster = LocalCluster(tmp_path, brokers=1)
    broker = cluster.brokers[1]
    child = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)", str(broker.config_path)]
    )
    try:
        broker.adopted_pid = child.pid
        # Its command line shows in /proc once its exec completed.
        deadline = time.monotonic() + 30
        while not broker.running and time.monotonic() < deadline:
            time.sleep(0.01)
        assert broker.running and not broker.paused
        cluster.pause(1)
        assert broker.paused
        cluster.resume(1)
        assert not broker.paused
        cluster.kill(1)  # SIGKILL, until it is gone (a zombie counts as gone)
        assert not broker.running
    finally:
        child.kill()
        child.wait()
    assert not process_alive(os.getpid(), str(broker.config_path))
    assert process_state(os.getpid()) in ("R", "S")


def test_no_two_listeners_share_a_port_when_the_kernel_repeats_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The kernel may hand the same free port to two probes in a row; a cluster never hands
    it out twice (two listeners of a broker on one port was a start-up error in CI)."""
    repeated = iter(
        [
            41000,
            41000,
            41001,
            41001,
            41002,
            41003,
            41003,
            41004,
            41005,
            41006,
            41006,
            41007,
            41008,
            41009,
        ]
    )
    monkeypatch.setattr("kafkasim.cluster.local.free_loopback_port", lambda: next(repeated))
    cluster = LocalCluster(tmp_path, brokers=2)
    ports = [
        p
        for b in cluster.brokers.values()
        for p in (b.port, b.kafka_port, b.metrics_port, b.replication_port)
        if p is not None
    ]
    assert len(ports) == 8 and len(set(ports)) == 8
