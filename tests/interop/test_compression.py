"""Every codec librdkafka writes (``compression.type`` gzip, snappy, lz4, zstd, none): the
batches confluent-kafka produced are stored as it compressed them (``dump-log`` names the codec
of each batch on the leader's disk and prints every payload) and kafkasim's consumer reads every
value back intact."""

from __future__ import annotations

import re

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient

from kafkasim.cluster.local import LocalCluster
from tests.cli_run import kafkasim
from tests.interop.kafkasim_side import DEADLINE_S, create_topic, read_partition

COUNT = 300
CODECS = ["gzip", "snappy", "lz4", "zstd", "none"]


def values(codec: str) -> list[bytes]:
    # Repetitive text, so that every codec makes the batch smaller (librdkafka sends a batch
    # uncompressed when compressing does not pay).
    return [f"{codec}-{i:04d} ".encode() + b"all work and no play " * 8 for i in range(COUNT)]


def leader_of(bootstrap: str, topic: str) -> int:
    metadata = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=30)
    return int(metadata.topics[topic].partitions[0].leader)


@pytest.mark.parametrize("codec", CODECS)
def test_a_codec_librdkafka_writes_is_stored_and_read_back_intact(
    kafka_cluster: LocalCluster, codec: str
) -> None:
    topic = f"compressed-{codec}"
    create_topic(kafka_cluster, topic, configs={"min.insync.replicas": "2"})
    sent = values(codec)
    errors: list[object] = []
    producer = Producer(
        {
            "bootstrap.servers": kafka_cluster.kafka_bootstrap,
            "compression.type": codec,
            "acks": "all",
            "linger.ms": 50,
            "batch.num.messages": 100,
        }
    )
    for value in sent:
        producer.produce(
            topic,
            value,
            key=b"key",
            partition=0,
            on_delivery=lambda err, _msg: errors.append(err) if err else None,
        )
    assert producer.flush(DEADLINE_S) == 0, "records still undelivered"
    assert errors == []

    stored = read_partition(kafka_cluster, topic)
    assert [(r.offset, r.key, r.value) for r in stored] == [
        (i, b"key", v) for i, v in enumerate(sent)
    ]

    leader = leader_of(kafka_cluster.kafka_bootstrap, topic)
    partition_dir = kafka_cluster.brokers[leader].data_dir / "logs" / f"{topic}-0"
    segments = sorted(partition_dir.glob("*.log"))
    out = kafkasim(
        "dump-log",
        "--print-data-log",
        "--files",
        ",".join(map(str, segments)),
        timeout=DEADLINE_S,
    )
    assert out.returncode == 0, out.stderr
    batch_codecs = re.findall(r"^baseOffset: .* compresscodec: (\w+) ", out.stdout, re.MULTILINE)
    assert len(batch_codecs) >= COUNT // 100  # at most batch.num.messages records a batch
    assert set(batch_codecs) == {codec.upper()}
    payloads = re.findall(r"^\| offset: (\d+) .* payload: (.*)$", out.stdout, re.MULTILINE)
    assert payloads == [(str(i), v.decode()) for i, v in enumerate(sent)]
