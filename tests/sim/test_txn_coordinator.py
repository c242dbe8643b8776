"""The transaction coordinator inside the brokers of a simulated cluster: ``__transaction_state``
created on first use, its partitions' leaders elected as coordinators (the coordinator epoch is
the leader epoch), a commit written through the replicas, and a commit whose coordinator
crashed between PrepareCommit and its markers finished by the next leader. The markers go to a
recording sender (WriteTxnMarkers is not wired into the brokers yet)."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from pathlib import Path

from kafkasim.common.types import TopicPartition
from kafkasim.node.broker import Broker
from kafkasim.node.group_types import Error
from kafkasim.node.txn_coordinator import TransactionCoordinator
from kafkasim.node.txn_log import TRANSACTION_STATE_TOPIC
from kafkasim.node.txn_markers import MarkerSender, TxnMarkerEntry
from kafkasim.node.txn_metadata import TransactionState
from kafkasim.node.txn_types import (
    AddPartitionsToTxnParams,
    EndTxnParams,
    InitProducerIdParams,
    TransactionResult,
)
from kafkasim.sim.cluster import SimCluster
from tests.sim.helpers import create, leader_of, simulate

TID = "sim-tx"
TXN_PARTITIONS = 3
TP = TopicPartition("orders", 0)
SETTINGS = {
    "transaction.state.log.num.partitions": TXN_PARTITIONS,
    "transaction.state.log.replication.factor": 3,
    "transaction.state.log.min.isr": 2,
}


class Recorder:
    """Every broker's markers, recorded (broker id, leader id, marker) and answered written;
    ``gate`` holds them."""

    def __init__(self) -> None:
        self.sent: list[tuple[int, int, TxnMarkerEntry]] = []
        self.gate: asyncio.Event | None = None

    def factory(self, broker: Broker) -> MarkerSender:
        async def send(leader_id: int, marker: TxnMarkerEntry) -> Mapping[TopicPartition, Error]:
            self.sent.append((broker.broker_id, leader_id, marker))
            if self.gate is not None:
                await self.gate.wait()
            return dict.fromkeys(marker.partitions)

        return send


def coordinator_of(cluster: SimCluster) -> tuple[int, TransactionCoordinator] | None:
    for broker_id, broker in sorted(cluster.brokers.items()):
        txns = broker.transactions
        if txns is not None and txns.manager.check(TID) is None:
            return broker_id, txns
    return None


async def create_transaction_state(cluster: SimCluster) -> tuple[int, TransactionCoordinator]:
    broker = cluster.brokers[1]
    code, message = await broker.topic_creator.create(
        broker.topic_creator.transaction_state_topic()
    )
    assert code == 0, message
    await cluster.wait_for(lambda: coordinator_of(cluster) is not None, what="a coordinator")
    found = coordinator_of(cluster)
    assert found is not None
    return found


def state(txns: TransactionCoordinator) -> TransactionState | None:
    metadata = txns.manager.metadata(TID)
    return None if metadata is None else metadata.state


async def begin(txns: TransactionCoordinator) -> tuple[int, int]:
    init = await txns.init_producer_id(InitProducerIdParams(TID, 60_000))
    assert init.error is None
    add = AddPartitionsToTxnParams(TID, init.producer_id, init.producer_epoch, frozenset({TP}))
    assert await txns.add_partitions_to_txn(add) is None
    return init.producer_id, init.producer_epoch


def test_a_commit_through_the_brokers(tmp_path: Path) -> None:
    recorder = Recorder()

    async def scenario(cluster: SimCluster) -> None:
        await create(cluster, "orders")
        broker_id, txns = await create_transaction_state(cluster)
        tp = TopicPartition(TRANSACTION_STATE_TOPIC, txns.partition_for(TID))
        assert leader_of(cluster, tp) == broker_id
        leader_epoch = cluster.brokers[broker_id].replica_manager.partitions[tp].leader_epoch
        pid, epoch = await begin(txns)
        assert await txns.end_txn(EndTxnParams(TID, pid, epoch, TransactionResult.COMMIT)) is None
        await cluster.wait_for(lambda: state(txns) is TransactionState.COMPLETE_COMMIT)
        [(sender, leader, marker)] = recorder.sent
        assert (sender, leader) == (broker_id, leader_of(cluster, TP))
        assert (marker.result, marker.partitions) == (TransactionResult.COMMIT, frozenset({TP}))
        assert marker.coordinator_epoch == leader_epoch

    simulate(tmp_path, scenario, marker_sender_factory=recorder.factory, **SETTINGS)


def test_the_next_leader_finishes_a_commit_whose_coordinator_crashed(tmp_path: Path) -> None:
    recorder = Recorder()

    async def scenario(cluster: SimCluster) -> None:
        await create(cluster, "orders")
        broker_id, txns = await create_transaction_state(cluster)
        pid, epoch = await begin(txns)
        recorder.gate = asyncio.Event()
        assert await txns.end_txn(EndTxnParams(TID, pid, epoch, TransactionResult.COMMIT)) is None
        await cluster.wait_for(lambda: len(recorder.sent) == 1, what="the first markers")
        first_epoch = recorder.sent[0][2].coordinator_epoch
        await cluster.crash(broker_id)
        recorder.gate.set()

        def finished() -> bool:
            found = coordinator_of(cluster)
            return found is not None and state(found[1]) is TransactionState.COMPLETE_COMMIT

        await cluster.wait_for(finished, what="the commit finished by the new coordinator")
        found = coordinator_of(cluster)
        assert found is not None and found[0] != broker_id
        resent = [m for sender, _, m in recorder.sent if sender == found[0]]
        assert [(m.result, m.producer_id, m.producer_epoch) for m in resent] == [
            (TransactionResult.COMMIT, pid, epoch)
        ]
        assert resent[0].coordinator_epoch > first_epoch

    simulate(tmp_path, scenario, marker_sender_factory=recorder.factory, **SETTINGS)
