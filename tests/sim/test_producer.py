"""The producer against an in-process cluster on the virtual clock.

Each test names what it checks: how records are batched (read back from the brokers' logs),
where keys and keyless records land, that order and idempotence survive a leader crash and a
lost answer (ARCHITECTURE.md invariant 7), what each acks level waits for, and that misuse
and timeouts fail with errors that say what happened.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import random
from collections.abc import AsyncIterator, Mapping
from pathlib import Path

import pytest

from kafkasim import proto
from kafkasim.client.admin import AdminClient
from kafkasim.client.partitioner import PartitionFunction, partition_for_key
from kafkasim.client.producer import (
    DeliveryTimeoutError,
    Producer,
    ProducerClosedError,
    ProducerConfig,
    RecordMetadata,
)
from kafkasim.common.errors import (
    InvalidConfigError,
    KafkaError,
    OutOfOrderSequenceNumberError,
    RecordTooLargeError,
)
from kafkasim.common.types import TopicPartition
from kafkasim.proto import kafkasim_pb2 as pb
from kafkasim.sim.cluster import SimCluster, broker_address, broker_node
from kafkasim.sim.network import SimTransport
from kafkasim.storage.records.batch import BatchHeader, decode_batch, iter_batches
from kafkasim.storage.records.compression import CompressionType
from tests.sim.helpers import create, leader_of, leo_of, partition_on, simulate

TOPIC = "events"
TP = TopicPartition(TOPIC, 0)
PRODUCER = "producer"


@contextlib.asynccontextmanager
async def producing(
    cluster: SimCluster,
    config: Mapping[str, object] | None = None,
    *,
    name: str = PRODUCER,
    partitioner: PartitionFunction | None = None,
) -> AsyncIterator[Producer]:
    """A producer on its own simulated node, closed (and its transport with it) afterwards."""
    transport = SimTransport(cluster.network, name)
    props: dict[str, object] = {
        "bootstrap.servers": ",".join(broker_address(b) for b in cluster.broker_ids),
        **(config or {}),
    }
    producer = Producer(
        props,
        transport=transport,
        clock=cluster.clock,
        rng=random.Random(f"{name}/{cluster.seed}"),
        partitioner=partitioner,
    )
    try:
        async with producer:
            yield producer
    finally:
        await transport.close()


def stored(cluster: SimCluster, tp: TopicPartition) -> list[tuple[BatchHeader, list[bytes]]]:
    """Every batch in the leader's log of ``tp``: its header and its values."""
    log = partition_on(cluster, leader_of(cluster, tp), tp).log
    out: list[tuple[BatchHeader, list[bytes]]] = []
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        data = log.read(offset, 1 << 24).records
        for position, _ in iter_batches(data):
            header, records = decode_batch(data, position)
            out.append((header, [r.value or b"" for r in records]))
            offset = header.last_offset + 1
    return out


def stored_values(cluster: SimCluster, tp: TopicPartition) -> list[bytes]:
    return [value for _, values in stored(cluster, tp) for value in values]


async def warm_up(producer: Producer, topic: str = TOPIC) -> RecordMetadata:
    """One acknowledged record: metadata and producer id are known afterwards."""
    return await producer.send(topic, b"warm-up", partition=0)


# -- batching -----------------------------------------------------------------------------------


def test_records_sent_one_by_one_with_linger_zero_travel_one_per_batch(tmp_path: Path) -> None:
    """linger.ms=0 sends a batch as soon as the sender runs: awaiting each send leaves
    nothing to batch."""

    async def scenario(cluster: SimCluster) -> list[int]:
        await create(cluster, TOPIC)
        async with producing(cluster, {"linger.ms": 0}) as producer:
            for i in range(5):
                await producer.send(TOPIC, b"%d" % i, partition=0)
        return [header.records_count for header, _ in stored(cluster, TP)]

    assert simulate(tmp_path, scenario) == [1] * 5


def test_records_sent_in_a_row_share_a_batch_even_with_linger_zero(tmp_path: Path) -> None:
    """The sender only runs when the caller yields: 50 sends in a row are one batch."""

    async def scenario(cluster: SimCluster) -> list[int]:
        await create(cluster, TOPIC)
        async with producing(cluster) as producer:
            await warm_up(producer)
            await asyncio.gather(*(producer.send(TOPIC, b"%d" % i, partition=0) for i in range(50)))
        return [header.records_count for header, _ in stored(cluster, TP)]

    assert simulate(tmp_path, scenario) == [1, 50]


