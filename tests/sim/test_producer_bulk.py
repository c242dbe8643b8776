"""``Producer.send_many`` against an in-process cluster on the virtual clock.

It must put records exactly where ``send`` in a loop puts them (partitions, batches, order),
report every record's outcome (offsets, errors per record, per-record callbacks when asked)
and refuse bad input before queueing anything.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pyarrow as pa
import pytest

from kafkasim.client.bulk import SendManyResult
from kafkasim.client.partitioner import partition_for_key
from kafkasim.client.producer import (
    DeliveryTimeoutError,
    IllegalTransactionStateError,
    ProducerClosedError,
    RecordMetadata,
)
from kafkasim.common.errors import RecordTooLargeError
from kafkasim.common.types import TopicPartition
from kafkasim.sim.cluster import SimCluster
from tests.sim.helpers import create, leader_of, simulate
from tests.sim.test_producer import TOPIC, TP, producing, stored, stored_values, warm_up


def _layout(cluster: SimCluster, partitions: int) -> list[list[tuple[int, list[bytes]]]]:
    """Per partition, each stored batch's record count and values."""
    return [
        [(h.records_count, values) for h, values in stored(cluster, TopicPartition(TOPIC, p))]
        for p in range(partitions)
    ]


@pytest.mark.parametrize("keyed", [False, True])
def test_send_many_fills_the_same_batches_as_send_in_a_loop(tmp_path: Path, keyed: bool) -> None:
    """Same seed, same records: send_many leaves the same batches on the same partitions
    (sticky partitioner moving on each new batch, or murmur2 for keys) as send() in a row."""
    values = [b"%04d" % i + bytes(60) for i in range(400)]
    keys = [b"k%d" % (i % 7) for i in range(400)] if keyed else None
    config = {"batch.size": 1500, "linger.ms": 60_000}

    async def with_send(cluster: SimCluster) -> list[list[tuple[int, list[bytes]]]]:
        await create(cluster, TOPIC, partitions=4)
        async with producing(cluster, config) as producer:
            futures = [
                producer.send(TOPIC, v, key=None if keys is None else keys[i])
                for i, v in enumerate(values)
            ]
            await producer.flush()
            await asyncio.gather(*futures)
        return _layout(cluster, 4)

    async def with_send_many(cluster: SimCluster) -> list[list[tuple[int, list[bytes]]]]:
        await create(cluster, TOPIC, partitions=4)
        async with producing(cluster, config) as producer:
            future = producer.send_many(TOPIC, values, keys=keys)
            await producer.flush()
            result = await future
        assert not result.errors and len(result) == 400
        if keys is not None:
            assert result.partitions == [partition_for_key(k, 4) for k in keys]
        for p in range(4):  # offsets: 0, 1, 2, ... per partition, in the order sent
            offsets = [o for o, q in zip(result.offsets, result.partitions, strict=True) if q == p]
            assert offsets == list(range(len(offsets)))
        return _layout(cluster, 4)

    expected = simulate(tmp_path / "send", with_send)
    assert sum(len(batches) for batches in expected) > 4  # several batches per partition
    assert simulate(tmp_path / "send_many", with_send_many) == expected


def test_send_many_and_send_share_a_batch_in_call_order(tmp_path: Path) -> None:
    async def scenario(cluster: SimCluster) -> None:
        await create(cluster, TOPIC)
        async with producing(cluster, {"linger.ms": 1000}) as producer:
            await warm_up(producer)
            first = producer.send(TOPIC, b"a", partition=0)
            many = producer.send_many(TOPIC, [b"b", b"c", b"d"], partition=0)
            last = producer.send(TOPIC, b"e", partition=0)
            await producer.flush()
            assert (await first).offset == 1
            assert (await many).offsets == [2, 3, 4]
            assert (await last).offset == 5
        assert [h.records_count for h, _ in stored(cluster, TP)] == [1, 5]
        assert stored_values(cluster, TP) == [b"warm-up", b"a", b"b", b"c", b"d", b"e"]

    simulate(tmp_path, scenario)


