"""``__consumer_offsets`` as the group coordinator sees it (``node.group_manager.OffsetsTopic``)
and ``__transaction_state`` as the transaction coordinator does
(``node.txn_state_manager.TransactionLogTopic``): reads of a partition's batches and acks=all
appends, over this broker's replica manager and its domain produce path (Kafka's coordinators
call ``ReplicaManager.appendRecords`` the same way, with ``AppendOrigin.COORDINATOR``: a
transactional offset commit's producer epoch is checked, its sequence is not)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from kafkasim.common.errors import KafkaError
from kafkasim.common.types import TopicPartition
from kafkasim.node.group_manager import Appended
from kafkasim.node.group_records import OFFSETS_TOPIC
from kafkasim.node.replica_manager import ReplicaManager
from kafkasim.node.replica_types import PartitionRecords, ProduceParams
from kafkasim.node.txn_log import TRANSACTION_STATE_TOPIC
from kafkasim.storage.producer_state import AppendOrigin
from kafkasim.storage.records.batch import Record
from kafkasim.storage.records.entry import LogEntryHeader


class ReplicaOffsetsTopic:
    """``node.group_manager.OffsetsTopic`` over this broker's replica manager (of ``topic``,
    an internal topic: ``__consumer_offsets`` unless told)."""

    def __init__(self, replica_manager: ReplicaManager, topic: str = OFFSETS_TOPIC) -> None:
        self._replica_manager = replica_manager
        self._topic = topic

    def batches(self, partition: int) -> Iterable[tuple[LogEntryHeader, Sequence[Record]]]:
        tp = TopicPartition(self._topic, partition)
        return self._replica_manager.partition(tp).log.batches()

    async def append(self, partition: int, batch: bytes, timeout_ms: int) -> Appended:
        tp = TopicPartition(self._topic, partition)
        [result] = await self._replica_manager.append_records(
            ProduceParams(
                acks=-1,
                timeout_ms=timeout_ms,
                partitions=(PartitionRecords(tp, batch),),
                origin=AppendOrigin.COORDINATOR,
            )
        )
        return Appended(result.error, result.base_offset)


class ReplicaTransactionLogTopic:
    """``node.txn_state_manager.TransactionLogTopic`` over this broker's replica manager."""

    def __init__(self, replica_manager: ReplicaManager) -> None:
        self._topic = ReplicaOffsetsTopic(replica_manager, TRANSACTION_STATE_TOPIC)

    async def batches(self, partition: int) -> Iterable[tuple[LogEntryHeader, Sequence[Record]]]:
        # Read now, in one step (as the group coordinator's load): the log may change later.
        return list(self._topic.batches(partition))

    async def append(self, partition: int, batch: bytes, timeout_ms: int) -> KafkaError | None:
        return (await self._topic.append(partition, batch, timeout_ms)).error
