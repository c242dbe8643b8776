"""``Consumer.poll_batch``: the records ``poll`` would return, as columns per partition, on
the virtual clock. Positions advance the same way (the two calls mix), ``max_records`` bounds
an answer, and deserializers apply per column with ``poll``'s failure rule."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kafkasim.client.consumer import RecordDeserializationError
from kafkasim.client.record_columns import RecordColumns, to_arrow
from kafkasim.common.types import TopicPartition
from kafkasim.sim.cluster import SimCluster
from kafkasim.storage.records.batch import TimestampType
from tests.sim.helpers import create, produce_all, simulate
from tests.sim.test_consumer import TOPIC, TP, consuming

TPS = [TopicPartition(TOPIC, p) for p in range(3)]


async def _fill(cluster: SimCluster) -> dict[TopicPartition, list[bytes]]:
    client = await create(cluster, TOPIC, partitions=3)
    produced: dict[TopicPartition, list[bytes]] = {}
    for tp in TPS:
        values = [b"p%d-%d" % (tp.partition, i) for i in range(20)]
        await produce_all(client, tp, values[:5])
        await client.produce(tp, values[5:])  # one batch of 15
        produced[tp] = values
    return produced


def test_poll_batch_returns_every_record_once_as_columns_in_offset_order(tmp_path: Path) -> None:
    async def scenario(cluster: SimCluster) -> None:
        produced = await _fill(cluster)
        read: dict[TopicPartition, list[bytes]] = {tp: [] for tp in TPS}
        async with consuming(cluster, {"auto.offset.reset": "earliest"}) as consumer:
            consumer.assign(TPS)
            for _ in range(50):
                parts = await consumer.poll_batch(1000, max_records=7)
                assert sum(len(part) for part in parts) <= 7
                for part in parts:
                    tp = TopicPartition(part.topic, part.partition)
                    assert part.offsets == list(range(len(read[tp]), len(read[tp]) + len(part)))
                    assert set(part.timestamp_types) == {int(TimestampType.CREATE_TIME)}
                    assert part.headers == [()] * len(part)
                    read[tp].extend(part.values)
                    assert consumer.position(tp) == part.offsets[-1] + 1
                if all(len(read[tp]) == 20 for tp in TPS):
                    break
        assert read == produced

    simulate(tmp_path, scenario)


def test_poll_and_poll_batch_share_the_positions(tmp_path: Path) -> None:
    async def scenario(cluster: SimCluster) -> None:
        client = await create(cluster, TOPIC)
        await client.produce(TP, [b"v%d" % i for i in range(10)])
        async with consuming(
            cluster, {"auto.offset.reset": "earliest", "max.poll.records": 3}
        ) as consumer:
            consumer.assign([TP])
            first = await consumer.poll(1000)
            (part,) = await consumer.poll_batch(1000, max_records=4)
            rest = await consumer.poll(1000)
            assert await consumer.poll_batch(1000) == []  # nothing left
        assert [r.offset for r in first] == [0, 1, 2]
        assert part.offsets == [3, 4, 5, 6]
        assert [r.offset for r in rest] == [7, 8, 9]

    simulate(tmp_path, scenario)


def test_poll_batch_refuses_a_max_records_below_one(tmp_path: Path) -> None:
    async def scenario(cluster: SimCluster) -> None:
        await create(cluster, TOPIC)
        async with consuming(cluster) as consumer:
            consumer.assign([TP])
            with pytest.raises(ValueError, match="max_records must be positive, got 0"):
                await consumer.poll_batch(0, max_records=0)

    simulate(tmp_path, scenario)


def test_poll_batch_deserializes_columns_and_stops_at_a_bad_record(tmp_path: Path) -> None:
    """As poll: the records before the failing one are returned, the position stays on it,
    and the next call raises RecordDeserializationError naming it."""

    async def scenario(cluster: SimCluster) -> None:
        client = await create(cluster, TOPIC)
        await client.produce(TP, [b'{"n": 1}', b'{"n": 2}', b"{broken", b'{"n": 4}'])
        config = {"auto.offset.reset": "earliest", "value.deserializer": json.loads}
        async with consuming(cluster, config) as consumer:
            consumer.assign([TP])
            (good,) = await consumer.poll_batch(1000)
            assert good.values == [{"n": 1}, {"n": 2}]
            assert good.offsets == [0, 1]
            assert consumer.position(TP) == 2
            with pytest.raises(RecordDeserializationError, match=f"{TP} at offset 2"):
                await consumer.poll_batch(1000)
            consumer.seek(TP, 3)
            (after,) = await consumer.poll_batch(1000)
            assert after.values == [{"n": 4}]

    simulate(tmp_path, scenario)


def test_poll_batch_columns_make_an_arrow_table(tmp_path: Path) -> None:
    async def scenario(cluster: SimCluster) -> None:
        produced = await _fill(cluster)
        async with consuming(cluster, {"auto.offset.reset": "earliest"}) as consumer:
            consumer.assign(TPS)
            parts: list[RecordColumns] = []
            for _ in range(20):
                parts.extend(await consumer.poll_batch(1000))
                if sum(len(p) for p in parts) == 60:
                    break
        table = to_arrow(parts)
        assert table.num_rows == 60
        assert sorted(table.column("value").to_pylist()) == sorted(
            v for values in produced.values() for v in values
        )

    simulate(tmp_path, scenario)
