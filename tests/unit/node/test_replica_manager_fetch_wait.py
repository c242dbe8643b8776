"""A parked fetch (the long-poll) through a real replica manager, as Kafka's DelayedFetch: it
is woken only by what can answer it — a consumer's by the HW, a follower's by the log end.

Why: a consumer woken by every leader append read its log again for nothing until the HW moved,
as did a follower woken by every HW move (a quarter of a leader-crash run's fetch reads)."""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path

import pytest

from kafkasim.node import replica_types as rt
from kafkasim.node.replica_manager import ReplicaManager
from tests.txn_records import Producer
from tests.unit.node.test_replica_manager_txn import TP, run

REPLICAS = (1, 2, 3)


async def append(manager: ReplicaManager, producer: Producer) -> None:
    """One batch appended with acks=1: the leader's log end moves, not the HW."""
    (result,) = await manager.append_records(
        rt.ProduceParams(1, 5_000, (rt.PartitionRecords(TP, producer.batch(transactional=False)),))
    )
    assert result.error is None, result.error


def fetch_params(replica_id: int, offset: int, max_wait_ms: int = 10_000) -> rt.FetchParams:
    return rt.FetchParams(
        replica_id, max_wait_ms, 1, 1 << 20, (rt.FetchPartitionParams(TP, offset),)
    )


def count_reads(manager: ReplicaManager, monkeypatch: pytest.MonkeyPatch) -> Counter[int]:
    """How many times each replica id's fetches (-1: consumers) read the log."""
    reads: Counter[int] = Counter()
    read_once = manager._read_once

    def counted(params: rt.FetchParams, *rest: object) -> object:
        reads[params.replica_id] += 1
        return read_once(params, *rest)  # type: ignore[arg-type]

    monkeypatch.setattr(manager, "_read_once", counted)
    return reads


def test_a_parked_consumer_fetch_wakes_when_the_hw_moves_not_at_each_append(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def scenario(manager: ReplicaManager) -> None:
        producer = Producer(9)
        reads = count_reads(manager, monkeypatch)
        consumer = asyncio.create_task(manager.fetch_messages(fetch_params(-1, 0)))
        await asyncio.sleep(0.1)
        await append(manager, producer)
        await asyncio.sleep(0.1)
        assert not consumer.done() and reads[-1] == 1  # the HW is still 0: nothing to answer
        for follower in (2, 3):  # both followers have the batch: the HW moves to 1
            (data,) = await manager.fetch_messages(fetch_params(follower, 1, max_wait_ms=0))
            assert data.error is None
        assert manager.partition(TP).high_watermark == 1
        (answer,) = await consumer
        assert answer.records and answer.high_watermark == 1
        assert reads[-1] == 2  # on arrival, and once woken by the HW

    run(tmp_path, scenario, replicas=REPLICAS)


def test_a_parked_follower_fetch_wakes_when_the_log_end_moves_not_at_a_hw_move(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def scenario(manager: ReplicaManager) -> None:
        producer = Producer(9)
        await append(manager, producer)  # the log end is 1
        reads = count_reads(manager, monkeypatch)
        parked = asyncio.create_task(manager.fetch_messages(fetch_params(2, 1)))
        await asyncio.sleep(0.1)
        (data,) = await manager.fetch_messages(fetch_params(3, 1, max_wait_ms=0))
        assert data.high_watermark == 1  # the HW moved; broker 2 has nothing new to fetch
        await asyncio.sleep(0.1)
        assert not parked.done() and reads[2] == 1
        await append(manager, producer)
        (answer,) = await parked
        assert answer.error is None and answer.records and reads[2] == 2

    run(tmp_path, scenario, replicas=REPLICAS)