def test_linger_ms_collects_records_that_arrive_within_it(tmp_path: Path) -> None:
    """A record every 10 ms with linger.ms=95: each batch holds the 10 records that arrived
    before it became sendable."""

    async def scenario(cluster: SimCluster) -> list[int]:
        await create(cluster, TOPIC)
        async with producing(cluster, {"linger.ms": 95}) as producer:
            await warm_up(producer)
            futures = []
            for i in range(30):
                futures.append(producer.send(TOPIC, b"%d" % i, partition=0))
                await asyncio.sleep(0.010)
            await asyncio.gather(*futures)
        return [header.records_count for header, _ in stored(cluster, TP)[1:]]

    assert simulate(tmp_path, scenario) == [10, 10, 10]


def test_lingering_batches_and_plain_answers_do_not_wake_the_sender(tmp_path: Path) -> None:
    """A record every 20 ms with linger.ms=5: each is a batch of its own, appended by the
    leader once its linger has passed (LogAppendTime minus the record's time: the linger plus
    the network), and the sender loops about twice per batch, at its linger's end and at its
    answer: not also when the batch is opened (``client.sender_sleep``)."""

    async def scenario(cluster: SimCluster) -> tuple[list[int], list[int], int]:
        await create(cluster, TOPIC, message_timestamp_type="LogAppendTime")
        async with producing(cluster, {"linger.ms": 5}) as producer:
            await warm_up(producer)
            sender = producer._sender  # its loop count is what is tested
            before = sender.rounds
            futures = []
            for i in range(20):
                futures.append(producer.send(TOPIC, b"%d" % i, partition=0))
                await asyncio.sleep(0.020)
            await asyncio.gather(*futures)
            rounds = sender.rounds - before
        batches = [header for header, _ in stored(cluster, TP)[1:]]
        waits = [header.max_timestamp - header.first_timestamp for header in batches]
        return [header.records_count for header in batches], waits, rounds

    counts, waits, rounds = simulate(tmp_path, scenario)
    assert counts == [1] * 20
    assert all(5 <= wait < 50 for wait in waits), waits
    assert rounds <= 2 * 20 + 2, rounds  # was 3 per batch: opened, linger's end, answer


def test_batch_size_caps_the_bytes_of_a_batch(tmp_path: Path) -> None:
    """batch.size=1000 and 100-byte values: a batch closes when the next record might not fit
    (Kafka's upper bound of a record: 31 bytes of overhead + key + value)."""

    async def scenario(cluster: SimCluster) -> list[tuple[int, int]]:
        await create(cluster, TOPIC)
        config = {"batch.size": 1000, "linger.ms": 60_000}
        async with producing(cluster, config) as producer:
            await warm_up(producer)
            futures = [producer.send(TOPIC, bytes(100), partition=0) for _ in range(30)]
            await producer.flush()  # the last, partial batch goes now, not after linger.ms
            await asyncio.gather(*futures)
        return [(h.records_count, h.size_in_bytes) for h, _ in stored(cluster, TP)[1:]]

    batches = simulate(tmp_path, scenario)
    assert sum(count for count, _ in batches) == 30
    assert len(batches) == 4
    for count, size in batches[:-1]:
        assert size <= 1000 < size + 131, (count, size)


def test_idempotent_batches_carry_the_producer_id_and_contiguous_sequences(
    tmp_path: Path,
) -> None:
    async def scenario(cluster: SimCluster) -> tuple[int, list[BatchHeader]]:
        await create(cluster, TOPIC)
        async with producing(cluster, {"batch.size": 500}) as producer:
            await asyncio.gather(*(producer.send(TOPIC, bytes(50), partition=0) for _ in range(40)))
            producer_id = producer.producer_id
        return producer_id, [header for header, _ in stored(cluster, TP)]

    producer_id, headers = simulate(tmp_path, scenario)
    assert producer_id >= 0
    assert len(headers) > 1
    expected = 0
    for header in headers:
        assert (header.producer_id, header.producer_epoch) == (producer_id, 0)
        assert header.base_sequence == expected
        expected += header.records_count


def test_compressed_batches_are_stored_compressed(tmp_path: Path) -> None:
    async def scenario(cluster: SimCluster) -> list[tuple[BatchHeader, list[bytes]]]:
        await create(cluster, TOPIC)
        async with producing(cluster, {"compression.type": "gzip"}) as producer:
            await asyncio.gather(
                *(producer.send(TOPIC, b"x%d" % i, partition=0) for i in range(20))
            )
        return stored(cluster, TP)

    (header, values), *_ = simulate(tmp_path, scenario)
    assert header.compression is CompressionType.GZIP
    assert values == [b"x%d" % i for i in range(20)]


# -- partitioning ---------------------------------------------------------------------------------

# Keys of Kafka's published murmur2 vectors (tests/unit/client/test_partitioner.py) and the
# partition a Java producer gives each on a topic of 6 partitions: to_positive(hash) % 6.
KNOWN_KEYS = [
    (b"21", 0),
    (b"foobar", 0),
    (b"abc", 3),
    (b"kafka", 4),
    (b"giberish123456789", 2),
    (b"a-little-bit-long-string", 2),
]


