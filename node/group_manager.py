"""The groups a broker coordinates and their home in ``__consumer_offsets`` (Kafka's
``GroupMetadataManager``): which partition holds a group, which partitions this broker leads
and has loaded, the groups loaded from them, and the writes that keep them durable.

A broker coordinates the groups whose partition (:meth:`GroupMetadataManager.partition_of`) it
leads. When it becomes that partition's leader it loads the partition from its own log
(``node.group_loader``); when it stops leading, it drops those groups and answers waiting
members NOT_COORDINATOR, so they look the coordinator up again. Writes go to the group's
partition with acks=all (:meth:`GroupMetadataManager.write`), and append errors are answered
as Kafka maps them for coordinator writes.

The partition count is the one ``__consumer_offsets`` has, as Kafka's ZooKeeper-mode broker
reads it at start-up (``zkClient.getTopicPartitionCount``, else ``offsets.topic.num.partitions``:
the count it would create the topic with); the broker sets it before it serves
(:meth:`GroupMetadataManager.set_partition_count`). A topic left by an older run with another
count therefore keeps every group's coordinator where its records are.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine, Iterable, Sequence
from typing import Any, NamedTuple, Protocol

from kafkasim.common.clock import Clock
from kafkasim.common.errors import KafkaError, error_for_name
from kafkasim.node.config import BrokerConfig
from kafkasim.node.group_loader import load_groups
from kafkasim.node.group_metadata import Group
from kafkasim.node.group_records import (
    OFFSETS_TOPIC,
    GroupKey,
    encode_group_key,
    encode_group_value,
    partition_for,
)
from kafkasim.node.group_types import Error, GroupState
from kafkasim.storage.records.batch import Record, encode_batch
from kafkasim.storage.records.entry import LogEntryHeader

logger = logging.getLogger(__name__)


class Appended(NamedTuple):
    """An append's outcome: its error, or None and the base offset the batch was given."""

    error: KafkaError | None
    base_offset: int = -1


class OffsetsTopic(Protocol):
    """This broker's replicas of ``__consumer_offsets`` as the coordinator uses them (Kafka's
    ``ReplicaManager.getLog`` and ``appendRecords`` with internal topics allowed)."""

    def batches(self, partition: int) -> Iterable[tuple[LogEntryHeader, Sequence[Record]]]:
        """Every batch of the local replica, decoded; raises a :class:`KafkaError`
        (UNKNOWN_TOPIC_OR_PARTITION) when this broker has no replica of ``partition``."""
        ...

    async def append(self, partition: int, batch: bytes, timeout_ms: int) -> Appended:
        """Append one batch as the leader (as the coordinator: a transactional batch's
        producer epoch is checked, its sequence is not) with acks=all."""
        ...


def _mapped(names: dict[str, str]) -> dict[type[KafkaError], type[KafkaError]]:
    return {error_for_name(k): error_for_name(v) for k, v in names.items()}


# How a failed write to __consumer_offsets is reported to the client (as Kafka maps them).
_WRITE_ERRORS = _mapped(
    {
        "UNKNOWN_TOPIC_OR_PARTITION": "COORDINATOR_NOT_AVAILABLE",
        "NOT_ENOUGH_REPLICAS": "COORDINATOR_NOT_AVAILABLE",
        "NOT_ENOUGH_REPLICAS_AFTER_APPEND": "COORDINATOR_NOT_AVAILABLE",
        "REQUEST_TIMED_OUT": "COORDINATOR_NOT_AVAILABLE",
        "NOT_LEADER_OR_FOLLOWER": "NOT_COORDINATOR",
        "KAFKA_STORAGE_ERROR": "NOT_COORDINATOR",
        "MESSAGE_TOO_LARGE": "INVALID_COMMIT_OFFSET_SIZE",
        "RECORD_LIST_TOO_LARGE": "INVALID_COMMIT_OFFSET_SIZE",
    }
)


