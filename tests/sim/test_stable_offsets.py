"""A read_committed consumer fetches its group's offsets stable (KIP-447, Kafka's
``ConsumerCoordinator.fetchCommittedOffsets`` with ``requireStable``): while a transaction that
committed offsets for its partitions is still open, ``committed()`` waits (the coordinator
answers UNSTABLE_OFFSET_COMMIT, retried) and a newly assigned partition gets no position —
``poll`` returns nothing of it — until the transaction commits; then both see the
transaction's offset. A read_uncommitted consumer is answered at once with the offset
committed before the transaction (none here), as Kafka's."""

from __future__ import annotations

import asyncio
from pathlib import Path

from kafkasim.client.consumer import Consumer
from kafkasim.client.transaction_types import ConsumerGroupMetadata
from kafkasim.common.types import TopicPartition
from kafkasim.sim.cluster import SimCluster
from tests.sim.helpers import create, simulate
from tests.sim.test_consumer import consuming, poll_until
from tests.sim.test_producer import producing
from tests.sim.test_transactional_producer import READ_COMMITTED, READ_UNCOMMITTED
from tests.sim.test_txn_coordinator import SETTINGS

TOPIC = "orders"
TP = TopicPartition(TOPIC, 0)
GROUP = "stable"
TID = "offsets-tx"
PENDING_OFFSET = 4


async def joined(consumer: Consumer) -> None:
    """Subscribe and poll until the group assigned the partition (a rebalance)."""
    consumer.subscribe([TOPIC])
    for _ in range(30):
        await consumer.poll(200)
        if TP in consumer.assignment():
            return
    raise AssertionError("never assigned")


def test_read_committed_waits_for_the_pending_transactional_offsets(tmp_path: Path) -> None:
    async def scenario(cluster: SimCluster) -> None:
        await create(cluster, TOPIC)
        async with producing(cluster, name="input") as plain:
            for i in range(6):
                plain.send(TOPIC, b"%d" % i)
            await plain.flush()
        async with producing(cluster, {"transactional.id": TID}, name="tx") as producer:
            await producer.init_transactions()
            producer.begin_transaction()
            await producer.send_offsets_to_transaction(
                {TP: PENDING_OFFSET}, ConsumerGroupMetadata(GROUP)
            )
            group = {"group.id": GROUP, "enable.auto.commit": False}
            async with (
                consuming(cluster, {**READ_COMMITTED, **group}, name="committed") as stable,
                consuming(cluster, {**READ_UNCOMMITTED, **group}, name="all") as unstable,
            ):
                # read_uncommitted: answered at once, without the pending offset.
                assert await unstable.committed([TP]) == {TP: None}
                await joined(stable)
                assert stable.position(TP) is None, "no position while the commit is pending"
                assert await stable.poll(500) == []
                waiting = asyncio.ensure_future(stable.committed([TP]))
                await asyncio.sleep(2)
                assert not waiting.done()
                await producer.commit_transaction()
                assert await waiting == {TP: PENDING_OFFSET}
                records = await poll_until(stable, 6 - PENDING_OFFSET)
                assert [r.offset for r in records] == list(range(PENDING_OFFSET, 6))

    simulate(tmp_path, scenario, **SETTINGS)
