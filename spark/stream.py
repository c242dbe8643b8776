"""Streaming reads: ``spark.readStream.format("kafkasim")``.

Offsets are Spark's Kafka checkpoint JSON, ``{"topic": {"0": 120, "1": 98}}``: the next
offset to read per partition. Spark writes the end offset of each micro-batch to the
checkpoint before it runs the batch and resumes a restarted query from there, so a batch is
always the same offset ranges however often it runs; together with a deterministic read of a
range (below the high watermark, in offset order) every record is read exactly once across
restarts, as Spark's Kafka source does.

Per micro-batch (driver, one long-lived reader object):

1. :meth:`~KafkasimStreamReader.latestOffset` looks at the partitions now (new ones start at
   offset 0, as a new partition of Spark's Kafka source does; vanished ones are data loss) and
   their high watermarks (under ``kafka.isolation.level=read_committed`` their last stable
   offsets: a micro-batch never reaches into an open transaction, and its records are those
   of committed transactions and non-transactional producers), caps them at the
   ``Trigger.AvailableNow`` target when there is one, and applies the read limit
   (``maxOffsetsPerTrigger`` → ``ReadMaxRows``, split over partitions by backlog,
   :func:`spark.planning.rate_limit`).
2. :meth:`~KafkasimStreamReader.partitions` turns ``start``..``end`` into offset ranges (split
   by ``minPartitions``); executors read them with :func:`spark.reader.read_partition`, which
   reports deleted records per ``failOnDataLoss``.
3. :meth:`~KafkasimStreamReader.commit`: nothing to release (no consumer group is used; the
   checkpoint is the only record of progress, as with Spark's Kafka source).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from typing_extensions import override

from kafkasim.common.types import TopicPartition
from kafkasim.spark import cluster_io
from kafkasim.spark.errors import user_facing
from kafkasim.spark.options import (
    LATEST,
    OffsetJson,
    OffsetSpec,
    SourceOptions,
    offsets_from_json,
    offsets_to_json,
)
from kafkasim.spark.planning import OffsetRange, rate_limit, split_ranges
from kafkasim.spark.reader import RangePartition, check_explicit_offsets, read_partition

if TYPE_CHECKING:
    import pyarrow as pa

logger = logging.getLogger(__name__)


class KafkasimStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        # Trigger.AvailableNow: the high watermarks when the query started; never read past.
        self._target: dict[TopicPartition, int] | None = None

    @property
    def _isolation(self) -> int:
        return cluster_io.isolation_level(self.options.settings)

    def _connect(self) -> cluster_io.ClusterConnection:
        return cluster_io.ClusterConnection.for_reading(self.options.settings)

    @override
    @user_facing
    def initialOffset(self) -> OffsetJson:
        """Where a new query starts (``startingOffsets``, default latest, or a timestamp)."""
        opts = self.options
        isolation = self._isolation
        with self._connect() as conn:
            tps = conn.run(cluster_io.topic_partitions(conn.client, opts.subscription))
            if isinstance(opts.starting, OffsetSpec):
                check_explicit_offsets("startingOffsets", opts.starting, tps)
                start = conn.run(
                    cluster_io.resolve_offsets(conn.client, tps, opts.starting, isolation)
                )
            else:
                start = conn.run(
                    cluster_io.resolve_timestamps(conn.client, tps, opts.starting, isolation)
                )
        return offsets_to_json(start)

    @override
    def getDefaultReadLimit(self) -> ReadLimit:
        limit = self.options.max_offsets_per_trigger
        return ReadAllAvailable() if limit is None else ReadMaxRows(limit)

    @override
    @user_facing
    def prepareForTriggerAvailableNow(self) -> None:
        with self._connect() as conn:
            tps = conn.run(cluster_io.topic_partitions(conn.client, self.options.subscription))
            self._target = conn.run(
                cluster_io.list_offsets(conn.client, dict.fromkeys(tps, LATEST), self._isolation)
            )
        logger.info("Trigger.AvailableNow: reading up to %s", offsets_to_json(self._target))

    @override
    @user_facing
    def latestOffset(self, start: OffsetJson, limit: ReadLimit) -> OffsetJson:
        """The end of the next micro-batch (see the module doc, step 1)."""
        fail = self.options.settings.fail_on_data_loss
        with self._connect() as conn:
            tps = conn.run(cluster_io.topic_partitions(conn.client, self.options.subscription))
            latest = conn.run(
                cluster_io.list_offsets(conn.client, dict.fromkeys(tps, LATEST), self._isolation)
            )
        base = offsets_from_json(start)
        for tp in sorted(set(base) - set(latest)):
            cluster_io.data_loss(f"Partition {tp} is gone (its topic was deleted?)", fail)
            del base[tp]
        for tp in sorted(set(latest) - set(base)):
            logger.info("new partition %s: reading it from offset 0", tp)
            base[tp] = 0
        if self._target is not None:
            # Partitions born after the target was taken are not read in this run.
            latest = {tp: min(o, self._target.get(tp, base[tp])) for tp, o in latest.items()}
        for tp in sorted(tp for tp in latest if latest[tp] < base[tp]):
            cluster_io.data_loss(
                f"The latest offset {latest[tp]} of {tp} is below the offset {base[tp]} the "
                "query has read up to (was the topic deleted and created again?)",
                fail,
            )
            latest[tp] = base[tp]
        end = latest
        if isinstance(limit, ReadMaxRows):
            end = rate_limit(base, latest, limit.max_rows)
        return offsets_to_json(end)

    @override
    @user_facing
    def partitions(self, start: OffsetJson, end: OffsetJson) -> list[InputPartition]:
        first = offsets_from_json(start)
        ranges: list[OffsetRange] = []
        for tp, until in sorted(offsets_from_json(end).items()):
            begin = first.get(tp, 0)  # a partition new in this batch: from offset 0
            if begin < until:
                ranges.append(OffsetRange(tp.topic, tp.partition, begin, until))
        ranges = split_ranges(ranges, self.options.min_partitions)
        return [RangePartition(r, self.options.settings) for r in ranges]

    @override
    @user_facing
    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch | tuple[Any, ...]]:
        return read_partition(partition)

    @override
    def commit(self, end: Mapping[str, Any]) -> None:
        logger.debug("micro-batch committed up to %s", dict(end))