def test_keys_land_on_kafkas_murmur2_partitions(tmp_path: Path) -> None:
    async def scenario(cluster: SimCluster) -> None:
        await create(cluster, TOPIC, partitions=6)
        async with producing(cluster) as producer:
            keys = [key for key, _ in KNOWN_KEYS] + [b"user-%d" % i for i in range(60)]
            results = await asyncio.gather(
                *(producer.send(TOPIC, b"value-" + key, key=key) for key in keys)
            )
        for key, expected in KNOWN_KEYS:
            assert partition_for_key(key, 6) == expected
        for key, metadata in zip(keys, results, strict=True):
            assert metadata.partition == partition_for_key(key, 6), key
            tp = TopicPartition(TOPIC, metadata.partition)
            assert b"value-" + key in stored_values(cluster, tp)

    simulate(tmp_path, scenario)


def test_a_partitioner_function_chooses_instead_of_murmur2(tmp_path: Path) -> None:
    def by_length(topic: str, key: bytes | None, value: bytes | None, count: int) -> int:
        return len(value or b"") % count

    async def scenario(cluster: SimCluster) -> list[int]:
        await create(cluster, TOPIC, partitions=3)
        async with producing(cluster, partitioner=by_length) as producer:
            results = await asyncio.gather(
                *(producer.send(TOPIC, b"v" * n, key=b"k") for n in range(1, 7))
            )
        return [metadata.partition for metadata in results]

    assert simulate(tmp_path, scenario) == [1, 2, 0, 1, 2, 0]


def test_keyless_records_stick_to_a_partition_then_move_when_its_batch_is_sent(
    tmp_path: Path,
) -> None:
    """KIP-480: each burst of keyless records (sent in a row, then awaited) lands on one
    partition; the next burst opens a new batch, so the sticky partition moves."""

    async def scenario(cluster: SimCluster) -> list[set[int]]:
        await create(cluster, TOPIC, partitions=6)
        bursts: list[set[int]] = []
        async with producing(cluster) as producer:
            for burst in range(12):
                results = await asyncio.gather(
                    *(producer.send(TOPIC, b"%d-%d" % (burst, i)) for i in range(10))
                )
                bursts.append({metadata.partition for metadata in results})
        return bursts

    bursts = simulate(tmp_path, scenario)
    assert all(len(partitions) == 1 for partitions in bursts)
    chosen = [next(iter(partitions)) for partitions in bursts]
    assert all(a != b for a, b in itertools.pairwise(chosen))
    assert len(set(chosen)) >= 4
    assert simulate(tmp_path / "again", scenario) == bursts  # the seed decides


def test_keyless_records_avoid_partitions_without_a_leader(tmp_path: Path) -> None:
    """The sticky partition is drawn among the partitions that have a leader."""

    async def scenario(cluster: SimCluster) -> tuple[set[int], set[int]]:
        await create(cluster, TOPIC, partitions=6, rf=1)
        await cluster.crash(3)
        offline = {p for p in range(6) if leader_of(cluster, TopicPartition(TOPIC, p)) == -1}
        await cluster.wait_for(
            lambda: all(
                broker.metadata.partitions[TopicPartition(TOPIC, p)].leader < 0
                for broker in cluster.brokers.values()
                for p in offline
            ),
            what="the controller to take the dead broker's partitions offline",
        )
        chosen: set[int] = set()
        async with producing(cluster) as producer:
            for burst in range(15):
                results = await asyncio.gather(
                    *(producer.send(TOPIC, b"%d-%d" % (burst, i)) for i in range(5))
                )
                chosen |= {metadata.partition for metadata in results}
        return offline, chosen

    offline, chosen = simulate(tmp_path, scenario)
    assert offline
    assert chosen == set(range(6)) - offline


# -- order and idempotence under faults ----------------------------------------------------------


def test_a_produce_stream_that_breaks_while_idle_is_replaced_before_the_next_request(
    tmp_path: Path,
) -> None:
    """The connection's reader waits on the open stream even with nothing in flight, so a
    broker restart between two sends is noticed as it happens: the next request goes on a
    new stream at once instead of failing on the dead one and being retried."""

    async def scenario(cluster: SimCluster) -> tuple[int, int, int]:
        client = await create(cluster, TOPIC, rf=1)
        async with producing(cluster) as producer:
            first = await warm_up(producer)
            await cluster.restart(1)
            await client.wait_for_leaders(TOPIC, 1)
            await asyncio.sleep(5)  # the old stream's break reaches the client meanwhile
            second = await producer.send(TOPIC, b"after", partition=0)
            return first.offset, second.offset, producer.retries

    assert simulate(tmp_path, scenario, brokers=1) == (0, 1, 0)