class GroupMetadataManager:
    """The cache of groups of the ``__consumer_offsets`` partitions this broker has loaded
    (``owned``, with the leader epoch each was loaded at) or is loading (``loading``; never
    both). Not thread-safe: the broker's event loop is its only caller."""

    def __init__(
        self, broker_id: int, config: BrokerConfig, offsets_topic: OffsetsTopic, clock: Clock
    ) -> None:
        self.broker_id = broker_id
        self._offsets_topic = offsets_topic
        self._clock = clock
        self._commit_timeout_ms: int = config["offsets.commit.timeout.ms"]
        self._partition_count: int = config["offsets.topic.num.partitions"]
        self.groups: dict[str, Group] = {}
        # __consumer_offsets partitions this broker leads and has loaded → their leader epoch.
        self.owned: dict[int, int] = {}
        self.loading: set[int] = set()
        # Producer id → the groups with transactional offsets of it pending (Kafka's
        # openGroupsForProducer): where a transaction marker's completion looks.
        self.producer_groups: dict[int, set[str]] = {}
        self._background: set[asyncio.Task[None]] = set()

    # -- which partition ------------------------------------------------------------------

    @property
    def partition_count(self) -> int:
        return self._partition_count

    def set_partition_count(self, count: int) -> None:
        """Map groups over ``count`` partitions from now on (the topic's actual count)."""
        if count <= 0:
            raise ValueError(f"{OFFSETS_TOPIC} must have at least one partition, not {count}")
        if count != self._partition_count and (self.owned or self.loading):
            # The groups loaded so far would no longer map to the partitions holding them.
            raise RuntimeError(
                f"broker {self.broker_id}: cannot remap groups over {count} partitions of "
                f"{OFFSETS_TOPIC} while coordinating partitions {sorted(self.owned)}"
            )
        self._partition_count = count

    def partition_of(self, group_id: str) -> int:
        return partition_for(group_id, self._partition_count)

    # -- leadership of __consumer_offsets ---------------------------------------------------

    def elect(self, partition: int, leader_epoch: int) -> None:
        """This broker now leads ``__consumer_offsets`` ``partition``: load its groups."""
        if self.owned.get(partition) == leader_epoch:
            return
        self.resign(partition)
        self.loading.add(partition)
        try:
            loaded = load_groups(self._offsets_topic.batches(partition), self._clock.monotonic_ms())
        except KafkaError as e:
            logger.error(
                "broker %d: could not load %s-%d: %s", self.broker_id, OFFSETS_TOPIC, partition, e
            )
            return
        finally:
            self.loading.discard(partition)
        self.groups.update(loaded)
        for group_id, group in loaded.items():
            for producer_id in group.offsets.producers:
                self.add_producer_group(producer_id, group_id)
        self.owned[partition] = leader_epoch
        logger.info(
            "broker %d: coordinator for %s-%d (epoch %d), %d groups loaded",
            self.broker_id,
            OFFSETS_TOPIC,
            partition,
            leader_epoch,
            len(loaded),
        )

    def resign(self, partition: int) -> None:
        """No longer the leader: forget the partition's groups; waiting members look again."""
        self.owned.pop(partition, None)
        for group_id in [g for g in self.groups if self.partition_of(g) == partition]:
            group = self.groups.pop(group_id)
            for producer_id in group.offsets.producers:
                self.remove_producer_group(producer_id, group_id)
            group.transition(GroupState.DEAD, self._clock.monotonic_ms())
            for member in group.members.values():
                member.fail(error_for_name("NOT_COORDINATOR"))

    def resign_all(self) -> None:
        for partition in sorted(self.owned):
            self.resign(partition)

    def check(self, group_id: str) -> Error:
        """None when this broker may serve ``group_id`` now, else the error to answer."""
        if not group_id:
            return error_for_name("INVALID_GROUP_ID")
        partition = self.partition_of(group_id)
        if partition in self.loading:
            return error_for_name("COORDINATOR_LOAD_IN_PROGRESS")
        if partition not in self.owned:
            return error_for_name("NOT_COORDINATOR")
        return None

    def add_empty_group(self, group_id: str, now_ms: int) -> Group:
        group = Group(group_id)
        group.transition(GroupState.EMPTY, now_ms)
        self.groups[group_id] = group
        return group

    # -- transactional offsets' producers ------------------------------------------------------

    def add_producer_group(self, producer_id: int, group_id: str) -> None:
        self.producer_groups.setdefault(producer_id, set()).add(group_id)

    def remove_producer_group(self, producer_id: int, group_id: str) -> None:
        groups = self.producer_groups.get(producer_id)
        if groups is not None:
            groups.discard(group_id)
            if not groups:
                del self.producer_groups[producer_id]

    def handle_txn_completion(
        self, producer_id: int, partitions: Iterable[int], is_commit: bool
    ) -> None:
        """The marker of ``producer_id``'s transaction was written to these partitions of
        ``__consumer_offsets``: its pending offsets in their groups are committed or dropped
        (Kafka's ``handleTxnCompletion``). A group no longer here is skipped: its new
        coordinator reads the marker when it loads the partition."""
        wanted = set(partitions)
        for group_id in sorted(self.producer_groups.get(producer_id, ())):
            if self.partition_of(group_id) not in wanted:
                continue
            group = self.groups.get(group_id)
            if group is None or group.state is GroupState.DEAD:
                continue
            group.offsets.complete_txn(producer_id, is_commit)
            self.remove_producer_group(producer_id, group_id)

    # -- writing to __consumer_offsets ------------------------------------------------------

    def group_record(self, group: Group) -> tuple[bytes, bytes]:
        """The group's metadata record as it stands now (key, value)."""
        value = encode_group_value(group.to_value(self._clock.time_ms()))
        return encode_group_key(GroupKey(group.group_id)), value

    def store_group_later(self, group: Group) -> None:
        """Write the group's metadata in the background (a change no client waits on)."""
        self._spawn(self._store_group(group, group.generation))

    async def _store_group(self, group: Group, generation: int) -> None:
        error = await self.write(group.group_id, [self.group_record(group)])
        if error is not None:
            logger.warning(
                "broker %d: could not store group %s generation %d: %s",
                self.broker_id,
                group.group_id,
                generation,
                error.error_name,
            )

    async def write(self, group_id: str, records: Sequence[tuple[bytes, bytes | None]]) -> Error:
        """Append ``records`` to the group's partition with acks=all; None or the error to
        answer (Kafka's mapping of append errors for coordinator writes)."""
        batch = encode_batch([(self._clock.time_ms(), key, value) for key, value in records])
        error, _ = await self.append(group_id, batch)
        return error

    async def append(self, group_id: str, batch: bytes) -> tuple[Error, int]:
        """Append ``batch`` to the group's partition with acks=all: (None, its base offset),
        or (the error to answer, -1)."""
        appended = await self._offsets_topic.append(
            self.partition_of(group_id), batch, self._commit_timeout_ms
        )
        error = appended.error
        if error is None:
            return None, appended.base_offset
        logger.info("broker %d: write for group %s failed: %s", self.broker_id, group_id, error)
        return _WRITE_ERRORS.get(type(error), type(error)), -1

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)
