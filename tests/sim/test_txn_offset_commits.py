"""Transactional offset commits inside a simulated cluster, at the brokers' domain level: a
transaction adds the group's offsets (AddOffsetsToTxn), commits them to the group coordinator
(TxnOffsetCommit) and ends; the transaction coordinator's markers go over the inter-broker
transport to the ``__consumer_offsets`` leader (``node.txn_marker_sender.RpcMarkerSender``),
whose WriteTxnMarkers makes the offsets committed (COMMIT) or drops them (ABORT). A group
coordinator that takes over after a crash, and the crashed broker coming back, read the same
outcome from the log's markers."""

from __future__ import annotations

from pathlib import Path

from kafkasim.common.errors import error_for_name
from kafkasim.common.types import TopicPartition
from kafkasim.node.group_coordinator import GroupCoordinator
from kafkasim.node.group_records import OFFSETS_TOPIC
from kafkasim.node.group_types import (
    CommittedOffset,
    OffsetCommitEntry,
    OffsetFetchParams,
    TxnOffsetCommitParams,
)
from kafkasim.node.txn_metadata import TransactionState
from kafkasim.node.txn_types import (
    AddOffsetsToTxnParams,
    AddPartitionsToTxnParams,
    EndTxnParams,
    InitProducerIdParams,
    TransactionResult,
)
from kafkasim.sim.cluster import SimCluster
from tests.sim.helpers import create, simulate
from tests.sim.test_transactions_partition import TOPIC, TP, produce
from tests.sim.test_txn_coordinator import (
    SETTINGS,
    TID,
    coordinator_of,
    create_transaction_state,
    state,
)
from tests.txn_records import Producer

GROUP = "sim-group"
CONSUMED = TopicPartition("input", 0)
GROUP_SETTINGS = {"offsets.topic.num.partitions": 3, "group.initial.rebalance.delay.ms": 0}
UNSTABLE = error_for_name("UNSTABLE_OFFSET_COMMIT")


def group_coordinator_of(cluster: SimCluster) -> tuple[int, GroupCoordinator] | None:
    for broker_id, broker in sorted(cluster.brokers.items()):
        if broker.groups.manager.check(GROUP) is None:
            return broker_id, broker.groups
    return None


async def wait_group_coordinator(cluster: SimCluster) -> tuple[int, GroupCoordinator]:
    await cluster.wait_for(
        lambda: group_coordinator_of(cluster) is not None, what="a group coordinator"
    )
    found = group_coordinator_of(cluster)
    assert found is not None
    return found


async def fail_over(cluster: SimCluster, broker_id: int) -> GroupCoordinator:
    """Crash ``broker_id`` (the group's coordinator); the group coordinator that follows."""
    await cluster.crash(broker_id)
    await cluster.wait_for(
        lambda: (found := group_coordinator_of(cluster)) is not None and found[0] != broker_id,
        what=f"a group coordinator after broker {broker_id}",
    )
    return (await wait_group_coordinator(cluster))[1]


def in_sync(cluster: SimCluster, leader_id: int) -> bool:
    """The group's ``__consumer_offsets`` partition has all three replicas in its ISR."""
    broker = cluster.brokers[leader_id]
    tp = TopicPartition(OFFSETS_TOPIC, broker.groups.partition_of(GROUP))
    partition = broker.replica_manager.partitions.get(tp)
    return partition is not None and len(partition.isr) == 3


def committed(groups: GroupCoordinator, *, stable: bool = False) -> CommittedOffset:
    params = OffsetFetchParams(GROUP, (CONSUMED,), require_stable=stable)
    result = groups.offset_fetch(params)
    assert result.error is None
    [answer] = result.partitions
    return answer


def test_transactional_offsets_commit_abort_and_survive_the_coordinators_failover(
    tmp_path: Path,
) -> None:
    async def scenario(cluster: SimCluster) -> None:
        client = await create(cluster, TOPIC)
        _, txns = await create_transaction_state(cluster)
        creator = cluster.brokers[1].topic_creator
        code, message = await creator.create(creator.offsets_topic())
        assert code == 0, message
        _, groups = await wait_group_coordinator(cluster)

        async def transaction(result: TransactionResult, offset: int) -> None:
            init = await txns.init_producer_id(InitProducerIdParams(TID, 60_000))
            assert init.error is None
            pid, epoch = init.producer_id, init.producer_epoch
            add = AddPartitionsToTxnParams(TID, pid, epoch, frozenset({TP}))
            assert await txns.add_partitions_to_txn(add) is None
            assert (
                await txns.add_offsets_to_txn(AddOffsetsToTxnParams(TID, pid, epoch, GROUP)) is None
            )
            await produce(client, cluster, Producer(pid, epoch), offset)
            commit = TxnOffsetCommitParams(
                TID, GROUP, pid, epoch, (OffsetCommitEntry(CONSUMED, offset),)
            )
            outcome = await groups.txn_offset_commit(commit)
            assert [p.error for p in outcome.partitions] == [None]
            # Pending: not visible, unstable for a read_committed consumer.
            assert committed(groups, stable=True).error is UNSTABLE
            assert await txns.end_txn(EndTxnParams(TID, pid, epoch, result)) is None
            done = (
                TransactionState.COMPLETE_COMMIT
                if result is TransactionResult.COMMIT
                else TransactionState.COMPLETE_ABORT
            )
            await cluster.wait_for(lambda: state(txns) is done, what=f"{result.value} complete")

        assert committed(groups).offset == -1
        await transaction(TransactionResult.COMMIT, 10)
        assert committed(groups, stable=True).offset == 10
        await transaction(TransactionResult.ABORT, 99)
        assert committed(groups, stable=True) == CommittedOffset(CONSUMED, 10)

        # The group coordinator crashes: the next leader of its partition loads the log.
        old_id, _ = await wait_group_coordinator(cluster)
        groups = await fail_over(cluster, old_id)
        assert committed(groups, stable=True) == CommittedOffset(CONSUMED, 10)

        # The crashed broker comes back; a transaction commits through whichever brokers now
        # coordinate; then that group coordinator crashes too and the next one (the restarted
        # broker among the candidates) reads offsets 20 from the log, never the aborted 99.
        await cluster.start_broker(old_id)
        await cluster.wait_for(
            lambda: coordinator_of(cluster) is not None, what="a transaction coordinator"
        )
        found_txns = coordinator_of(cluster)
        assert found_txns is not None
        txns = found_txns[1]
        await transaction(TransactionResult.COMMIT, 20)
        second_id, _ = await wait_group_coordinator(cluster)
        await cluster.wait_for(
            lambda: in_sync(cluster, second_id), what="every offsets replica in sync"
        )
        groups = await fail_over(cluster, second_id)
        assert committed(groups, stable=True) == CommittedOffset(CONSUMED, 20)

    simulate(tmp_path, scenario, **SETTINGS, **GROUP_SETTINGS)
