"""A group's committed offsets with the commits still on their way (the offsets half of Kafka's
``GroupMetadata``: ``offsets``, ``pendingOffsetCommits`` and
``pendingTransactionalOffsetCommits``).

Pure bookkeeping, no IO. Three maps:

* ``committed`` — what OffsetFetch answers: per partition the value and the log offset of the
  ``__consumer_offsets`` batch that holds it (Kafka's ``CommitRecordMetadataAndOffset``);
* plain commits whose append is in flight (:meth:`OffsetCache.prepare_commit`, then
  :meth:`~OffsetCache.on_commit_append` or :meth:`~OffsetCache.fail_commit`);
* transactional commits per producer id (KIP-98): prepared before their append, given their
  log offset once appended, and then kept until the transaction's marker is written —
  :meth:`~OffsetCache.complete_txn` materialises them (COMMIT) or drops them (ABORT).

Ordering, as Kafka's: a value replaces the committed one only when its batch is *later in the
log* than the committed one's (``olderThan`` on the batch offsets), so a plain commit written
after a transactional one wins even if the transaction commits afterwards, and a transaction
whose offsets were written after a plain commit wins when it commits.

KIP-447's ``require_stable``: :meth:`~OffsetCache.has_pending` is true for a partition with a
plain commit in flight or a transactional commit not yet completed (OffsetFetch then answers
UNSTABLE_OFFSET_COMMIT).

The cache reads as a ``Mapping`` of the committed values, so code that only looks at what is
committed (OffsetFetch, OffsetDelete, DeleteGroups) sees a dict of ``OffsetValue``.
Not thread-safe: the broker's event loop is its only caller.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass

from kafkasim.common.types import TopicPartition
from kafkasim.node.group_records import OffsetValue


@dataclass(frozen=True, slots=True)
class CommitRecord:
    """An offset value and the base offset of the ``__consumer_offsets`` batch that holds it;
    ``log_offset`` None: a transactional commit whose append has not completed yet."""

    value: OffsetValue
    log_offset: int | None

    def older_than(self, other: CommitRecord) -> bool:
        """Kafka's ``olderThan``: this record's batch comes before ``other``'s in the log."""
        if self.log_offset is None or other.log_offset is None:
            raise ValueError(f"an offset commit not yet appended has no place in the log: {self}")
        return self.log_offset < other.log_offset


