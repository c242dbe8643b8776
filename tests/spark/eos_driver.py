"""A streaming query that copies a topic to another through the exactly-once kafkasim sink,
run by ``test_transactions`` in a process (group) of its own so that the test can SIGKILL the
whole query — driver, JVM, Python workers — at a chosen point, then start it again from its
checkpoint.

``--block write:B:P`` stops the write task of Spark partition P of micro-batch B in the
middle of its rows, after some of them were flushed to the log inside its transaction;
``--block commit:B`` stops the sink's driver-side ``commit`` of micro-batch B, when every
task has committed its transaction but Spark has not written its commit log. When it stops,
it creates the ``--marker`` file (holding its pid) and sleeps until it is killed.
Without ``--block`` the query reads everything there is (``Trigger.AvailableNow``) and exits.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

from pyspark.sql import Row, SparkSession
from pyspark.sql.datasource import DataSourceStreamWriter, WriterCommitMessage
from pyspark.sql.types import StructType
from typing_extensions import override

from kafkasim.cluster.local import REPO_ROOT
from kafkasim.spark import KafkasimDataSource
from kafkasim.spark import writer as sink


def _stop_here(marker: str) -> None:
    Path(marker).write_text(str(os.getpid()))
    while True:
        time.sleep(60)


class BlockingWriter(sink.KafkasimStreamWriter):
    def __init__(self, options: sink.SinkOptions, block: list[str], marker: str) -> None:
        super().__init__(options)
        self.block, self.marker = block, marker

    @override
    def write(self, iterator: Iterator[Row]) -> sink.WriteResult:
        task = sink.current_task()
        if self.block[:1] == ["write"] and [task.batch_id, task.partition_id] == [
            int(n) for n in self.block[1:]
        ]:
            sink.FLUSH_EVERY_RECORDS = 5  # this worker's module: rows reach the log early

            def rows() -> Iterator[Row]:
                for i, row in enumerate(iterator):
                    if i == 8:
                        _stop_here(self.marker)
                    yield row

            return super().write(rows())
        return super().write(iterator)

    @override
    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        if self.block == ["commit", str(batchId)]:
            _stop_here(self.marker)
        super().commit(messages, batchId)


class BlockingSource(KafkasimDataSource):
    block: ClassVar[list[str]] = []
    marker: ClassVar[str] = ""

    @override
    @classmethod
    def name(cls) -> str:
        return "kafkasim_blocking"

    @override
    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        writer = super().streamWriter(schema, overwrite)
        assert isinstance(writer, sink.KafkasimStreamWriter)
        return BlockingWriter(writer.options, self.block, self.marker)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--input", required=True)
    parser.add_argument("--output", required=True)
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--local-dir", required=True)
    parser.add_argument("--block", default="")
    parser.add_argument("--marker", default="")
    args = parser.parse_args()
    os.environ["PYSPARK_PYTHON"] = sys.executable
    BlockingSource.block = args.block.split(":") if args.block else []  # pickled by value
    BlockingSource.marker = args.marker
    spark = (
        SparkSession.builder.master("local[2]")
        .appName("kafkasim-eos-driver")
        .config("spark.ui.enabled", "false")
        .config("spark.executorEnv.PYTHONPATH", str(REPO_ROOT))
        .config("spark.local.dir", args.local_dir)
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    spark.dataSource.register(BlockingSource)
    source = (
        spark.readStream.format("kafkasim")
        .option("kafkasim.bootstrap.servers", args.bootstrap)
        .option("subscribe", args.input)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", "40")
        .load()
    )
    query = (
        source.select("key", "value")
        .writeStream.format("kafkasim_blocking")
        .option("kafkasim.bootstrap.servers", args.bootstrap)
        .option("topic", args.output)
        .option("kafkasim.sink.exactlyOnce", "true")
        .option("checkpointLocation", args.checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    failed = query.exception()
    spark.stop()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