def test_send_many_reports_each_record_and_calls_back_per_record(tmp_path: Path) -> None:
    """A record over max.request.size fails alone (its error at its index, as send fails its
    future); the others are written in order; the callback hears every record once."""

    async def scenario(cluster: SimCluster) -> None:
        await create(cluster, TOPIC)
        heard: list[tuple[RecordMetadata | None, BaseException | None]] = []
        values = [b"one", bytes(800), b"three", b"four"]
        async with producing(cluster, {"max.request.size": 500}) as producer:
            future = producer.send_many(
                TOPIC,
                values,
                keys=[b"k1", None, b"k3", None],
                partition=0,
                timestamps=[10, 20, 30, 40],
                callback=lambda m, e: heard.append((m, e)),
            )
            result = await future
        assert set(result.errors) == {1}
        assert isinstance(result.errors[1], RecordTooLargeError)
        assert result.offsets == [0, -1, 1, 2]
        assert result.metadata(2) == RecordMetadata(TOPIC, 0, 1, 30)
        with pytest.raises(RecordTooLargeError, match=r"max\.request\.size"):
            result.metadata(1)
        with pytest.raises(RecordTooLargeError):
            result.raise_first_error()
        assert stored_values(cluster, TP) == [b"one", b"three", b"four"]
        assert len(heard) == 4
        failures = [e for m, e in heard if m is None]
        assert len(failures) == 1 and isinstance(failures[0], RecordTooLargeError)
        assert sorted(m.offset for m, _ in heard if m is not None) == [0, 1, 2]

    simulate(tmp_path, scenario)


def test_send_many_to_a_log_append_time_topic_reports_the_broker_time(tmp_path: Path) -> None:
    async def scenario(cluster: SimCluster) -> None:
        await create(cluster, TOPIC, message_timestamp_type="LogAppendTime")
        async with producing(cluster) as producer:
            result = await producer.send_many(TOPIC, [b"a", b"b"], timestamps=5)
        assert result.timestamps[0] == result.timestamps[1] != 5
        assert result.timestamps[0] == stored(cluster, TP)[0][0].max_timestamp

    simulate(tmp_path, scenario)


def test_send_many_waits_for_an_unknown_topic_then_sends(tmp_path: Path) -> None:
    """The first send_many of a topic the producer has no metadata for (auto-created by the
    broker) waits for it and goes through, in order."""

    async def scenario(cluster: SimCluster) -> SendManyResult:
        async with producing(cluster) as producer:
            return await producer.send_many("fresh", [b"x%d" % i for i in range(5)], partition=0)

    result = simulate(tmp_path, scenario, **{"num.partitions": 1})
    assert result.offsets == [0, 1, 2, 3, 4] and not result.errors


def test_send_many_to_a_missing_topic_fails_every_record_after_max_block_ms(
    tmp_path: Path,
) -> None:
    async def scenario(cluster: SimCluster) -> SendManyResult:
        async with producing(cluster, {"max.block.ms": 2000}) as producer:
            return await producer.send_many("nope", [b"a", b"b", b"c"])

    result = simulate(tmp_path, scenario, **{"auto.create.topics.enable": False})
    assert sorted(result.errors) == [0, 1, 2]
    assert all(isinstance(e, DeliveryTimeoutError) for e in result.errors.values())
    assert "Topic nope not present in metadata after 2000 ms" in str(result.errors[0])


def test_send_many_keeps_order_across_a_leader_crash(tmp_path: Path) -> None:
    """Idempotence holds for bulk sends too: every record stored once, in order."""

    async def scenario(cluster: SimCluster) -> None:
        await create(cluster, TOPIC, min_insync_replicas="2")
        chunks = [[b"%03d-%02d" % (c, i) for i in range(20)] for c in range(30)]
        async with producing(cluster) as producer:
            await warm_up(producer)
            old_leader = leader_of(cluster, TP)
            futures = []
            for c, chunk in enumerate(chunks):
                futures.append(producer.send_many(TOPIC, chunk, partition=0))
                if c == 15:
                    await cluster.crash(old_leader)
                await asyncio.sleep(0.002)
            results = await asyncio.gather(*futures)
            assert producer.retries > 0
        offsets = [o for result in results for o in result.offsets]
        assert not any(result.errors for result in results)
        assert offsets == list(range(1, 601))
        assert stored_values(cluster, TP) == [b"warm-up", *(v for c in chunks for v in c)]

    simulate(tmp_path, scenario)


