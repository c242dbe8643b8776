"""The transactional ids a broker coordinates and their home in ``__transaction_state`` (Kafka's
``TransactionStateManager``): which partition holds an id, the partitions this broker leads
and has loaded (each with its *coordinator epoch*), the metadata loaded from them, and the
acks=all writes that keep them durable.

Theory of operation
-------------------
A broker coordinates the ids of the ``__transaction_state`` partitions it leads. The
coordinator epoch of a partition is the partition's leader epoch when this broker became its
leader: every marker carries it, so a partition leader can refuse the markers of a coordinator
that was deposed (TRANSACTION_COORDINATOR_FENCED), and every write checks it afterwards.

1. :meth:`TransactionStateManager.begin_load` (on election) drops whatever the partition
   held and marks it *loading* at the new epoch; :meth:`TransactionStateManager.load` then
   reads its batches through the :class:`TransactionLogTopic` port (``node.txn_loader``) and
   installs the ids unless the partition was resigned or elected again meanwhile. While it
   loads, its ids answer COORDINATOR_LOAD_IN_PROGRESS; a partition neither loading nor loaded
   answers NOT_COORDINATOR.
2. :meth:`TransactionStateManager.resign` drops the partition's ids; whatever is in flight for
   them (a write, markers) finds them gone when it looks again and stops.
3. :meth:`TransactionStateManager.write` appends records to a partition with acks=all and
   returns the replica manager's error as it is. Whether the write still counts is the
   caller's check afterwards (:meth:`TransactionStateManager.metadata_at`: is this the same
   metadata object, at the same coordinator epoch?) — Kafka's ``appendTransactionToLog``
   answers NOT_COORDINATOR when the epoch changed during the write.

Per-id locks (:meth:`TransactionStateManager.lock`) serialise the *decisions* about one id
(Kafka's ``inLock``); writes run outside them, guarded by the metadata's pending state.

Not thread-safe: the broker's event loop is its only caller.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from kafkasim.common.clock import Clock
from kafkasim.common.errors import KafkaError, error_for_name
from kafkasim.node.config import BrokerConfig
from kafkasim.node.group_types import Error
from kafkasim.node.txn_loader import load_transactions_from_batches
from kafkasim.node.txn_log import TRANSACTION_STATE_TOPIC, partition_for
from kafkasim.node.txn_metadata import TransactionMetadata
from kafkasim.storage.records.batch import Record, encode_batch
from kafkasim.storage.records.entry import LogEntryHeader

logger = logging.getLogger(__name__)

NOT_COORDINATOR = error_for_name("NOT_COORDINATOR")
COORDINATOR_LOAD_IN_PROGRESS = error_for_name("COORDINATOR_LOAD_IN_PROGRESS")


class TransactionLogTopic(Protocol):
    """This broker's replicas of ``__transaction_state`` as the coordinator uses them (Kafka's
    ``ReplicaManager.getLog`` and ``appendRecords`` with internal topics allowed)."""

    async def batches(self, partition: int) -> Iterable[tuple[LogEntryHeader, Sequence[Record]]]:
        """Every batch of the local replica, decoded; raises a :class:`KafkaError`
        (UNKNOWN_TOPIC_OR_PARTITION) when this broker has no replica of ``partition``."""
        ...

    async def append(self, partition: int, batch: bytes, timeout_ms: int) -> KafkaError | None:
        """Append one batch as the leader with acks=all; the append's error, or None."""
        ...


@dataclass
class TxnPartitionCache:
    """A loaded partition: its coordinator epoch and its ids (Kafka's
    ``TxnMetadataCacheEntry``)."""

    coordinator_epoch: int
    metadata: dict[str, TransactionMetadata] = field(default_factory=dict)


