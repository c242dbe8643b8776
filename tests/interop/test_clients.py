"""Kafka's own clients produce and consume over the Kafka listener: confluent-kafka
(librdkafka), kafka-python, aiokafka and kcat each write keyed records (with headers where the
client sends them) and read them back in order; kafkasim's consumer and ``console-consumer``
read what they wrote, and confluent-kafka and kcat read what ``console-producer`` wrote."""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.structs import TopicPartition as AioPartition
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, Producer
from confluent_kafka import TopicPartition as CkPartition
from kafka import KafkaConsumer, KafkaProducer
from kafka import TopicPartition as KpPartition

from kafkasim.cluster.local import LocalCluster
from tests.cli_run import kafkasim
from tests.interop.kafkasim_side import DEADLINE_S, create_topic, read_partition

COUNT = 20


@dataclass(frozen=True)
class Rec:
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...] = ()


def records(client: str) -> list[Rec]:
    """What ``client`` writes: numbered keys and values; headers per record (kcat sets the same
    headers on every record of a run)."""
    out = []
    for i in range(COUNT):
        headers = (("by", client.encode()),) if client == "kcat" else (("n", b"%d" % i),)
        out.append(Rec(b"k%d" % i, f"{client}-value-{i}".encode(), headers))
    return out


# -- confluent-kafka ------------------------------------------------------------------------


def confluent_produce(bootstrap: str, topic: str, recs: list[Rec]) -> None:
    errors: list[object] = []
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
    for r in recs:
        producer.produce(
            topic,
            r.value,
            key=r.key,
            headers=list(r.headers),
            partition=0,
            on_delivery=lambda err, _msg: errors.append(err) if err else None,
        )
    assert producer.flush(DEADLINE_S) == 0, "records still undelivered"
    assert errors == []


def confluent_consume(bootstrap: str, topic: str, count: int) -> list[Rec]:
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "interop", "enable.auto.commit": False}
    )
    try:
        consumer.assign([CkPartition(topic, 0, OFFSET_BEGINNING)])
        got: list[Rec] = []
        deadline = time.monotonic() + DEADLINE_S
        while len(got) < count and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error():
                raise KafkaException(msg.error())
            assert msg.offset() == len(got)
            got.append(Rec(msg.key(), msg.value(), tuple(msg.headers() or ())))
        return got
    finally:
        consumer.close()


# -- kafka-python ---------------------------------------------------------------------------


def kafka_python_produce(bootstrap: str, topic: str, recs: list[Rec]) -> None:
    producer = KafkaProducer(bootstrap_servers=bootstrap.split(","), acks="all", linger_ms=5)
    try:
        futures = [
            producer.send(topic, r.value, key=r.key, headers=list(r.headers), partition=0)
            for r in recs
        ]
        offsets = [f.get(timeout=DEADLINE_S).offset for f in futures]
        assert offsets == sorted(offsets)
    finally:
        producer.close(timeout=10)


def kafka_python_consume(bootstrap: str, topic: str, count: int) -> list[Rec]:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap.split(","), enable_auto_commit=False)
    try:
        tp = KpPartition(topic, 0)
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        got: list[Rec] = []
        deadline = time.monotonic() + DEADLINE_S
        while len(got) < count and time.monotonic() < deadline:
            for msg in consumer.poll(timeout_ms=500).get(tp, []):
                assert msg.offset == len(got)
                got.append(Rec(msg.key, msg.value, tuple(msg.headers)))
        return got
    finally:
        consumer.close()


# -- aiokafka -------------------------------------------------------------------------------


def aiokafka_produce(bootstrap: str, topic: str, recs: list[Rec]) -> None:
    async def main() -> None:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5)
        await producer.start()
        try:
            futures = [
                await producer.send(topic, r.value, key=r.key, headers=list(r.headers), partition=0)
                for r in recs
            ]
            offsets = [(await f).offset for f in futures]
            assert offsets == sorted(offsets)
        finally:
            await producer.stop()

    asyncio.run(asyncio.wait_for(main(), DEADLINE_S))


def aiokafka_consume(bootstrap: str, topic: str, count: int) -> list[Rec]:
    async def main() -> list[Rec]:
        consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
        await consumer.start()
        try:
            tp = AioPartition(topic, 0)
            consumer.assign([tp])
            await consumer.seek_to_beginning(tp)
            got: list[Rec] = []
            while len(got) < count:
                batches = await consumer.getmany(tp, timeout_ms=500)
                for msg in batches.get(tp, []):
                    assert msg.offset == len(got)
                    got.append(Rec(msg.key, msg.value, tuple(msg.headers)))
            return got
        finally:
            await consumer.stop()

    return asyncio.run(asyncio.wait_for(main(), DEADLINE_S))