def test_send_many_refuses_bad_input_before_queueing_anything(tmp_path: Path) -> None:
    async def scenario(cluster: SimCluster) -> None:
        await create(cluster, TOPIC, partitions=2)
        async with producing(cluster) as producer:
            await warm_up(producer)
            with pytest.raises(ValueError, match="keys has 1 entries for 2 values"):
                producer.send_many(TOPIC, [b"a", b"b"], keys=[b"k"])
            with pytest.raises(ValueError, match="timestamps has 3 entries for 2 values"):
                producer.send_many(TOPIC, [b"a", b"b"], timestamps=[1, 2, 3])
            with pytest.raises(TypeError, match=r"values\[1\] must be bytes or None, not str"):
                producer.send_many(TOPIC, [b"a", "b", b"c"])
            with pytest.raises(TypeError, match=r"keys\[0\] must be bytes or None, not int"):
                producer.send_many(TOPIC, [b"a"], keys=[7])
            with pytest.raises(ValueError, match=r"Invalid timestamp: -5 \(record 1\)"):
                producer.send_many(TOPIC, [b"a", b"b"], timestamps=[1, -5])
            with pytest.raises(ValueError, match=r"-1 is not in the range \[0\.\.\.2\]"):
                producer.send_many(TOPIC, [b"a"], partition=-1)
            memory = producer.send_many(TOPIC, [bytearray(b"x"), memoryview(b"y")], partition=1)
            assert (await memory).offsets == [0, 1]
            assert (await producer.send_many(TOPIC, [])).offsets == []
        with pytest.raises(ProducerClosedError, match="after producer has been closed"):
            producer.send_many(TOPIC, [b"late"])
        assert stored_values(cluster, TP) == [b"warm-up"]
        assert stored_values(cluster, TopicPartition(TOPIC, 1)) == [b"x", b"y"]

    simulate(tmp_path, scenario)


def test_send_many_applies_the_serializers(tmp_path: Path) -> None:
    async def scenario(cluster: SimCluster) -> None:
        await create(cluster, TOPIC)
        config = {"key.serializer": "str", "value.serializer": "str"}
        async with producing(cluster, config) as producer:
            result = await producer.send_many(TOPIC, ["a", None], keys=["k", "k"], partition=0)
            assert result.offsets == [0, 1]
        assert stored_values(cluster, TP) == [b"a", b""]

    simulate(tmp_path, scenario)


def test_send_arrow_sends_a_tables_rows_in_order(tmp_path: Path) -> None:
    """Binary or string columns (strings as UTF-8, nulls as None), timestamps from an Arrow
    timestamp column; a missing or mistyped column raises before anything is queued."""
    table = pa.table(
        {
            "value": pa.array(["a", None, "é"], pa.string()),
            "key": pa.array([b"k1", b"k2", None], pa.binary()),
            "at": pa.array([1_000, 2_000, 3_000], pa.timestamp("ms")),
            "n": pa.array([1, 2, 3], pa.int64()),
        }
    )

    async def scenario(cluster: SimCluster) -> None:
        await create(cluster, TOPIC)
        config = {"value.serializer": "json"}  # not applied: Arrow columns are bytes
        async with producing(cluster, config) as producer:
            with pytest.raises(KeyError, match="no column 'nope'"):
                producer.send_arrow(TOPIC, table, value="nope")
            with pytest.raises(TypeError, match="column 'n' is int64, not binary or string"):
                producer.send_arrow(TOPIC, table, value="n")
            with pytest.raises(TypeError, match="column 'key' is binary, not a timestamp"):
                producer.send_arrow(TOPIC, table, timestamp="key")
            with pytest.raises(TypeError, match="Table or RecordBatch"):
                producer.send_arrow(TOPIC, [b"x"])
            batch = table.to_batches()[0]
            result = await producer.send_arrow(TOPIC, batch, key="key", timestamp="at", partition=0)
        assert result.offsets == [0, 1, 2] and result.timestamps == [1_000, 2_000, 3_000]
        ((header, values),) = stored(cluster, TP)
        assert values == [b"a", b"", "é".encode()]  # stored() shows a null value as b""
        assert header.first_timestamp == 1_000

    simulate(tmp_path, scenario)