def test_per_partition_order_survives_a_leader_crash(tmp_path: Path) -> None:
    """Records sent while the leader is killed with five requests in flight are all
    acknowledged, stored once each, in the order they were sent (idempotence: the retries of
    batches the new leader already has are answered as duplicates)."""

    async def scenario(cluster: SimCluster) -> None:
        await create(cluster, TOPIC, min_insync_replicas="2")
        values = [b"%05d" % i for i in range(300)]
        async with producing(cluster) as producer:
            await warm_up(producer)
            old_leader = leader_of(cluster, TP)
            futures = []
            for i, value in enumerate(values):
                futures.append(producer.send(TOPIC, value, partition=0))
                if i == 150:
                    in_flight = sum(len(c.in_flight) for c in producer._connections.values())
                    assert in_flight == producer.config.max_in_flight == 5
                    await cluster.crash(old_leader)
                await asyncio.sleep(0.0002)
            results = await asyncio.gather(*futures)
            assert producer.retries > 0
        assert leader_of(cluster, TP) not in (-1, old_leader)
        offsets = [metadata.offset for metadata in results]
        assert offsets == sorted(offsets) and len(set(offsets)) == len(offsets)
        assert stored_values(cluster, TP) == [b"warm-up", *values]

    simulate(tmp_path, scenario)


@pytest.mark.parametrize("seed", range(6))
def test_exactly_once_in_order_on_a_lossy_network_with_a_leader_crash(
    tmp_path: Path, seed: int
) -> None:
    """Invariant 7 under a seeded fault schedule: 5 % of all messages lost (every loss breaks
    a stream: produce, replication and controller alike) and the leader killed halfway.
    Every record is acknowledged and stored exactly once, in order."""

    async def scenario(cluster: SimCluster) -> None:
        await create(cluster, TOPIC, min_insync_replicas="2")
        values = [b"%05d" % i for i in range(300)]
        async with producing(cluster) as producer:
            await warm_up(producer)
            cluster.network.set_loss(0.05)
            futures = []
            for i, value in enumerate(values):
                futures.append(producer.send(TOPIC, value, partition=0))
                if i == 150:
                    await cluster.crash(leader_of(cluster, TP))
                await asyncio.sleep(0.0005)
            await asyncio.gather(*futures)
            cluster.network.set_loss(0.0)
            assert producer.retries > 0
        assert stored_values(cluster, TP) == [b"warm-up", *values]

    simulate(tmp_path, scenario, seed=seed)


def test_order_without_idempotence_holds_with_one_request_in_flight(tmp_path: Path) -> None:
    """max.in.flight.requests.per.connection=1 without idempotence: a leader crash may
    duplicate records (a retry of an appended batch) but never reorders them."""

    async def scenario(cluster: SimCluster) -> None:
        await create(cluster, TOPIC, min_insync_replicas="2")
        values = [b"%05d" % i for i in range(200)]
        config = {"enable.idempotence": False, "max.in.flight.requests.per.connection": 1}
        async with producing(cluster, config) as producer:
            await warm_up(producer)
            old_leader = leader_of(cluster, TP)
            futures = []
            for i, value in enumerate(values):
                futures.append(producer.send(TOPIC, value, partition=0))
                if i == 100:
                    await cluster.crash(old_leader)
                await asyncio.sleep(0.0002)
            await asyncio.gather(*futures)
        first_seen = list(dict.fromkeys(stored_values(cluster, TP)))
        assert first_seen == [b"warm-up", *values]

    simulate(tmp_path, scenario)


def test_a_leader_moved_away_answers_not_leader_and_the_producer_follows(
    tmp_path: Path,
) -> None:
    """A controlled shutdown moves leadership: the old leader answers NOT_LEADER_OR_FOLLOWER,
    the producer refreshes its metadata and sends to the new leader; nothing is lost or
    duplicated."""

    async def scenario(cluster: SimCluster) -> None:
        await create(cluster, TOPIC)
        values = [b"%04d" % i for i in range(200)]
        async with producing(cluster) as producer:
            await warm_up(producer)
            old_leader = leader_of(cluster, TP)
            refreshes = producer._metadata.refreshes
            futures = []
            for i, value in enumerate(values):
                futures.append(producer.send(TOPIC, value, partition=0))
                if i == 100:
                    stopping = asyncio.get_running_loop().create_task(
                        cluster.stop_broker(old_leader)
                    )
                await asyncio.sleep(0.001)
            await asyncio.gather(*futures)
            await stopping
            assert producer._metadata.refreshes > refreshes
        assert leader_of(cluster, TP) not in (-1, old_leader)
        assert stored_values(cluster, TP) == [b"warm-up", *values]

    simulate(tmp_path, scenario)


