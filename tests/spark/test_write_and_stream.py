"""Writes and streaming reads through Spark: a batch write reads back as written (keys,
headers, chosen partitions, topics from a column or the option); a streaming query stopped
and restarted from its checkpoint reads every record exactly once, in micro-batches capped by
maxOffsetsPerTrigger, picking up partitions added in between; a streaming write of a stream
read copies a topic; bad sink columns are named."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pyspark.errors import PySparkException, StreamingQueryException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import StreamingQuery

from kafkasim.cluster.local import LocalCluster
from kafkasim.common.types import TopicPartition
from tests.spark.conftest import ToSend, admin_call, bootstrap, create_topic, produce

# Generous: a micro-batch on a shared 2-core machine can take a while.
QUERY_TIMEOUT_S = 300


def _read(spark: SparkSession, cluster: LocalCluster, topic: str) -> DataFrame:
    return (
        spark.read.format("kafkasim")
        .option("kafkasim.bootstrap.servers", bootstrap(cluster))
        .option("subscribe", topic)
        .option("includeHeaders", "true")
        .load()
    )


def _finish(query: StreamingQuery) -> None:
    finished = query.awaitTermination(QUERY_TIMEOUT_S)
    if not finished:
        query.stop()
        pytest.fail(f"streaming query {query.name} did not finish in {QUERY_TIMEOUT_S} s")
    assert query.exception() is None


def test_a_batch_write_reads_back_as_written(spark: SparkSession, cluster: LocalCluster) -> None:
    create_topic(cluster, "written")
    rows = [
        (f"k{i}".encode() if i % 3 else None, f"v{i}", i % 3, [("h", f"{i}".encode())])
        for i in range(30)
    ]
    df = spark.createDataFrame(
        rows,
        "key binary, value string, partition int, headers array<struct<key:string,value:binary>>",
    )
    (
        df.write.format("kafkasim")
        .mode("append")
        .option("kafkasim.bootstrap.servers", bootstrap(cluster))
        .option("topic", "written")
        .save()
    )
    got = {
        (r.key, r.value, r.partition, tuple((h.key, h.value) for h in r.headers))
        for r in _read(spark, cluster, "written").collect()
    }
    assert got == {(k, v.encode(), p, tuple(h)) for k, v, p, h in rows}
    per_partition = _read(spark, cluster, "written").groupBy("partition").count().collect()
    assert sorted((r.partition, r["count"]) for r in per_partition) == [(0, 10), (1, 10), (2, 10)]


def test_the_topic_column_routes_rows_when_no_topic_option_is_given(
    spark: SparkSession, cluster: LocalCluster
) -> None:
    create_topic(cluster, "route-a", partitions=1)
    create_topic(cluster, "route-b", partitions=1)
    df = spark.createDataFrame(
        [("route-a", "x"), ("route-b", "y"), ("route-a", "z")], "topic string, value string"
    )
    df.write.format("kafkasim").mode("append").option(
        "kafkasim.bootstrap.servers", bootstrap(cluster)
    ).save()
    assert sorted(r.value for r in _read(spark, cluster, "route-a").collect()) == [b"x", b"z"]
    assert [r.value for r in _read(spark, cluster, "route-b").collect()] == [b"y"]


@pytest.mark.parametrize(
    ("ddl", "options", "message"),
    [
        ("key string", {"topic": "t"}, "Required attribute 'value' not found"),
        ("value string", {}, "topic option required when no 'topic' attribute"),
        ("value int", {"topic": "t"}, "value attribute type must be string or binary"),
        ("value string, partition string", {"topic": "t"}, "partition attribute type must be int"),
        ("value string", {"topic": "t", "subscribe": "t"}, "does not apply to a kafkasim write"),
    ],
)
def test_bad_sink_columns_and_options_are_named(
    spark: SparkSession, cluster: LocalCluster, ddl: str, options: dict[str, str], message: str
) -> None:
    writer = spark.createDataFrame([], ddl).write.format("kafkasim").mode("append")
    writer = writer.option("kafkasim.bootstrap.servers", bootstrap(cluster))
    for name, value in options.items():
        writer = writer.option(name, value)
    with pytest.raises(PySparkException, match=message):
        writer.save()


def _stream_to_parquet(
    spark: SparkSession, cluster: LocalCluster, topic: str, out: Path, checkpoint: Path
) -> StreamingQuery:
    source = (
        spark.readStream.format("kafkasim")
        .option("kafkasim.bootstrap.servers", bootstrap(cluster))
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", "25")
        .load()
    )
    return (
        source.select("partition", "offset", "value")
        .writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )


def test_a_restarted_stream_reads_every_record_exactly_once(
    spark: SparkSession, cluster: LocalCluster, tmp_path: Path
) -> None:
    """Run 1 reads 60 records in micro-batches of at most 25 and stops; 40 more arrive, one
    more partition is added and written to; run 2 resumes from the checkpoint. The parquet
    sink (itself exactly-once) then holds each (partition, offset) exactly once."""
    create_topic(cluster, "stream-in")
    produced = produce(
        cluster, "stream-in", [ToSend(f"a{i}".encode(), partition=i % 3) for i in range(60)]
    )
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    query = _stream_to_parquet(spark, cluster, "stream-in", out, checkpoint)
    _finish(query)
    sizes = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]
    assert sum(sizes) == 60 and max(sizes) <= 25, sizes

    admin_call(cluster, "create_partitions", "stream-in", 4)
    produced += produce(
        cluster, "stream-in", [ToSend(f"b{i}".encode(), partition=i % 4) for i in range(40)]
    )
    _finish(_stream_to_parquet(spark, cluster, "stream-in", out, checkpoint))

    got = [(r.partition, r.offset, r.value) for r in spark.read.parquet(str(out)).collect()]
    assert sorted(got) == sorted((p.partition, p.offset, p.value) for p in produced)
    assert len(produced) == 100


def test_a_stream_skips_deleted_records_only_without_fail_on_data_loss(
    spark: SparkSession, cluster: LocalCluster, tmp_path: Path
) -> None:
    create_topic(cluster, "stream-lossy", partitions=1)
    produce(cluster, "stream-lossy", [ToSend(f"v{i}".encode(), partition=0) for i in range(10)])
    admin_call(cluster, "delete_records", {TopicPartition("stream-lossy", 0): 4})

    def run(fail_on_data_loss: str, name: str) -> StreamingQuery:
        source = (
            spark.readStream.format("kafkasim")
            .option("kafkasim.bootstrap.servers", bootstrap(cluster))
            .option("subscribe", "stream-lossy")
            .option("startingOffsets", json.dumps({"stream-lossy": {"0": 0}}))
            .option("failOnDataLoss", fail_on_data_loss)
            .load()
        )
        return (
            source.select("offset")
            .writeStream.format("parquet")
            .option("path", str(tmp_path / name))
            .option("checkpointLocation", str(tmp_path / f"{name}-checkpoint"))
            .trigger(availableNow=True)
            .start()
        )

    with pytest.raises(StreamingQueryException, match="log now starts at offset 4"):
        run("true", "strict").awaitTermination(QUERY_TIMEOUT_S)
    _finish(run("false", "lenient"))
    offsets = sorted(r.offset for r in spark.read.parquet(str(tmp_path / "lenient")).collect())
    assert offsets == list(range(4, 10))


def test_a_streaming_write_copies_a_stream_read(
    spark: SparkSession, cluster: LocalCluster, tmp_path: Path
) -> None:
    create_topic(cluster, "copy-in")
    create_topic(cluster, "copy-out")
    produced = produce(
        cluster,
        "copy-in",
        [ToSend(f"v{i}".encode(), key=f"k{i}".encode(), partition=i % 3) for i in range(45)],
    )
    source = (
        spark.readStream.format("kafkasim")
        .option("kafkasim.bootstrap.servers", bootstrap(cluster))
        .option("subscribe", "copy-in")
        .option("startingOffsets", "earliest")
        .option("includeHeaders", "true")
        .load()
    )
    query = (
        source.selectExpr("key", "upper(cast(value as string)) as value", "partition")
        .writeStream.format("kafkasim")
        .option("kafkasim.bootstrap.servers", bootstrap(cluster))
        .option("topic", "copy-out")
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    _finish(query)
    got = sorted((r.partition, r.key, r.value) for r in _read(spark, cluster, "copy-out").collect())
    assert got == sorted((p.partition, p.key, p.value.upper()) for p in produced)
