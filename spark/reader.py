"""Batch reads: ``spark.read.format("kafkasim")``.

Planning (driver, :meth:`KafkasimBatchReader.partitions`): the subscription's partitions, their
start offsets (``startingOffsets`` or a starting timestamp) and end offsets (``endingOffsets``,
by default the high watermark at planning time) are looked up once; every partition with
something to read becomes one offset range, split further by ``minPartitions``. Under
``kafka.isolation.level=read_committed`` "latest" is the last stable offset (ListOffsets with
read_committed), so no range reaches into an open transaction. Each range is
one :class:`RangePartition`, carrying everything its task needs: Spark pickles the reader for
the tasks *before* it calls ``partitions()``, so nothing may be left on ``self`` for them.

Reading (executors, :func:`read_partition`): one connection per task (kept for the worker's
next task: :class:`spark.cluster_io.IdleConnections`), fetches from the
partition's leader with failover (:func:`spark.cluster_io.read_range`); the result is Arrow
record batches (:mod:`spark.arrow_decode`) or tuples (:mod:`spark.rows`). The same function
serves streaming reads.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import DataSourceReader, InputPartition
from typing_extensions import override

from kafkasim.common.types import TopicPartition
from kafkasim.spark import cluster_io
from kafkasim.spark.arrow_decode import ArrowChunkDecoder
from kafkasim.spark.errors import user_facing
from kafkasim.spark.options import OffsetSpec, ReadSettings, SourceOptions, SparkOptionError
from kafkasim.spark.planning import OffsetRange, offset_ranges, split_ranges
from kafkasim.spark.rows import arrow_schema, to_tuples

if TYPE_CHECKING:
    import pyarrow as pa


@dataclass(frozen=True)
class RangePartition(InputPartition):
    """One Spark task: an offset range of one partition and how to read it."""

    range: OffsetRange
    settings: ReadSettings

    @property
    def value(self) -> OffsetRange:  # InputPartition's documented field
        return self.range


def read_partition(partition: InputPartition) -> Iterator[pa.RecordBatch | tuple[Any, ...]]:
    """The records of one RangePartition. Spark hands an empty plan to ``read`` as a single
    ``InputPartition(None)``: that reads nothing."""
    if not isinstance(partition, RangePartition):
        return
    r, settings = partition.range, partition.settings
    with cluster_io.reading_connection(settings) as conn:
        if settings.arrow:
            schema = arrow_schema(settings.include_headers)
            decoder = ArrowChunkDecoder(r.topic, r.partition, schema)
            batches = cluster_io.read_range(conn.client, r, settings, decoder.decode)
            while (chunk := conn.run(cluster_io.next_chunk(batches))) is not None:
                yield from chunk
        else:
            decode = functools.partial(cluster_io.decode_columns, r.topic_partition)
            columns = cluster_io.read_range(conn.client, r, settings, decode)
            while (part := conn.run(cluster_io.next_chunk(columns))) is not None:
                yield from to_tuples(part, settings.include_headers)


def check_explicit_offsets(
    name: str, spec: OffsetSpec, partitions: Sequence[TopicPartition]
) -> None:
    """Offsets JSON may only name partitions the subscription reads."""
    unknown = sorted(set(spec.offsets) - set(partitions))
    if unknown:
        raise SparkOptionError(
            f"Option '{name}' names partitions that the query does not read: "
            + ", ".join(str(tp) for tp in unknown)
        )


class KafkasimBatchReader(DataSourceReader):
    def __init__(self, options: SourceOptions) -> None:
        self.options = options

    @override
    @user_facing
    def partitions(self) -> list[InputPartition]:
        opts = self.options
        with cluster_io.reading_connection(opts.settings) as conn:
            client = conn.client
            isolation = cluster_io.isolation_level(opts.settings)
            tps = conn.run(cluster_io.topic_partitions(client, opts.subscription))
            if isinstance(opts.starting, OffsetSpec):
                check_explicit_offsets("startingOffsets", opts.starting, tps)
                start = conn.run(cluster_io.resolve_offsets(client, tps, opts.starting, isolation))
            else:
                start = conn.run(
                    cluster_io.resolve_timestamps(client, tps, opts.starting, isolation)
                )
            check_explicit_offsets("endingOffsets", opts.ending, tps)
            end = conn.run(cluster_io.resolve_offsets(client, tps, opts.ending, isolation))
        ranges = split_ranges(offset_ranges(start, end), opts.min_partitions)
        return [RangePartition(r, opts.settings) for r in ranges]

    @override
    @user_facing
    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch | tuple[Any, ...]]:
        return read_partition(partition)