def test_new_partitions_are_used_after_the_metadata_refresh(tmp_path: Path) -> None:
    """Topic changes reach the producer by the periodic refresh (metadata.max.age.ms): keys
    hash over the new partition count, keyless records may stick to new partitions."""

    async def scenario(cluster: SimCluster) -> None:
        client = await create(cluster, TOPIC, partitions=2)
        async with producing(cluster, {"metadata.max.age.ms": 1000}) as producer:
            before = await producer.send(TOPIC, b"v", key=b"kafka")
            assert before.partition == partition_for_key(b"kafka", 2)
            request = pb.CreatePartitionsRequest(timeout_ms=10_000)
            request.topics.add(name=TOPIC, count=6)
            await client.controller_call(proto.METHOD_CREATE_PARTITIONS, request)
            await client.wait_for_leaders(TOPIC, 6)
            await cluster.sleep(1.5)
            after = await producer.send(TOPIC, b"v", key=b"kafka")
            assert after.partition == partition_for_key(b"kafka", 6) == 4
            keyless = set()
            for _ in range(20):
                results = await asyncio.gather(*(producer.send(TOPIC, b"x") for _i in range(3)))
                keyless |= {metadata.partition for metadata in results}
            assert keyless & {2, 3, 4, 5}

    simulate(tmp_path, scenario)


@pytest.mark.parametrize(
    ("idempotent", "copies"), [(True, 1), (False, 2)], ids=["idempotent", "not-idempotent"]
)
def test_a_retry_after_a_lost_answer_is_acknowledged_as_a_duplicate(
    tmp_path: Path, idempotent: bool, copies: int
) -> None:
    """Invariant 7. The leader appends the batch but its answer is lost (the link from the
    leader to the producer is cut for a moment); the producer retries the same batch. The
    idempotent producer's retry is recognised by its sequence number and answered with the
    original offset, so the record is stored once; without idempotence it is stored twice —
    which shows the retry really happened."""

    async def scenario(cluster: SimCluster) -> None:
        await create(cluster, TOPIC)
        leader = leader_of(cluster, TP)
        config = {"enable.idempotence": idempotent}
        async with producing(cluster, config) as producer:
            assert (await warm_up(producer)).offset == 0
            future = producer.send(TOPIC, b"once", partition=0)
            await cluster.wait_for(
                lambda: leo_of(cluster, leader, TP) == 2, step_s=0.0001, what="the append"
            )
            assert not future.done()
            cluster.network.one_way(broker_node(leader), PRODUCER)  # the answer is lost
            await cluster.sleep(0.2)
            cluster.network.heal(broker_node(leader))
            metadata = await future
            assert producer.retries >= 1
        # The idempotent retry is answered with the original's offset; the other is a copy.
        assert metadata.offset == copies
        assert stored_values(cluster, TP) == [b"warm-up"] + [b"once"] * copies

    simulate(tmp_path, scenario)


def test_out_of_order_sequence_fails_the_batch_and_the_producer_starts_a_new_id(
    tmp_path: Path,
) -> None:
    """A gap in the sequence (forced here by skipping numbers) is OUT_OF_ORDER_SEQUENCE_NUMBER
    for the partition's oldest unresolved batch: it fails, and the producer takes a new
    producer id so later records go through."""

    async def scenario(cluster: SimCluster) -> None:
        await create(cluster, TOPIC)
        async with producing(cluster) as producer:
            await warm_up(producer)
            first_id = producer.producer_id
            producer._partitions[TP].next_sequence_index += 5  # a gap the broker will refuse
            with pytest.raises(OutOfOrderSequenceNumberError):
                await producer.send(TOPIC, b"after-a-gap", partition=0)
            metadata = await producer.send(TOPIC, b"fine", partition=0)
            assert producer.producer_id_resets == 1
            assert producer.producer_id != first_id
        assert metadata.offset == 1
        assert stored_values(cluster, TP) == [b"warm-up", b"fine"]

    simulate(tmp_path, scenario)


def test_producers_get_distinct_producer_ids(tmp_path: Path) -> None:
    async def scenario(cluster: SimCluster) -> list[int]:
        await create(cluster, TOPIC)
        ids = []
        for i in range(4):
            async with producing(cluster, name=f"producer-{i}") as producer:
                await warm_up(producer)
                ids.append(producer.producer_id)
        return ids

    ids = simulate(tmp_path, scenario)
    assert len(set(ids)) == 4


# -- acks ------------------------------------------------------------------------------------------


