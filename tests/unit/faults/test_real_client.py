"""A failure run's workload driven by a real Kafka client (``faults.real_client``): the
scenario key ``workload.client``, the backend that refuses it before anything starts (the
simulation has no sockets), the optional
import of confluent-kafka, and how librdkafka's delivery reports become history events. The
run itself on real brokers is tests/integration/test_chaos_real_client.py."""

from __future__ import annotations

import asyncio
import dataclasses
import subprocess
import sys
from pathlib import Path

import confluent_kafka
import pytest

from kafkasim.cluster.chaos import LOCAL
from kafkasim.cluster.compose import COMPOSE
from kafkasim.common.clock import ManualClock
from kafkasim.common.rpc import ClientTransport
from kafkasim.faults import runner
from kafkasim.faults.backend import UnsupportedFaultError, check_supported
from kafkasim.faults.checker import check as check_history
from kafkasim.faults.history import History, OpType
from kafkasim.faults.reading import find, load, parse
from kafkasim.faults.real_client import ClientUnavailableError, ConfluentWorkload, require
from kafkasim.faults.report import render
from kafkasim.faults.scenario import (
    CLIENT_CONFLUENT,
    CLIENT_KAFKASIM,
    ProducerSpec,
    Scenario,
    ScenarioError,
)
from kafkasim.faults.workload import Workload
from kafkasim.faults.writing import dump
from kafkasim.sim.backend import SIM

ROOT = Path(__file__).resolve().parents[3]

LEADER_CRASH = find("leader-crash").read_text()


def scenario(client_line: str = "") -> Scenario:
    """The catalog's leader-crash, with ``client_line`` added to its [workload]."""
    text = LEADER_CRASH.replace("settle_s = 20.0\n", f"settle_s = 20.0\n{client_line}\n")
    assert client_line in text
    return parse(text, source="leader-crash.toml")


def with_client(chosen: Scenario, client: str) -> Scenario:
    return dataclasses.replace(chosen, workload=dataclasses.replace(chosen.workload, client=client))


# -- the scenario key ------------------------------------------------------------------------


def test_the_workload_client_defaults_to_kafkasims_own_and_reads_back_from_a_dump() -> None:
    assert scenario().workload.client == CLIENT_KAFKASIM
    assert "client =" not in dump(scenario())  # the default is not written
    chosen = scenario('client = "confluent-kafka"')
    assert chosen.workload.client == CLIENT_CONFLUENT
    assert 'client = "confluent-kafka"' in dump(chosen)
    assert parse(dump(chosen), source="dumped") == chosen


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        (
            'client = "librdkafka"',
            "unknown client 'librdkafka': expected one of 'kafkasim', 'confluent-kafka'",
        ),
        ("client = 1", "expected a string, got an integer (1)"),
    ],
)
def test_an_unknown_client_is_a_scenario_error_naming_the_key(line: str, reason: str) -> None:
    with pytest.raises(ScenarioError) as caught:
        scenario(line)
    assert caught.value.path == "workload.client"
    assert caught.value.reason == reason


# -- backends that cannot run a real client --------------------------------------------------


def test_the_simulation_refuses_a_real_client_before_anything_starts(tmp_path: Path) -> None:
    chosen = with_client(load(find("leader-crash")), CLIENT_CONFLUENT)
    with pytest.raises(UnsupportedFaultError) as caught:
        runner.run(chosen, SIM, tmp_path / "run", seed=1)
    assert str(caught.value).startswith(
        "scenario leader-crash: simulation cannot drive the workload with confluent-kafka: "
        "the simulation has no sockets"
    )
    assert not (tmp_path / "run").exists()


def test_local_processes_and_compose_take_a_real_client_and_every_backend_kafkasims_own() -> None:
    chosen = load(find("leader-crash"))
    check_supported(with_client(chosen, CLIENT_CONFLUENT), LOCAL)
    check_supported(with_client(chosen, CLIENT_CONFLUENT), COMPOSE)
    for spec in (LOCAL, COMPOSE, SIM):
        check_supported(chosen, spec)


# -- the optional import ---------------------------------------------------------------------