class TransactionStateManager:
    """See the module doc."""

    def __init__(
        self, broker_id: int, config: BrokerConfig, log_topic: TransactionLogTopic, clock: Clock
    ) -> None:
        self.broker_id = broker_id
        self._log_topic = log_topic
        self._clock = clock
        self._partition_count: int = config["transaction.state.log.num.partitions"]
        # Kafka appends to the transaction log with the broker's request.timeout.ms.
        self._append_timeout_ms: int = config["request.timeout.ms"]
        # Loaded partitions → their cache; partitions being loaded → the epoch they load at.
        self.caches: dict[int, TxnPartitionCache] = {}
        self.loading: dict[int, int] = {}
        self._locks: dict[str, asyncio.Lock] = {}

    # -- which partition ------------------------------------------------------------------

    @property
    def partition_count(self) -> int:
        return self._partition_count

    def set_partition_count(self, count: int) -> None:
        """Map ids over ``count`` partitions from now on (the topic's actual count)."""
        if count <= 0:
            raise ValueError(
                f"{TRANSACTION_STATE_TOPIC} must have at least one partition, not {count}"
            )
        if count != self._partition_count and (self.caches or self.loading):
            raise RuntimeError(
                f"broker {self.broker_id}: cannot remap transactional ids over {count} "
                f"partitions of {TRANSACTION_STATE_TOPIC} while coordinating partitions "
                f"{sorted(self.caches)}"
            )
        self._partition_count = count

    def partition_for(self, transactional_id: str) -> int:
        return partition_for(transactional_id, self._partition_count)

    # -- lookups --------------------------------------------------------------------------

    def check(self, transactional_id: str) -> Error:
        """None when this broker coordinates ``transactional_id`` now, else the error to
        answer (COORDINATOR_LOAD_IN_PROGRESS, NOT_COORDINATOR)."""
        partition = self.partition_for(transactional_id)
        if partition in self.loading:
            return COORDINATOR_LOAD_IN_PROGRESS
        if partition not in self.caches:
            return NOT_COORDINATOR
        return None

    def coordinator_epoch(self, transactional_id: str) -> int | None:
        cache = self.caches.get(self.partition_for(transactional_id))
        return None if cache is None else cache.coordinator_epoch

    def metadata(self, transactional_id: str) -> TransactionMetadata | None:
        cache = self.caches.get(self.partition_for(transactional_id))
        return None if cache is None else cache.metadata.get(transactional_id)

    def metadata_at(
        self, transactional_id: str, coordinator_epoch: int
    ) -> TransactionMetadata | None:
        """The id's metadata if this broker still coordinates it at ``coordinator_epoch``."""
        cache = self.caches.get(self.partition_for(transactional_id))
        if cache is None or cache.coordinator_epoch != coordinator_epoch:
            return None
        return cache.metadata.get(transactional_id)

    def put_if_absent(self, metadata: TransactionMetadata) -> TransactionMetadata:
        """Cache a new id's metadata (the id's partition must be loaded); the cached one if
        the id already has one (Kafka's ``putTransactionStateIfNotExists``)."""
        cache = self.caches[self.partition_for(metadata.transactional_id)]
        return cache.metadata.setdefault(metadata.transactional_id, metadata)

    def remove(self, transactional_id: str, metadata: TransactionMetadata) -> None:
        """An expired id leaves the cache (only if ``metadata`` is still the cached one)."""
        cache = self.caches.get(self.partition_for(transactional_id))
        if cache is not None and cache.metadata.get(transactional_id) is metadata:
            del cache.metadata[transactional_id]
            self._locks.pop(transactional_id, None)

    def lock(self, transactional_id: str) -> asyncio.Lock:
        lock = self._locks.get(transactional_id)
        if lock is None:
            lock = self._locks[transactional_id] = asyncio.Lock()
        return lock

    # -- leadership of __transaction_state ------------------------------------------------

    def begin_load(self, partition: int, coordinator_epoch: int) -> None:
        """Drop what ``partition`` held and mark it loading at ``coordinator_epoch`` (at once,
        on election: its ids answer COORDINATOR_LOAD_IN_PROGRESS from now on)."""
        self.caches.pop(partition, None)
        self.loading[partition] = coordinator_epoch

    async def load(self, partition: int, coordinator_epoch: int) -> TxnPartitionCache | None:
        """Load ``partition`` (after :meth:`begin_load` at ``coordinator_epoch``): its cache
        once installed, None when the load failed or was overtaken (resigned, or elected
        again) while it ran."""
        if self.loading.get(partition) != coordinator_epoch:
            return None
        try:
            batches = await self._log_topic.batches(partition)
            loaded = load_transactions_from_batches(batches)
        except KafkaError as e:
            logger.error(
                "broker %d: could not load %s-%d: %s",
                self.broker_id,
                TRANSACTION_STATE_TOPIC,
                partition,
                e,
            )
            if self.loading.get(partition) == coordinator_epoch:
                del self.loading[partition]
            return None
        if self.loading.get(partition) != coordinator_epoch:
            return None
        del self.loading[partition]
        cache = TxnPartitionCache(coordinator_epoch, loaded)
        self.caches[partition] = cache
        logger.info(
            "broker %d: transaction coordinator for %s-%d (epoch %d), %d ids loaded",
            self.broker_id,
            TRANSACTION_STATE_TOPIC,
            partition,
            coordinator_epoch,
            len(loaded),
        )
        return cache

    def resign(self, partition: int, coordinator_epoch: int | None = None) -> None:
        """No longer the leader: forget the partition's ids. With ``coordinator_epoch`` (the
        leader epoch this broker now follows at) only a load or cache of that epoch or an
        older one goes: a late resignation never drops a newer election's state."""
        loading = self.loading.get(partition)
        if loading is not None and (coordinator_epoch is None or loading <= coordinator_epoch):
            del self.loading[partition]
        cache = self.caches.get(partition)
        if cache is not None and (
            coordinator_epoch is None or cache.coordinator_epoch <= coordinator_epoch
        ):
            del self.caches[partition]
            for transactional_id in cache.metadata:
                self._locks.pop(transactional_id, None)
            logger.info(
                "broker %d: no longer the transaction coordinator for %s-%d",
                self.broker_id,
                TRANSACTION_STATE_TOPIC,
                partition,
            )

    def resign_all(self) -> None:
        for partition in sorted(set(self.caches) | set(self.loading)):
            self.resign(partition)

    # -- writing to __transaction_state ---------------------------------------------------

    async def write(
        self, partition: int, records: Sequence[tuple[bytes, bytes | None]]
    ) -> type[KafkaError] | None:
        """Append ``records`` to ``partition`` in one batch with acks=all; the replica
        manager's error class (unmapped), or None."""
        batch = encode_batch([(self._clock.time_ms(), key, value) for key, value in records])
        error = await self._log_topic.append(partition, batch, self._append_timeout_ms)
        if error is None:
            return None
        logger.info(
            "broker %d: write to %s-%d failed: %s",
            self.broker_id,
            TRANSACTION_STATE_TOPIC,
            partition,
            error,
        )
        return type(error)
