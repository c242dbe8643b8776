"""A broker started on a partition directory written before Kafka 0.11 (message formats v0/v1,
gzip wrappers among them), with v2 batches appended after it: the consumer, the simple client
and ``Log.batches`` read every record with its offset, key, value and timestamp."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from kafkasim.common.sentinels import NO_TIMESTAMP
from kafkasim.common.types import TopicPartition
from kafkasim.sim.cluster import SimCluster
from kafkasim.storage.records.batch import TimestampType
from tests.sim.helpers import create, leader_of, partition_on, simulate
from tests.sim.test_consumer import consuming, poll_until
from tests.unit.storage.legacy_logs import T0, write_legacy_partition

TOPIC = "old"
TP = TopicPartition(TOPIC, 0)


async def _serve_legacy_partition(
    cluster: SimCluster, magic: int, partition_dir_from: Path
) -> tuple[int, list[tuple[int, bytes]]]:
    """Create the topic, stop its leader, put a v``magic`` partition directory in place of
    the partition's, start the broker again; the leader and every (offset, value) written."""
    client = await create(cluster, TOPIC, rf=1)
    leader = leader_of(cluster, TP)
    await cluster.stop_broker(leader)
    partition_dir = cluster.log_dirs(leader)[0] / f"{TOPIC}-0"
    for path in partition_dir.iterdir():
        if path.suffix in (".log", ".index", ".timeindex"):
            path.unlink()
    written = write_legacy_partition(partition_dir_from, magic=magic)
    for path in partition_dir_from.iterdir():
        shutil.copy(path, partition_dir / path.name)
    await cluster.start_broker(leader)
    await client.wait_for_leaders(TOPIC, 1)
    # The metadata names the leader before its LeaderAndIsr has made the partition (a new
    # controller sends UpdateMetadata first, as Kafka's does): wait for the partition itself.
    partitions = cluster.brokers[leader].replica_manager.partitions
    await cluster.wait_for(
        lambda: TP in partitions and partitions[TP].log.high_watermark == len(written),
        what="the legacy records below the high watermark",
    )
    return leader, written


@pytest.mark.parametrize("magic", [0, 1])
def test_a_legacy_partition_is_read_whole_with_v2_batches_after_it(
    tmp_path: Path, magic: int
) -> None:
    async def scenario(cluster: SimCluster) -> None:
        leader, written = await _serve_legacy_partition(cluster, magic, tmp_path / "legacy")
        legacy_end = len(written)
        client = cluster.client("producer")
        produced = await client.produce(TP, [b"new-0", b"new-1"], keys=[b"n0", b"n1"])
        assert produced.ok and produced.base_offset == legacy_end
        expected = [(o, b"k%d" % o, v) for o, v in written] + [
            (legacy_end, b"n0", b"new-0"),
            (legacy_end + 1, b"n1", b"new-1"),
        ]

        # The consumer, from the beginning: one fetch mixes v0/v1 messages and v2 batches.
        async with consuming(cluster, {"auto.offset.reset": "earliest"}) as consumer:
            consumer.assign([TP])
            records = await poll_until(consumer, len(expected))
        assert [(r.offset, r.key, r.value) for r in records] == expected
        legacy, new = records[:legacy_end], records[legacy_end:]
        if magic == 0:
            assert {(r.timestamp, r.timestamp_type) for r in legacy} == {
                (NO_TIMESTAMP, TimestampType.NO_TIMESTAMP_TYPE)
            }
        else:
            assert [(r.timestamp, r.timestamp_type) for r in legacy] == [
                (T0 + r.offset, TimestampType.CREATE_TIME) for r in legacy
            ]
        assert {r.timestamp_type for r in new} == {TimestampType.CREATE_TIME}
        assert all(r.timestamp > T0 for r in new)

        # From an offset inside a gzip wrapper (offsets 1-3): the records before it are skipped.
        async with consuming(cluster, name="seeker") as consumer:
            consumer.assign([TP])
            consumer.seek(TP, 2)
            records = await poll_until(consumer, len(expected) - 2)
        assert [(r.offset, r.value) for r in records] == [(o, v) for o, _, v in expected[2:]]

        # The simple client, and Log.batches (the coordinator's loader, the sim's snapshot).
        assert [(r.offset, r.key, r.value) for r in await client.read_all(TP)] == expected
        assert [(r.offset, r.value) for r in (await client.fetch(TP, 2)).records][:2] == [
            (2, written[2][1]),
            (3, written[3][1]),
        ]
        log = partition_on(cluster, leader, TP).log
        assert [(r.offset, r.key, r.value) for _, rs in log.batches() for r in rs] == expected

    simulate(tmp_path / "cluster", scenario, brokers=1)
