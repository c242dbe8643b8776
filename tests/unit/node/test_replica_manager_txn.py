"""The partition side of transactions through a real replica manager (one broker, real logs,
virtual time): transactional produce, WriteTxnMarkers on the leader, read_committed fetches
bounded by the last stable offset with the aborted transactions, read_uncommitted fetches and
followers unchanged, ListOffsets per isolation level.

Why: a read_committed consumer must never see data of an open or aborted transaction, and the
coordinator's markers must be appended like Kafka's (acks=all, per-partition errors)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TypeVar

import pytest

from kafkasim.common.clock import ManualClock
from kafkasim.common.errors import (
    InvalidProducerEpochError,
    InvalidRecordError,
    NotLeaderOrFollowerError,
    RequestTimedOutError,
    TransactionCoordinatorFencedError,
    UnknownTopicOrPartitionError,
)
from kafkasim.common.types import TopicPartition
from kafkasim.node import replica_types as rt
from kafkasim.node.config import BrokerConfig
from kafkasim.node.replica_manager import ReplicaManager
from kafkasim.sim.loop import run_simulation
from kafkasim.sim.zookeeper import SimZooKeeperClient, SimZooKeeperServer
from kafkasim.storage.log_manager import LogManager
from kafkasim.storage.records.batch import (
    ControlRecordType,
    decode_batch,
    iter_batches,
    parse_end_transaction_marker,
)
from tests.txn_records import ABORT, COMMIT, T0, Producer

TP, FOLLOWED, MISSING = TopicPartition("t", 0), TopicPartition("t", 1), TopicPartition("x", 0)
_T = TypeVar("_T")


def broker(tmp_path: Path, *, replicas: tuple[int, ...] = (1,)) -> ReplicaManager:
    """Broker 1 leading ``TP`` (ISR = ``replicas``) and following broker 2 for ``FOLLOWED``."""
    config = BrokerConfig.from_props(
        {
            "broker.id": 1,
            "log.dirs": str(tmp_path),
            "zookeeper.connect": "sim",
            "request.timeout.ms": 5_000,
        }
    )
    clock = ManualClock(T0)
    logs = LogManager([tmp_path], config.log_config(), clock)
    logs.startup()
    zk = SimZooKeeperClient(SimZooKeeperServer(), 6_000, "broker")
    manager = ReplicaManager(1, config, logs, clock, zk, topic_config=lambda _: config.log_config())
    states = (
        rt.LeaderAndIsrPartitionState(TP, 1, 1, 0, replicas, 0, replicas),
        rt.LeaderAndIsrPartitionState(FOLLOWED, 1, 2, 0, (1, 2), 0, (1, 2)),
    )
    errors = manager.leader_and_isr(rt.LeaderAndIsrParams(0, 1, states))
    assert not errors.failed()
    return manager


def run(
    tmp_path: Path,
    scenario: Callable[[ReplicaManager], Awaitable[_T]],
    *,
    replicas: tuple[int, ...] = (1,),
) -> _T:
    async def main() -> _T:
        manager = broker(tmp_path, replicas=replicas)
        try:
            return await scenario(manager)
        finally:
            await manager.close()

    return run_simulation(main(), time_limit_s=600)


async def produce(manager: ReplicaManager, data: bytes, tp: TopicPartition = TP) -> int:
    (result,) = await manager.append_records(
        rt.ProduceParams(-1, 5_000, (rt.PartitionRecords(tp, data),))
    )
    assert result.error is None, result.error
    return result.base_offset


def marker(
    producer: Producer,
    result: ControlRecordType,
    *tps: TopicPartition,
    coordinator_epoch: int = 0,
) -> rt.WriteTxnMarkersParams:
    return rt.WriteTxnMarkersParams(
        (rt.TxnMarkerEntry(producer.pid, producer.epoch, coordinator_epoch, result, tps or (TP,)),)
    )


async def fetch(
    manager: ReplicaManager, offset: int = 0, *, level: int = rt.READ_COMMITTED
) -> rt.FetchPartitionData:
    (data,) = await manager.fetch_messages(
        rt.FetchParams(-1, 0, 1, 1 << 20, (rt.FetchPartitionParams(TP, offset),), level)
    )
    assert data.error is None, data.error
    return data


def base_offsets(records: bytes) -> list[int]:
    return [header.base_offset for _, header in iter_batches(records)]


def test_read_committed_stops_at_the_lso_and_answers_the_aborted_transactions(
    tmp_path: Path,
) -> None:
    a, b = Producer(1), Producer(2)

    async def scenario(manager: ReplicaManager) -> None:
        assert await produce(manager, a.batch(2)) == 0  # 0-1
        assert await produce(manager, b.batch()) == 2  # 2
        assert await manager.write_txn_markers(marker(a, ABORT)) == [
            rt.TxnMarkerResult(1, ((TP, None),))
        ]  # 3
        committed = await fetch(manager)
        assert (committed.high_watermark, committed.last_stable_offset) == (4, 2)
        assert base_offsets(committed.records) == [0]
        assert committed.aborted_transactions == (rt.AbortedTransaction(1, 0),)

        uncommitted = await fetch(manager, level=rt.READ_UNCOMMITTED)
        assert base_offsets(uncommitted.records) == [0, 2, 3]
        assert uncommitted.aborted_transactions is None  # Kafka sends null
        assert uncommitted.last_stable_offset == 2  # the LSO, whatever the isolation

        await manager.write_txn_markers(marker(b, COMMIT))  # 4
        committed = await fetch(manager)
        assert committed.last_stable_offset == committed.high_watermark == 5
        assert base_offsets(committed.records) == [0, 2, 3, 4]
        assert committed.aborted_transactions == (rt.AbortedTransaction(1, 0),)
        # Past the aborted transaction: none to drop (an empty list, not null).
        assert (await fetch(manager, 4)).aborted_transactions == ()

    run(tmp_path, scenario)


def test_a_read_committed_fetch_at_the_lso_long_polls_until_the_commit(tmp_path: Path) -> None:
    a = Producer(1)

    async def scenario(manager: ReplicaManager) -> None:
        await produce(manager, a.batch())  # 0, open
        params = rt.FetchParams(
            -1, 10_000, 1, 1 << 20, (rt.FetchPartitionParams(TP, 0),), rt.READ_COMMITTED
        )
        waiting = asyncio.create_task(manager.fetch_messages(params))
        await asyncio.sleep(1)
        assert not waiting.done()  # the open transaction is above the LSO
        await manager.write_txn_markers(marker(a, COMMIT))
        (data,) = await waiting
        assert base_offsets(data.records) == [0, 1]
        assert data.aborted_transactions == ()

    run(tmp_path, scenario)


def test_list_offsets_latest_is_the_lso_for_read_committed(tmp_path: Path) -> None:
    a = Producer(1)

    async def scenario(manager: ReplicaManager) -> None:
        await produce(manager, Producer(7).batch(transactional=False))  # 0
        await produce(manager, a.batch(timestamp=T0 + 10))  # 1, open

        def offsets(timestamp: int, level: int, replica_id: int = -1) -> int:
            (result,) = manager.list_offsets(
                rt.ListOffsetsParams(replica_id, (rt.ListOffsetsPartition(TP, timestamp),), level)
            )
            assert result.error is None
            return result.offset

        assert offsets(-1, rt.READ_COMMITTED) == 1
        assert offsets(-1, rt.READ_UNCOMMITTED) == 2
        assert offsets(-1, rt.READ_COMMITTED, replica_id=2) == 2  # a replica: the log end
        assert offsets(T0, rt.READ_COMMITTED) == 0
        # Only the open batch has this timestamp (and the largest): above the LSO, not found.
        assert offsets(T0 + 5, rt.READ_COMMITTED) == -1
        assert offsets(T0 + 5, rt.READ_UNCOMMITTED) == 1
        assert offsets(-3, rt.READ_COMMITTED) == -1
        assert offsets(-3, rt.READ_UNCOMMITTED) == 1

    run(tmp_path, scenario)


def test_write_txn_markers_appends_kafkas_marker_batch_as_the_coordinator(tmp_path: Path) -> None:
    a = Producer(5, epoch=3)

    async def scenario(manager: ReplicaManager) -> None:
        await produce(manager, a.batch())
        await manager.write_txn_markers(marker(a, COMMIT, coordinator_epoch=9))
        data = (await fetch(manager, 1, level=rt.READ_UNCOMMITTED)).records
        header, (record,) = decode_batch(data)
        assert (header.base_offset, header.is_control, header.is_transactional) == (1, True, True)
        assert (header.producer_id, header.producer_epoch, header.base_sequence) == (5, 3, -1)
        assert header.partition_leader_epoch == 0  # stamped by the leader
        assert header.max_timestamp == T0  # the broker's clock
        end = parse_end_transaction_marker(record.key, record.value)
        assert (end.control_type, end.coordinator_epoch) == (COMMIT, 9)
        # A client may not write markers through Produce.
        (refused,) = await manager.append_records(
            rt.ProduceParams(-1, 5_000, (rt.PartitionRecords(TP, a.marker(ABORT)),))
        )
        assert isinstance(refused.error, InvalidRecordError)

    run(tmp_path, scenario)


def test_write_txn_markers_answers_each_partitions_error(tmp_path: Path) -> None:
    a = Producer(1, epoch=2)

    async def scenario(manager: ReplicaManager) -> None:
        await produce(manager, a.batch())
        await manager.write_txn_markers(marker(a, COMMIT, coordinator_epoch=4))
        await produce(manager, a.batch())  # a second transaction, open
        stale = Producer(1, epoch=1)
        fenced_coordinator = marker(a, ABORT, coordinator_epoch=3).markers[0]
        answers = await manager.write_txn_markers(
            rt.WriteTxnMarkersParams(
                (
                    rt.TxnMarkerEntry(1, 2, 4, ABORT, (TP, FOLLOWED, MISSING)),
                    marker(stale, ABORT, coordinator_epoch=4).markers[0],
                    fenced_coordinator,
                    rt.TxnMarkerEntry(8, 0, 0, COMMIT, ()),
                )
            )
        )
        assert [answer.producer_id for answer in answers] == [1, 1, 1, 8]
        first, by_stale, by_fenced, empty = (dict(answer.partitions) for answer in answers)
        assert first[TP] is None
        assert isinstance(first[FOLLOWED], NotLeaderOrFollowerError)
        assert isinstance(first[MISSING], UnknownTopicOrPartitionError)
        # The first marker ended the transaction: the same again with an older epoch is stale.
        assert isinstance(by_stale[TP], InvalidProducerEpochError)
        assert isinstance(by_fenced[TP], TransactionCoordinatorFencedError)
        assert empty == {}

    run(tmp_path, scenario)


def test_write_txn_markers_waits_for_the_isr_like_acks_all(tmp_path: Path) -> None:
    a = Producer(1)

    async def scenario(manager: ReplicaManager) -> None:
        (appended,) = await manager.append_records(
            rt.ProduceParams(1, 5_000, (rt.PartitionRecords(TP, a.batch()),))
        )  # acks=1: the follower has not fetched it
        writing = asyncio.create_task(manager.write_txn_markers(marker(a, COMMIT)))
        await asyncio.sleep(1)
        assert not writing.done()
        assert manager.partition(TP).log_end_offset == 2  # appended, waiting for the ISR
        follower = rt.FetchParams(2, 0, 1, 1 << 20, (rt.FetchPartitionParams(TP, 2),))
        await manager.fetch_messages(follower)  # broker 2 now has both batches
        assert await writing == [rt.TxnMarkerResult(1, ((TP, None),))]
        # A marker the follower does not take times out, as an acks=all produce does.
        b = Producer(2)
        await manager.append_records(
            rt.ProduceParams(1, 5_000, (rt.PartitionRecords(TP, b.batch()),))
        )
        (timed_out,) = await manager.write_txn_markers(marker(b, ABORT))
        assert isinstance(dict(timed_out.partitions)[TP], RequestTimedOutError)
        assert appended.error is None

    run(tmp_path, scenario, replicas=(1, 2))


@pytest.mark.parametrize("level", [rt.READ_UNCOMMITTED, rt.READ_COMMITTED])
def test_a_follower_reads_to_the_log_end_whatever_the_isolation(tmp_path: Path, level: int) -> None:
    a = Producer(1)

    async def scenario(manager: ReplicaManager) -> None:
        await manager.append_records(
            rt.ProduceParams(1, 5_000, (rt.PartitionRecords(TP, a.batch()),))
        )
        (data,) = await manager.fetch_messages(
            rt.FetchParams(2, 0, 1, 1 << 20, (rt.FetchPartitionParams(TP, 0),), level)
        )
        assert base_offsets(data.records) == [0]  # above the HW and the LSO
        assert data.aborted_transactions is None
        assert (data.high_watermark, data.last_stable_offset) == (0, 0)

    run(tmp_path, scenario, replicas=(1, 2))