def test_send_many_asks_a_partitioner_function_per_record(tmp_path: Path) -> None:
    def by_length(topic: str, key: bytes | None, value: bytes | None, count: int) -> int:
        return len(value or b"") % count

    async def scenario(cluster: SimCluster) -> list[int]:
        await create(cluster, TOPIC, partitions=3)
        async with producing(cluster, partitioner=by_length) as producer:
            result = await producer.send_many(TOPIC, [b"v" * n for n in range(1, 7)])
        return result.partitions

    assert simulate(tmp_path, scenario) == [1, 2, 0, 1, 2, 0]


def _chunk(tag: bytes) -> list[bytes]:
    return [tag + b"%03d" % i + bytes(60) for i in range(50)]


def test_send_many_to_an_unknown_topic_waits_as_one_entry_per_call(tmp_path: Path) -> None:
    """Before the topic's metadata is known a send_many call waits as one entry, not one per
    record; released, its records go where they go with the metadata known (same batches),
    in call order with a send() between the calls."""

    async def scenario(cluster: SimCluster) -> tuple[list[int], list[int]]:
        await create(cluster, TOPIC)
        await create(cluster, "known")
        async with producing(cluster, {"batch.size": 1500, "linger.ms": 1000}) as producer:
            await warm_up(producer, "known")
            for topic in (TOPIC, "known"):
                first = producer.send_many(topic, _chunk(b"a"), partition=0)
                between = producer.send(topic, b"between", partition=0)
                second = producer.send_many(topic, _chunk(b"b"), partition=0)
                if topic == TOPIC:  # the producer has no metadata of TOPIC yet
                    assert len(producer._accumulator.waiting[TOPIC]) == 3
                await producer.flush()
                base = 0 if topic == TOPIC else 1
                assert (await first).offsets == list(range(base, base + 50))
                assert (await between).offset == base + 50
                assert (await second).offsets == list(range(base + 51, base + 101))
        known = TopicPartition("known", 0)
        assert stored_values(cluster, TP) == [*_chunk(b"a"), b"between", *_chunk(b"b")]
        assert stored_values(cluster, known)[1:] == stored_values(cluster, TP)
        counts = [h.records_count for h, _ in stored(cluster, TP)]
        return counts, [h.records_count for h, _ in stored(cluster, known)][1:]

    waited, direct = simulate(tmp_path, scenario)
    assert len(waited) > 2 and waited == direct


def test_send_many_released_from_waiting_fails_only_what_a_new_batch_refused(
    tmp_path: Path,
) -> None:
    """Records released after waiting for metadata never raise: when a new batch's
    partition is refused (a transaction that may not take it: the accumulator's
    add_partition raises), the records before it are written and those from it on fail
    with that error, each once."""
    refusal = IllegalTransactionStateError("send", "ABORTING_TRANSACTION", "aborting")

    async def scenario(cluster: SimCluster) -> SendManyResult:
        await create(cluster, TOPIC)
        async with producing(cluster, {"batch.size": 1500, "linger.ms": 1000}) as producer:
            batches = 0

            def add_partition(_tp: TopicPartition) -> None:
                nonlocal batches
                batches += 1
                if batches == 2:
                    raise refusal

            producer._accumulator.add_partition = add_partition
            future = producer.send_many(TOPIC, _chunk(b"a"), partition=0)
            await producer.flush()
            return await future

    result = simulate(tmp_path, scenario)
    written = result.offsets.index(-1)
    assert 0 < written < 50
    assert result.offsets[:written] == list(range(written))
    assert sorted(result.errors) == list(range(written, 50))
    assert all(e is refusal for e in result.errors.values())
