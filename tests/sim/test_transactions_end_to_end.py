"""A transaction from the coordinator to the consumer, inside a simulated cluster: the
coordinator (on the leader of the transactional id's ``__transaction_state`` partition) writes
its markers to the data partition's leader with WriteTxnMarkers over the inter-broker transport
(``node.txn_marker_sender.RpcMarkerSender``), and a read_committed consumer returns the
committed transaction's records and never the aborted one's; then the same over the
coordinator's gRPC APIs (``node.apis_txn``). The transactional batches are produced by hand
(the producer's side is not wired yet); everything else is the brokers'."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from kafkasim import proto
from kafkasim.common.errors import error_for_name
from kafkasim.node.txn_metadata import TransactionState
from kafkasim.node.txn_types import (
    AddPartitionsToTxnParams,
    EndTxnParams,
    InitProducerIdParams,
    TransactionResult,
)
from kafkasim.proto import kafkasim_pb2 as pb
from kafkasim.sim.cluster import SimCluster, broker_address
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


def test_a_transaction_through_the_grpc_apis(tmp_path: Path) -> None:
    """The client's side over gRPC (``node.apis_txn``): FindCoordinator key_type 1 creates
    ``__transaction_state`` and then names its leader; InitProducerId, AddPartitionsToTxn,
    the transactional batch, EndTxn; DescribeTransactions and ListTransactions show the id;
    a second InitProducerId fences the first epoch."""

    async def scenario(cluster: SimCluster) -> None:
        client = await create(cluster, TOPIC)
        tid = "grpc-tx"

        async def call(broker_id: int, method: str, request: Any) -> Any:
            return await client.transport.call(
                broker_address(broker_id), method, request, timeout_s=20
            )

        async def retried(broker_id: int, method: str, request: Any) -> Any:
            """Kafka's clients retry these answers (the coordinator loads its partition)."""
            for _ in range(100):
                response = await call(broker_id, method, request)
                if response.error_code not in RETRIABLE:
                    return response
                await asyncio.sleep(0.2)
            raise AssertionError(f"{method} never answered without a retriable error")

        find = pb.FindCoordinatorRequest(key=tid, key_type=1)
        first = await call(1, proto.METHOD_FIND_COORDINATOR, find)
        assert first.error_code == code("COORDINATOR_NOT_AVAILABLE")  # creating the topic
        found = await retried(1, proto.METHOD_FIND_COORDINATOR, find)
        coordinator = found.node_id
        init_request = pb.InitProducerIdRequest(transactional_id=tid, transaction_timeout_ms=60_000)
        init = await retried(coordinator, proto.METHOD_INIT_PRODUCER_ID, init_request)
        assert init.error_code == 0
        pid, epoch = init.producer_id, init.producer_epoch
        add = pb.AddPartitionsToTxnRequest(
            transactional_id=tid,
            producer_id=pid,
            producer_epoch=epoch,
            partitions=[
                pb.TopicPartitionId(topic=TOPIC, partition=0),
                pb.TopicPartitionId(topic="nowhere", partition=0),
            ],
        )
        refused = await call(coordinator, proto.METHOD_ADD_PARTITIONS_TO_TXN, add)
        assert [(p.topic, p.error_code) for p in refused.partitions] == [
            ("nowhere", code("UNKNOWN_TOPIC_OR_PARTITION")),
            (TOPIC, code("OPERATION_NOT_ATTEMPTED")),
        ]
        del add.partitions[1]
        added = await call(coordinator, proto.METHOD_ADD_PARTITIONS_TO_TXN, add)
        assert [(p.topic, p.partition, p.error_code) for p in added.partitions] == [(TOPIC, 0, 0)]
        await produce(client, cluster, Producer(pid, epoch), 0, 1)  # offsets 0-1
        end = pb.EndTxnRequest(
            transactional_id=tid, producer_id=pid, producer_epoch=epoch, committed=True
        )
        assert (await call(coordinator, proto.METHOD_END_TXN, end)).error_code == 0

        async def described() -> pb.TransactionDescription:
            request = pb.DescribeTransactionsRequest(transactional_ids=[tid])
            response = await call(coordinator, proto.METHOD_DESCRIBE_TRANSACTIONS, request)
            (description,) = response.transactions
            return description

        for _ in range(100):
            if (await described()).transaction_state == "CompleteCommit":
                break
            await asyncio.sleep(0.1)
        description = await described()
        assert (description.error_code, description.transaction_state) == (0, "CompleteCommit")
        assert (description.producer_id, description.producer_epoch) == (pid, epoch)
        listed = await call(
            coordinator,
            proto.METHOD_LIST_TRANSACTIONS,
            pb.ListTransactionsRequest(state_filters=["CompleteCommit", "Nope"]),
        )
        assert list(listed.unknown_state_filters) == ["Nope"]
        assert [(t.transactional_id, t.producer_id) for t in listed.transactions] == [(tid, pid)]
        config = {"auto.offset.reset": "earliest", "isolation.level": "read_committed"}
        async with consuming(cluster, config, name="committed") as consumer:
            consumer.assign([TP])
            records = await poll_until(consumer, 2)
            assert [r.offset for r in records] == [0, 1]
        # A new producer with the same id: the old epoch is fenced.
        again = await retried(coordinator, proto.METHOD_INIT_PRODUCER_ID, init_request)
        assert (again.error_code, again.producer_id, again.producer_epoch) == (0, pid, epoch + 1)
        assert (await call(coordinator, proto.METHOD_END_TXN, end)).error_code == code(
            "PRODUCER_FENCED"
        )
        # KIP-360: the new producer names its id and epoch.
        init_request.has_producer_id = True
        init_request.producer_id, init_request.producer_epoch = pid, epoch + 1
        bumped = await retried(coordinator, proto.METHOD_INIT_PRODUCER_ID, init_request)
        assert (bumped.error_code, bumped.producer_epoch) == (0, epoch + 2)
        # An empty transactional id over gRPC is an idempotent producer's request.
        plain = await call(coordinator, proto.METHOD_INIT_PRODUCER_ID, pb.InitProducerIdRequest())
        assert (plain.error_code, plain.producer_epoch) == (0, 0)
        assert plain.producer_id != pid

    simulate(tmp_path, scenario, **SETTINGS)


def code(name: str) -> int:
    return error_for_name(name).code


RETRIABLE = {
    code(name)
    for name in ("COORDINATOR_NOT_AVAILABLE", "COORDINATOR_LOAD_IN_PROGRESS", "NOT_COORDINATOR")
}
