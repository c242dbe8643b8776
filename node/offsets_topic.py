"""``__consumer_offsets`` as the group coordinator sees it (``node.group_manager.OffsetsTopic``):
reads of a partition's batches and acks=all appends, over this broker's replica manager and its
domain produce path (Kafka's ``GroupMetadataManager`` calls ``ReplicaManager.appendRecords``
the same way)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from kafkasim.common.errors import KafkaError
from kafkasim.common.types import TopicPartition
from kafkasim.node.group_records import OFFSETS_TOPIC
from kafkasim.node.replica_manager import ReplicaManager
from kafkasim.node.replica_types import PartitionRecords, ProduceParams
from kafkasim.storage.records.batch import Record
from kafkasim.storage.records.entry import LogEntryHeader


class ReplicaOffsetsTopic:
    """``node.group_manager.OffsetsTopic`` over this broker's replica manager."""

    def __init__(self, replica_manager: ReplicaManager) -> None:
        self._replica_manager = replica_manager

    def batches(self, partition: int) -> Iterable[tuple[LogEntryHeader, Sequence[Record]]]:
        tp = TopicPartition(OFFSETS_TOPIC, partition)
        return self._replica_manager.partition(tp).log.batches()

    async def append(self, partition: int, batch: bytes, timeout_ms: int) -> KafkaError | None:
        tp = TopicPartition(OFFSETS_TOPIC, partition)
        [result] = await self._replica_manager.append_records(
            ProduceParams(acks=-1, timeout_ms=timeout_ms, partitions=(PartitionRecords(tp, batch),))
        )
        return result.error
