"""Producer id blocks in ZooKeeper (Kafka's ZkProducerIdManager) and the InitProducerId answer,
on SimZooKeeper and the virtual-time loop: blocks are disjoint however brokers race for them,
ids are unique and increasing, a used-up block is followed by the next one."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

import pytest

from kafkasim.common.coordination import ConnectionLossError
from kafkasim.controller import zk_data
from kafkasim.controller.zk_data import PRODUCER_ID_BLOCK_SIZE, ProducerIdBlock
from kafkasim.node.apis_cluster import ProducerIdAnswer, new_producer_id
from kafkasim.node.apis_replica import error_code
from kafkasim.node.producer_ids import (
    INT64_MAX,
    ProducerIdManager,
    ProducerIdsExhaustedError,
)
from kafkasim.sim.loop import run_simulation
from kafkasim.sim.zookeeper import SimZooKeeperClient, SimZooKeeperServer

T = TypeVar("T")

SESSION_TIMEOUT_MS = 6_000


def simulate(scenario: Callable[[SimZooKeeperServer], Awaitable[T]]) -> T:
    async def main() -> T:
        return await scenario(SimZooKeeperServer())

    return run_simulation(main(), time_limit_s=3_600)


async def session(server: SimZooKeeperServer, name: str) -> SimZooKeeperClient:
    client = SimZooKeeperClient(server, SESSION_TIMEOUT_MS, name, latency_ms=(0.1, 2.0))
    await client.start()
    return client


async def stored_block(zk: SimZooKeeperClient) -> ProducerIdBlock:
    data, _ = await zk.get(zk_data.LATEST_PRODUCER_ID_BLOCK)
    return zk_data.decode_producer_id_block(data)


def test_first_id_is_zero_and_ids_increase_within_the_block() -> None:
    async def scenario(server: SimZooKeeperServer) -> None:
        zk = await session(server, "broker-1")
        manager = ProducerIdManager(1, zk)
        ids = [await manager.generate_producer_id() for _ in range(5)]
        assert ids == [0, 1, 2, 3, 4]
        assert manager.current_block == ProducerIdBlock(1, 0, PRODUCER_ID_BLOCK_SIZE - 1)
        assert await stored_block(zk) == ProducerIdBlock(1, 0, PRODUCER_ID_BLOCK_SIZE - 1)
        assert manager.blocks_reserved == 1

    simulate(scenario)


def test_an_exhausted_block_is_followed_by_the_next_one() -> None:
    """Id 1000 is the first of block [1000, 1999], reserved when [0, 999] runs out."""

    async def scenario(server: SimZooKeeperServer) -> None:
        zk = await session(server, "broker-1")
        manager = ProducerIdManager(1, zk)
        ids = [await manager.generate_producer_id() for _ in range(PRODUCER_ID_BLOCK_SIZE + 2)]
        assert ids == list(range(PRODUCER_ID_BLOCK_SIZE + 2))
        assert manager.blocks_reserved == 2
        assert manager.current_block == ProducerIdBlock(1, 1000, 1999)
        assert await stored_block(zk) == ProducerIdBlock(1, 1000, 1999)

    simulate(scenario)


@pytest.mark.parametrize("existing", [None, b""], ids=["no-znode", "empty-znode"])
def test_two_brokers_racing_for_blocks_get_disjoint_blocks(existing: bytes | None) -> None:
    """Both read the same state, both write: one write fails (NodeExists when the znode was
    absent, BadVersion when it existed) and that broker retries on top of the winner's block."""

    async def scenario(server: SimZooKeeperServer) -> None:
        zk1, zk2 = await session(server, "broker-1"), await session(server, "broker-2")
        if existing is not None:
            await zk1.create(zk_data.LATEST_PRODUCER_ID_BLOCK, existing)
        managers = [ProducerIdManager(1, zk1), ProducerIdManager(2, zk2)]
        # Interleave whole block reservations: each round, both want a new block at once.
        ids_by_manager: list[list[int]] = [[], []]
        for _ in range(3):
            rounds = await asyncio.gather(
                *(_take(manager, PRODUCER_ID_BLOCK_SIZE) for manager in managers)
            )
            for mine, taken in zip(ids_by_manager, rounds, strict=True):
                mine.extend(taken)
        every_id = ids_by_manager[0] + ids_by_manager[1]
        assert len(every_id) == len(set(every_id)) == 6 * PRODUCER_ID_BLOCK_SIZE
        assert sorted(every_id) == list(range(6 * PRODUCER_ID_BLOCK_SIZE))
        for mine in ids_by_manager:
            assert mine == sorted(mine)
        assert sum(m.blocks_reserved for m in managers) == 6
        assert sum(m.block_write_conflicts for m in managers) >= 1  # they did race
        assert (await stored_block(zk1)).block_end == 6 * PRODUCER_ID_BLOCK_SIZE - 1

    simulate(scenario)


