"""How a local cluster reads a broker that exited during start-up: the broker's own error as
one line, and a retry on new ports only when it could not bind a port the cluster chose."""

from __future__ import annotations

from pathlib import Path

import pytest

from kafkasim.cluster.local import LocalCluster, broker_error

CONFIG_ERROR = "INVALID_CONFIG: Unknown broker configuration key: log.retention.hourz"


def test_the_error_is_the_line_the_broker_exits_with() -> None:
    output = f"INFO node.broker: starting\nkafkasim broker: error: {CONFIG_ERROR}\n"
    assert broker_error(output) == CONFIG_ERROR


def test_an_uncaught_exception_is_its_tracebacks_last_line() -> None:
    output = (
        "Traceback (most recent call last):\n"
        '  File "x.py", line 1, in <module>\n'
        "RuntimeError: the loop broke\n"
    )
    assert broker_error(output) == "RuntimeError: the loop broke"
    assert broker_error("") == "no output"


def _cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[LocalCluster, list[int]]:
    cluster = LocalCluster(tmp_path, brokers=1)
    restarted: list[int] = []
    monkeypatch.setattr(cluster, "start_broker", restarted.append)
    return cluster, restarted


def test_a_config_error_is_not_retried(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cluster, restarted = _cluster(tmp_path, monkeypatch)
    assert not cluster._retry_on_new_port(1, CONFIG_ERROR)
    assert restarted == []


def test_a_port_the_cluster_chose_is_retried_on_new_ports_three_times(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cluster, restarted = _cluster(tmp_path, monkeypatch)
    broker = cluster.brokers[1]
    for _ in range(3):
        lost = f"Socket server failed to bind to {broker.kafka_address}: Address already in use."
        old = broker.kafka_address
        assert cluster._retry_on_new_port(1, lost)
        assert broker.kafka_address != old
    lost = f"Socket server failed to bind to {broker.address}: Address already in use."
    assert not cluster._retry_on_new_port(1, lost)
    assert restarted == [1, 1, 1]


def test_a_port_the_user_chose_is_not_retried(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cluster, restarted = _cluster(tmp_path, monkeypatch)
    error = "Socket server failed to bind to 127.0.0.1:9092: Address already in use."
    assert not cluster._retry_on_new_port(1, error)
    assert restarted == []
