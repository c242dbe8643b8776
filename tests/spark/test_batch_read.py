"""Batch reads through Spark: what was produced is what is read — keys, values, offsets,
timestamps, headers — whatever the split into tasks, on the Arrow path and the tuple path;
starting/ending offsets and timestamps bound the read; a read survives the loss of a
partition's leader; deleted records fail the read or are skipped, per failOnDataLoss."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

import pytest
from pyspark.errors import PySparkException
from pyspark.sql import DataFrame, SparkSession

from kafkasim.cluster.local import LocalCluster
from kafkasim.common.types import TopicPartition
from tests.spark.conftest import (
    Produced,
    ToSend,
    admin_call,
    bootstrap,
    create_topic,
    leader_of,
    produce,
)

BASE_TS = 1_700_000_000_000


def _records(n: int, partitions: int = 3) -> list[ToSend]:
    return [
        ToSend(
            value=f"value-{i}".encode(),
            key=None if i % 7 == 0 else f"key-{i}".encode(),
            partition=i % partitions,
            timestamp_ms=BASE_TS + i * 1000,
            headers=(("n", str(i).encode()), ("empty", None)) if i % 2 else (),
        )
        for i in range(n)
    ]


@pytest.fixture(scope="module")
def topic(cluster: LocalCluster) -> tuple[str, list[Produced]]:
    """A 3-partition topic of 90 records with keys, null keys, headers and set timestamps."""
    create_topic(cluster, "reads")
    return "reads", produce(cluster, "reads", _records(90))


def _read(spark: SparkSession, cluster: LocalCluster, **options: str) -> DataFrame:
    reader = spark.read.format("kafkasim").option("kafkasim.bootstrap.servers", bootstrap(cluster))
    for name, value in options.items():
        reader = reader.option(name, value)
    return reader.load()


def _expected(produced: list[Produced], headers: bool) -> list[tuple[Any, ...]]:
    rows = []
    for p in produced:
        row: tuple[Any, ...] = (
            p.key,
            p.value,
            p.topic,
            p.partition,
            p.offset,
            dt.datetime.fromtimestamp(p.timestamp_ms / 1000, dt.UTC).replace(tzinfo=None),
            0,
        )
        if headers:
            row = (*row, [(k, v) for k, v in p.headers])
        rows.append(row)
    return sorted(rows, key=lambda r: (r[3], r[4]))


def _rows(df: DataFrame) -> list[tuple[Any, ...]]:
    out = []
    for row in df.orderBy("partition", "offset").collect():
        values = list(row)
        if "headers" in df.columns:
            values[-1] = [(h["key"], h["value"]) for h in values[-1]]
        out.append(tuple(values))
    return out


@pytest.mark.parametrize(
    ("read_format", "min_partitions", "tasks"),
    [("arrow", None, 3), ("arrow", 7, 7), ("tuples", None, 3), ("tuples", 5, 5)],
)
def test_a_batch_read_returns_every_produced_record_with_its_metadata(
    spark: SparkSession,
    cluster: LocalCluster,
    topic: tuple[str, list[Produced]],
    *,
    read_format: str,
    min_partitions: int | None,
    tasks: int,
) -> None:
    """Keys (null ones too), values, partitions, offsets, CreateTime timestamps and headers
    round-trip; minPartitions only changes how many tasks read them."""
    name, produced = topic
    options = {"subscribe": name, "includeHeaders": "true", "kafkasim.read.format": read_format}
    if min_partitions is not None:
        options["minPartitions"] = str(min_partitions)
    df = _read(spark, cluster, **options)
    assert df.rdd.getNumPartitions() == tasks
    assert _rows(df) == _expected(produced, headers=True)


def test_without_include_headers_the_schema_is_sparks_kafka_schema(
    spark: SparkSession, cluster: LocalCluster, topic: tuple[str, list[Produced]]
) -> None:
    df = _read(spark, cluster, subscribe=topic[0])
    assert df.schema.simpleString() == (
        "struct<key:binary,value:binary,topic:string,partition:int,offset:bigint,"
        "timestamp:timestamp,timestampType:int>"
    )
    assert _rows(df) == _expected(topic[1], headers=False)


def test_starting_and_ending_offsets_bound_each_partition(
    spark: SparkSession, cluster: LocalCluster, topic: tuple[str, list[Produced]]
) -> None:
    """JSON offsets per partition, -2 (earliest) and -1 (latest) included; assign limits
    the partitions read."""
    name, produced = topic
    df = _read(
        spark,
        cluster,
        assign=json.dumps({name: [0, 1]}),
        startingOffsets=json.dumps({name: {"0": 5, "1": -2}}),
        endingOffsets=json.dumps({name: {"0": 10, "1": -1}}),
    )
    got = [(r.partition, r.offset) for r in df.orderBy("partition", "offset").collect()]
    assert got == [(0, o) for o in range(5, 10)] + [(1, o) for o in range(30)]
    assert len(produced) == 90


def test_starting_timestamp_starts_each_partition_at_its_first_record_that_recent(
    spark: SparkSession, cluster: LocalCluster, topic: tuple[str, list[Produced]]
) -> None:
    name, produced = topic
    since = BASE_TS + 60 * 1000  # records 60..89
    df = _read(spark, cluster, subscribe=name, startingTimestamp=str(since))
    assert sorted(r.offset for r in df.collect()) == sorted(
        p.offset for p in produced if p.timestamp_ms >= since
    )
    per_partition = json.dumps({name: {"0": BASE_TS + 87 * 1000}})
    df = _read(
        spark,
        cluster,
        assign=json.dumps({name: [0]}),
        startingOffsetsByTimestamp=per_partition,
    )
    assert [r.value for r in df.orderBy("offset").collect()] == [b"value-87"]


def test_a_timestamp_past_every_record_fails_unless_the_strategy_is_latest(
    spark: SparkSession, cluster: LocalCluster, topic: tuple[str, list[Produced]]
) -> None:
    future = str(BASE_TS + 10**9)
    with pytest.raises(PySparkException, match="No record at or after the starting timestamp"):
        _read(spark, cluster, subscribe=topic[0], startingTimestamp=future).collect()
    df = _read(
        spark,
        cluster,
        subscribe=topic[0],
        startingTimestamp=future,
        startingOffsetsByTimestampStrategy="latest",
    )
    assert df.count() == 0


def test_a_batch_read_fails_over_when_the_leader_dies(
    spark: SparkSession, cluster: LocalCluster
) -> None:
    """The plan is made, then partition 0's leader is killed: its task finds the new leader
    (after the controller's election) and reads everything below the high watermark."""
    create_topic(cluster, "failover")
    produced = produce(cluster, "failover", _records(60))
    df = _read(spark, cluster, subscribe="failover")
    assert df.rdd.getNumPartitions() == 3  # planned while every broker is up
    victim = leader_of(cluster, TopicPartition("failover", 0))
    cluster.kill(victim)
    try:
        got = sorted((r.partition, r.offset, r.value) for r in df.collect())
    finally:
        cluster.start_broker(victim)
        cluster.wait_serving(victim)
    assert got == sorted((p.partition, p.offset, p.value) for p in produced)


def test_deleted_records_fail_the_read_or_are_skipped_per_fail_on_data_loss(
    spark: SparkSession, cluster: LocalCluster
) -> None:
    create_topic(cluster, "lossy", partitions=1)
    produce(cluster, "lossy", [ToSend(f"v{i}".encode(), partition=0) for i in range(20)])
    admin_call(cluster, "delete_records", {TopicPartition("lossy", 0): 8})
    starting = json.dumps({"lossy": {"0": 0}})
    with pytest.raises(PySparkException, match="failOnDataLoss"):
        _read(spark, cluster, subscribe="lossy", startingOffsets=starting).collect()
    df = _read(spark, cluster, subscribe="lossy", startingOffsets=starting, failOnDataLoss="false")
    assert sorted(r.offset for r in df.collect()) == list(range(8, 20))


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (
            {"subscribe": "reads", "maxOffsetPerTrigger": "5"},
            "(?i)Unknown option 'maxOffsetPerTrigger'",
        ),
        ({}, "One of the following options must be specified"),
        ({"subscribe": "reads", "assign": '{"reads": [0]}'}, "Only one of the following options"),
        ({"assign": "[0, 1]"}, "Option 'assign' expects JSON"),
        ({"subscribe": "reads", "startingOffsets": "latest"}, "cannot be latest"),
        ({"subscribe": "reads", "endingOffsets": '{"reads": {"0": -2}}'}, "cannot be earliest"),
        ({"subscribe": "reads", "startingOffsets": "{oops"}, "not valid JSON"),
        ({"subscribe": "reads", "minPartitions": "0"}, "'minPartitions' must be a positive"),
        ({"subscribe": "reads", "failOnDataLoss": "maybe"}, "'failOnDataLoss' must be true"),
        ({"subscribe": "reads", "maxOffsetsPerTrigger": "5"}, "does not apply to a kafkasim batch"),
        ({"assign": '{"reads": [9]}'}, "partitions that do not exist: reads-9"),
        (
            {"subscribe": "reads", "startingOffsets": '{"other": {"0": 1}}'},
            "does not read: other-0",
        ),
    ],
)
def test_bad_options_fail_with_a_message_naming_the_problem(
    spark: SparkSession,
    cluster: LocalCluster,
    topic: tuple[str, list[Produced]],
    *,
    options: dict[str, str],
    message: str,
) -> None:
    with pytest.raises(PySparkException, match=message):
        _read(spark, cluster, **options).collect()


def test_a_missing_bootstrap_option_is_named(spark: SparkSession) -> None:
    with pytest.raises(
        PySparkException,
        match=r"'kafka\.bootstrap\.servers' \(or 'kafkasim\.bootstrap\.servers'\) must be",
    ):
        spark.read.format("kafkasim").option("subscribe", "reads").load().collect()


def test_a_custom_schema_is_refused(spark: SparkSession, cluster: LocalCluster) -> None:
    reader = spark.read.format("kafkasim").schema("value binary")
    with pytest.raises(PySparkException, match="fixed schema"):
        reader.option("kafkasim.bootstrap.servers", bootstrap(cluster)).option(
            "subscribe", "reads"
        ).load().collect()
