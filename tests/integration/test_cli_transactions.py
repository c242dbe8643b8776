"""``kafkasim transactions`` against real brokers: a transaction opened over gRPC
(FindCoordinator key_type 1, InitProducerId, AddPartitionsToTxn, a transactional batch) is
listed by every broker's ListTransactions, described by its coordinator, and its producer is
described by the partition's leader and by a follower's replica; after the commit the producer
has no open transaction; an unknown transactional id fails in one line."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from google.protobuf.message import Message

from kafkasim import proto
from kafkasim.client.admin import AdminClient, NewTopic
from kafkasim.cluster.local import LocalCluster
from kafkasim.common.clock import SystemClock
from kafkasim.common.errors import UnknownTopicOrPartitionError
from kafkasim.common.rpc_grpc_client import GrpcTransport
from kafkasim.proto import kafkasim_pb2 as pb
from tests.cli_run import kafkasim
from tests.txn_records import Producer

TOPIC = "tx-events"
TID = "tool-tx"


async def _retried(transport: GrpcTransport, address: str, method: str, request: Message) -> Any:
    """Call until the answer has no error code (coordinator being created or loaded)."""
    for _ in range(300):
        response = await transport.call(address, method, request, timeout_s=10)
        if not getattr(response, "error_code", 0):
            return response
        await asyncio.sleep(0.1)
    raise AssertionError(f"{method} kept failing: {response}")


async def _open_transaction(cluster: LocalCluster) -> dict[str, int]:
    """A transaction with two records in TOPIC-0, left open; what the tool should show."""
    transport = GrpcTransport()
    try:
        admin = AdminClient(cluster.bootstrap, transport=transport, clock=SystemClock())
        await admin.create_topics([NewTopic(TOPIC, 1, 3)])
        for _ in range(300):
            try:
                (topic,) = await admin.describe_topics([TOPIC])
            except UnknownTopicOrPartitionError:
                topic = None  # the brokers' metadata has not caught up yet
            if topic is not None and topic.partitions and topic.partitions[0].leader >= 0:
                break
            await asyncio.sleep(0.1)
        assert topic is not None
        part = topic.partitions[0]
        addresses = {
            b.node_id: f"{b.host}:{b.port}" for b in (await admin.describe_cluster()).brokers
        }
        found = await _retried(
            transport,
            cluster.bootstrap[0],
            proto.METHOD_FIND_COORDINATOR,
            pb.FindCoordinatorRequest(key=TID, key_type=1),
        )
        coordinator = addresses[found.node_id]
        init = await _retried(
            transport,
            coordinator,
            proto.METHOD_INIT_PRODUCER_ID,
            pb.InitProducerIdRequest(transactional_id=TID, transaction_timeout_ms=600_000),
        )
        add = pb.AddPartitionsToTxnRequest(
            transactional_id=TID,
            producer_id=init.producer_id,
            producer_epoch=init.producer_epoch,
            partitions=[pb.TopicPartitionId(topic=TOPIC, partition=0)],
        )
        added = await transport.call(
            coordinator, proto.METHOD_ADD_PARTITIONS_TO_TXN, add, timeout_s=10
        )
        assert [p.error_code for p in added.partitions] == [0]
        request = pb.ProduceRequest(acks=-1, timeout_ms=10_000, transactional_id=TID)
        batch = Producer(init.producer_id, init.producer_epoch).batch(
            2, timestamp=int(time.time() * 1000)
        )
        request.partitions.add(topic=TOPIC, partition=0, records=batch)
        produced = await transport.call(
            addresses[part.leader], proto.METHOD_PRODUCE, request, timeout_s=20
        )
        assert produced.partitions[0].error_code == 0, produced.partitions[0].error_message
        follower = next(r for r in part.replicas if r != part.leader)
        return {
            "coordinator_id": found.node_id,
            "producer_id": init.producer_id,
            "epoch": init.producer_epoch,
            "leader": part.leader,
            "follower": follower,
        }
    finally:
        await transport.close()


async def _commit(cluster: LocalCluster, coordinator_id: int, pid: int, epoch: int) -> None:
    transport = GrpcTransport()
    try:
        address = cluster.brokers[coordinator_id].address
        end = pb.EndTxnRequest(
            transactional_id=TID, producer_id=pid, producer_epoch=epoch, committed=True
        )
        assert (
            await transport.call(address, proto.METHOD_END_TXN, end, timeout_s=10)
        ).error_code == 0
    finally:
        await transport.close()


def _rows(out: str) -> list[list[str]]:
    return [[v.strip() for v in line.split("\t")[:-1]] for line in out.splitlines()]


def _until(args: list[str], ok: Any) -> list[list[str]]:
    for _ in range(100):
        out = kafkasim("transactions", *args)
        assert out.returncode == 0, out.stdout + out.stderr
        rows = _rows(out.stdout)
        if ok(rows):
            return rows
        time.sleep(0.2)
    raise AssertionError(f"transactions {args} never showed what was expected: {rows}")


def test_list_describe_and_describe_producers(local_cluster: LocalCluster) -> None:
    txn = asyncio.run(_open_transaction(local_cluster))
    bootstrap = ["--bootstrap-server", ",".join(local_cluster.bootstrap)]
    pid, epoch = str(txn["producer_id"]), str(txn["epoch"])

    listed = _until([*bootstrap, "--list"], lambda rows: len(rows) > 1)
    assert listed[0] == ["TransactionalId", "Coordinator", "ProducerId", "TransactionState"]
    assert [TID, str(txn["coordinator_id"]), pid, "Ongoing"] in listed[1:]

    described = _rows(
        kafkasim("transactions", *bootstrap, "describe", "--transactional-id", TID).stdout
    )
    assert described[0][:5] == [
        "CoordinatorId",
        "TransactionalId",
        "ProducerId",
        "ProducerEpoch",
        "TransactionState",
    ]
    row = described[1]
    assert row[:6] == [str(txn["coordinator_id"]), TID, pid, epoch, "Ongoing", "600000"]
    assert row[6] != "None" and int(row[7]) >= 0
    assert row[8] == f"{TOPIC}-0"

    for extra in ([], ["--broker-id", str(txn["follower"])]):
        producers = _rows(
            kafkasim(
                "transactions",
                *bootstrap,
                "--describe-producers",
                "--topic",
                TOPIC,
                "--partition",
                "0",
                *extra,
            ).stdout
        )
        assert producers[0] == [
            "ProducerId",
            "ProducerEpoch",
            "LatestCoordinatorEpoch",
            "LastSequence",
            "LastTimestamp",
            "CurrentTransactionStartOffset",
        ]
        (producer,) = producers[1:]
        assert [producer[i] for i in (0, 1, 2, 3, 5)] == [pid, epoch, "-1", "1", "0"]

    asyncio.run(_commit(local_cluster, txn["coordinator_id"], txn["producer_id"], txn["epoch"]))
    committed = _until(
        [*bootstrap, "describe-producers", "--topic", TOPIC, "--partition", "0"],
        lambda rows: len(rows) == 2 and rows[1][5] == "None",
    )
    assert committed[1][2] != "-1"  # the marker's coordinator epoch
    _until(
        [*bootstrap, "--list"],
        lambda rows: [TID, str(txn["coordinator_id"]), pid, "CompleteCommit"] in rows,
    )

    unknown = kafkasim("transactions", *bootstrap, "--describe", "--transactional-id", "ghost")
    assert unknown.returncode == 1
    assert unknown.stderr.strip().splitlines() == [
        "Failed to describe transaction state of transactional-id `ghost`: "
        "TRANSACTIONAL_ID_NOT_FOUND: TransactionalId ghost not found."
    ]
