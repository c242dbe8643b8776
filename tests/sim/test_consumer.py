"""The consumer against an in-process cluster on the virtual clock.

Each test names what it checks: that everything produced is read back per partition in offset
order and never at or above the high watermark, that a leader change is followed, that seek and
offsets_for_times land on the produced records, what each auto.offset.reset does, and that a
bad config or a group call without a group id fails with an error that says so.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Mapping
from pathlib import Path

import pytest

from kafkasim.client.consumer import Consumer, ConsumerClosedError, ConsumerRecord
from kafkasim.client.producer import Producer
from kafkasim.common.errors import InvalidConfigError, OffsetOutOfRangeError, error_for_name
from kafkasim.common.types import TopicPartition
from kafkasim.sim.cluster import SimCluster, broker_address
from kafkasim.sim.network import SimTransport
from kafkasim.storage.records.batch import TimestampType
from tests.sim.helpers import create, leader_of, partition_on, produce_all, simulate

TOPIC = "events"
InvalidGroupIdError = error_for_name("INVALID_GROUP_ID")
TP = TopicPartition(TOPIC, 0)
CONSUMER = "consumer"


@contextlib.asynccontextmanager
async def consuming(
    cluster: SimCluster, config: Mapping[str, object] | None = None, *, name: str = CONSUMER
) -> AsyncIterator[Consumer]:
    """A consumer on its own simulated node, closed (and its transport) afterwards."""
    transport = SimTransport(cluster.network, name)
    props: dict[str, object] = {
        "bootstrap.servers": ",".join(broker_address(b) for b in cluster.broker_ids),
        **(config or {}),
    }
    try:
        async with Consumer(props, transport=transport, clock=cluster.clock) as consumer:
            yield consumer
    finally:
        await transport.close()


async def poll_until(consumer: Consumer, count: int, *, polls: int = 50) -> list[ConsumerRecord]:
    """Poll (1 s each, virtual) until ``count`` records came back or ``polls`` ran out."""
    out: list[ConsumerRecord] = []
    for _ in range(polls):
        if len(out) >= count:
            break
        out.extend(await consumer.poll(1000))
    return out


def test_reads_everything_produced_per_partition_in_offset_order(tmp_path: Path) -> None:
    """All records of three partitions come back once each, in offset order per partition,
    with max.poll.records bounding every poll."""

    async def scenario(cluster: SimCluster) -> None:
        client = await create(cluster, TOPIC, partitions=3)
        tps = [TopicPartition(TOPIC, p) for p in range(3)]
        produced: dict[TopicPartition, list[bytes]] = {}
        for tp in tps:
            values = [b"p%d-%d" % (tp.partition, i) for i in range(25)]
            await produce_all(client, tp, values[:10])
            await client.produce(tp, values[10:])  # one batch of 15
            produced[tp] = values
        async with consuming(
            cluster, {"auto.offset.reset": "earliest", "max.poll.records": 7}
        ) as consumer:
            consumer.assign(tps)
            assert consumer.assignment() == set(tps)
            records: list[ConsumerRecord] = []
            for _ in range(50):
                batch = await consumer.poll(1000)
                assert len(batch) <= 7
                records.extend(batch)
                if len(records) >= 75:
                    break
            assert len(records) == 75
            for tp in tps:
                mine = [r for r in records if r.topic_partition == tp]
                assert [r.offset for r in mine] == list(range(25))
                assert [r.value for r in mine] == produced[tp]
                assert consumer.position(tp) == 25
            assert all(r.timestamp_type is TimestampType.CREATE_TIME for r in records)
            assert await consumer.poll(100) == []

    simulate(tmp_path, scenario)


def test_never_returns_records_at_or_above_the_high_watermark(tmp_path: Path) -> None:
    """Invariant 3 from the consumer's side: with the followers cut off the leader's log grows
    but the HW does not, and poll stops at the HW until the followers are back."""

    async def scenario(cluster: SimCluster) -> None:
        client = await create(cluster, TOPIC)
        await produce_all(client, TP, [b"x%d" % i for i in range(3)])
        leader = leader_of(cluster, TP)
        followers = [b for b in cluster.brokers if b != leader]
        cluster.network.partition(
            [{f"broker-{leader}", "client", CONSUMER}, {f"broker-{f}" for f in followers}]
        )
        await produce_all(client, TP, [b"y%d" % i for i in range(4)], acks=1)
        partition = partition_on(cluster, leader, TP)
        assert (partition.high_watermark, partition.log_end_offset) == (3, 7)
        # Only the leader is asked for metadata, and briefly: a request stuck on the far side
        # of the cut would wait until the ISR shrinks (and the HW moves) by itself.
        config = {
            "auto.offset.reset": "earliest",
            "bootstrap.servers": broker_address(leader),
            "request.timeout.ms": 1000,
        }
        async with consuming(cluster, config) as consumer:
            consumer.assign([TP])
            first = await poll_until(consumer, 3, polls=5)
            assert [r.value for r in first] == [b"x0", b"x1", b"x2"]
            assert await consumer.poll(2000) == []
            assert await consumer.end_offsets([TP]) == {TP: 3}
            cluster.network.heal_all()
            rest = await poll_until(consumer, 4)
            assert [r.offset for r in rest] == [3, 4, 5, 6]

    simulate(tmp_path, scenario)


def test_follows_a_leader_change(tmp_path: Path) -> None:
    """After the leader crashes the consumer finds the new leader (NOT_LEADER_OR_FOLLOWER or a
    broken connection refresh its metadata) and goes on from its position."""

    async def scenario(cluster: SimCluster) -> None:
        client = await create(cluster, TOPIC, min_insync_replicas="2")
        await produce_all(client, TP, [b"before-%d" % i for i in range(10)])
        async with consuming(cluster, {"auto.offset.reset": "earliest"}) as consumer:
            consumer.assign([TP])
            assert len(await poll_until(consumer, 10)) == 10
            old_leader = leader_of(cluster, TP)
            await cluster.crash(old_leader)
            await cluster.wait_for(
                lambda: leader_of(cluster, TP) not in (-1, old_leader), what="a new leader"
            )
            await produce_all(client, TP, [b"after-%d" % i for i in range(10)])
            after = await poll_until(consumer, 10)
            assert [r.value for r in after] == [b"after-%d" % i for i in range(10)]
            assert [r.offset for r in after] == list(range(10, 20))

    simulate(tmp_path, scenario)


def test_seek_and_offsets_for_times_land_on_the_produced_records(tmp_path: Path) -> None:
    async def scenario(cluster: SimCluster) -> None:
        await create(cluster, TOPIC)
        props = {"bootstrap.servers": ",".join(broker_address(b) for b in cluster.broker_ids)}
        transport = SimTransport(cluster.network, "producer")
        async with Producer(props, transport=transport, clock=cluster.clock) as producer:
            for i in range(10):
                await producer.send(
                    TOPIC, b"v%d" % i, key=b"k", partition=0, timestamp=1_000 * (i + 1)
                )
        await transport.close()
        async with consuming(cluster) as consumer:
            consumer.assign([TP])
            found = await consumer.offsets_for_times({TP: 3_500})
            assert found == {TP: (3, 4_000)}
            assert await consumer.offsets_for_times({TP: 1}) == {TP: (0, 1_000)}
            assert await consumer.offsets_for_times({TP: 99_000}) == {TP: None}
            assert await consumer.beginning_offsets([TP]) == {TP: 0}
            assert await consumer.end_offsets([TP]) == {TP: 10}
            consumer.seek(TP, 7)
            assert consumer.position(TP) == 7
            records = await poll_until(consumer, 3)
            assert [(r.offset, r.timestamp, r.key) for r in records] == [
                (7, 8_000, b"k"),
                (8, 9_000, b"k"),
                (9, 10_000, b"k"),
            ]
            consumer.seek_to_beginning([TP])
            assert consumer.position(TP) is None  # resolved by the next poll
            assert [r.offset for r in await poll_until(consumer, 10)] == list(range(10))
            consumer.seek_to_end()
            assert await consumer.poll(500) == []
            assert consumer.position(TP) == 10
            with pytest.raises(ValueError, match="must be >= 0"):
                await consumer.offsets_for_times({TP: -5})

    simulate(tmp_path, scenario)


@pytest.mark.parametrize(
    ("reset", "expected"),
    [
        ("latest", [b"new"]),  # the default: only what comes after the first poll
        ("earliest", [b"old-0", b"old-1", b"new"]),
    ],
)
def test_auto_offset_reset_decides_where_a_new_assignment_starts(
    tmp_path: Path, reset: str, expected: list[bytes]
) -> None:
    async def scenario(cluster: SimCluster) -> None:
        client = await create(cluster, TOPIC)
        await produce_all(client, TP, [b"old-0", b"old-1"])
        config = {} if reset == "latest" else {"auto.offset.reset": reset}
        async with consuming(cluster, config) as consumer:
            consumer.assign([TP])
            first = await consumer.poll(100)
            await produce_all(client, TP, [b"new"])
            records = first + await poll_until(consumer, len(expected) - len(first))
            assert [r.value for r in records] == expected

    simulate(tmp_path, scenario)


def test_an_out_of_range_position_is_reset_per_auto_offset_reset(tmp_path: Path) -> None:
    """A seek past the log end draws OFFSET_OUT_OF_RANGE: earliest starts over, none raises
    (as it does when a new assignment has no position at all)."""

    async def scenario(cluster: SimCluster) -> None:
        client = await create(cluster, TOPIC)
        await produce_all(client, TP, [b"a", b"b"])
        async with consuming(cluster, {"auto.offset.reset": "earliest"}) as consumer:
            consumer.assign([TP])
            consumer.seek(TP, 1_000)
            assert [r.value for r in await poll_until(consumer, 2)] == [b"a", b"b"]
        async with consuming(cluster, {"auto.offset.reset": "none"}, name="strict") as consumer:
            consumer.assign([TP])
            with pytest.raises(OffsetOutOfRangeError, match=r"no reset policy.*\[events-0\]"):
                await consumer.poll(100)
            consumer.seek(TP, 1_000)
            with pytest.raises(OffsetOutOfRangeError, match=r"offset=1000.*events-0"):
                await poll_until(consumer, 1)
            consumer.seek(TP, 1)
            assert [r.value for r in await poll_until(consumer, 1)] == [b"b"]

    simulate(tmp_path, scenario)


@pytest.mark.parametrize(
    ("props", "message"),
    [
        ({"fetch.max.wait": 5}, "fetch.max.wait"),
        ({"auto.offset.reset": "smallest"}, "auto.offset.reset"),
        ({"max.poll.records": 0}, "max.poll.records"),
        ({"isolation.level": "serializable"}, "isolation.level"),
        ({"bootstrap.servers": ""}, "bootstrap.servers"),
    ],
)
def test_a_bad_config_names_the_key(props: dict[str, object], message: str) -> None:
    config = {"bootstrap.servers": "localhost:9092", **props}
    with pytest.raises(InvalidConfigError, match=message):
        Consumer(config, transport=None, clock=None)  # type: ignore[arg-type]


def test_group_calls_without_a_group_id_name_it(tmp_path: Path) -> None:
    async def scenario(cluster: SimCluster) -> None:
        async with consuming(cluster, {"client.id": "c"}) as consumer:
            with pytest.raises(InvalidGroupIdError, match=r"group\.id"):
                consumer.subscribe([TOPIC])
            with pytest.raises(InvalidGroupIdError, match=r"group\.id"):
                await consumer.commit({TP: 1})
            with pytest.raises(InvalidGroupIdError, match=r"group\.id"):
                await consumer.committed([TP])
            with pytest.raises(Exception, match="not subscribed to any topics or assigned"):
                await consumer.poll(0)
        with pytest.raises(ConsumerClosedError):
            await consumer.poll(0)

    simulate(tmp_path, scenario)
