"""kafkasim's own transactional producer (``Producer`` with ``transactional.id``) against a
simulated cluster, end to end over the gRPC APIs: a committed transaction is seen whole by a
read_committed consumer and an aborted one never; a zombie with the old epoch is fenced by a
new producer with the same transactional id; a consume-transform-produce loop commits its
input offsets with its output (send_offsets_to_transaction), and an aborted round leaves both
the output and the group's offsets as they were."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from kafkasim.common.errors import ProducerFencedError
from kafkasim.common.types import TopicPartition
from kafkasim.sim.cluster import SimCluster
from tests.sim.helpers import create, simulate
from tests.sim.test_consumer import consuming, poll_until
from tests.sim.test_producer import producing
from tests.sim.test_txn_coordinator import SETTINGS

TOPIC = "orders"
OUTPUT = "shipped"
TID = "sim-producer-tx"
READ_COMMITTED = {"auto.offset.reset": "earliest", "isolation.level": "read_committed"}
READ_UNCOMMITTED = {"auto.offset.reset": "earliest"}


async def values_seen(
    cluster: SimCluster, tps: list[TopicPartition], count: int, config: dict[str, object], name: str
) -> list[bytes | None]:
    async with consuming(cluster, config, name=name) as consumer:
        consumer.assign(tps)
        records = await poll_until(consumer, count)
        assert await consumer.poll(1000) == []  # nothing more
        return [r.value for r in records]


def test_committed_transactions_are_seen_whole_and_aborted_ones_never(tmp_path: Path) -> None:
    async def scenario(cluster: SimCluster) -> None:
        await create(cluster, TOPIC, partitions=2)
        tps = [TopicPartition(TOPIC, p) for p in range(2)]
        async with producing(cluster, {"transactional.id": TID}, name="tx") as producer:
            await producer.init_transactions()
            producer.begin_transaction()
            for i in range(4):
                producer.send(TOPIC, b"c1-%d" % i, partition=i % 2)
            await producer.commit_transaction()
            producer.begin_transaction()
            aborted = [producer.send(TOPIC, b"a-%d" % i, partition=i % 2) for i in range(2)]
            await producer.flush()  # written to the logs, then aborted
            assert all(f.exception() is None for f in aborted)
            await producer.abort_transaction()
            producer.begin_transaction()
            producer.send(TOPIC, b"c2-0", partition=0)
            await producer.commit_transaction()
        committed = await values_seen(cluster, tps, 5, READ_COMMITTED, "committed")
        assert sorted(v or b"" for v in committed) == [b"c1-0", b"c1-1", b"c1-2", b"c1-3", b"c2-0"]
        everything = await values_seen(cluster, tps, 7, READ_UNCOMMITTED, "all")
        assert len(everything) == 7 and b"a-0" in everything

    simulate(tmp_path, scenario, **SETTINGS)


def test_the_simple_client_reads_committed_records_up_to_the_last_stable_offset(
    tmp_path: Path,
) -> None:
    async def scenario(cluster: SimCluster) -> None:
        client = await create(cluster, TOPIC)
        tp = TopicPartition(TOPIC, 0)
        async with producing(cluster, {"transactional.id": TID}, name="tx") as producer:
            await producer.init_transactions()
            producer.begin_transaction()
            producer.send(TOPIC, b"committed", partition=0)
            await producer.commit_transaction()
            producer.begin_transaction()
            producer.send(TOPIC, b"aborted", partition=0)
            await producer.flush()  # written, then aborted
            await producer.abort_transaction()
            producer.begin_transaction()
            producer.send(TOPIC, b"open", partition=0)
            await producer.flush()  # written, its transaction still open: past the LSO
            committed = await client.read_all(tp, read_committed=True)
            assert [r.value for r in committed] == [b"committed"]
            first = await client.fetch(tp, 0, read_committed=True)
            assert first.last_stable_offset == first.next_offset == first.high_watermark - 1
            everything = [r.value for r in await client.read_all(tp)]
            # read_uncommitted: every record, the two markers' control records included
            assert len(everything) == 5 and everything[-1] == b"open"
            await producer.commit_transaction()
            # EndTxn answers once the commit is decided; the markers follow (the LSO moves)
            later: list[bytes | None] = []
            while not later:
                await asyncio.sleep(0.1)
                records = await client.read_all(tp, first.next_offset, read_committed=True)
                later = [r.value for r in records]
            assert later == [b"open"]

    simulate(tmp_path, scenario, **SETTINGS)


def test_a_zombie_with_the_old_epoch_is_fenced(tmp_path: Path) -> None:
    async def scenario(cluster: SimCluster) -> None:
        await create(cluster, TOPIC)
        tp = TopicPartition(TOPIC, 0)
        async with producing(cluster, {"transactional.id": TID}, name="zombie") as zombie:
            await zombie.init_transactions()
            zombie.begin_transaction()
            await zombie.send(TOPIC, b"zombie")
            async with producing(cluster, {"transactional.id": TID}, name="new") as producer:
                await producer.init_transactions()  # aborts the zombie's open transaction
                assert producer.producer_id == zombie.producer_id
                assert producer.producer_epoch > zombie.producer_epoch
                with pytest.raises(ProducerFencedError):
                    await zombie.commit_transaction()
                with pytest.raises(ProducerFencedError):
                    zombie.begin_transaction()
                producer.begin_transaction()
                await producer.send(TOPIC, b"new")
                await producer.commit_transaction()
        assert await values_seen(cluster, [tp], 1, READ_COMMITTED, "reader") == [b"new"]

    simulate(tmp_path, scenario, **SETTINGS)


def test_consume_transform_produce_commits_offsets_with_the_output(tmp_path: Path) -> None:
    async def scenario(cluster: SimCluster) -> None:
        await create(cluster, TOPIC)
        await create(cluster, OUTPUT)
        source, sink = TopicPartition(TOPIC, 0), TopicPartition(OUTPUT, 0)
        async with producing(cluster, name="input") as plain:
            for i in range(6):
                plain.send(TOPIC, b"%d" % i)
            await plain.flush()
        group = {**READ_COMMITTED, "group.id": "transform", "enable.auto.commit": False}
        async with (
            consuming(cluster, group, name="transformer") as consumer,
            producing(cluster, {"transactional.id": TID}, name="tx") as producer,
        ):
            consumer.subscribe([TOPIC])
            await producer.init_transactions()
            done = 0
            aborted_once = False
            while done < 6:
                records = await consumer.poll(1000)
                if not records:
                    continue
                producer.begin_transaction()
                for record in records:
                    producer.send(OUTPUT, b"x" + (record.value or b""))
                next_offset = records[-1].offset + 1
                await producer.send_offsets_to_transaction(
                    {source: next_offset}, consumer.group_metadata()
                )
                if not aborted_once:  # the first round fails: nothing of it may count
                    aborted_once = True
                    await producer.abort_transaction()
                    consumer.seek(source, records[0].offset)
                    continue
                await producer.commit_transaction()
                done = next_offset
            # The offsets become committed with the COMMIT marker, which the coordinator
            # writes after answering EndTxn.
            for _ in range(50):
                if (await consumer.committed([source]))[source] == 6:
                    break
                await asyncio.sleep(0.1)
            assert (await consumer.committed([source]))[source] == 6
        output = await values_seen(cluster, [sink], 6, READ_COMMITTED, "reader")
        assert output == [b"x%d" % i for i in range(6)]  # each input exactly once

    simulate(tmp_path, scenario, **SETTINGS)
