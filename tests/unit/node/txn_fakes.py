"""Fakes for the transaction coordinator's ports: ``__transaction_state`` in memory, a marker
sender that records and scripts its answers, leaders by dict, producer ids by counter."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence

from kafkasim.common.clock import ManualClock
from kafkasim.common.errors import KafkaError, UnknownTopicOrPartitionError
from kafkasim.common.types import TopicPartition
from kafkasim.node.config import BrokerConfig
from kafkasim.node.group_types import Error
from kafkasim.node.txn_coordinator import TransactionCoordinator
from kafkasim.node.txn_log import TxnLogKey, decode_key, decode_value
from kafkasim.node.txn_markers import TxnMarkerEntry
from kafkasim.node.txn_metadata import TransactionState
from kafkasim.storage.records.batch import BatchHeader, Record, decode_batch

TXN_PARTITIONS = 4
OFFSETS_PARTITIONS = 5


class MemoryTxnLog:
    """``__transaction_state`` as a list of batches per partition. ``load_gate``: loads wait
    for it; ``fail_with``: appends answer that error (as many times as ``fail_times``, forever
    when None); ``on_append``: runs during each append (before it lands)."""

    def __init__(self) -> None:
        self.logs: dict[int, list[bytes]] = {}
        self.load_gate: asyncio.Event | None = None
        self.fail_with: KafkaError | None = None
        self.fail_times: int | None = None
        self.on_append: Callable[[], None] | None = None

    async def batches(self, partition: int) -> list[tuple[BatchHeader, Sequence[Record]]]:
        if self.load_gate is not None:
            await self.load_gate.wait()
        if partition not in self.logs:
            raise UnknownTopicOrPartitionError(f"__transaction_state-{partition}")
        return [decode_batch(batch) for batch in self.logs[partition]]

    async def append(self, partition: int, batch: bytes, timeout_ms: int) -> KafkaError | None:
        await asyncio.sleep(0)
        if self.on_append is not None:
            self.on_append()
        if self.fail_with is not None and self.fail_times != 0:
            if self.fail_times is not None:
                self.fail_times -= 1
            return self.fail_with
        self.logs.setdefault(partition, []).append(batch)
        return None

    def states(self, partition: int, transactional_id: str) -> list[TransactionState | None]:
        """The states written for an id, in order (None: a tombstone)."""
        out: list[TransactionState | None] = []
        for batch in self.logs.get(partition, []):
            for record in decode_batch(batch)[1]:
                assert record.key is not None
                key = decode_key(record.key)
                if isinstance(key, TxnLogKey) and key.transactional_id == transactional_id:
                    out.append(None if record.value is None else decode_value(record.value).state)
        return out


Answer = Mapping[TopicPartition, Error] | BaseException


class FakeMarkers:
    """Records every send; ``script`` answers a (leader, partition) from a queue of errors
    (None: written) or raises an exception queued for a leader; ``gate`` holds every send."""

    def __init__(self) -> None:
        self.sent: list[tuple[int, TxnMarkerEntry]] = []
        self.script: dict[TopicPartition, list[Error]] = {}
        self.raise_for: dict[int, list[BaseException]] = {}
        self.gate: asyncio.Event | None = None

    async def __call__(
        self, leader_id: int, marker: TxnMarkerEntry
    ) -> Mapping[TopicPartition, Error]:
        self.sent.append((leader_id, marker))
        if self.gate is not None:
            await self.gate.wait()
        raising = self.raise_for.get(leader_id)
        if raising:
            raise raising.pop(0)
        answer: dict[TopicPartition, Error] = {}
        for tp in sorted(marker.partitions):
            queued = self.script.get(tp)
            answer[tp] = queued.pop(0) if queued else None
        return answer

    def partitions_sent(self) -> list[TopicPartition]:
        return sorted(tp for _, m in self.sent for tp in m.partitions)


def config(**props: object) -> BrokerConfig:
    base: dict[str, object] = {
        "broker.id": 1,
        "log.dirs": "/nonexistent",
        "zookeeper.connect": "sim",
        "transaction.state.log.num.partitions": TXN_PARTITIONS,
        "offsets.topic.num.partitions": OFFSETS_PARTITIONS,
    }
    return BrokerConfig.from_props({**base, **props})


class ProducerIds:
    def __init__(self, first: int = 1000) -> None:
        self.next = first
        self.fail_with: Exception | None = None

    async def __call__(self) -> int:
        if self.fail_with is not None:
            raise self.fail_with
        self.next += 1
        return self.next - 1


class Harness:
    """A coordinator over the fakes; ``leaders`` maps partitions to leader ids (a partition
    absent from it is unknown to the cluster)."""

    def __init__(
        self,
        log: MemoryTxnLog | None = None,
        clock: ManualClock | None = None,
        leaders: dict[TopicPartition, int] | None = None,
        **props: object,
    ) -> None:
        self.log = log or MemoryTxnLog()
        self.clock = clock or ManualClock()
        self.markers = FakeMarkers()
        self.producer_ids = ProducerIds()
        self.leaders: dict[TopicPartition, int] = leaders if leaders is not None else {}
        self.coordinator = TransactionCoordinator(
            1,
            config(**props),
            log_topic=self.log,
            producer_ids=self.producer_ids,
            marker_sender=self.markers,
            leaders=self.leaders.get,
            offsets_partitions=lambda: OFFSETS_PARTITIONS,
            clock=self.clock,
            marker_retry_backoff_ms=10,
        )

    async def lead(self, transactional_id: str, epoch: int = 0) -> int:
        """Elect the coordinator for the id's partition and wait for the load."""
        partition = self.coordinator.partition_for(transactional_id)
        self.log.logs.setdefault(partition, [])
        task = self.coordinator.elect(partition, epoch)
        if task is not None:
            await task
        return partition

    async def settle(self) -> None:
        """Wait for every background task (markers, loads) to finish."""
        await until(lambda: not self.coordinator._background)


async def until(predicate: Callable[[], bool], steps: int = 10_000) -> None:
    for _ in range(steps):
        if predicate():
            return
        await asyncio.sleep(0.001)
    raise AssertionError("condition never held")