def test_require_names_a_missing_package_and_an_unknown_client(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    require(CLIENT_KAFKASIM)
    require(CLIENT_CONFLUENT)
    with pytest.raises(ClientUnavailableError, match="unknown client 'kcat'"):
        require("kcat")
    monkeypatch.setitem(sys.modules, "confluent_kafka", None)  # import raises ImportError
    require(CLIENT_KAFKASIM)  # kafkasim's own client needs nothing
    with pytest.raises(ClientUnavailableError, match="pip install confluent-kafka"):
        require(CLIENT_CONFLUENT)


def test_the_failure_runner_and_the_command_import_without_confluent_kafka() -> None:
    code = (
        "import sys; sys.modules['confluent_kafka'] = None\n"
        "import kafkasim.faults.runner, kafkasim.faults.real_client, kafkasim.cli.main\n"
        "kafkasim.cli.main.build_parser()  # every verb's module\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={"PYTHONPATH": str(ROOT)},
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr


# -- the driver ------------------------------------------------------------------------------


def _no_transport(name: str) -> ClientTransport:
    raise AssertionError(f"{name}: the driver's events need no transport")


def workload(chosen: Scenario) -> Workload:
    return Workload(
        scenario=chosen,
        history=History(),
        clock=ManualClock(),
        transport_for=_no_transport,
        bootstrap=[],
        start_ms=0,
        broker_addresses=list,
    )


def test_a_cluster_without_kafka_listeners_is_refused() -> None:
    chosen = scenario('client = "confluent-kafka"')
    with pytest.raises(ClientUnavailableError, match="needs the brokers' Kafka listeners"):
        ConfluentWorkload(chosen, [], workload(chosen))


def test_a_setting_librdkafka_refuses_fails_at_start_naming_the_producer() -> None:
    chosen = scenario('client = "confluent-kafka"')
    (producer,) = chosen.workload.producers
    odd = dataclasses.replace(producer, config={"buffer.memory": 1 << 20})  # Java's only
    chosen = dataclasses.replace(
        chosen, workload=dataclasses.replace(chosen.workload, producers=(odd,))
    )

    async def start() -> None:
        ConfluentWorkload(chosen, ["127.0.0.1:1"], workload(chosen)).start()

    with pytest.raises(ClientUnavailableError) as caught:
        asyncio.run(start())
    assert "confluent-kafka refuses the settings of producer p1" in str(caught.value)
    assert "buffer.memory" in str(caught.value)


def test_delivery_reports_become_ok_fail_and_info_events() -> None:
    """An acknowledgement is ok with its offset; an error Kafka returns before any append
    (MESSAGE_TOO_LARGE, code 10) is fail; a local timeout or purge (the record may have been
    written) is info."""
    chosen = scenario('client = "confluent-kafka"')
    recorder = workload(chosen)
    driver = ConfluentWorkload(chosen, ["127.0.0.1:1"], recorder)
    spec: ProducerSpec = chosen.workload.producers[0]
    delivered = confluent_kafka.Message(topic="events", partition=0, offset=7)
    driver._delivered(spec, 0, "p1-0", None, delivered)
    driver._delivered(spec, 0, "p1-1", confluent_kafka.KafkaError(10), delivered)
    local = confluent_kafka.KafkaError
    for code in (local._MSG_TIMED_OUT, local._PURGE_QUEUE):
        driver._delivered(spec, 0, "p1-2", local(code), delivered)
    events = [(op.type, op.value, op.offset) for op in recorder.history.ops]
    assert events == [
        (OpType.OK, "p1-0", 7),
        (OpType.FAIL, "p1-1", None),
        (OpType.INFO, "p1-2", None),
        (OpType.INFO, "p1-2", None),
    ]
    assert all(op.process == "p1" and op.acks == "all" for op in recorder.history.ops)


def test_the_report_names_the_client_that_drove_the_workload() -> None:
    history = History(meta={"scenario": "leader-crash", "runtime": "local processes"})
    assert "client: kafkasim," in render(history, check_history(history))
    history.meta["client"] = CLIENT_CONFLUENT
    assert "client: confluent-kafka," in render(history, check_history(history))