def test_acks_0_completes_without_an_offset(tmp_path: Path) -> None:
    async def scenario(cluster: SimCluster) -> RecordMetadata:
        await create(cluster, TOPIC)
        async with producing(cluster, {"acks": "0"}) as producer:
            assert not producer.config.idempotence  # the default true gives way to acks=0
            metadata = await producer.send(TOPIC, b"fire-and-forget", partition=0)
        leader = leader_of(cluster, TP)
        await cluster.wait_for(lambda: leo_of(cluster, leader, TP) == 1, what="the append")
        return metadata

    metadata = simulate(tmp_path, scenario)
    assert (metadata.partition, metadata.offset) == (0, -1)


def test_acks_1_answers_after_the_leader_append_and_acks_all_after_the_isr(
    tmp_path: Path,
) -> None:
    """With the followers cut off from the leader, acks=1 is acknowledged at once; acks=all
    waits until the followers have the record, then is acknowledged."""

    async def scenario(cluster: SimCluster) -> None:
        await create(cluster, TOPIC)
        leader = leader_of(cluster, TP)
        followers = [b for b in cluster.broker_ids if b != leader]
        async with (
            producing(cluster, {"acks": 1}, name="acks-1") as acks_1,
            producing(cluster, {"acks": "all"}, name="acks-all") as acks_all,
        ):
            await acks_1.send(TOPIC, b"warm-up", partition=0)
            await acks_all.send(TOPIC, b"warm-up", partition=0)
            for follower in followers:
                cluster.network.one_way(broker_node(follower), broker_node(leader))
            one = await acks_1.send(TOPIC, b"leader-only", partition=0)
            assert [leo_of(cluster, f, TP) for f in followers] == [2, 2]  # not replicated
            follower_leos: list[int] = []
            pending = acks_all.send(
                TOPIC,
                b"all",
                partition=0,
                callback=lambda _m, _e: follower_leos.extend(
                    leo_of(cluster, f, TP) for f in followers
                ),
            )
            await cluster.sleep(2.0)
            assert not pending.done()
            for follower in followers:
                cluster.network.heal(broker_node(follower))
            everyone = await pending
        assert (one.offset, everyone.offset) == (2, 3)
        assert all(leo > everyone.offset for leo in follower_leos)

    simulate(tmp_path, scenario)


# -- configuration ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("props", "named"),
    [
        ({"no.such.key": 1}, "no.such.key"),
        ({"acks": "2"}, "acks"),
        ({"acks": "some"}, "acks"),
        ({"batch.size": -1}, "batch.size"),
        ({"linger.ms": "soon"}, "linger.ms"),
        ({"compression.type": "brotli"}, "compression.type"),
        ({"partitioner": "random"}, "partitioner"),
        ({"enable.idempotence": True, "acks": "1"}, "acks"),
        ({"enable.idempotence": True, "retries": 0}, "retries"),
        (
            {"enable.idempotence": True, "max.in.flight.requests.per.connection": 6},
            "max.in.flight.requests.per.connection",
        ),
        ({"delivery.timeout.ms": 1000}, "delivery.timeout.ms"),
        ({"bootstrap.servers": ""}, "bootstrap.servers"),
    ],
)
def test_a_bad_config_raises_naming_the_key(props: dict[str, object], named: str) -> None:
    raw: dict[str, object] = {"bootstrap.servers": "broker-1:9092", **props}
    with pytest.raises(InvalidConfigError, match=named.replace(".", r"\.")):
        ProducerConfig.from_props(raw)


@pytest.mark.parametrize(
    ("props", "idempotent"),
    [
        ({}, True),
        ({"acks": "1"}, False),
        ({"acks": 0}, False),
        ({"retries": 0}, False),
        ({"max.in.flight.requests.per.connection": 10}, False),
        ({"enable.idempotence": False}, False),
        ({"enable.idempotence": "true", "acks": "-1"}, True),
    ],
)
def test_idempotence_defaults_on_and_gives_way_when_not_asked_for(
    props: dict[str, object], idempotent: bool
) -> None:
    """Kafka 3.x: the default enable.idempotence=true is dropped, silently, by a conflicting
    setting; only an explicit true conflicts."""
    config = ProducerConfig.from_props({"bootstrap.servers": "b:1", **props})
    assert config.idempotence is idempotent


def test_config_defaults_are_kafkas() -> None:
    config = ProducerConfig.from_props({"bootstrap.servers": "b:1"})
    assert (config.acks, config.batch_size, config.linger_ms) == (-1, 16_384, 0)
    assert (config.retries, config.retry_backoff_ms) == (2**31 - 1, 100)
    assert (config.delivery_timeout_ms, config.request_timeout_ms) == (120_000, 30_000)
    assert (config.max_in_flight, config.max_request_size) == (5, 1_048_576)
    assert config.compression is CompressionType.NONE
    # An unset delivery.timeout.ms is raised to linger.ms + request.timeout.ms, not refused.
    raised = ProducerConfig.from_props(
        {"bootstrap.servers": "b:1", "linger.ms": 100, "request.timeout.ms": 200_000}
    )
    assert raised.delivery_timeout_ms == 200_100