# -- kcat -----------------------------------------------------------------------------------


def kcat_produce(bootstrap: str, topic: str, recs: list[Rec]) -> None:
    headers = {h for r in recs for h in r.headers}
    assert len(headers) <= 1, "kcat sets one set of headers per run"
    args = ["kcat", "-P", "-b", bootstrap, "-t", topic, "-p", "0", "-K", ":"]
    args += ["-X", "acks=all"]
    for name, value in headers:
        args += ["-H", f"{name}={value.decode()}"]
    lines = "".join(f"{(r.key or b'').decode()}:{(r.value or b'').decode()}\n" for r in recs)
    done = subprocess.run(
        args, input=lines, capture_output=True, check=False, text=True, timeout=DEADLINE_S
    )
    assert done.returncode == 0, done.stderr


def kcat_consume(bootstrap: str, topic: str, count: int) -> list[Rec]:
    args = ["kcat", "-C", "-b", bootstrap, "-t", topic, "-p", "0", "-o", "beginning", "-e"]
    args += ["-c", str(count), "-J", "-q"]
    done = subprocess.run(args, capture_output=True, text=True, timeout=DEADLINE_S, check=False)
    assert done.returncode == 0, done.stderr
    got = []
    for line in done.stdout.splitlines():
        msg = json.loads(line)
        assert msg["offset"] == len(got)
        flat = msg.get("headers") or []
        headers = tuple((n, v.encode()) for n, v in zip(flat[::2], flat[1::2], strict=True))
        key = None if msg["key"] is None else msg["key"].encode()
        value = None if msg["payload"] is None else msg["payload"].encode()
        got.append(Rec(key, value, headers))
    return got


Produce = Callable[[str, str, list[Rec]], None]
Consume = Callable[[str, str, int], list[Rec]]
CLIENTS: dict[str, tuple[Produce, Consume]] = {
    "confluent-kafka": (confluent_produce, confluent_consume),
    "kafka-python": (kafka_python_produce, kafka_python_consume),
    "aiokafka": (aiokafka_produce, aiokafka_consume),
    "kcat": (kcat_produce, kcat_consume),
}


@pytest.mark.parametrize("client", list(CLIENTS))
def test_a_kafka_client_reads_back_what_it_wrote_and_so_does_kafkasims_consumer(
    kafka_cluster: LocalCluster, client: str
) -> None:
    topic = f"written-by-{client}"
    create_topic(kafka_cluster, topic, configs={"min.insync.replicas": "2"})
    produce, consume = CLIENTS[client]
    sent = records(client)
    produce(kafka_cluster.kafka_bootstrap, topic, sent)
    assert consume(kafka_cluster.kafka_bootstrap, topic, COUNT) == sent
    stored = read_partition(kafka_cluster, topic)
    assert [r.offset for r in stored] == list(range(COUNT))
    assert [Rec(r.key, r.value, tuple((n, v or b"") for n, v in r.headers)) for r in stored] == sent


def test_console_consumer_reads_what_kcat_wrote(kafka_cluster: LocalCluster) -> None:
    topic = "kcat-to-console"
    create_topic(kafka_cluster, topic)
    kcat_produce(kafka_cluster.kafka_bootstrap, topic, records("kcat"))
    out = kafkasim(
        "console-consumer",
        "--bootstrap-server",
        ",".join(kafka_cluster.bootstrap),
        "--topic",
        topic,
        "--from-beginning",
        "--max-messages",
        str(COUNT),
        "--timeout-ms",
        "30000",
        "--property",
        "print.key=true",
        "--property",
        "print.offset=true",
        timeout=DEADLINE_S,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [f"Offset:{i}\tk{i}\tkcat-value-{i}" for i in range(COUNT)]


def test_confluent_kafka_and_kcat_read_what_console_producer_wrote(
    kafka_cluster: LocalCluster,
) -> None:
    topic = "console-to-clients"
    create_topic(kafka_cluster, topic)
    lines = "".join(f"k{i}:line {i}\n" for i in range(COUNT))
    out = kafkasim(
        "console-producer",
        "--bootstrap-server",
        ",".join(kafka_cluster.bootstrap),
        "--topic",
        topic,
        "--property",
        "parse.key=true",
        "--property",
        "key.separator=:",
        "--producer-property",
        "acks=all",
        stdin=lines,
        timeout=DEADLINE_S,
    )
    assert (out.returncode, out.stderr) == (0, ""), out.stderr
    expected = [Rec(b"k%d" % i, b"line %d" % i) for i in range(COUNT)]
    assert confluent_consume(kafka_cluster.kafka_bootstrap, topic, COUNT) == expected
    assert kcat_consume(kafka_cluster.kafka_bootstrap, topic, COUNT) == expected
