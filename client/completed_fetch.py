"""What a consumer reads of one partition's fetch answer (the record part of Kafka's
``CompletedFetch``): which entries it decodes, which it skips, by ``isolation.level``.

:func:`consumed_entries` walks the answer entry by entry (v2 batches and v0/v1 messages) and
gives each one's records at or above the fetch offset, except:

* **control batches** (COMMIT/ABORT markers) give no record, at either isolation level;
* **read_committed**: the batches of aborted transactions give no record either. The answer's
  aborted transactions, (producer id, first offset), go into a min-heap by first offset; per
  batch with a producer id, in offset order, every aborted transaction whose first offset is
  at or below the batch's last offset moves its producer into the *aborted set*; a
  transactional data batch of a producer in the set is skipped (its CRC is still checked,
  Kafka's ``check.crcs``, but its records are never decompressed); the producer's ABORT
  marker takes it out of the set, so its later transactions are read. All of it per batch,
  never per record, as Kafka's ``nextFetchedRecord`` does.

A read_committed answer never goes past the last stable offset, so every transaction it holds
data of has either committed or aborted with its marker in the answer's range or later; the
aborted list names exactly those that aborted (``FetchPartitionData.aborted_transactions``).
The caller moves its position past every entry, read or skipped (``header.next_offset``).
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Iterator
from typing import Final

from kafkasim.storage.records.batch import (
    BatchHeader,
    ControlRecordType,
    Record,
    parse_control_key,
    validate_batch,
)
from kafkasim.storage.records.entry import LogEntryHeader, decode_entry, iter_entries

__all__ = ["CONTROL", "READ", "SKIP", "consumed_entries", "entries_to_read"]


def _is_abort_marker(records: list[Record]) -> bool:
    """Kafka's ``containsAbortMarker``: the control batch's first record is an ABORT."""
    return bool(records) and parse_control_key(records[0].key) is ControlRecordType.ABORT


READ: Final = 0  # the entry's records are returned (those at or above the fetch offset)
SKIP: Final = 1  # an aborted transaction's batch (its CRC checked): no record
CONTROL: Final = 2  # a control batch: decoded (checked), no record


def entries_to_read(
    data: bytes, aborted: Iterable[tuple[int, int]] | None = None
) -> Iterator[tuple[int, LogEntryHeader, int]]:
    """Each entry of ``data`` as (position, header, READ / SKIP / CONTROL), by the rules of
    the module doc; ``aborted`` as for :func:`consumed_entries`."""
    pending: list[tuple[int, int]] | None = None
    if aborted is not None:
        pending = [(first_offset, producer_id) for producer_id, first_offset in aborted]
        heapq.heapify(pending)
    aborted_producers: set[int] = set()
    for pos, header in iter_entries(data):
        if pending is not None and isinstance(header, BatchHeader) and header.has_producer_id:
            while pending and pending[0][0] <= header.last_offset:
                aborted_producers.add(heapq.heappop(pending)[1])
            if header.is_control:
                if _is_abort_marker(decode_entry(data, pos, header)):
                    aborted_producers.discard(header.producer_id)
                yield pos, header, SKIP
                continue
            if header.is_transactional and header.producer_id in aborted_producers:
                validate_batch(data, pos)
                yield pos, header, SKIP
                continue
        is_control = isinstance(header, BatchHeader) and header.is_control
        yield pos, header, CONTROL if is_control else READ


def consumed_entries(
    data: bytes,
    *,
    fetch_offset: int,
    aborted: Iterable[tuple[int, int]] | None = None,
) -> Iterator[tuple[LogEntryHeader, list[Record]]]:
    """Each entry of ``data`` with the records the consumer returns (see the module doc).

    ``aborted``: None for read_uncommitted; for read_committed the answer's aborted
    transactions as (producer id, first offset). CorruptRecordError / InvalidRecordError for
    an entry that does not decode (a control record without a valid key among them)."""
    for pos, header, action in entries_to_read(data, aborted):
        if action == SKIP:
            yield header, []
            continue
        records = decode_entry(data, pos, header, fetch_offset=fetch_offset)
        yield header, [] if action == CONTROL else records
