"""The transaction coordinator's runtime over fakes (``txn_fakes``): what each request writes to
``__transaction_state`` and answers, the markers it sends and the Complete state after them,
fencing, timeouts, expiration, failover, and the coordinator checks. Runs on the simulation's
virtual-time loop, so the marker retry backoff costs no real time."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any

from kafkasim.common.errors import error_for_name
from kafkasim.common.rpc import RpcError, RpcStatus
from kafkasim.common.types import TopicPartition
from kafkasim.node.txn_decisions import offsets_partition
from kafkasim.node.txn_metadata import TransactionState
from kafkasim.node.txn_types import (
    AddOffsetsToTxnParams,
    AddPartitionsToTxnParams,
    EndTxnParams,
    InitProducerIdParams,
    TransactionResult,
)
from kafkasim.sim.loop import run_simulation
from tests.unit.node.txn_fakes import OFFSETS_PARTITIONS, Harness, until

S = TransactionState
COMMIT = TransactionResult.COMMIT
ABORT = TransactionResult.ABORT
TID = "tx-1"
TP0 = TopicPartition("orders", 0)
TP1 = TopicPartition("orders", 1)
TIMEOUT_MS = 60_000


def err(name: str) -> type[Exception]:
    return error_for_name(name)


def run(coro: Coroutine[Any, Any, None]) -> None:
    run_simulation(coro)


def harness(**props: object) -> Harness:
    return Harness(leaders={TP0: 2, TP1: 3}, **props)


async def begin(h: Harness, *partitions: TopicPartition) -> tuple[int, int]:
    """InitProducerId, then AddPartitionsToTxn of ``partitions``: the producer id and epoch."""
    result = await h.coordinator.init_producer_id(InitProducerIdParams(TID, TIMEOUT_MS))
    assert result.error is None
    add = AddPartitionsToTxnParams(
        TID, result.producer_id, result.producer_epoch, frozenset(partitions or (TP0, TP1))
    )
    assert await h.coordinator.add_partitions_to_txn(add) is None
    return result.producer_id, result.producer_epoch


def end(pid: int, epoch: int, result: TransactionResult = COMMIT) -> EndTxnParams:
    return EndTxnParams(TID, pid, epoch, result)


def state(h: Harness) -> TransactionState:
    metadata = h.coordinator.manager.metadata(TID)
    assert metadata is not None
    return metadata.state


# -- the flows ---------------------------------------------------------------------------


def test_commit_writes_prepare_markers_then_complete() -> None:
    async def body() -> None:
        h = harness()
        partition = await h.lead(TID)
        pid, epoch = await begin(h)
        assert (pid, epoch) == (1000, 0)
        assert await h.coordinator.end_txn(end(pid, epoch)) is None
        assert state(h) is S.PREPARE_COMMIT  # answered before the markers
        await h.settle()
        assert state(h) is S.COMPLETE_COMMIT
        assert h.log.states(partition, TID) == [
            S.EMPTY,
            S.ONGOING,
            S.PREPARE_COMMIT,
            S.COMPLETE_COMMIT,
        ]
        assert [
            (leader, m.result, m.producer_id, m.producer_epoch) for leader, m in h.markers.sent
        ] == [
            (2, COMMIT, pid, epoch),
            (3, COMMIT, pid, epoch),
        ]
        assert {m.coordinator_epoch for _, m in h.markers.sent} == {0}
        assert h.markers.partitions_sent() == [TP0, TP1]
        # A retry whose answer was lost succeeds; the other outcome is refused.
        assert await h.coordinator.end_txn(end(pid, epoch)) is None
        assert await h.coordinator.end_txn(end(pid, epoch, ABORT)) is err("INVALID_TXN_STATE")

    run(body())


def test_abort_with_offsets_marks_the_group_partition_too() -> None:
    async def body() -> None:
        h = harness()
        group_tp = offsets_partition("g1", OFFSETS_PARTITIONS)
        h.leaders[group_tp] = 4
        partition = await h.lead(TID)
        pid, epoch = await begin(h, TP0)
        offsets = AddOffsetsToTxnParams(TID, pid, epoch, "g1")
        assert await h.coordinator.add_offsets_to_txn(offsets) is None
        assert await h.coordinator.end_txn(end(pid, epoch, ABORT)) is None
        await h.settle()
        assert state(h) is S.COMPLETE_ABORT
        assert h.log.states(partition, TID)[-2:] == [S.PREPARE_ABORT, S.COMPLETE_ABORT]
        assert {(leader, m.result) for leader, m in h.markers.sent} == {(2, ABORT), (4, ABORT)}
        assert sorted(h.markers.partitions_sent()) == sorted([TP0, group_tp])
        # The next transaction starts from CompleteAbort.
        assert (
            await h.coordinator.add_partitions_to_txn(
                AddPartitionsToTxnParams(TID, pid, epoch, frozenset({TP1}))
            )
            is None
        )
        assert state(h) is S.ONGOING

    run(body())


def test_end_txn_while_markers_are_out_is_concurrent_transactions() -> None:
    async def body() -> None:
        h = harness()
        await h.lead(TID)
        pid, epoch = await begin(h)
        h.markers.gate = asyncio.Event()
        assert await h.coordinator.end_txn(end(pid, epoch)) is None
        concurrent = err("CONCURRENT_TRANSACTIONS")
        assert await h.coordinator.end_txn(end(pid, epoch)) is concurrent
        add = AddPartitionsToTxnParams(TID, pid, epoch, frozenset({TP0}))
        assert await h.coordinator.add_partitions_to_txn(add) is concurrent
        init = await h.coordinator.init_producer_id(InitProducerIdParams(TID, TIMEOUT_MS))
        assert init.error is concurrent
        h.markers.gate.set()
        await h.settle()
        assert state(h) is S.COMPLETE_COMMIT

    run(body())


def test_init_producer_id_again_fences_the_zombie() -> None:
    async def body() -> None:
        h = harness()
        await h.lead(TID)
        first = await h.coordinator.init_producer_id(InitProducerIdParams(TID, TIMEOUT_MS))
        second = await h.coordinator.init_producer_id(InitProducerIdParams(TID, TIMEOUT_MS))
        assert (first.producer_id, first.producer_epoch) == (1000, 0)
        assert (second.producer_id, second.producer_epoch) == (1000, 1)
        zombie = AddPartitionsToTxnParams(TID, 1000, 0, frozenset({TP0}))
        assert await h.coordinator.add_partitions_to_txn(zombie) is err("PRODUCER_FENCED")
        assert await h.coordinator.end_txn(end(1000, 0)) is err("PRODUCER_FENCED")
        other = AddPartitionsToTxnParams(TID, 999, 1, frozenset({TP0}))
        assert await h.coordinator.add_partitions_to_txn(other) is err(
            "INVALID_PRODUCER_ID_MAPPING"
        )

    run(body())


def test_init_producer_id_aborts_an_open_transaction_then_bumps_again() -> None:
    async def body() -> None:
        h = harness()
        partition = await h.lead(TID)
        pid, epoch = await begin(h)
        retry = await h.coordinator.init_producer_id(InitProducerIdParams(TID, TIMEOUT_MS))
        assert retry.error is err("CONCURRENT_TRANSACTIONS")
        await h.settle()
        assert state(h) is S.COMPLETE_ABORT
        assert {(m.result, m.producer_epoch) for _, m in h.markers.sent} == {(ABORT, epoch + 1)}
        again = await h.coordinator.init_producer_id(InitProducerIdParams(TID, TIMEOUT_MS))
        assert (again.error, again.producer_id, again.producer_epoch) == (None, pid, epoch + 2)
        assert h.log.states(partition, TID)[-3:] == [S.PREPARE_ABORT, S.COMPLETE_ABORT, S.EMPTY]
        old = AddPartitionsToTxnParams(TID, pid, epoch, frozenset({TP0}))
        assert await h.coordinator.add_partitions_to_txn(old) is err("PRODUCER_FENCED")

    run(body())


def test_timed_out_transaction_is_aborted_at_a_bumped_epoch() -> None:
    async def body() -> None:
        h = harness()
        partition = await h.lead(TID)
        pid, epoch = await begin(h)
        h.clock.advance(TIMEOUT_MS)
        await h.coordinator.abort_timed_out_transactions()
        assert state(h) is S.ONGOING  # not past the timeout yet (strictly later)
        h.clock.advance(1)
        await h.coordinator.abort_timed_out_transactions()
        await h.settle()
        assert state(h) is S.COMPLETE_ABORT
        assert h.log.states(partition, TID)[-2:] == [S.PREPARE_ABORT, S.COMPLETE_ABORT]
        assert {(m.result, m.producer_epoch) for _, m in h.markers.sent} == {(ABORT, epoch + 1)}
        late = AddPartitionsToTxnParams(TID, pid, epoch, frozenset({TP0}))
        assert await h.coordinator.add_partitions_to_txn(late) is err("PRODUCER_FENCED")
        assert await h.coordinator.end_txn(end(pid, epoch)) is err("PRODUCER_FENCED")

    run(body())


def test_the_timers_run_on_their_intervals() -> None:
    async def body() -> None:
        h = harness(
            **{
                "transaction.abort.timed.out.transaction.cleanup.interval.ms": 1000,
                "transaction.remove.expired.transaction.cleanup.interval.ms": 5000,
                "transactional.id.expiration.ms": 100_000,
            }
        )
        await h.lead(TID)
        await begin(h)
        h.coordinator.start()
        h.clock.advance(TIMEOUT_MS + 1)
        await asyncio.sleep(1.5)  # virtual time: one abort round
        await h.settle()
        assert state(h) is S.COMPLETE_ABORT
        h.clock.advance(100_000)
        await asyncio.sleep(5)  # one expiration round
        assert h.coordinator.manager.metadata(TID) is None
        await h.coordinator.stop()
        assert h.coordinator.manager.caches == {}

    run(body())


def test_the_timers_run_only_while_a_partition_is_loaded() -> None:
    async def body() -> None:
        h = harness()
        h.coordinator.start()
        assert h.coordinator._timers == []  # no partition: nothing to abort, no wake-ups
        partition = await h.lead(TID)
        timers = list(h.coordinator._timers)
        assert len(timers) == 2
        h.coordinator.resign(partition)
        assert h.coordinator._timers == []
        await asyncio.sleep(0)
        assert all(t.cancelled() for t in timers)
        await h.lead(TID, epoch=1)
        assert len(h.coordinator._timers) == 2
        await h.coordinator.stop()
        assert h.coordinator._timers == []

    run(body())


# -- failover and the coordinator checks ---------------------------------------------------


def test_a_new_coordinator_finishes_a_commit_left_in_prepare_commit() -> None:
    async def body() -> None:
        old = harness()
        partition = await old.lead(TID)
        pid, epoch = await begin(old)
        old.markers.gate = asyncio.Event()  # the old coordinator dies with its markers out
        assert await old.coordinator.end_txn(end(pid, epoch)) is None
        await until(lambda: len(old.markers.sent) == 2)
        old.coordinator.resign(partition)
        assert old.log.states(partition, TID)[-1] is S.PREPARE_COMMIT

        new = Harness(log=old.log, leaders={TP0: 2, TP1: 3})
        await new.lead(TID, epoch=1)
        await new.settle()
        assert {(m.result, m.coordinator_epoch, m.producer_epoch) for _, m in new.markers.sent} == {
            (COMMIT, 1, epoch)
        }
        assert new.markers.partitions_sent() == [TP0, TP1]
        assert state(new) is S.COMPLETE_COMMIT
        old.markers.gate.set()
        await old.settle()
        # The deposed coordinator wrote nothing more: one CompleteCommit, the new one's.
        assert old.log.states(partition, TID)[-2:] == [S.PREPARE_COMMIT, S.COMPLETE_COMMIT]

    run(body())


def test_not_coordinator_after_resign_and_for_partitions_not_led() -> None:
    async def body() -> None:
        h = harness()
        partition = await h.lead(TID)
        pid, epoch = await begin(h)
        h.coordinator.resign(partition)
        not_coordinator = err("NOT_COORDINATOR")
        assert await h.coordinator.end_txn(end(pid, epoch)) is not_coordinator
        init = await h.coordinator.init_producer_id(InitProducerIdParams(TID, TIMEOUT_MS))
        assert init.error is not_coordinator
        # A request malformed in itself is refused as such first.
        bad = await h.coordinator.init_producer_id(InitProducerIdParams(TID, 0))
        assert bad.error is err("INVALID_TRANSACTION_TIMEOUT")
        empty = AddPartitionsToTxnParams("", pid, epoch, frozenset({TP0}))
        assert await h.coordinator.add_partitions_to_txn(empty) is err("INVALID_REQUEST")

    run(body())


def test_resign_with_an_older_epoch_keeps_the_partition() -> None:
    async def body() -> None:
        h = harness()
        partition = await h.lead(TID, epoch=3)
        h.coordinator.resign(partition, coordinator_epoch=2)
        assert h.coordinator.manager.check(TID) is None
        h.coordinator.resign(partition, coordinator_epoch=4)  # a follower at a newer epoch
        assert h.coordinator.manager.check(TID) is err("NOT_COORDINATOR")

    run(body())


def test_a_write_during_which_the_epoch_changed_answers_not_coordinator() -> None:
    async def body() -> None:
        h = harness()
        partition = await h.lead(TID)
        pid, epoch = await begin(h)

        def reelect() -> None:
            h.log.on_append = None
            h.coordinator.resign(partition)
            h.coordinator.manager.caches.clear()

        h.log.on_append = reelect
        assert await h.coordinator.end_txn(end(pid, epoch)) is err("NOT_COORDINATOR")
        await h.lead(TID, epoch=1)
        # The write landed: the new coordinator loads PrepareCommit and finishes it.
        await h.settle()
        assert state(h) is S.COMPLETE_COMMIT
        assert {m.coordinator_epoch for _, m in h.markers.sent} == {1}

    run(body())


def test_load_in_progress_while_the_partition_loads() -> None:
    async def body() -> None:
        h = harness()
        h.log.load_gate = asyncio.Event()
        partition = h.coordinator.partition_for(TID)
        h.log.logs[partition] = []
        task = h.coordinator.elect(partition, 0)
        assert task is not None
        assert h.coordinator.elect(partition, 0) is None  # already loading at that epoch
        await asyncio.sleep(0)
        init = await h.coordinator.init_producer_id(InitProducerIdParams(TID, TIMEOUT_MS))
        assert init.error is err("COORDINATOR_LOAD_IN_PROGRESS")
        assert await h.coordinator.end_txn(end(1, 0)) is err("COORDINATOR_LOAD_IN_PROGRESS")
        h.log.load_gate.set()
        await task
        init = await h.coordinator.init_producer_id(InitProducerIdParams(TID, TIMEOUT_MS))
        assert init.error is None

    run(body())


def test_a_load_overtaken_by_resign_installs_nothing() -> None:
    async def body() -> None:
        h = harness()
        h.log.load_gate = asyncio.Event()
        partition = h.coordinator.partition_for(TID)
        h.log.logs[partition] = []
        task = h.coordinator.elect(partition, 0)
        assert task is not None
        await asyncio.sleep(0)
        h.coordinator.resign(partition)
        h.log.load_gate.set()
        await task
        assert h.coordinator.manager.check(TID) is err("NOT_COORDINATOR")

    run(body())


def test_a_partition_without_a_replica_is_not_loaded() -> None:
    async def body() -> None:
        h = harness()
        partition = h.coordinator.partition_for(TID)
        task = h.coordinator.elect(partition, 0)
        assert task is not None
        await task
        assert h.coordinator.manager.check(TID) is err("NOT_COORDINATOR")

    run(body())


# -- markers -------------------------------------------------------------------------------


def test_markers_are_retried_until_written() -> None:
    async def body() -> None:
        h = harness()
        await h.lead(TID)
        pid, epoch = await begin(h)
        h.markers.script[TP0] = [err("NOT_LEADER_OR_FOLLOWER"), err("NOT_ENOUGH_REPLICAS")]
        h.markers.raise_for[3] = [RpcError(RpcStatus.UNAVAILABLE, "broker 3 is down")]
        assert await h.coordinator.end_txn(end(pid, epoch)) is None
        await until(lambda: len(h.markers.sent) >= 2)
        h.leaders[TP0] = 5  # the leader moved: the retry goes to the new one
        await h.settle()
        assert state(h) is S.COMPLETE_COMMIT
        to_tp0 = [leader for leader, m in h.markers.sent if TP0 in m.partitions]
        to_tp1 = [leader for leader, m in h.markers.sent if TP1 in m.partitions]
        assert to_tp0[0] == 2 and to_tp0[-1] == 5 and len(to_tp0) == 3
        assert to_tp1 == [3, 3]

    run(body())


def test_a_leaderless_partition_waits_and_a_deleted_one_is_dropped() -> None:
    async def body() -> None:
        h = harness()
        await h.lead(TID)
        pid, epoch = await begin(h)
        h.leaders[TP0] = -1
        del h.leaders[TP1]
        assert await h.coordinator.end_txn(end(pid, epoch)) is None
        await asyncio.sleep(0.1)
        assert state(h) is S.PREPARE_COMMIT
        assert h.markers.sent == []
        h.leaders[TP0] = 2
        await h.settle()
        assert state(h) is S.COMPLETE_COMMIT
        assert h.markers.partitions_sent() == [TP0]

    run(body())


def test_a_fenced_marker_stops_the_completion() -> None:
    async def body() -> None:
        h = harness()
        partition = await h.lead(TID)
        pid, epoch = await begin(h)
        h.markers.script[TP0] = [err("TRANSACTION_COORDINATOR_FENCED")]
        assert await h.coordinator.end_txn(end(pid, epoch)) is None
        await h.settle()
        assert state(h) is S.PREPARE_COMMIT
        assert h.log.states(partition, TID)[-1] is S.PREPARE_COMMIT

    run(body())


def test_unsupported_partitions_are_dropped_from_the_markers() -> None:
    async def body() -> None:
        h = harness()
        await h.lead(TID)
        pid, epoch = await begin(h)
        h.markers.script[TP0] = [err("UNSUPPORTED_FOR_MESSAGE_FORMAT")]
        assert await h.coordinator.end_txn(end(pid, epoch)) is None
        await h.settle()
        assert state(h) is S.COMPLETE_COMMIT
        assert len(h.markers.sent) == 2

    run(body())


def test_the_complete_write_is_retried_when_the_log_is_unavailable() -> None:
    async def body() -> None:
        h = harness()
        partition = await h.lead(TID)
        pid, epoch = await begin(h)
        h.markers.gate = asyncio.Event()
        assert await h.coordinator.end_txn(end(pid, epoch)) is None
        h.log.fail_with = err("NOT_ENOUGH_REPLICAS")("min.isr not met")
        h.log.fail_times = 2
        h.markers.gate.set()
        await h.settle()
        assert state(h) is S.COMPLETE_COMMIT
        assert h.log.states(partition, TID)[-2:] == [S.PREPARE_COMMIT, S.COMPLETE_COMMIT]

    run(body())


# -- failed writes, producer ids, expiration -----------------------------------------------


def test_a_failed_write_is_answered_mapped_and_leaves_nothing_pending() -> None:
    async def body() -> None:
        h = harness()
        partition = await h.lead(TID)
        init = await h.coordinator.init_producer_id(InitProducerIdParams(TID, TIMEOUT_MS))
        add = AddPartitionsToTxnParams(TID, init.producer_id, 0, frozenset({TP0}))
        h.log.fail_with = err("NOT_ENOUGH_REPLICAS")("min.isr not met")
        assert await h.coordinator.add_partitions_to_txn(add) is err("COORDINATOR_NOT_AVAILABLE")
        h.log.fail_with = err("NOT_LEADER_OR_FOLLOWER")("moved")
        assert await h.coordinator.add_partitions_to_txn(add) is err("NOT_COORDINATOR")
        h.log.fail_with = None
        assert await h.coordinator.add_partitions_to_txn(add) is None
        assert h.log.states(partition, TID) == [S.EMPTY, S.ONGOING]

    run(body())


def test_producer_id_allocation_failure_is_retriable() -> None:
    async def body() -> None:
        h = harness()
        await h.lead(TID)
        h.producer_ids.fail_with = err("UNKNOWN_SERVER_ERROR")("zookeeper down")
        init = await h.coordinator.init_producer_id(InitProducerIdParams(TID, TIMEOUT_MS))
        assert init.error is err("COORDINATOR_LOAD_IN_PROGRESS")
        assert h.coordinator.manager.metadata(TID) is None
        h.producer_ids.fail_with = None
        init = await h.coordinator.init_producer_id(InitProducerIdParams(TID, TIMEOUT_MS))
        assert (init.error, init.producer_epoch) == (None, 0)

    run(body())


def test_idle_ids_expire_with_a_tombstone() -> None:
    async def body() -> None:
        h = harness(**{"transactional.id.expiration.ms": 10_000})
        partition = await h.lead(TID)
        first = await h.coordinator.init_producer_id(InitProducerIdParams(TID, TIMEOUT_MS))
        h.clock.advance(9_999)
        await h.coordinator.expire_transactional_ids()
        assert h.coordinator.manager.metadata(TID) is not None
        h.clock.advance(1)
        await h.coordinator.expire_transactional_ids()
        assert h.coordinator.manager.metadata(TID) is None
        assert h.log.states(partition, TID) == [S.EMPTY, None]
        again = await h.coordinator.init_producer_id(InitProducerIdParams(TID, TIMEOUT_MS))
        assert again.producer_id != first.producer_id and again.producer_epoch == 0

    run(body())


def test_an_id_with_an_open_transaction_does_not_expire() -> None:
    async def body() -> None:
        h = harness(**{"transactional.id.expiration.ms": 10_000})
        await h.lead(TID)
        await begin(h)
        h.clock.advance(50_000)
        await h.coordinator.expire_transactional_ids()
        assert state(h) is S.ONGOING

    run(body())


def test_a_failed_tombstone_keeps_the_id() -> None:
    async def body() -> None:
        h = harness(**{"transactional.id.expiration.ms": 10_000})
        await h.lead(TID)
        await h.coordinator.init_producer_id(InitProducerIdParams(TID, TIMEOUT_MS))
        h.clock.advance(10_000)
        h.log.fail_with = err("NOT_ENOUGH_REPLICAS")("min.isr not met")
        await h.coordinator.expire_transactional_ids()
        metadata = h.coordinator.manager.metadata(TID)
        assert metadata is not None and metadata.pending_state is None

    run(body())
