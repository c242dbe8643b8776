"""Offsets as Kafka's clients ask for them: ``offsets_for_times`` on record timestamps the
producer set (out of order, as Kafka allows with CreateTime), the watermarks, ListOffsets for
the earliest, the latest, a timestamp and the max timestamp (KIP-734, AdminClient.list_offsets),
and consumers seeking to an offset and to the offset a time lookup answered."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from confluent_kafka import OFFSET_END, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec
from kafka import KafkaConsumer
from kafka import TopicPartition as KpPartition

from kafkasim.cluster.local import LocalCluster
from tests.interop.kafkasim_side import DEADLINE_S, create_topic

TOPIC = "timed"
T0 = 1_700_000_000_000
# Record i's timestamp is T0 + SECONDS[i] s: the largest (9 s) is at offset 3, not the last.
SECONDS = [0, 1, 2, 9, 3, 4, 5, 6, 7, 8]


@pytest.fixture(scope="module")
def bootstrap(kafka_cluster: LocalCluster) -> str:
    """``timed``: one partition holding ten records ``v0``..``v9`` with the timestamps of
    ``SECONDS``."""
    create_topic(kafka_cluster, TOPIC, configs={"min.insync.replicas": "2"})
    errors: list[object] = []
    producer = Producer({"bootstrap.servers": kafka_cluster.kafka_bootstrap, "acks": "all"})
    for i, s in enumerate(SECONDS):
        producer.produce(
            TOPIC,
            b"v%d" % i,
            partition=0,
            timestamp=T0 + s * 1000,
            on_delivery=lambda err, _msg: errors.append(err) if err else None,
        )
    assert producer.flush(DEADLINE_S) == 0
    assert errors == []
    return kafka_cluster.kafka_bootstrap


@pytest.fixture
def consumer(bootstrap: str) -> Iterator[Consumer]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "offsets", "enable.auto.commit": 0})
    try:
        yield c
    finally:
        c.close()


def poll_one(consumer: Consumer) -> tuple[int, bytes, int]:
    """The next record's (offset, value, timestamp)."""
    deadline = time.monotonic() + DEADLINE_S
    while time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is None:
            continue
        assert msg.error() is None, msg.error()
        return msg.offset(), msg.value(), msg.timestamp()[1]
    raise AssertionError("no record within the deadline")


@pytest.mark.parametrize(
    ("target_s", "expected"),
    [
        (-5, 0),  # before every record: the first
        (0, 0),  # equal to the first record's
        (1.5, 2),  # the first record at or after it, in offset order
        (2.5, 3),  # offset 3 (9 s) comes before offset 4 (3 s)
        (8.5, 3),
        (9, 3),
        (9.5, -1),  # after every record: none (librdkafka's offset -1, OFFSET_END)
    ],
)
def test_offsets_for_times_answers_the_first_offset_at_or_after_the_time(
    consumer: Consumer, target_s: float, expected: int
) -> None:
    [found] = consumer.offsets_for_times(
        [TopicPartition(TOPIC, 0, T0 + int(target_s * 1000))], timeout=DEADLINE_S
    )
    assert found.error is None
    assert found.offset == expected
    if expected == -1:
        assert found.offset == OFFSET_END


def test_watermarks_are_the_log_start_and_the_high_watermark(consumer: Consumer) -> None:
    tp = TopicPartition(TOPIC, 0)
    assert consumer.get_watermark_offsets(tp, timeout=DEADLINE_S) == (0, len(SECONDS))
    consumer.assign([TopicPartition(TOPIC, 0, 0)])
    poll_one(consumer)
    # Cached from the fetch responses now; still the same values.
    assert consumer.get_watermark_offsets(tp, cached=True) == (0, len(SECONDS))


def test_admin_list_offsets_earliest_latest_timestamp_and_max_timestamp(bootstrap: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    tp = TopicPartition(TOPIC, 0)

    def answer(spec: OffsetSpec) -> tuple[int, int]:
        result = admin.list_offsets({tp: spec}, request_timeout=DEADLINE_S)[tp].result()
        return result.offset, result.timestamp

    assert answer(OffsetSpec.earliest())[0] == 0
    assert answer(OffsetSpec.latest())[0] == len(SECONDS)
    assert answer(OffsetSpec.for_timestamp(T0 + 2500)) == (3, T0 + 9000)
    # The record with the largest timestamp, wherever it is in the log.
    assert answer(OffsetSpec.max_timestamp()) == (3, T0 + 9000)


def test_a_consumer_seeks_forward_and_back_and_to_a_looked_up_time(consumer: Consumer) -> None:
    consumer.assign([TopicPartition(TOPIC, 0, 0)])
    assert poll_one(consumer)[:2] == (0, b"v0")
    assert poll_one(consumer)[:2] == (1, b"v1")
    consumer.seek(TopicPartition(TOPIC, 0, 7))
    assert poll_one(consumer) == (7, b"v7", T0 + 6000)
    consumer.seek(TopicPartition(TOPIC, 0, 2))
    assert poll_one(consumer) == (2, b"v2", T0 + 2000)
    # Where a time lookup points: the first record at or after 4 s is offset 3 (9 s).
    [at] = consumer.offsets_for_times([TopicPartition(TOPIC, 0, T0 + 4000)], timeout=DEADLINE_S)
    consumer.seek(at)
    assert poll_one(consumer) == (3, b"v3", T0 + 9000)


def test_kafka_python_looks_up_offsets_and_seeks(bootstrap: str) -> None:
    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap.split(","),
        enable_auto_commit=False,
        request_timeout_ms=int(DEADLINE_S * 1000),
    )
    try:
        tp = KpPartition(TOPIC, 0)
        assert consumer.beginning_offsets([tp]) == {tp: 0}
        assert consumer.end_offsets([tp]) == {tp: len(SECONDS)}
        found = consumer.offsets_for_times({tp: T0 + 2500})[tp]
        assert found is not None
        assert (found.offset, found.timestamp) == (3, T0 + 9000)
        assert consumer.offsets_for_times({tp: T0 + 9500}) == {tp: None}
        consumer.assign([tp])
        consumer.seek(tp, 8)
        got = []
        deadline = time.monotonic() + DEADLINE_S
        while len(got) < 2 and time.monotonic() < deadline:
            got += [(m.offset, m.value) for m in consumer.poll(timeout_ms=500).get(tp, [])]
        assert got == [(8, b"v8"), (9, b"v9")]
    finally:
        consumer.close()
