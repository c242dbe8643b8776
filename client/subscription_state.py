"""What the consumer reads and from where (Kafka's ``SubscriptionState``): the subscribed
topics or the manual assignment, and per assigned partition its fetch position and state.

A partition's *position* is the offset of the next record ``poll`` returns; it is None while a
reset is pending (a new partition, ``seek_to_beginning``/``seek_to_end``, OFFSET_OUT_OF_RANGE),
which the consumer's next ``poll`` resolves. Records fetched at and above the position wait in
the partition's buffer; ``ready`` lists the partitions with buffered records, in the order
their fetches completed. Setting a position drops the buffer (its records were fetched for
another position). A buffer is a fetch's records as columns (:mod:`client.record_columns`)
and a read index: ``drain`` makes ``ConsumerRecord`` objects only of the records it returns,
``drain_columns`` returns slices of the columns.

Not thread-safe: one event loop owns a consumer.
"""

from __future__ import annotations

import contextlib
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass

from kafkasim.client.consumer_types import ConsumerRecord
from kafkasim.client.record_columns import RecordColumns
from kafkasim.common.errors import KafkasimError
from kafkasim.common.types import TopicPartition
from kafkasim.storage.records.batch import TimestampType

__all__ = ["PartitionState", "SubscriptionState"]

_TIMESTAMP_TYPES = {int(t): t for t in TimestampType}


@dataclass(slots=True)
class PartitionState:
    """An assigned partition. ``position`` is None while a reset (to ``reset_to``) is pending;
    ``buffered`` holds fetched records, in offset order, those from ``read`` on at and above
    ``position`` (not returned yet)."""

    position: int | None = None
    reset_to: str | None = None  # "earliest" / "latest"; None: auto.offset.reset decides
    buffered: RecordColumns | None = None
    read: int = 0  # buffered records before this index were returned
    in_flight: bool = False
    retry_at_ms: int = 0  # after an error, not fetched again before this (monotonic)


class SubscriptionState:
    """The assigned partitions with their states, the subscribed topics (None with a manual
    assignment or none) and the partitions with records ready for ``poll``."""

    def __init__(self) -> None:
        self.assignment: dict[TopicPartition, PartitionState] = {}
        self.ready: deque[TopicPartition] = deque()  # partitions with buffered records
        self.subscription: tuple[str, ...] | None = None

    def set_assignment(self, partitions: Iterable[TopicPartition]) -> None:
        """Exactly these partitions; partitions kept from the previous assignment keep their
        states."""
        wanted = list(dict.fromkeys(TopicPartition(*tp) for tp in partitions))
        self.assignment = {tp: self.assignment.get(tp) or PartitionState() for tp in wanted}
        self.ready = deque(tp for tp in self.ready if tp in self.assignment)

    def state(self, tp: TopicPartition) -> PartitionState:
        state = self.assignment.get(tp)
        if state is None:
            raise KafkasimError(f"No current assignment for partition {tp}")
        return state

    def set_position(self, tp: TopicPartition, state: PartitionState, offset: int | None) -> None:
        """Read ``tp`` from ``offset`` (None: a reset is pending); its buffer is dropped."""
        state.position = offset
        state.buffered = None
        state.retry_at_ms = 0
        with contextlib.suppress(ValueError):
            self.ready.remove(tp)

    def request_reset(self, partitions: Iterable[TopicPartition] | None, to: str) -> None:
        """Reset the positions of ``partitions`` (default: every assigned one) to ``to``
        ("earliest" or "latest") at the next poll."""
        tps = list(self.assignment) if partitions is None else list(partitions)
        for tp in tps:
            state = self.state(tp)
            self.set_position(tp, state, None)
            state.reset_to = to

    def consumed(self) -> dict[TopicPartition, int]:
        """The position of every assigned partition that has one (what a commit commits)."""
        return {
            tp: state.position
            for tp, state in self.assignment.items()
            if state.position is not None
        }

    def buffer(self, tp: TopicPartition, state: PartitionState, columns: RecordColumns) -> None:
        """``columns`` (records at and above the position) wait for ``poll``."""
        state.buffered = columns
        state.read = 0
        self.ready.append(tp)

    def drain_columns(self, limit: int) -> list[RecordColumns]:
        """Up to ``limit`` buffered records as columns, one part per partition, partition by
        partition, advancing positions past the records returned."""
        out: list[RecordColumns] = []
        while self.ready and limit > 0:
            tp = self.ready[0]
            state = self.assignment[tp]
            buffered = state.buffered
            assert buffered is not None
            start = state.read
            stop = min(len(buffered), start + limit)
            part = buffered if start == 0 and stop == len(buffered) else buffered.slice(start, stop)
            out.append(part)
            limit -= stop - start
            state.position = buffered.offsets[stop - 1] + 1
            state.read = stop
            if stop == len(buffered):
                state.buffered = None
                self.ready.popleft()
        return out

    def drain(self, limit: int) -> list[ConsumerRecord]:
        """Up to ``limit`` buffered records, partition by partition, advancing positions past
        the records returned (one ConsumerRecord each: what ``poll`` returns)."""
        out: list[ConsumerRecord] = []
        types = _TIMESTAMP_TYPES
        for part in self.drain_columns(limit):
            topic, partition = part.topic, part.partition
            out.extend(
                ConsumerRecord(topic, partition, offset, timestamp, types[kind], key, value, hdrs)
                for offset, timestamp, kind, key, value, hdrs in zip(
                    part.offsets,
                    part.timestamps,
                    part.timestamp_types,
                    part.keys,
                    part.values,
                    part.headers,
                    strict=True,
                )
            )
        return out
