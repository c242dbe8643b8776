"""``kafkasim chaos run --client``: the choice of the client driving a failure run's workload,
refused in one line before anything starts where it cannot run (an unknown client, the
simulation); ``--client`` overrides the scenario's ``workload.client``."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from kafkasim.cli.chaos import with_client
from kafkasim.cli.main import main
from kafkasim.faults.reading import find, load
from kafkasim.faults.scenario import CLIENT_CONFLUENT, CLIENT_KAFKASIM, ScenarioError


@pytest.fixture(autouse=True)
def root_log_level() -> Iterator[None]:
    """The commands quiet the root logger for their run (a CLI process's whole life); in
    this process the next tests must get it back as it was."""
    level = logging.getLogger().level
    yield
    logging.getLogger().setLevel(level)


def test_an_unknown_client_is_refused_by_name(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["chaos", "run", "leader-crash", "--client", "kafka-go"])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert "argument --client: invalid choice: 'kafka-go'" in err
    assert "'kafkasim'" in err and "'confluent-kafka'" in err


def test_the_simulation_refuses_a_real_client_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(
        ["chaos", "run", "leader-crash", "--backend", "sim", "--client", "confluent-kafka",
         "--dir", str(tmp_path / "run")]
    )  # fmt: skip
    assert code == 1
    out, err = capsys.readouterr()
    assert out == ""
    assert err.count("\n") == 1, err
    assert err.startswith(
        "kafkasim chaos: error: scenario leader-crash: simulation cannot drive the workload "
        "with confluent-kafka: the simulation has no sockets"
    )
    assert not (tmp_path / "run").exists()


def test_sim_run_refuses_a_scenario_whose_workload_names_a_real_client(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = (
        find("leader-crash")
        .read_text()
        .replace("settle_s = 20.0", 'settle_s = 20.0\nclient = "confluent-kafka"')
    )
    path = tmp_path / "real-client.toml"
    path.write_text(text)
    assert main(["sim", "run", str(path)]) == 1
    assert "simulation cannot drive the workload with confluent-kafka" in capsys.readouterr().err


def test_the_option_overrides_the_scenarios_client() -> None:
    chosen = load(find("leader-crash"))
    assert with_client(chosen, None) is chosen
    real = with_client(chosen, CLIENT_CONFLUENT)
    assert real.workload.client == CLIENT_CONFLUENT
    assert real.workload.producers == chosen.workload.producers
    assert with_client(real, CLIENT_KAFKASIM).workload.client == CLIENT_KAFKASIM
    with pytest.raises(ScenarioError, match=r"workload\.client: unknown client 'kcat'"):
        with_client(chosen, "kcat")