async def _take(manager: ProducerIdManager, count: int) -> list[int]:
    return [await manager.generate_producer_id() for _ in range(count)]


def test_concurrent_requests_on_one_broker_reserve_one_block() -> None:
    """The lock serialises handlers: 10 concurrent first requests make one block, not 10."""

    async def scenario(server: SimZooKeeperServer) -> None:
        manager = ProducerIdManager(1, await session(server, "broker-1"))
        ids = await asyncio.gather(*(manager.generate_producer_id() for _ in range(10)))
        assert sorted(ids) == list(range(10))
        assert manager.blocks_reserved == 1

    simulate(scenario)


def test_a_restarted_broker_skips_the_rest_of_its_old_block() -> None:
    """Nothing is kept locally: a new manager reserves a fresh block, never reusing ids."""

    async def scenario(server: SimZooKeeperServer) -> None:
        zk = await session(server, "broker-1")
        before = ProducerIdManager(1, zk)
        assert await before.generate_producer_id() == 0
        after = ProducerIdManager(1, zk)
        assert await after.generate_producer_id() == PRODUCER_ID_BLOCK_SIZE

    simulate(scenario)


def test_replace_coordination_reserves_through_the_new_session() -> None:
    async def scenario(server: SimZooKeeperServer) -> None:
        old = await session(server, "broker-1/0")
        manager = ProducerIdManager(1, old, block_size=2)
        assert [await manager.generate_producer_id() for _ in range(2)] == [0, 1]
        old.disconnect()
        with pytest.raises(ConnectionLossError):
            await manager.generate_producer_id()
        manager.replace_coordination(await session(server, "broker-1/1"))
        assert await manager.generate_producer_id() == 2

    simulate(scenario)


def test_int64_exhaustion_is_an_error_not_a_wrap() -> None:
    async def scenario(server: SimZooKeeperServer) -> None:
        zk = await session(server, "broker-1")
        last = ProducerIdBlock(2, INT64_MAX - 1500, INT64_MAX - 501)
        await zk.create(zk_data.LATEST_PRODUCER_ID_BLOCK, zk_data.encode_producer_id_block(last))
        manager = ProducerIdManager(1, zk)
        with pytest.raises(ProducerIdsExhaustedError, match="exhausted all producerIds"):
            await manager.generate_producer_id()
        answer = await new_producer_id(manager)
        assert (error_code(answer.error), answer.producer_id) == (-1, -1)

    simulate(scenario)


@pytest.mark.parametrize(
    ("has_manager", "code", "producer_id", "epoch"),
    [
        (True, 0, 0, 0),
        (False, 14, -1, -1),  # COORDINATOR_LOAD_IN_PROGRESS (retriable): no session yet
    ],
)
def test_init_producer_id_answers(
    has_manager: bool, code: int, producer_id: int, epoch: int
) -> None:
    async def scenario(server: SimZooKeeperServer) -> ProducerIdAnswer:
        manager = ProducerIdManager(1, await session(server, "broker-1")) if has_manager else None
        return await new_producer_id(manager)

    answer = simulate(scenario)
    assert (error_code(answer.error), answer.producer_id, answer.producer_epoch) == (
        code,
        producer_id,
        epoch,
    )


def test_a_zookeeper_failure_is_answered_as_retriable() -> None:
    async def scenario(server: SimZooKeeperServer) -> ProducerIdAnswer:
        zk = await session(server, "broker-1")
        zk.disconnect()
        return await new_producer_id(ProducerIdManager(1, zk))

    assert error_code(simulate(scenario).error) == 14
