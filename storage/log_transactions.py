"""The partition side of transactions over a log's batches, segments and offsets.

Functions :class:`~storage.log.Log`, segment recovery and the loader share (Kafka's
``UnifiedLog.analyzeAndValidateProducerState`` / ``updateProducers``, ``LogSegment.
updateProducerState`` / ``updateTxnIndex``, ``UnifiedLog.lastStableOffset`` and
``collectAbortedTransactions``):

* :func:`apply_batch` — one appended (or replayed) batch into producer state: a data batch
  through the sequence/epoch/transaction rules, a control batch's COMMIT/ABORT marker (its one
  record is decoded: markers are the only batches whose records the log reads here, as Kafka's
  ``ProducerAppendInfo.append`` does) — returning the transaction a marker completes;
* :func:`complete_txns` — after the write: an ABORT goes into the ``.txnindex`` of the segment
  holding its marker with the last stable offset of that moment, then the transaction leaves
  the ongoing set (Kafka's order: LSO, index, ``completeTxn``);
* :func:`last_stable_offset` — ``min(first unstable offset, HW)``, the first unstable offset
  never below the log start offset;
* :func:`collect_aborted_txns` — the aborted transactions overlapping a fetch range, from the
  segment holding the fetch offset onwards, stopping when an entry's LSO covers the range.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from enum import Enum
from typing import TYPE_CHECKING

from kafkasim.storage.file_records import Buffer
from kafkasim.storage.offset_index import OffsetPosition
from kafkasim.storage.producer_state import AppendOrigin, ProducerStateManager
from kafkasim.storage.records.batch import (
    BatchHeader,
    EndTransactionMarker,
    decode_batch,
    parse_end_transaction_marker,
)
from kafkasim.storage.txn_index import AbortedTxn, CompletedTxn, TransactionIndex

if TYPE_CHECKING:
    from kafkasim.storage.segment import FetchDataInfo
    from kafkasim.storage.segments import LogSegments

logger = logging.getLogger(__name__)


class FetchIsolation(Enum):
    """How far a read may go (Kafka's ``FetchIsolation``): a follower to the log end, a
    ``read_uncommitted`` consumer to the high watermark, a ``read_committed`` one to the last
    stable offset, with the aborted transactions of what it reads."""

    LOG_END = "log_end"
    HIGH_WATERMARK = "high_watermark"
    TXN_COMMITTED = "txn_committed"


def read_marker(batch: Buffer, position: int = 0) -> EndTransactionMarker | None:
    """The COMMIT/ABORT marker of the control batch at ``position`` (CRC already checked), or
    None when compaction emptied it. InvalidRecordError when its record is not a marker."""
    _, records = decode_batch(batch, position, verify_crc=False)
    if not records:
        return None
    return parse_end_transaction_marker(records[0].key, records[0].value)


def apply_batch(
    producer_state: ProducerStateManager,
    header: BatchHeader,
    batch: Buffer,
    *,
    base_offset: int,
    last_offset: int,
    origin: AppendOrigin,
) -> CompletedTxn | None:
    """Record one batch of a producer (``header.producer_id`` ≥ 0) at the offsets it is
    written at; a marker returns the transaction it completes. A leader's client batches go
    through :func:`~storage.log_append.check_client_sequences` instead (duplicates).

    A control batch whose record is not a marker is INVALID_RECORD for every origin, as
    Kafka's ``EndTransactionMarker.deserialize``: a follower's fetcher retries the partition
    after a backoff, recovery truncates the segment there (``segment_recovery``).
    """
    if header.is_control:
        marker = read_marker(batch)
        if marker is None:
            return None
        return producer_state.append_end_txn_marker(
            header.producer_id,
            header.producer_epoch,
            marker,
            base_offset,
            header.max_timestamp,
            origin=origin,
        )
    producer_state.check_and_update(
        header.producer_id,
        header.producer_epoch,
        header.base_sequence,
        header.last_sequence,
        last_offset,
        header.max_timestamp,
        is_from_client=False,
        is_transactional=header.is_transactional,
        first_offset=base_offset,
        origin=origin,
    )
    return None


def complete_txns(
    producer_state: ProducerStateManager,
    txn_index: TransactionIndex | None,
    completed: Iterable[CompletedTxn],
) -> None:
    """Write each aborted transaction to ``txn_index`` (None: replay without an index) with
    the LSO of the moment, then complete it in producer state."""
    for txn in completed:
        if txn_index is not None and txn.is_aborted:
            txn_index.append(AbortedTxn.of(txn, producer_state.last_stable_offset_of(txn)))
        producer_state.complete_txn(txn)


def last_stable_offset(
    producer_state: ProducerStateManager, *, log_start_offset: int, high_watermark: int
) -> int:
    """Kafka's ``UnifiedLog.lastStableOffset``: the first unstable offset (at least the log
    start offset) when it is below the high watermark, else the high watermark."""
    first_unstable = producer_state.first_unstable_offset()
    if first_unstable is None:
        return high_watermark
    return min(max(first_unstable, log_start_offset), high_watermark)


def collect_aborted_txns(
    segments: LogSegments, fetch_offset: int, upper_bound_offset: int
) -> list[AbortedTxn]:
    """Aborted transactions with ``last_offset`` ≥ ``fetch_offset`` and ``first_offset`` <
    ``upper_bound_offset``, from the segment holding ``fetch_offset`` on, in marker order;
    a segment's search that is complete ends it (Kafka's ``collectAbortedTransactions``)."""
    found: list[AbortedTxn] = []
    start = segments.floor(fetch_offset)
    if start is None:
        start = segments.first
    if start is None:
        return found
    for segment in segments.from_offset(start.base_offset):
        result = segment.txn_index.collect_aborted_txns(fetch_offset, upper_bound_offset)
        found.extend(result.aborted_transactions)
        if result.is_complete:
            break
    return found


def apply_batches(
    producer_state: ProducerStateManager,
    batches: Iterable[tuple[BatchHeader, Buffer, int]],
    origin: AppendOrigin,
) -> list[CompletedTxn]:
    """:func:`apply_batch` for each (header, bytes, base offset written at) of an append whose
    producer id is set; the transactions its markers complete, in order."""
    completed: list[CompletedTxn] = []
    for header, batch, base_offset in batches:
        if header.producer_id < 0:
            continue
        txn = apply_batch(
            producer_state,
            header,
            batch,
            base_offset=base_offset,
            last_offset=base_offset + header.last_offset_delta,
            origin=origin,
        )
        if txn is not None:
            completed.append(txn)
    return completed


def aborted_txns_for_read(
    segments: LogSegments, info: FetchDataInfo, log_end_offset: int
) -> tuple[AbortedTxn, ...]:
    """The aborted transactions a ``read_committed`` consumer needs with ``info`` (Kafka's
    ``addAbortedTransactions``): those overlapping ``[fetch offset, upper bound)``, the upper
    bound being the first offset-index entry past the bytes read, else the next segment's
    base offset, else the log end offset."""
    if not info.records:
        return ()
    segment = segments.get(info.segment_base_offset)
    if segment is None:
        return ()
    found = segment.offset_index.fetch_upper_bound_offset(
        OffsetPosition(info.fetch_offset, info.position), len(info.records)
    )
    if found is not None:
        upper = found.offset
    else:
        nxt = segments.higher(segment.base_offset)
        upper = nxt.base_offset if nxt is not None else log_end_offset
    return tuple(collect_aborted_txns(segments, info.fetch_offset, upper))