# -- failures that must say what happened -----------------------------------------------------


def test_delivery_timeout_fails_records_with_a_clear_error(tmp_path: Path) -> None:
    """Cut off from every broker, a record fails once delivery.timeout.ms has passed since its
    batch was created, measured on the virtual clock, and the error says so."""

    async def scenario(cluster: SimCluster) -> None:
        await create(cluster, TOPIC)
        config = {"delivery.timeout.ms": 3000, "request.timeout.ms": 1000}
        async with producing(cluster, config) as producer:
            await warm_up(producer)
            cluster.network.isolate(PRODUCER)
            started = cluster.loop.time()
            with pytest.raises(DeliveryTimeoutError, match=r"Expiring 1 record\(s\) for events-0"):
                await producer.send(TOPIC, b"lost", partition=0)
            assert 3.0 <= cluster.loop.time() - started < 3.1
            cluster.network.heal(PRODUCER)

    simulate(tmp_path, scenario)


def test_with_retries_0_a_lost_connection_fails_the_record_at_once(tmp_path: Path) -> None:
    """retries=0 (so no idempotence): the first failure is final, reported as Kafka's
    NETWORK_EXCEPTION when the transport failed, long before delivery.timeout.ms."""

    async def scenario(cluster: SimCluster) -> None:
        await create(cluster, TOPIC)
        async with producing(cluster, {"retries": 0}) as producer:
            assert not producer.config.idempotence
            await warm_up(producer)
            cluster.network.isolate(PRODUCER)
            started = cluster.loop.time()
            with pytest.raises(KafkaError, match="Disconnected from node") as failure:
                await producer.send(TOPIC, b"lost", partition=0)
            assert failure.value.error_name == "NETWORK_EXCEPTION"
            assert cluster.loop.time() - started < 2.0  # the stream's break, not a timeout
            cluster.network.heal(PRODUCER)

    simulate(tmp_path, scenario)


def test_a_topic_missing_from_metadata_fails_after_max_block_ms(tmp_path: Path) -> None:
    async def scenario(cluster: SimCluster) -> None:
        async with producing(cluster, {"max.block.ms": 2000}) as producer:
            with pytest.raises(
                DeliveryTimeoutError, match="Topic nope not present in metadata after 2000 ms"
            ):
                await producer.send("nope", b"v")

    simulate(tmp_path, scenario, **{"auto.create.topics.enable": False})


def test_a_send_to_a_partition_not_in_metadata_yet_waits_for_it(tmp_path: Path) -> None:
    """As Kafka's producer: a record for a partition the producer's metadata does not show
    (just added) waits for a metadata refresh that shows it, up to max.block.ms, and the
    records sent after it stay behind it; one that never appears fails with Kafka's message.
    (It used to fail at once, which broke a send right after create_partitions.)"""

    async def scenario(cluster: SimCluster) -> None:
        await create(cluster, TOPIC, partitions=2)
        async with producing(cluster, {"max.block.ms": 5000}) as producer:
            await producer.send(TOPIC, b"first", partition=0)  # metadata: 2 partitions
            admin = AdminClient(
                [broker_address(b) for b in cluster.broker_ids],
                transport=SimTransport(cluster.network, "admin"),
                clock=cluster.clock,
            )
            await admin.create_partitions(TOPIC, 3)
            new = producer.send(TOPIC, b"new", partition=2)
            after = producer.send(TOPIC, b"after", partition=0)
            assert (await new).partition == 2
            assert (await after).offset == 1
            with pytest.raises(
                DeliveryTimeoutError,
                match=f"Partition 7 of topic {TOPIC} with partition count 3 is not present "
                "in metadata after 5000 ms",
            ):
                await producer.send(TOPIC, b"never", partition=7)

    simulate(tmp_path, scenario)


def test_a_send_to_an_unknown_topic_creates_it_when_the_brokers_allow(tmp_path: Path) -> None:
    """auto.create.topics.enable (Kafka's default): the broker creates the topic with
    num.partitions and default.replication.factor and the send goes through."""

    async def scenario(cluster: SimCluster) -> None:
        async with producing(cluster) as producer:
            metadata = await producer.send("fresh", b"v", key=b"k")
            assert (metadata.topic, metadata.offset) == ("fresh", 0)
        described = await cluster.client().refresh_metadata(["fresh"])
        assert [len(p.replicas) for p in described.topics[0].partitions] == [3, 3]

    simulate(tmp_path, scenario, **{"num.partitions": 2, "default.replication.factor": 3})


