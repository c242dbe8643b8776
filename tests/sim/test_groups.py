"""Consumer groups against an in-process cluster on the virtual clock: rebalancing when a
member leaves or goes silent, committed offsets that survive the coordinator's failure, the
assignors, and the errors a bad group request gets."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Mapping
from pathlib import Path

import pytest

from kafkasim.client.admin import AdminClient
from kafkasim.client.consumer import Consumer, ConsumerRebalanceListener
from kafkasim.client.simple import MinimalClient
from kafkasim.common.errors import error_for_name
from kafkasim.common.types import TopicPartition
from kafkasim.node.group_records import OFFSETS_TOPIC, partition_for
from kafkasim.sim.cluster import SimCluster, broker_address
from kafkasim.sim.network import SimTransport
from tests.sim.helpers import create, leader_of, produce_all, simulate

TOPIC = "orders"
GROUP = "billing"
FAST_GROUPS = {"group.initial.rebalance.delay.ms": 0, "offsets.topic.num.partitions": 5}


@contextlib.asynccontextmanager
async def member(
    cluster: SimCluster, name: str, config: Mapping[str, object] | None = None
) -> AsyncIterator[Consumer]:
    transport = SimTransport(cluster.network, name)
    props: dict[str, object] = {
        "bootstrap.servers": ",".join(broker_address(b) for b in cluster.broker_ids),
        "group.id": GROUP,
        "client.id": name,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
        "session.timeout.ms": 6000,
        "heartbeat.interval.ms": 1000,
        "max.poll.records": 10,
        **(config or {}),
    }
    consumer = Consumer(props, transport=transport, clock=cluster.clock)
    try:
        yield consumer
    finally:
        await consumer.close()
        await transport.close()


async def produce_numbers(client: MinimalClient, partitions: int, per_partition: int) -> int:
    for p in range(partitions):
        tp = TopicPartition(TOPIC, p)
        for start in range(0, per_partition, 10):
            result = await client.produce(
                tp, [b"%d-%d" % (p, i) for i in range(start, start + 10)], acks=-1
            )
            assert result.ok
    return partitions * per_partition


class Recorder(ConsumerRebalanceListener):
    def __init__(self) -> None:
        self.assignments: list[list[TopicPartition]] = []

    async def on_partitions_assigned(self, partitions: list[TopicPartition]) -> None:
        self.assignments.append(sorted(partitions))


def test_three_members_rebalance_when_one_leaves_and_nothing_committed_is_read_twice(
    tmp_path: Path,
) -> None:
    """Range assignment of 6 partitions over 3 members (2 each); after one member has read a
    share and leaves, the other two take its partitions from the committed offsets: every
    record is processed exactly once."""

    async def scenario(cluster: SimCluster) -> None:
        client = await create(cluster, TOPIC, partitions=6)
        total = await produce_numbers(client, 6, 50)
        processed: list[tuple[int, int]] = []
        listeners = {name: Recorder() for name in ("a", "b", "c")}
        leave_c = asyncio.Event()

        async def run(name: str) -> None:
            async with member(cluster, name) as consumer:
                consumer.subscribe([TOPIC], listener=listeners[name])
                idle = 0
                while len(processed) < total and idle < 30:
                    if name == "c" and leave_c.is_set():
                        return  # close(): LeaveGroup
                    records = await consumer.poll(500)
                    idle = 0 if records else idle + 1
                    processed.extend((r.partition, r.offset) for r in records)
                    if records:
                        await consumer.commit()
                    if name == "c" and len(processed) >= total // 3:
                        leave_c.set()

        await asyncio.gather(run("a"), run("b"), run("c"))
        assert len(processed) == total
        assert len(set(processed)) == total, "a committed record was processed twice"
        # group.initial.rebalance.delay.ms (3 s) lets all three join the first generation.
        assert [len(listeners[n].assignments[0]) for n in ("a", "b", "c")] == [2, 2, 2]
        final_a, final_b = listeners["a"].assignments[-1], listeners["b"].assignments[-1]
        assert sorted(final_a + final_b) == [TopicPartition(TOPIC, p) for p in range(6)]
        assert len(final_a) == len(final_b) == 3

    simulate(tmp_path, scenario, **{"offsets.topic.num.partitions": 5})


def test_committed_offsets_survive_the_coordinator_crashing(tmp_path: Path) -> None:
    async def scenario(cluster: SimCluster) -> None:
        client = await create(cluster, TOPIC, partitions=2)
        tps = [TopicPartition(TOPIC, p) for p in range(2)]
        # The committed offsets are the log end offsets: in range (an out-of-range one would
        # be reset to earliest at the first fetch) and with nothing after them to consume.
        for tp, count in ((tps[0], 7), (tps[1], 11)):
            assert len(await produce_all(client, tp, [b"%d" % i for i in range(count)])) == count
        async with member(cluster, "a") as consumer:
            consumer.assign(tps)
            await consumer.commit({tps[0]: 7, tps[1]: 11})
            assert await consumer.committed(tps) == {tps[0]: 7, tps[1]: 11}
        offsets_tp = TopicPartition(OFFSETS_TOPIC, partition_for(GROUP, 5))
        coordinator = leader_of(cluster, offsets_tp)
        assert coordinator > 0
        await cluster.crash(coordinator)
        await cluster.wait_for(
            lambda: leader_of(cluster, offsets_tp) not in (-1, coordinator),
            what="a new coordinator",
        )
        async with member(cluster, "b") as consumer:
            assert await consumer.committed(tps) == {tps[0]: 7, tps[1]: 11}
            consumer.subscribe([TOPIC])
            await consumer.poll(100)
            assert {tp: consumer.position(tp) for tp in consumer.assignment()} == {
                tps[0]: 7,
                tps[1]: 11,
            }

    simulate(tmp_path, scenario, **FAST_GROUPS)


def test_a_silent_member_is_removed_after_its_session_timeout(tmp_path: Path) -> None:
    async def scenario(cluster: SimCluster) -> None:
        await create(cluster, TOPIC, partitions=4)
        async with member(cluster, "a") as a, member(cluster, "b") as b:
            a.subscribe([TOPIC])
            b.subscribe([TOPIC])
            for _ in range(10):
                await asyncio.gather(a.poll(200), b.poll(200))
                if len(a.assignment()) == len(b.assignment()) == 2:
                    break
            assert len(a.assignment()) == len(b.assignment()) == 2
            # b goes silent: no polls, no heartbeats, no LeaveGroup (as a crashed process).
            assert b._coordinator is not None
            group = b._coordinator.group
            await group.stop_heartbeats()
            start = cluster.clock.monotonic_ms()
            while len(a.assignment()) < 4:
                await a.poll(500)
                assert cluster.clock.monotonic_ms() - start < 20_000
            assert cluster.clock.monotonic_ms() - start >= 5000  # not before the session ends
            group.member_id = ""  # do not leave on close: it is gone already

    simulate(tmp_path, scenario, **FAST_GROUPS)


def test_round_robin_is_chosen_when_every_member_offers_it_first(tmp_path: Path) -> None:
    async def scenario(cluster: SimCluster) -> None:
        await create(cluster, TOPIC, partitions=3)
        await create(cluster, "refunds", partitions=3)
        config = {"partition.assignment.strategy": "roundrobin,range"}
        async with member(cluster, "a", config) as a, member(cluster, "b", config) as b:
            a.subscribe([TOPIC, "refunds"])
            b.subscribe([TOPIC, "refunds"])
            for _ in range(10):
                await asyncio.gather(a.poll(200), b.poll(200))
                if a.assignment() and b.assignment():
                    break
            owned = sorted(a.assignment()) + sorted(b.assignment())
            assert sorted(owned) == sorted(
                TopicPartition(t, p) for t in (TOPIC, "refunds") for p in range(3)
            )
            # Round robin over the sorted partitions: each member gets 3 (range would too,
            # but split per topic 2+1 / 1+2).
            assert len(a.assignment()) == len(b.assignment()) == 3
            assert {len({tp.topic for tp in c.assignment()}) for c in (a, b)} == {2}

    simulate(tmp_path, scenario, **FAST_GROUPS)


@pytest.mark.parametrize(
    ("config", "error"),
    [
        ({"session.timeout.ms": 1000}, "INVALID_SESSION_TIMEOUT"),
        ({"session.timeout.ms": 4_000_000}, "INVALID_SESSION_TIMEOUT"),
    ],
)
def test_a_bad_session_timeout_is_refused_by_name(
    tmp_path: Path, config: dict[str, object], error: str
) -> None:
    async def scenario(cluster: SimCluster) -> None:
        await create(cluster, TOPIC, partitions=1)
        async with member(cluster, "a", config) as consumer:
            consumer.subscribe([TOPIC])
            with pytest.raises(error_for_name(error)):
                await consumer.poll(1000)

    simulate(tmp_path, scenario, **FAST_GROUPS)


def test_group_ids_map_to_partitions_as_kafka(tmp_path: Path) -> None:
    del tmp_path
    assert partition_for("billing", 50) == abs(_java_hash("billing")) % 50


def _java_hash(text: str) -> int:
    h = 0
    for ch in text:
        h = (31 * h + ord(ch)) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def test_the_admin_client_lists_describes_and_measures_lag_of_groups(tmp_path: Path) -> None:
    async def scenario(cluster: SimCluster) -> None:
        client = await create(cluster, TOPIC, partitions=2)
        await produce_numbers(client, 2, 10)
        transport = SimTransport(cluster.network, "admin")
        admin = AdminClient(
            [broker_address(b) for b in cluster.broker_ids],
            transport=transport,
            clock=cluster.clock,
        )
        async with member(cluster, "a") as consumer:
            consumer.subscribe([TOPIC])
            read = 0
            while read < 13:
                read += len(await consumer.poll(500))
            consumer.seek(TopicPartition(TOPIC, 0), 4)
            consumer.seek(TopicPartition(TOPIC, 1), 9)
            await consumer.commit()
            [listing] = await admin.list_groups()
            assert (listing.group_id, listing.protocol_type, listing.state) == (
                GROUP,
                "consumer",
                "Stable",
            )
            [described] = await admin.describe_groups([GROUP])
            assert described.assignor == "range" and len(described.members) == 1
            assert described.members[0].client_id == "a"
            assert described.members[0].assignment == (
                TopicPartition(TOPIC, 0),
                TopicPartition(TOPIC, 1),
            )
            lag = await admin.group_lag(GROUP)
            assert {tp: (v.committed, v.log_end_offset, v.lag) for tp, v in lag.items()} == {
                TopicPartition(TOPIC, 0): (4, 10, 6),
                TopicPartition(TOPIC, 1): (9, 10, 1),
            }
            with pytest.raises(error_for_name("NON_EMPTY_GROUP")):
                await admin.delete_groups([GROUP])
        [after] = await admin.describe_groups([GROUP])
        assert (after.state, after.members) == ("Empty", ())
        await admin.delete_groups([GROUP])
        [gone] = await admin.describe_groups([GROUP])
        assert gone.state == "Dead"
        assert await admin.list_groups() == []
        await transport.close()

    simulate(tmp_path, scenario, **FAST_GROUPS)


def test_auto_commit_commits_positions_from_poll_and_on_close(tmp_path: Path) -> None:
    async def scenario(cluster: SimCluster) -> None:
        client = await create(cluster, TOPIC, partitions=1)
        await produce_numbers(client, 1, 10)
        tp = TopicPartition(TOPIC, 0)
        config = {"enable.auto.commit": True, "auto.commit.interval.ms": 1000}
        async with member(cluster, "a", config) as consumer:
            consumer.subscribe([TOPIC])
            read = 0
            while read < 10:
                read += len(await consumer.poll(200))
            for _ in range(6):  # polls over more than auto.commit.interval.ms
                assert await consumer.poll(200) == []
            assert await consumer.committed([tp]) == {tp: 10}
            await produce_numbers(client, 1, 20)
            while read < 30:
                read += len(await consumer.poll(200))
        # close() committed the last position.
        async with member(cluster, "b", {"enable.auto.commit": False}) as other:
            assert await other.committed([tp]) == {tp: 30}

    simulate(tmp_path, scenario, **FAST_GROUPS)


def test_added_partitions_make_the_leader_ask_for_a_new_assignment(tmp_path: Path) -> None:
    """The group leader re-reads the subscribed topics every metadata.max.age.ms; when the
    partition count grew, it rejoins and the new partitions are assigned."""

    async def scenario(cluster: SimCluster) -> None:
        client = await create(cluster, TOPIC, partitions=2)
        config = {"metadata.max.age.ms": 1000}
        async with member(cluster, "a", config) as a, member(cluster, "b", config) as b:
            a.subscribe([TOPIC])
            b.subscribe([TOPIC])
            for _ in range(10):
                await asyncio.gather(a.poll(200), b.poll(200))
                if len(a.assignment()) + len(b.assignment()) == 2 and a.assignment():
                    break
            assert a.assignment() | b.assignment() == {TopicPartition(TOPIC, p) for p in (0, 1)}
            transport = SimTransport(cluster.network, "admin")
            admin = AdminClient(
                [broker_address(x) for x in cluster.broker_ids],
                transport=transport,
                clock=cluster.clock,
            )
            await admin.create_partitions(TOPIC, 4)
            await client.wait_for_leaders(TOPIC, 4)
            for _ in range(40):
                await asyncio.gather(a.poll(200), b.poll(200))
                if len(a.assignment() | b.assignment()) == 4:
                    break
            assert a.assignment() | b.assignment() == {TopicPartition(TOPIC, p) for p in range(4)}
            assert len(a.assignment()) == len(b.assignment()) == 2
            await transport.close()

    simulate(tmp_path, scenario, **FAST_GROUPS)
