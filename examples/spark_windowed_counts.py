"""Windowed counts per key, from one kafkasim topic to another, with Spark Structured Streaming.

Reads ``--input`` as a stream (``format("kafkasim")``), counts records per key in tumbling
event-time windows of ``--window`` (by the records' timestamps, with a watermark of the same
length so that closed windows are emitted once, in append mode), and writes one JSON record
per closed window to ``--output``, keyed by the record key, with the window's bounds in UTC
(whatever the time zone of the machine running the driver)::

    {"window_start": "2026-01-01T10:00:00.000Z", "window_end": "...", "key": "k1", "count": 42}

A window is written once the watermark (the latest timestamp read, minus ``--window``) has
passed its end, so the newest window(s) wait for later records; records older than the
watermark are dropped.

Run it locally (a cluster from ``kafkasim cluster up``; Spark in this process)::

    kafkasim topics --create --topic clicks --partitions 3 --bootstrap-server 127.0.0.1:9092
    kafkasim topics --create --topic click-counts --partitions 3 --bootstrap-server 127.0.0.1:9092
    PYSPARK_PYTHON=$(which python) python examples/spark_windowed_counts.py \\
        --bootstrap-server 127.0.0.1:9092 --input clicks --output click-counts \\
        --checkpoint /tmp/click-counts-checkpoint --master 'local[*]'

Or on a real Spark cluster, with the wheel (``pip wheel .``) installed on every node or shipped
with a packed environment (see ``spark/README.md``, "Running on a cluster")::

    spark-submit --master spark://spark-master:7077 \\
        --archives kafkasim-env.tar.gz#environment \\
        --conf spark.pyspark.python=./environment/bin/python \\
        examples/spark_windowed_counts.py --bootstrap-server broker-1:9092,broker-2:9092 \\
        --input clicks --output click-counts --checkpoint hdfs:///checkpoints/click-counts

Stop it with Ctrl-C; started again with the same ``--checkpoint`` it goes on where it stopped.
``--available-now`` processes what is there and exits (Spark's ``Trigger.AvailableNow``).
"""

from __future__ import annotations

import argparse
import sys

from pyspark.sql import SparkSession
from pyspark.sql import functions as F  # noqa: N812 - Spark's own convention

from kafkasim.spark import KafkasimDataSource


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap-server", required=True, metavar="HOST:PORT[,...]")
    parser.add_argument("--input", required=True, help="topic to read")
    parser.add_argument("--output", required=True, help="topic to write the counts to")
    parser.add_argument("--checkpoint", required=True, help="Spark checkpoint directory")
    parser.add_argument("--window", default="1 minute", help="window length (Spark interval)")
    parser.add_argument("--master", help="Spark master (default: spark-submit's)")
    parser.add_argument("--max-offsets-per-trigger", type=int, default=100_000)
    parser.add_argument("--starting-offsets", default="earliest", help="earliest or latest")
    parser.add_argument(
        "--available-now", action="store_true", help="process what is there, then exit"
    )
    parser.add_argument(
        "--shuffle-partitions",
        type=int,
        help="spark.sql.shuffle.partitions: tasks per stateful step (default: Spark's 200; "
        "a few suffice on one machine)",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    # The output labels window bounds with "Z": format them in UTC, not in the JVM's zone.
    builder = SparkSession.builder.appName("kafkasim-windowed-counts").config(
        "spark.sql.session.timeZone", "UTC"
    )
    if args.master:
        builder = builder.master(args.master)
    if args.shuffle_partitions is not None:
        # Also fixed in the checkpoint by the first run: a restart keeps the first run's value.
        builder = builder.config("spark.sql.shuffle.partitions", str(args.shuffle_partitions))
    spark = builder.getOrCreate()
    # Installed kafkasim is found by Spark itself (pyspark_kafkasim); registering explicitly
    # also works from a source checkout that is not on the workers' path.
    spark.dataSource.register(KafkasimDataSource)

    records = (
        spark.readStream.format("kafkasim")
        .option("kafka.bootstrap.servers", args.bootstrap_server)
        .option("subscribe", args.input)
        .option("startingOffsets", args.starting_offsets)
        .option("maxOffsetsPerTrigger", str(args.max_offsets_per_trigger))
        .load()
    )
    counts = (
        records.withWatermark("timestamp", args.window)
        .groupBy(F.window("timestamp", args.window), F.col("key"))
        .count()
    )
    out = counts.select(
        F.col("key"),
        F.to_json(
            F.struct(
                F.date_format("window.start", "yyyy-MM-dd'T'HH:mm:ss.SSS'Z'").alias("window_start"),
                F.date_format("window.end", "yyyy-MM-dd'T'HH:mm:ss.SSS'Z'").alias("window_end"),
                F.col("key").cast("string").alias("key"),
                F.col("count"),
            )
        ).alias("value"),
    )
    writer = (
        out.writeStream.format("kafkasim")
        .outputMode("append")
        .option("kafka.bootstrap.servers", args.bootstrap_server)
        .option("topic", args.output)
        .option("checkpointLocation", args.checkpoint)
    )
    if args.available_now:
        writer = writer.trigger(availableNow=True)
    query = writer.start()
    try:
        query.awaitTermination()
    except KeyboardInterrupt:
        query.stop()
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