def test_a_record_larger_than_max_request_size_fails_before_sending(tmp_path: Path) -> None:
    async def scenario(cluster: SimCluster) -> None:
        await create(cluster, TOPIC)
        async with producing(cluster, {"max.request.size": 1000}) as producer:
            with pytest.raises(RecordTooLargeError, match=r"max\.request\.size"):
                await producer.send(TOPIC, bytes(1000), partition=0)
            assert producer.requests_sent == 0
            assert (await producer.send(TOPIC, bytes(100), partition=0)).offset == 0

    simulate(tmp_path, scenario)


def test_callbacks_hear_success_and_failure(tmp_path: Path) -> None:
    async def scenario(cluster: SimCluster) -> None:
        await create(cluster, TOPIC)
        heard: list[tuple[RecordMetadata | None, BaseException | None]] = []
        async with producing(cluster, {"max.request.size": 500}) as producer:
            producer.send(TOPIC, b"ok", partition=0, callback=lambda m, e: heard.append((m, e)))
            producer.send(TOPIC, bytes(600), callback=lambda m, e: heard.append((m, e)))
            await producer.flush()
            await asyncio.sleep(0)  # done-callbacks run on the next loop turn
        (ok, no_error), (no_metadata, failed) = sorted(heard, key=lambda item: item[0] is None)
        assert isinstance(ok, RecordMetadata) and no_error is None
        assert (ok.topic, ok.partition, ok.offset) == (TOPIC, 0, 0)
        assert no_metadata is None and isinstance(failed, RecordTooLargeError)

    simulate(tmp_path, scenario)


def test_misuse_raises_at_once(tmp_path: Path) -> None:
    async def scenario(cluster: SimCluster) -> None:
        await create(cluster, TOPIC, partitions=2)
        async with producing(cluster) as producer:
            await warm_up(producer)
            # (A partition above the known count waits for metadata, as in Kafka: see
            # test_a_send_to_a_partition_not_in_metadata_yet_waits_for_it.)
            with pytest.raises(ValueError, match=r"-1 is not in the range \[0\.\.\.2\]"):
                producer.send(TOPIC, b"v", partition=-1)
            with pytest.raises(ValueError, match="Invalid timestamp"):
                producer.send(TOPIC, b"v", timestamp=-5)
            with pytest.raises(TypeError, match="value must be bytes"):
                producer.send(TOPIC, "text")  # type: ignore[arg-type]
        with pytest.raises(ProducerClosedError, match="after producer has been closed"):
            producer.send(TOPIC, b"late")

    simulate(tmp_path, scenario)


def test_close_with_a_timeout_fails_what_is_left(tmp_path: Path) -> None:
    async def scenario(cluster: SimCluster) -> None:
        await create(cluster, TOPIC)
        transport = SimTransport(cluster.network, PRODUCER)
        producer = Producer(
            {"bootstrap.servers": broker_address(1)}, transport=transport, clock=cluster.clock
        )
        await warm_up(producer)
        cluster.network.isolate(PRODUCER)
        future = producer.send(TOPIC, b"stuck", partition=0)
        started = cluster.loop.time()
        await producer.close(timeout_s=0.5)
        assert cluster.loop.time() - started == pytest.approx(0.5)
        with pytest.raises(ProducerClosedError, match="closed forcefully"):
            await future
        await transport.close()

    simulate(tmp_path, scenario)


def test_a_partition_without_a_leader_does_not_freeze_the_producer(tmp_path: Path) -> None:
    """Regression: with a record queued for a leaderless partition, the sender used to wake
    itself on every loop (asking for metadata) and never yield, so the refresh never ran and
    the whole event loop hung (virtual time stopped). A wall-clock alarm turns a hang into a
    failure; the record must be written once the leader is back."""
    import signal

    def hung(_signum: int, _frame: object) -> None:
        raise AssertionError("the event loop hung: the producer spins without yielding")

    async def scenario(cluster: SimCluster) -> None:
        await create(cluster, TOPIC, partitions=1, rf=1)
        leader = leader_of(cluster, TopicPartition(TOPIC, 0))
        async with producing(cluster) as producer:
            assert (await producer.send(TOPIC, b"first", partition=0)).offset == 0
            await cluster.crash(leader)
            await cluster.sleep(8)  # the session expires: the partition goes offline
            pending = producer.send(TOPIC, b"second", partition=0)
            await cluster.sleep(5)
            assert not pending.done()
            await cluster.start_broker(leader)
            assert (await pending).offset == 1

    previous = signal.signal(signal.SIGALRM, hung)
    signal.alarm(60)
    try:
        simulate(tmp_path, scenario)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
