"""Delayed operations and their purgatory (Kafka's ``DelayedOperation`` and
``DelayedOperationPurgatory``): requests that cannot be answered yet wait here, watched by the
partitions they wait on, until they can complete, fail, or time out.

Theory of operation:

1. A request path builds an operation with one entry per partition it waits on and calls
   :meth:`DelayedOperationPurgatory.try_complete_else_watch`. The operation is checked once at
   once; if it is not done, it is watched under each pending partition and its timeout starts.
2. Whatever may satisfy an operation calls :meth:`check_and_complete` with the partition: the
   leader's high watermark moved (acks=all produce), a follower's log start offset or the set
   of live brokers changed (DeleteRecords' low watermark). Each operation watching it is
   checked again; the entries satisfied are settled, and the operation completes once none is
   pending.
3. A partition that stops being led here (LeaderAndIsr to follower, StopReplica, broker stop)
   calls :meth:`fail` with the error: every entry on it settles with that error.
4. On timeout, :meth:`DelayedOperation.on_expiration` settles the entries still pending
   (REQUEST_TIMED_OUT) and the operation completes.

An operation completes exactly once; its waiter then resumes. If the waiter goes away (the
request is cancelled), the operation leaves every watch list and never completes.
Not thread-safe: one event loop (the broker's).

Two concrete operations: :class:`DelayedProduce` (acks=all: HW ≥ the batch's last offset + 1,
then NOT_ENOUGH_REPLICAS_AFTER_APPEND if the ISR shrank below min.insync.replicas meanwhile)
and :class:`DelayedDeleteRecords` (the low watermark ≥ the new log start offset).
"""

from __future__ import annotations

import asyncio
import contextlib
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Generic, Protocol, TypeVar

from kafkasim.common.errors import KafkaError, RequestTimedOutError, error_for_name
from kafkasim.common.types import TopicPartition
from kafkasim.common.waits import wait_any
from kafkasim.storage.log import Log


class WatchedPartition(Protocol):
    """What an operation reads of the partition it waits on (``node.partition.Partition``)."""

    @property
    def tp(self) -> TopicPartition: ...

    @property
    def log(self) -> Log: ...

    @property
    def isr(self) -> frozenset[int]: ...

    @property
    def is_leader(self) -> bool: ...

    @property
    def high_watermark(self) -> int: ...

    @property
    def low_watermark(self) -> int: ...


NotEnoughReplicasAfterAppendError = error_for_name("NOT_ENOUGH_REPLICAS_AFTER_APPEND")


@dataclass(slots=True)
class PartitionWait:
    """One partition an operation waits on: until ``partition``'s watermark reaches
    ``required_offset``. Settled once ``done``, with ``error`` (None: satisfied)."""

    partition: WatchedPartition
    required_offset: int
    done: bool = False
    error: KafkaError | None = None

    @property
    def tp(self) -> TopicPartition:
        return self.partition.tp

    def settle(self, error: KafkaError | None) -> None:
        self.done, self.error = True, error


class DelayedOperation(ABC):
    """An operation over some partitions that completes when none of them is pending."""

    def __init__(self, waits: Iterable[PartitionWait], timeout_ms: int) -> None:
        self.waits = list(waits)
        self.timeout_ms = timeout_ms
        self.completed = False
        self._done: asyncio.Future[None] | None = None

    @property
    def keys(self) -> list[TopicPartition]:
        return [w.tp for w in self.waits if not w.done]

    @abstractmethod
    def satisfied(self, wait: PartitionWait) -> tuple[bool, KafkaError | None]:
        """Whether ``wait``'s partition has reached its offset, and with which error."""

    @abstractmethod
    def timed_out(self, wait: PartitionWait) -> KafkaError:
        """The error of an entry still pending at the timeout."""

    def try_complete(self) -> bool:
        """Settle what can be settled; complete when nothing is pending (Kafka's
        ``tryComplete`` + ``forceComplete``). True once complete."""
        if self.completed:
            return True
        for wait in self.waits:
            if not wait.done:
                reached, error = self.satisfied(wait)
                if reached:
                    wait.settle(error)
        if all(w.done for w in self.waits):
            self._complete()
        return self.completed

    def fail(self, tp: TopicPartition, error: KafkaError) -> bool:
        """``tp`` stopped being led here: its pending entries settle with ``error``."""
        for wait in self.waits:
            if wait.tp == tp and not wait.done:
                wait.settle(error)
        return self.try_complete()

    def on_expiration(self) -> None:
        """The timeout passed: every pending entry times out, and the operation completes."""
        if self.completed:
            return
        for wait in self.waits:
            if not wait.done:
                wait.settle(self.timed_out(wait))
        self._complete()

    def completion(self, loop: asyncio.AbstractEventLoop) -> asyncio.Future[None]:
        """The future the waiter awaits; it resolves when the operation completes."""
        if self._done is None:
            self._done = loop.create_future()
        return self._done

    def _complete(self) -> None:
        self.completed = True
        if self._done is not None and not self._done.done():
            self._done.set_result(None)


Op = TypeVar("Op", bound=DelayedOperation)


