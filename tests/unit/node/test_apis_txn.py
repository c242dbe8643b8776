"""The gRPC door's transactional translations (``node.apis_txn``): proto3's empty string and
``has_producer_id`` into Kafka's null id and -1/-1 pair, and the handlers over a coordinator
on fakes (``txn_fakes``)."""

from __future__ import annotations

from typing import Any, cast

from kafkasim import proto
from kafkasim.common.errors import error_for_name
from kafkasim.node.apis_txn import init_producer_id_request, txn_handlers
from kafkasim.proto import kafkasim_pb2 as pb
from kafkasim.sim.loop import run_simulation
from tests.unit.node.test_kafka_apis_txn import TID, TP0, txn_broker


def test_init_producer_id_request_conventions() -> None:
    fresh = init_producer_id_request(
        pb.InitProducerIdRequest(transactional_id=TID, transaction_timeout_ms=5, producer_id=0)
    )
    assert (fresh.transactional_id, fresh.transaction_timeout_ms) == (TID, 5)
    assert (fresh.producer_id, fresh.producer_epoch) == (-1, -1)  # has_producer_id false
    known = init_producer_id_request(
        pb.InitProducerIdRequest(
            transactional_id=TID, has_producer_id=True, producer_id=0, producer_epoch=3
        )
    )
    assert (known.producer_id, known.producer_epoch) == (0, 3)  # zero is a valid id
    assert init_producer_id_request(pb.InitProducerIdRequest()).transactional_id is None


def test_the_handlers_answer_per_partition_and_per_id() -> None:
    async def main() -> None:
        broker = txn_broker()
        broker.harness.coordinator.start()
        await broker.harness.lead(TID)
        handlers = txn_handlers(cast(Any, broker))
        init = await handlers[proto.METHOD_INIT_PRODUCER_ID](
            pb.InitProducerIdRequest(transactional_id=TID, transaction_timeout_ms=60_000)
        )
        assert (init.error_code, init.producer_id, init.producer_epoch) == (0, 1000, 0)
        added = await handlers[proto.METHOD_ADD_PARTITIONS_TO_TXN](
            pb.AddPartitionsToTxnRequest(
                transactional_id=TID,
                producer_id=1000,
                producer_epoch=0,
                partitions=[pb.TopicPartitionId(topic=TP0.topic, partition=TP0.partition)],
            )
        )
        assert [(p.topic, p.partition, p.error_code) for p in added.partitions] == [
            ("orders", 0, 0)
        ]
        offsets = await handlers[proto.METHOD_ADD_OFFSETS_TO_TXN](
            pb.AddOffsetsToTxnRequest(
                transactional_id=TID, producer_id=1000, producer_epoch=0, group_id="g"
            )
        )
        assert offsets.error_code == 0
        fenced = await handlers[proto.METHOD_END_TXN](
            pb.EndTxnRequest(transactional_id=TID, producer_id=1000, producer_epoch=7)
        )
        assert fenced.error_code == error_for_name("PRODUCER_FENCED").code  # any version
        txns = broker.transactions
        same = next(  # an id of the same (loaded) partition, never used
            f"tx-{n}"
            for n in range(2, 100)
            if txns.partition_for(f"tx-{n}") == txns.partition_for(TID)
        )
        described = await handlers[proto.METHOD_DESCRIBE_TRANSACTIONS](
            pb.DescribeTransactionsRequest(transactional_ids=[TID, same])
        )
        ongoing, unknown = described.transactions
        assert (ongoing.transaction_state, ongoing.producer_id) == ("Ongoing", 1000)
        assert len(ongoing.partitions) == 2  # orders-0 and the group's __consumer_offsets
        assert unknown.error_code == error_for_name("TRANSACTIONAL_ID_NOT_FOUND").code
        listed = await handlers[proto.METHOD_LIST_TRANSACTIONS](
            pb.ListTransactionsRequest(producer_id_filters=[1000])
        )
        assert [(t.transactional_id, t.transaction_state) for t in listed.transactions] == [
            (TID, "Ongoing")
        ]
        await broker.harness.coordinator.stop()

    run_simulation(main())
