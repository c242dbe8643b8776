"""The controller election in ZooKeeper on its own: who wins, the epoch, freeing
``/controller``."""

from __future__ import annotations

from kafkasim.controller import campaign, zk_data
from kafkasim.controller.log import ControllerLog
from kafkasim.controller.zk_access import RetryingCoordination
from kafkasim.sim.zookeeper import SimZooKeeperClient, SimZooKeeperServer

from .harness import SESSION_TIMEOUT_MS, run


async def _session(server: SimZooKeeperServer, name: str) -> RetryingCoordination:
    client = SimZooKeeperClient(server, SESSION_TIMEOUT_MS, name)
    await client.start()
    zk = RetryingCoordination(client, 3, 0.1)
    await campaign.ensure_persistent_paths(zk)
    return zk


def _ignore(event: object) -> None:
    return None


def test_first_campaign_wins_epoch_1_and_the_second_sees_the_winner() -> None:
    async def scenario() -> None:
        server = SimZooKeeperServer()
        a, b = await _session(server, "a"), await _session(server, "b")
        won, seen = await campaign.campaign(a, 1, 0)
        assert won is not None and won[0] == 1 and seen == 1
        assert await campaign.read_controller_epoch(a) == won
        lost, seen = await campaign.campaign(b, 2, 0)
        assert lost is None and seen == 1
        assert await campaign.read_active_controller(b, _ignore) == 1
        await a.zk.close()
        await b.zk.close()

    run(scenario)


def test_the_next_controller_gets_the_next_epoch() -> None:
    async def scenario() -> None:
        server = SimZooKeeperServer()
        a, b = await _session(server, "a"), await _session(server, "b")
        await campaign.campaign(a, 1, 0)
        await a.zk.close()  # /controller goes with the session
        assert await campaign.read_active_controller(b, _ignore) == zk_data.NO_LEADER
        won, _ = await campaign.campaign(b, 2, 0)
        assert won is not None and won[0] == 2
        await b.zk.close()

    run(scenario)


def test_only_the_owner_frees_controller() -> None:
    async def scenario() -> None:
        server = SimZooKeeperServer()
        a, b = await _session(server, "a"), await _session(server, "b")
        await campaign.campaign(a, 1, 0)
        await campaign.delete_own_controller_znode(b, 2, ControllerLog(2, lambda: -1))
        assert await campaign.read_active_controller(b, _ignore) == 1
        await campaign.delete_own_controller_znode(a, 1, ControllerLog(1, lambda: 1))
        assert await campaign.read_active_controller(b, _ignore) == zk_data.NO_LEADER
        await a.zk.close()
        await b.zk.close()

    run(scenario)


def test_cluster_id_read_or_default() -> None:
    async def scenario() -> None:
        server = SimZooKeeperServer()
        zk = await _session(server, "a")
        assert await campaign.read_cluster_id(zk, "dflt") == "dflt"
        await zk.create(zk_data.CLUSTER_ID, zk_data.encode_cluster_id("abc"), makepath=True)
        assert await campaign.read_cluster_id(zk, "dflt") == "abc"
        await zk.zk.close()

    run(scenario)
