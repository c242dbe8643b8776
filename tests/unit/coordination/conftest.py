from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator

import pytest

from kafkasim.controller.zk_process import ZooKeeperProcess
from tests.unit.coordination.harness import KINDS, ZOOKEEPER_UNAVAILABLE, Env, root_for, run


@pytest.fixture(scope="module")
def zookeeper(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeperProcess]:
    """One real ZooKeeper per test module, stopped (by its pid) when the module is done."""
    if ZOOKEEPER_UNAVAILABLE is not None:
        pytest.skip(f"real ZooKeeper cannot run here: {ZOOKEEPER_UNAVAILABLE}")
    with ZooKeeperProcess(tmp_path_factory.mktemp("zookeeper"), force_sync=False) as zookeeper:
        yield zookeeper


@pytest.fixture(params=KINDS)
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def root(request: pytest.FixtureRequest) -> str:
    """A znode path unique to the test (tests of one module share a real server)."""
    return root_for(request.node.name)


@pytest.fixture
def zk(kind: str, request: pytest.FixtureRequest) -> ZooKeeperProcess | None:
    """The module's real server for the ``real`` kind, else None (no server is started)."""
    if kind != "real":
        return None
    zookeeper: ZooKeeperProcess = request.getfixturevalue("zookeeper")
    return zookeeper


@pytest.fixture
def run_scenario(
    kind: str, root: str, zk: ZooKeeperProcess | None
) -> Callable[[Callable[[Env], Awaitable[None]]], None]:
    """``run_scenario(scenario)`` runs it on this test's kind of ZooKeeper."""

    def go(scenario: Callable[[Env], Awaitable[None]]) -> None:
        run(kind, scenario, root=root, zookeeper=zk)

    return go
