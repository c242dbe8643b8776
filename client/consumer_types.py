"""The consumer's public value types: the record ``poll`` returns (Kafka's ``ConsumerRecord``),
the rebalance listener, the asynchronous commit's callback, and the error of a closed
consumer."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kafkasim.common.errors import KafkasimError
from kafkasim.common.types import TopicPartition
from kafkasim.storage.records.batch import TimestampType

__all__ = [
    "CommitCallback",
    "CommitFailedError",
    "ConsumerClosedError",
    "ConsumerRebalanceListener",
    "ConsumerRecord",
    "RecordDeserializationError",
]


class ConsumerRebalanceListener:
    """Told of partitions taken away before a rebalance and given after it (Kafka's
    ``ConsumerRebalanceListener``); override either coroutine."""

    async def on_partitions_revoked(self, partitions: list[TopicPartition]) -> None:
        return None

    async def on_partitions_assigned(self, partitions: list[TopicPartition]) -> None:
        return None


CommitCallback = Callable[[dict[TopicPartition, int], BaseException | None], object]


class CommitFailedError(KafkasimError):
    """Kafka's CommitFailedException: the group rebalanced, the partitions may already belong
    to another member, so the commit (plain, or a transaction's TxnOffsetCommit) was refused."""


class ConsumerClosedError(KafkasimError):
    """The consumer was used after ``close``."""


class RecordDeserializationError(KafkasimError):
    """Kafka's RecordDeserializationException: ``key.deserializer`` or ``value.deserializer``
    failed on the record at ``offset`` of ``partition``; the consumer's position stays on it
    (``seek`` past it to go on). The deserializer's exception is the ``__cause__``."""

    def __init__(self, partition: TopicPartition, offset: int) -> None:
        super().__init__(
            f"Error deserializing key/value for partition {partition} at offset {offset}. "
            "If needed, please seek past the record to continue consumption."
        )
        self.partition = partition
        self.offset = offset


@dataclass(frozen=True, slots=True)
class ConsumerRecord:
    """One record as ``poll`` returns it (Kafka's ``ConsumerRecord``). A record of message
    format v0 has timestamp -1 and ``NO_TIMESTAMP_TYPE``; only v2 records carry headers.
    ``key`` and ``value`` are ``bytes | None`` unless ``key.deserializer`` or
    ``value.deserializer`` is set: then what it returned (None stays None)."""

    topic: str
    partition: int
    offset: int
    timestamp: int
    timestamp_type: TimestampType
    key: Any
    value: Any
    headers: tuple[tuple[str, bytes | None], ...] = ()

    @property
    def topic_partition(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)
