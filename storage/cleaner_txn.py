"""What compaction does with transactions (Kafka's ``CleanedTransactionMetadata`` and the
transactional half of ``Cleaner.cleanInto``'s record filter).

One :class:`CleanedTransactions` walks the batches of one cleaning unit (the offset-map pass,
or one group of segments being recopied) in offset order. It starts from the aborted
transactions overlapping that unit, read from the ``.txnindex`` files
(:meth:`~storage.log.Log.collect_aborted_txns`), and decides per batch:

* a transactional **data** batch of an aborted transaction is discarded (and its keys never
  enter the offset map, so an aborted record cannot shadow a committed one); data of any other
  transaction is kept and noted as "seen" for its producer;
* an **ABORT marker** may go once no batch of its transaction was seen in this unit (they were
  removed by an earlier pass); while some were seen it stays, and its index entry is written
  into the cleaned segment's ``.txnindex``. A **COMMIT marker** may go when no data of its
  transaction was seen in this unit. A marker that may go still waits for the delete horizon
  (Kafka's legacy rule, the one it applies to tombstones: segments last modified after the
  last clean segment's mtime minus ``delete.retention.ms`` keep theirs). An empty control
  batch (already cleaned) may always go;
* whatever may go, the **last batch of each live producer** is kept as an empty batch (its
  header: producer id, epoch, sequence range, offsets) so that the producer's sequence and
  epoch checks survive a reload; when the producer's last entry is a marker, the marker of its
  current epoch is the batch kept (Kafka's ``isBatchLastRecordOfProducer``).

Consequence, as in Kafka: the cleaned ``.txnindex`` keeps an aborted transaction only as long
as some of its data are still in the unit; once they are gone, the entry goes (a consumer has
nothing of it to drop) even while the marker itself still waits for the horizon.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable
from typing import NamedTuple

from kafkasim.storage.producer_entry import ProducerStateEntry
from kafkasim.storage.records.batch import (
    BatchHeader,
    ControlRecordType,
    Record,
    parse_control_key,
)
from kafkasim.storage.txn_index import AbortedTxn, TransactionIndex


class _OngoingAbort:
    __slots__ = ("seen_data", "txn")

    def __init__(self, txn: AbortedTxn) -> None:
        self.txn = txn
        self.seen_data = False


class CleanedTransactions:
    """Transaction bookkeeping over one cleaning unit (see the module doc).

    ``cleaned_index``: where the aborted transactions that keep data go (None in the
    offset-map pass, which writes nothing).
    """

    def __init__(
        self, aborted: Iterable[AbortedTxn], cleaned_index: TransactionIndex | None = None
    ) -> None:
        # Min-heap on the first offset: a transaction becomes "ongoing" once the walk reaches it.
        self._pending = [(t.first_offset, t.last_offset, t) for t in aborted]
        heapq.heapify(self._pending)
        self._ongoing_aborted: dict[int, _OngoingAbort] = {}
        self._ongoing_committed: set[int] = set()
        self._cleaned_index = cleaned_index

    def _reach(self, offset: int) -> None:
        while self._pending and self._pending[0][0] <= offset:
            txn = heapq.heappop(self._pending)[2]
            self._ongoing_aborted.setdefault(txn.producer_id, _OngoingAbort(txn))

    def on_data_batch(self, header: BatchHeader) -> bool:
        """True when this data batch belongs to an aborted transaction (discard it)."""
        self._reach(header.last_offset)
        if not header.is_transactional:
            return False
        ongoing = self._ongoing_aborted.get(header.producer_id)
        if ongoing is not None:
            ongoing.seen_data = True
            return True
        self._ongoing_committed.add(header.producer_id)
        return False

    def on_control_batch(self, header: BatchHeader, records: list[Record]) -> bool:
        """True when this marker's transaction has no data left in the unit (it may go once
        past the delete horizon); an ABORT that stays writes its index entry."""
        self._reach(header.last_offset)
        if not records:
            return True  # emptied by an earlier pass
        kind = parse_control_key(records[0].key)
        if kind is ControlRecordType.ABORT:
            ongoing = self._ongoing_aborted.pop(header.producer_id, None)
            if ongoing is not None and ongoing.seen_data:
                if self._cleaned_index is not None:
                    self._cleaned_index.append(ongoing.txn)
                return False
            return True
        if kind is ControlRecordType.COMMIT:
            seen = header.producer_id in self._ongoing_committed
            self._ongoing_committed.discard(header.producer_id)
            return not seen
        return False


class LastBatch(NamedTuple):
    """A live producer's last data offset (None when its last entry is a marker) and epoch."""

    last_data_offset: int | None
    producer_epoch: int


def last_batches_of_producers(producers: dict[int, ProducerStateEntry]) -> dict[int, LastBatch]:
    """Kafka's ``lastRecordsOfActiveProducers``, taken once before a pass."""
    return {
        pid: LastBatch(e.last_data_offset if e.last_data_offset >= 0 else None, e.producer_epoch)
        for pid, e in producers.items()
    }


def is_last_batch_of_producer(header: BatchHeader, last: dict[int, LastBatch]) -> bool:
    """Whether ``header`` is the batch that holds its producer's state (keep it, if empty)."""
    if header.producer_id < 0:
        return False
    entry = last.get(header.producer_id)
    if entry is None:
        return False
    if entry.last_data_offset is not None:
        return header.last_offset == entry.last_data_offset
    return header.is_control and header.producer_epoch == entry.producer_epoch
