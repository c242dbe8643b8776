"""A transaction from the coordinator to the consumer, inside a simulated cluster: the
coordinator (on the leader of the transactional id's ``__transaction_state`` partition) writes
its markers to the data partition's leader with WriteTxnMarkers over the inter-broker transport
(``node.txn_marker_sender.RpcMarkerSender``), and a read_committed consumer returns the
committed transaction's records and never the aborted one's. The transactional batches are
produced by hand (the producer's side is not wired yet); everything else is the brokers'."""

from __future__ import annotations

from pathlib import Path

from kafkasim.node.txn_metadata import TransactionState
from kafkasim.node.txn_types import (
    AddPartitionsToTxnParams,
    EndTxnParams,
    InitProducerIdParams,
    TransactionResult,
)
from kafkasim.sim.cluster import SimCluster
from tests.sim.helpers import create, simulate
from tests.sim.test_consumer import consuming, poll_until
from tests.sim.test_transactions_partition import TOPIC, TP, produce
from tests.sim.test_txn_coordinator import SETTINGS, create_transaction_state, state
from tests.txn_records import Producer


def test_a_committed_and_an_aborted_transaction_as_a_read_committed_consumer_sees_them(
    tmp_path: Path,
) -> None:
    async def scenario(cluster: SimCluster) -> None:
        client = await create(cluster, TOPIC)
        _, txns = await create_transaction_state(cluster)

        async def transaction(result: TransactionResult, *values: int) -> None:
            init = await txns.init_producer_id(InitProducerIdParams("sim-tx", 60_000))
            assert init.error is None
            pid, epoch = init.producer_id, init.producer_epoch
            add = AddPartitionsToTxnParams("sim-tx", pid, epoch, frozenset({TP}))
            assert await txns.add_partitions_to_txn(add) is None
            await produce(client, cluster, Producer(pid, epoch), *values)
            assert await txns.end_txn(EndTxnParams("sim-tx", pid, epoch, result)) is None
            done = (
                TransactionState.COMPLETE_COMMIT
                if result is TransactionResult.COMMIT
                else TransactionState.COMPLETE_ABORT
            )
            await cluster.wait_for(lambda: state(txns) is done, what=f"{result.value} complete")

        await transaction(TransactionResult.ABORT, 0, 1)  # offsets 0-1, ABORT marker 2
        await transaction(TransactionResult.COMMIT, 0)  # offset 3, COMMIT marker 4
        config = {"auto.offset.reset": "earliest", "isolation.level": "read_committed"}
        async with consuming(cluster, config, name="committed") as consumer:
            consumer.assign([TP])
            records = await poll_until(consumer, 1)
            assert [r.offset for r in records] == [3]
            assert await consumer.poll(1000) == []
            assert consumer.position(TP) == 5  # past the COMMIT marker
        async with consuming(cluster, {"auto.offset.reset": "earliest"}, name="all") as consumer:
            consumer.assign([TP])
            records = await poll_until(consumer, 3)
            assert [r.offset for r in records] == [0, 1, 3]  # markers are never returned

    simulate(tmp_path, scenario, **SETTINGS)  # every broker's default sender: RpcMarkerSender
