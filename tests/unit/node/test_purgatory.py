"""The delayed-operation purgatory (Kafka's ``DelayedOperationPurgatory``) with its two
operations, acks=all produce and DeleteRecords, over real partitions.

Why: an acks=all answer promises that every ISR member has the records, and a DeleteRecords
answer that every live replica dropped them; the purgatory is what holds each answer until
then, fails it when leadership moves, and times it out — and it must never leak a watcher.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from kafkasim.common.clock import ManualClock
from kafkasim.common.errors import NotLeaderOrFollowerError, RequestTimedOutError, error_for_name
from kafkasim.common.types import TopicPartition
from kafkasim.node.partition import Partition
from kafkasim.node.purgatory import (
    DelayedDeleteRecords,
    DelayedOperations,
    DelayedProduce,
    PartitionWait,
)
from kafkasim.storage.config import LogConfig
from kafkasim.storage.log import Log
from tests.unit.node.looptools import turns
from tests.unit.storage.logtools import T0, make_batch

NOW_MS = 1_000
TP0 = TopicPartition("topic", 0)
TP1 = TopicPartition("topic", 1)


def leader(tmp_path: Path, tp: TopicPartition, delayed: DelayedOperations) -> Partition:
    """Broker 1 leading ``tp`` with followers 2 and 3 in the ISR, min ISR 2, 3 records that
    only the leader has (HW 0)."""
    log = Log.open(
        tmp_path / tp.dir_name(),
        LogConfig.from_props({"min.insync.replicas": 2}),
        ManualClock(T0),
        topic_partition=tp,
    )
    partition = Partition(tp, 1, log, delayed=delayed)
    partition.make_leader(
        leader_epoch=1, isr=[1, 2, 3], replicas=[1, 2, 3], zk_version=0, controller_epoch=1,
        now_ms=NOW_MS,
    )  # fmt: skip
    for follower in (2, 3):
        partition.record_follower_fetch(follower, 0, NOW_MS, log_start_offset=0)
    partition.append_records_to_leader(make_batch([b"a", b"b", b"c"]), -1)
    assert partition.high_watermark == 0
    return partition


async def parked(delayed: DelayedOperations, op: DelayedProduce) -> asyncio.Task[None]:
    task = asyncio.create_task(delayed.produce.try_complete_else_watch(op))
    await asyncio.sleep(0)
    return task


def test_an_operation_already_satisfied_completes_without_being_watched(tmp_path: Path) -> None:
    async def scenario() -> None:
        delayed = DelayedOperations()
        partition = leader(tmp_path, TP0, delayed)
        wait = PartitionWait(partition, 0)
        await delayed.produce.try_complete_else_watch(DelayedProduce([wait], 1_000))
        assert wait.done and wait.error is None
        assert delayed.produce.watched(TP0) == 0

    asyncio.run(scenario())


def test_a_produce_completes_once_every_partition_reached_its_offset(tmp_path: Path) -> None:
    async def scenario() -> None:
        delayed = DelayedOperations()
        p0, p1 = leader(tmp_path, TP0, delayed), leader(tmp_path, TP1, delayed)
        waits = [PartitionWait(p0, 3), PartitionWait(p1, 3)]
        task = await parked(delayed, DelayedProduce(waits, 30_000))
        assert delayed.produce.watched(TP0) == delayed.produce.watched(TP1) == 1
        for follower in (2, 3):
            p0.record_follower_fetch(follower, 3, NOW_MS)
        await turns()
        assert waits[0].done and not waits[1].done and not task.done()
        for follower in (2, 3):
            p1.record_follower_fetch(follower, 3, NOW_MS)
        await turns()
        assert task.done() and [w.error for w in waits] == [None, None]
        assert delayed.produce.watched(TP0) == delayed.produce.watched(TP1) == 0

    asyncio.run(scenario())


def test_reached_after_the_isr_shrank_below_min_isr_answers_not_enough_replicas_after_append(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        delayed = DelayedOperations()
        partition = leader(tmp_path, TP0, delayed)
        wait = PartitionWait(partition, 3)
        task = await parked(delayed, DelayedProduce([wait], 30_000))
        # Both followers leave the ISR: the HW moves to the leader's own LEO, past the batch,
        # with one ISR member where min.insync.replicas asks for two.
        partition.commit_isr(frozenset({1}), 1)
        assert partition.high_watermark == 3
        await turns()
        assert task.done()
        assert isinstance(wait.error, error_for_name("NOT_ENOUGH_REPLICAS_AFTER_APPEND"))

    asyncio.run(scenario())


def test_losing_leadership_fails_the_waiting_partitions(tmp_path: Path) -> None:
    async def scenario() -> None:
        delayed = DelayedOperations()
        partition = leader(tmp_path, TP0, delayed)
        wait = PartitionWait(partition, 3)
        task = await parked(delayed, DelayedProduce([wait], 30_000))
        partition.make_follower(
            leader_id=2, leader_epoch=2, isr=[2, 3], replicas=[1, 2, 3], zk_version=1,
            controller_epoch=1,
        )  # fmt: skip
        await turns()
        assert task.done() and isinstance(wait.error, NotLeaderOrFollowerError)
        assert delayed.produce.watched(TP0) == 0

    asyncio.run(scenario())


def test_an_operation_not_satisfied_in_time_expires_with_request_timed_out(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        delayed = DelayedOperations()
        p0, p1 = leader(tmp_path, TP0, delayed), leader(tmp_path, TP1, delayed)
        for follower in (2, 3):
            p0.record_follower_fetch(follower, 3, NOW_MS)
        waits = [PartitionWait(p0, 3), PartitionWait(p1, 3)]
        await delayed.produce.try_complete_else_watch(DelayedProduce(waits, 10))
        assert waits[0].error is None  # reached before the timeout: answered as such
        assert isinstance(waits[1].error, RequestTimedOutError)
        assert "acks=all not satisfied within 10 ms for topic-1" in waits[1].error.message
        assert delayed.produce.watched(TP1) == 0

    asyncio.run(scenario())


def test_a_cancelled_waiter_leaves_no_watcher_behind(tmp_path: Path) -> None:
    async def scenario() -> None:
        delayed = DelayedOperations()
        partition = leader(tmp_path, TP0, delayed)
        task = await parked(delayed, DelayedProduce([PartitionWait(partition, 3)], 30_000))
        task.cancel()
        await turns()
        assert task.cancelled()
        assert delayed.produce.watched(TP0) == 0

    asyncio.run(scenario())


def test_delete_records_waits_for_the_low_watermark_and_only_for_its_own_purgatory(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        delayed = DelayedOperations()
        partition = leader(tmp_path, TP0, delayed)
        for follower in (2, 3):
            partition.record_follower_fetch(follower, 3, NOW_MS)
        assert partition.delete_records_on_leader(2) == 2
        wait = PartitionWait(partition, 2)
        op = DelayedDeleteRecords([wait], 30_000)
        task = asyncio.create_task(delayed.delete_records.try_complete_else_watch(op))
        await turns()
        assert delayed.delete_records.watched(TP0) == 1 and delayed.produce.watched(TP0) == 0
        partition.record_follower_fetch(2, 3, NOW_MS, log_start_offset=2)
        partition.record_follower_fetch(3, 3, NOW_MS, log_start_offset=2)
        await turns()
        assert task.done() and wait.error is None
        assert delayed.delete_records.watched(TP0) == 0

    asyncio.run(scenario())