class OffsetCache(Mapping[TopicPartition, OffsetValue]):
    """The committed offsets of one group (a mapping of their values) and its pending commits.

    Invariants: every ``committed`` record has a log offset; a producer id is a key of the
    transactional map only while it has at least one pending partition."""

    def __init__(
        self,
        committed: Mapping[TopicPartition, CommitRecord] | None = None,
        pending_txn: Mapping[int, Mapping[TopicPartition, CommitRecord]] | None = None,
    ) -> None:
        self._committed: dict[TopicPartition, CommitRecord] = dict(committed or {})
        if any(r.log_offset is None for r in self._committed.values()):
            raise ValueError("a committed offset must carry the log offset of its record")
        self._pending: dict[TopicPartition, OffsetValue] = {}
        self._pending_txn: dict[int, dict[TopicPartition, CommitRecord]] = {
            pid: dict(offsets) for pid, offsets in (pending_txn or {}).items() if offsets
        }

    # -- the Mapping of committed values ------------------------------------------------------

    def __getitem__(self, tp: TopicPartition) -> OffsetValue:
        return self._committed[tp].value

    def __iter__(self) -> Iterator[TopicPartition]:
        return iter(self._committed)

    def __len__(self) -> int:
        return len(self._committed)

    def record(self, tp: TopicPartition) -> CommitRecord | None:
        """The committed value of ``tp`` with its log offset, or None."""
        return self._committed.get(tp)

    # -- plain commits (OffsetCommit) -----------------------------------------------------------

    def prepare_commit(self, offsets: Mapping[TopicPartition, OffsetValue]) -> None:
        """Plain commits about to be appended (Kafka's ``prepareOffsetCommit``)."""
        self._pending.update(offsets)

    def on_commit_append(self, tp: TopicPartition, value: OffsetValue, log_offset: int) -> None:
        """A plain commit of ``tp`` was appended at ``log_offset``: it becomes the committed
        value unless a later record already is, or its partition was deleted meanwhile."""
        if tp in self._pending:
            current = self._committed.get(tp)
            appended = CommitRecord(value, log_offset)
            if current is None or current.older_than(appended):
                self._committed[tp] = appended
        if self._pending.get(tp) == value:
            del self._pending[tp]

    def fail_commit(self, tp: TopicPartition, value: OffsetValue) -> None:
        """A plain commit's append failed: it is no longer pending."""
        if self._pending.get(tp) == value:
            del self._pending[tp]

    # -- transactional commits (TxnOffsetCommit) --------------------------------------------------

    def prepare_txn_commit(
        self, producer_id: int, offsets: Mapping[TopicPartition, OffsetValue]
    ) -> None:
        """Transactional commits of ``producer_id`` about to be appended: pending from now on."""
        if not offsets:
            return
        pending = self._pending_txn.setdefault(producer_id, {})
        for tp, value in offsets.items():
            pending[tp] = CommitRecord(value, None)

    def on_txn_commit_append(
        self, producer_id: int, tp: TopicPartition, value: OffsetValue, log_offset: int
    ) -> None:
        """The transactional commit of ``tp`` was appended at ``log_offset`` (ignored when the
        pending entry is gone or was replaced by another value meanwhile)."""
        pending = self._pending_txn.get(producer_id, {})
        if tp in pending and pending[tp].value == value:
            pending[tp] = CommitRecord(value, log_offset)

    def fail_txn_commit(self, producer_id: int, tp: TopicPartition) -> None:
        """A transactional commit's append failed: forget it (the producer retries)."""
        pending = self._pending_txn.get(producer_id)
        if pending is None:
            return
        pending.pop(tp, None)
        if not pending:
            del self._pending_txn[producer_id]

    def complete_txn(self, producer_id: int, is_commit: bool) -> None:
        """The producer's transaction ended (its marker was written): on COMMIT its offsets
        become committed where they are later in the log than the committed ones; on ABORT
        they are dropped. Raises ``RuntimeError`` (Kafka's IllegalStateException) for a
        commit whose record was never appended."""
        pending = self._pending_txn.pop(producer_id, None)
        if not is_commit or pending is None:
            return
        unappended = sorted(str(tp) for tp, r in pending.items() if r.log_offset is None)
        if unappended:
            self._pending_txn[producer_id] = pending
            raise RuntimeError(
                f"cannot complete the transactional offset commit of producer {producer_id}: "
                f"its record for {', '.join(unappended)} was never appended to the log"
            )
        for tp, record in pending.items():
            current = self._committed.get(tp)
            if current is None or current.older_than(record):
                self._committed[tp] = record

    # -- questions and removal ------------------------------------------------------------------

    def has_pending(self, tp: TopicPartition) -> bool:
        """A commit of ``tp`` is in flight or in an open transaction (KIP-447's unstable)."""
        return tp in self._pending or any(tp in p for p in self._pending_txn.values())

    def has_pending_from(self, producer_id: int) -> bool:
        return producer_id in self._pending_txn

    @property
    def producers(self) -> frozenset[int]:
        """The producer ids with pending transactional commits."""
        return frozenset(self._pending_txn)

    def pending_txn_offsets(self, producer_id: int) -> dict[TopicPartition, CommitRecord]:
        """A copy of ``producer_id``'s pending transactional commits."""
        return dict(self._pending_txn.get(producer_id, {}))

    def remove(self, tps: Iterable[TopicPartition]) -> None:
        """Forget ``tps`` everywhere: committed, in flight and pending in transactions (Kafka's
        ``removeOffsets``, for OffsetDelete and deleted groups)."""
        for tp in tps:
            self._committed.pop(tp, None)
            self._pending.pop(tp, None)
            for pending in self._pending_txn.values():
                pending.pop(tp, None)
        self._pending_txn = {pid: p for pid, p in self._pending_txn.items() if p}
