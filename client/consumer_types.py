"""The consumer's public value types: the record ``poll`` returns (Kafka's ``ConsumerRecord``),
the rebalance listener, the asynchronous commit's callback, and the error of a closed
consumer."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from kafkasim.common.errors import KafkasimError
from kafkasim.common.types import TopicPartition
from kafkasim.storage.records.batch import TimestampType

__all__ = [
    "CommitCallback",
    "CommitFailedError",
    "ConsumerClosedError",
    "ConsumerRebalanceListener",
    "ConsumerRecord",
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


@dataclass(frozen=True, slots=True)
class ConsumerRecord:
    """One record as ``poll`` returns it (Kafka's ``ConsumerRecord``). A record of message
    format v0 has timestamp -1 and ``NO_TIMESTAMP_TYPE``; only v2 records carry headers."""

    topic: str
    partition: int
    offset: int
    timestamp: int
    timestamp_type: TimestampType
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] = ()

    @property
    def topic_partition(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)