@dataclass(slots=True)
class DelayedOperationPurgatory(Generic[Op]):
    """Operations of one kind, watched by partition (Kafka's ``DelayedOperationPurgatory``)."""

    name: str
    _watchers: dict[TopicPartition, list[Op]] = field(default_factory=dict)

    def watched(self, tp: TopicPartition) -> int:
        """How many operations wait on ``tp`` (Kafka's ``numDelayed`` per key; for tests)."""
        return sum(1 for op in self._watchers.get(tp, ()) if not op.completed)

    async def try_complete_else_watch(self, op: Op) -> None:
        """Return once ``op`` has completed: at once, on a later check, or at its timeout.

        The waiter always yields to the loop before it resumes, even for an operation complete
        at once, so an answer never overtakes work already scheduled (the order of events in
        the simulation, and so its histories, depend on it)."""
        loop = asyncio.get_running_loop()
        done = op.completion(loop)
        keys: list[TopicPartition] = []
        if not op.try_complete():
            keys = op.keys
            for tp in keys:
                self._watchers.setdefault(tp, []).append(op)
        try:
            await wait_any((done,), max(op.timeout_ms, 0) / 1000)
        except asyncio.CancelledError:
            op.completed = True  # abandoned: the request went away, nobody reads the answer
            raise
        finally:
            # Completed, expiring or abandoned: no watch list keeps it.
            for tp in keys:
                self._forget(tp, op)
        if not op.completed:
            op.on_expiration()

    def check_and_complete(self, tp: TopicPartition) -> int:
        """Check every operation watching ``tp`` again; how many completed."""
        return self._each(tp, lambda op: op.try_complete())

    def fail(self, tp: TopicPartition, error: KafkaError) -> int:
        """Settle every operation's entries on ``tp`` with ``error``; how many completed."""
        return self._each(tp, lambda op: op.fail(tp, error))

    def _each(self, tp: TopicPartition, step: Callable[[Op], bool]) -> int:
        ops = self._watchers.get(tp)
        if not ops:
            return 0
        completed = 0
        for op in list(ops):
            if not op.completed and step(op):
                completed += 1
        self._watchers[tp] = [op for op in self._watchers.get(tp, ()) if not op.completed]
        if not self._watchers[tp]:
            del self._watchers[tp]
        return completed

    def _forget(self, tp: TopicPartition, op: Op) -> None:
        ops = self._watchers.get(tp)
        if ops is None:
            return
        with contextlib.suppress(ValueError):
            ops.remove(op)
        if not ops:
            del self._watchers[tp]


# -- the two operations -----------------------------------------------------------------------


class DelayedProduce(DelayedOperation):
    """acks=all: each partition's entry waits until the HW passes the batch's last offset.

    As Kafka's ``Partition.checkEnoughReplicasReachOffset``: reached with fewer ISR members than
    min.insync.replicas, the entry answers NOT_ENOUGH_REPLICAS_AFTER_APPEND (the records stay
    written); a partition no longer led here answers NOT_LEADER_OR_FOLLOWER (via ``fail``)."""

    def satisfied(self, wait: PartitionWait) -> tuple[bool, KafkaError | None]:
        partition = wait.partition
        if partition.high_watermark < wait.required_offset:
            return False, None
        min_isr = partition.log.config.min_insync_replicas
        if len(partition.isr) < min_isr:
            return True, NotEnoughReplicasAfterAppendError(
                f"ISR {sorted(partition.isr)} shrank below min.insync.replicas={min_isr} "
                "after the append"
            )
        return True, None

    def timed_out(self, wait: PartitionWait) -> KafkaError:
        partition = wait.partition
        return RequestTimedOutError(
            f"acks=all not satisfied within {self.timeout_ms} ms for {partition.tp}: "
            f"HW {partition.high_watermark}, ISR {sorted(partition.isr)}"
        )


class DelayedDeleteRecords(DelayedOperation):
    """DeleteRecords: each entry waits until the partition's low watermark (the smallest log
    start offset over the leader and the followers on live brokers) reaches the new start."""

    def satisfied(self, wait: PartitionWait) -> tuple[bool, KafkaError | None]:
        partition = wait.partition
        if not partition.is_leader:
            return False, None  # settled by ``fail`` when leadership goes
        return partition.low_watermark >= wait.required_offset, None

    def timed_out(self, wait: PartitionWait) -> KafkaError:
        low = -1
        with contextlib.suppress(KafkaError):
            low = wait.partition.low_watermark
        return RequestTimedOutError(
            f"{wait.tp}: the low watermark {low} did not reach the new log start offset "
            f"{wait.required_offset} within {self.timeout_ms} ms"
        )


class DelayedOperations:
    """The purgatories a partition's changes complete (Kafka's ``DelayedOperations``)."""

    def __init__(self) -> None:
        self.produce: DelayedOperationPurgatory[DelayedProduce] = DelayedOperationPurgatory(
            "Produce"
        )
        self.delete_records: DelayedOperationPurgatory[DelayedDeleteRecords] = (
            DelayedOperationPurgatory("DeleteRecords")
        )

    def fail(self, tp: TopicPartition, error: KafkaError) -> None:
        self.produce.fail(tp, error)
        self.delete_records.fail(tp, error)
