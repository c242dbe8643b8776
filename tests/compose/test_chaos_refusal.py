"""``kafkasim chaos run --backend compose`` refuses, in one line and before anything starts,
what the compose cluster cannot do: a fault it cannot inject (named with the backend's
runtime), or a run where there is no engine. No container is needed: these run everywhere."""

from __future__ import annotations

import functools
from pathlib import Path

import pytest

from tests.cli_run import kafkasim as run_kafkasim

kafkasim = functools.partial(run_kafkasim, timeout=60)


SCENARIO = (
    'name = "refused"\ndescription = ""\nexpect = "safe"\n'
    '[cluster]\nbrokers = 3\n[[cluster.topics]]\nname = "events"\n'
    "[workload]\nduration_s = 5.0\n"
    '[[workload.producers]]\nname = "p1"\ntopic = "events"\nrate = 10.0\n'
)


@pytest.mark.parametrize(
    ("faults", "named"),
    [
        (
            '[[faults]]\nat_s = 1.0\naction = "expire_session"\ntarget = "leader:events-0"\n',
            "expire_session (faults[0]): a broker's ZooKeeper session id and password never "
            "leave its container",
        ),
        (
            '[[faults]]\nat_s = 1.0\naction = "slow_network"\ntarget = "broker:1"\n'
            "duration_s = 1.0\nparams = { latency_ms = 50.0 }\n",
            "slow_network (faults[0]): delaying a container's traffic ",
        ),
    ],
    ids=["expire-session", "slow-network"],
)
def test_a_fault_the_compose_cluster_cannot_inject_is_refused_in_one_line(
    faults: str, named: str, tmp_path: Path
) -> None:
    path = tmp_path / "refused.toml"
    path.write_text(SCENARIO + faults)
    done = kafkasim("chaos", "run", str(path), "--backend", "compose", "--dir", str(tmp_path / "c"))
    assert done.returncode == 1
    assert done.stdout == ""
    assert done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith(
        "kafkasim chaos: error: scenario refused: the compose cluster cannot inject "
    )
    assert named in done.stderr
    assert not (tmp_path / "c").exists()


def test_without_a_docker_client_the_compose_backend_fails_in_one_line(tmp_path: Path) -> None:
    path = tmp_path / "fine.toml"
    path.write_text(
        SCENARIO + '[[faults]]\nat_s = 1.0\naction = "isolate"\ntarget = "leader:events-0"\n'
        "duration_s = 1.0\n"
    )
    empty = tmp_path / "bin"
    empty.mkdir()
    done = kafkasim(
        "chaos",
        "run",
        str(path),
        "--backend",
        "compose",
        "--dir",
        str(tmp_path / "c"),
        env={"PATH": str(empty)},
    )
    assert done.returncode == 1
    assert done.stdout == ""
    assert done.stderr == (
        "kafkasim chaos: error: the compose backend cannot run here: no docker client on PATH "
        "(as root: apt-get install docker.io, then compose/engine.sh start)\n"
    )
    assert not (tmp_path / "c").exists()
