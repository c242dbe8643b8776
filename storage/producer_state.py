"""Producer state of one partition: Kafka's ProducerStateManager (idempotence, transactions).

(One module, ~700 lines: idempotence and transactions check and update the same per-producer
entries in one pass per batch, as Kafka's ProducerAppendInfo does; the entries and the
snapshot codec are in :mod:`storage.producer_entry`.)

Theory of operation: idempotence
--------------------------------
An idempotent producer stamps every batch with its producer id, producer epoch and the
sequence numbers of its first and last record. The partition leader remembers, per producer,
the epoch and the metadata of the last :data:`NUM_BATCHES_TO_RETAIN` batches, and checks each
new client batch against them (:meth:`ProducerStateManager.check_and_update`):

1. A batch with the current epoch and exactly the first/last sequence of a cached batch is a
   *duplicate* (a retry whose first attempt was written): it is not appended again, and the
   producer is answered with the offsets of the original.
2. An epoch below the producer's current epoch is *fenced*: INVALID_PRODUCER_EPOCH.
3. A higher epoch must start at sequence 0 (the producer reset its sequences when its epoch
   was bumped): otherwise OUT_OF_ORDER_SEQUENCE_NUMBER.
4. The current epoch must continue exactly where the last batch ended: ``first_seq ==
   last_seq + 1``, wrapping from 2**31 - 1 to 0; a gap or a step back is
   OUT_OF_ORDER_SEQUENCE_NUMBER.
5. A producer the partition has no state for is accepted at any sequence (Kafka 2.5+,
   KIP-360: its state may have been removed by retention or DeleteRecords; before that Kafka
   answered UNKNOWN_PRODUCER_ID to a first sequence other than 0).

Theory of operation: transactions (KIP-98, Kafka's ``ProducerAppendInfo``)
-------------------------------------------------------------------------
6. A transactional data batch (attributes bit 4) of a producer with no open transaction opens
   one at the batch's first offset (``current_txn_first_offset``); the manager keeps the open
   ("ongoing") transactions ordered by first offset.
7. A non-transactional batch from a producer whose transaction is open is INVALID_TXN_STATE.
8. A COMMIT or ABORT marker (a control batch, written by the transaction coordinator) is
   checked like a data batch for its producer epoch (older: INVALID_PRODUCER_EPOCH; Kafka's
   rule for transaction versions 0 and 1) and for its coordinator epoch (older than the last
   marker's: TRANSACTION_COORDINATOR_FENCED); it closes the producer's transaction and yields
   a :class:`~storage.txn_index.CompletedTxn`. A marker for a producer with no open
   transaction is allowed and completes nothing (the coordinator may write markers to every
   partition of a transaction, some of which got no data, and retries them).
9. The log writes an ABORT's CompletedTxn to the segment's ``.txnindex`` with
   :meth:`ProducerStateManager.last_stable_offset_of` (the earliest other open transaction's
   first offset, else the marker's offset + 1), then calls :meth:`complete_txn`: the
   transaction stays *unreplicated* until the high watermark passes its marker.
10. The first unstable offset is the smallest first offset of the ongoing and unreplicated
    transactions; the partition's last stable offset is ``min(first unstable offset, HW)``
    (the HW when there is none). ``read_committed`` consumers read up to it.

Followers and log recovery (origin REPLICATION) replay batches a leader already validated:
as in Kafka, sequences are not checked, and a stale producer or coordinator epoch (rules 2
and 8) is only logged; rule 7 raises for every origin (Kafka's ``appendDataBatch`` does not
look at the origin), so a follower's fetcher marks the partition failed and recovery fails the
log's load rather than build a state no leader could have had.

The state is valid up to :attr:`ProducerStateManager.map_end_offset` (exclusive); the log
advances it after each append and takes snapshots at segment rolls and at clean shutdown.
"""

from __future__ import annotations

import contextlib
import logging
import re
from collections.abc import Iterable
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

from kafkasim.common.errors import (
    InvalidProducerEpochError,
    InvalidTxnStateError,
    KafkaStorageError,
    OutOfOrderSequenceNumberError,
    TransactionCoordinatorFencedError,
)
from kafkasim.common.frozen import fast_frozen_init
from kafkasim.common.sentinels import INT16_MAX, INT32_MAX
from kafkasim.storage.checkpoints import TMP_SUFFIX, atomic_write
from kafkasim.storage.file_names import SNAPSHOT_SUFFIX
from kafkasim.storage.producer_entry import (
    NO_COORDINATOR_EPOCH,
    NUM_BATCHES_TO_RETAIN,
    PRODUCER_SNAPSHOT_VERSION,
    BatchMetadata,
    CorruptSnapshotError,
    ProducerStateEntry,
    decode_snapshot,
    decrement_sequence,
    encode_snapshot,
    snapshot_file_name,
)
from kafkasim.storage.records.batch import (
    NO_PRODUCER_EPOCH,
    NO_SEQUENCE,
    BatchHeader,
    ControlRecordType,
    EndTransactionMarker,
)
from kafkasim.storage.txn_index import CompletedTxn

__all__ = [
    "NO_COORDINATOR_EPOCH",
    "NUM_BATCHES_TO_RETAIN",
    "PRODUCER_SNAPSHOT_VERSION",
    "SNAPSHOT_SUFFIX",
    "AppendOrigin",
    "BatchMetadata",
    "CompletedTxn",
    "CorruptSnapshotError",
    "ProducerStateEntry",
    "ProducerStateManager",
    "TxnMetadata",
    "decode_snapshot",
    "decrement_sequence",
    "encode_snapshot",
    "snapshot_file_name",
]

logger = logging.getLogger(__name__)

_SNAPSHOT_NAME = re.compile(r"([0-9]+)\.snapshot")


class AppendOrigin(Enum):
    """Who is appending, which decides how much is validated (Kafka's ``AppendOrigin``): a
    client through the leader (everything), the broker's own coordinators through the leader
    (epochs, not sequences; the only origin allowed to write control batches), a follower's
    fetcher or log recovery (nothing: the leader validated it)."""

    CLIENT = "client"
    REPLICATION = "replication"
    COORDINATOR = "coordinator"


@dataclass(slots=True)
class TxnMetadata:
    """One transaction this partition has seen begin: open while ``last_offset`` is None,
    then completed (its marker's offset) until the high watermark passes the marker."""

    producer_id: int
    first_offset: int
    last_offset: int | None = None

    def copy(self) -> TxnMetadata:
        return TxnMetadata(self.producer_id, self.first_offset, self.last_offset)


@fast_frozen_init
@dataclass(frozen=True, slots=True)
class SavedProducerState:
    """What :meth:`ProducerStateManager.save_entries` copies for an append that may fail."""

    entries: dict[int, ProducerStateEntry | None]
    ongoing: dict[int, TxnMetadata]
    unreplicated: dict[int, TxnMetadata]


def _in_sequence(last_seq: int, next_seq: int) -> bool:
    return next_seq == last_seq + 1 or (next_seq == 0 and last_seq == INT32_MAX)


def _check_client_batch_fields(
    producer_epoch: int, first_seq: int, last_seq: int, last_offset: int
) -> None:
    if not 0 <= producer_epoch <= INT16_MAX:
        raise ValueError(f"producer epoch {producer_epoch} is not in [0, {INT16_MAX}]")
    for name, seq in (("first", first_seq), ("last", last_seq)):
        if not 0 <= seq <= INT32_MAX:
            raise ValueError(f"{name} sequence {seq} is not in [0, {INT32_MAX}]")
    if last_offset - decrement_sequence(last_seq, first_seq) < 0:
        raise ValueError(
            f"batch with sequences {first_seq}..{last_seq} cannot end at offset {last_offset}"
        )


class ProducerStateManager:
    """Per-producer idempotence and transaction state of one partition, and its snapshots.

    Invariants: every entry's batches belong to its current epoch, are in sequence order and
    number at most :data:`NUM_BATCHES_TO_RETAIN`; an entry has ``current_txn_first_offset``
    exactly when an ongoing transaction at that offset names its producer; ongoing and
    unreplicated transactions are kept in increasing first offset; the in-memory state
    reflects exactly the batches below :attr:`map_end_offset` (the log advances it with
    :meth:`update_map_end_offset` after each append, including non-idempotent batches).

    Snapshots (``<20-digit map end offset>.snapshot``, format in :mod:`storage.producer_entry`)
    hold each producer's *last* batch and open transaction. After a restart the cache of recent
    batches is rebuilt from the snapshot plus the batches replayed from the log above it; a
    producer whose last few batches lie below the snapshot offset has just one cached batch, so
    a retry of one of its older in-flight batches is no longer recognised as a duplicate and is
    answered OUT_OF_ORDER_SEQUENCE_NUMBER instead (the batch is not written twice either way).
    Kafka has the same limitation. Ongoing transactions come back from the snapshot's
    ``current_txn_first_offset``; unreplicated ones are not persisted (Kafka's neither): after a
    restart they are below the high watermark the log is given, or lost with the tail.

    Thread-safety: none; the owning log serialises calls under its lock.

    Crash story: snapshots are written to ``.tmp``, fsync'd and renamed, so a snapshot file is
    whole or absent; a snapshot that is nevertheless unreadable (bad CRC, short, unknown
    version) is deleted and the next older one used. Snapshots above the recovered log end
    offset are deleted, and the state between the snapshot and the log end is rebuilt by
    replaying the log's batches as replicated ones.
    """

    def __init__(
        self, partition_dir: Path, max_producer_id_expiration_ms: int = 86_400_000
    ) -> None:
        if max_producer_id_expiration_ms <= 0:
            raise ValueError(
                "max_producer_id_expiration_ms must be positive, "
                f"got {max_producer_id_expiration_ms}"
            )
        self.partition_dir = Path(partition_dir)
        self.max_producer_id_expiration_ms = max_producer_id_expiration_ms
        self._producers: dict[int, ProducerStateEntry] = {}
        # Both keyed by first offset, in increasing order (transactions begin at the log end,
        # so insertion order is offset order; a snapshot load sorts once).
        self._ongoing: dict[int, TxnMetadata] = {}
        self._unreplicated: dict[int, TxnMetadata] = {}
        self._map_end_offset = 0
        self._last_snap_offset = 0

    # ---------------------------------------------------------------------------------------
    # Validation and update
    # ---------------------------------------------------------------------------------------

    def check_and_update(  # noqa: PLR0917 -- the batch header's fields, in the agreed order
        self,
        producer_id: int,
        producer_epoch: int,
        first_seq: int,
        last_seq: int,
        last_offset: int,
        timestamp: int,
        *,
        is_from_client: bool,
        is_transactional: bool = False,
        first_offset: int | None = None,
        origin: AppendOrigin | None = None,
    ) -> BatchMetadata | None:
        """Validate one data batch and record it; see the module's theory of operation.

        Returns the cached metadata of the original when a client batch is a duplicate (the
        state is then unchanged and the caller must not append it), else ``None`` after
        recording the batch. ``offset_delta`` is derived from the sequence range, which for a
        v2 batch always spans ``last offset delta`` records. ``origin`` (default: CLIENT when
        ``is_from_client``, else REPLICATION) decides what is checked. Raises
        INVALID_PRODUCER_EPOCH, OUT_OF_ORDER_SEQUENCE_NUMBER or INVALID_TXN_STATE (this one for
        every origin) for a batch that is refused (state unchanged). A transactional batch
        opens a transaction at ``first_offset`` (default: ``last_offset`` - the sequence span).
        """
        if origin is None:
            origin = AppendOrigin.CLIENT if is_from_client else AppendOrigin.REPLICATION
        is_client = origin is AppendOrigin.CLIENT
        if producer_id < 0:
            raise ValueError(f"Invalid producer id {producer_id} for producer state update")
        if is_client:
            _check_client_batch_fields(producer_epoch, first_seq, last_seq, last_offset)
        # Replicated and recovered batches passed the leader's checks and their CRC: take them
        # as they are (Kafka does not re-validate them either).
        offset_delta = (
            decrement_sequence(last_seq, first_seq) if first_seq >= 0 and last_seq >= 0 else 0
        )
        if first_offset is None:
            first_offset = last_offset - offset_delta

        entry = self._producers.get(producer_id)
        if is_client and entry is not None:
            duplicate = entry.find_duplicate_batch(producer_epoch, first_seq, last_seq)
            if duplicate is not None:
                return duplicate

        self._check_producer_epoch(producer_id, producer_epoch, first_offset, entry, origin)
        if is_client:
            self._check_sequence(producer_id, producer_epoch, first_seq, entry)
        open_txn = entry.current_txn_first_offset if entry is not None else None
        if open_txn is not None and not is_transactional:
            message = (
                f"Expected transactional write from producer {producer_id} at offset "
                f"{first_offset} in partition {self.partition_dir.name} (its transaction "
                f"opened at offset {open_txn})"
            )
            # Kafka's ProducerAppendInfo raises this for every origin: a follower's fetcher
            # then stops fetching the partition, recovery fails the log's load.
            raise InvalidTxnStateError(message)

        if entry is None:
            entry = ProducerStateEntry(producer_id)
            self._producers[producer_id] = entry
        entry.add_batch(
            producer_epoch,
            BatchMetadata(first_seq, last_seq, last_offset, offset_delta, timestamp),
        )
        if open_txn is None and is_transactional:
            entry.current_txn_first_offset = first_offset
            self._add_ongoing(TxnMetadata(producer_id, first_offset))
        return None

    def append_end_txn_marker(
        self,
        producer_id: int,
        producer_epoch: int,
        marker: EndTransactionMarker,
        offset: int,
        timestamp: int,
        *,
        origin: AppendOrigin,
    ) -> CompletedTxn | None:
        """Record a COMMIT/ABORT marker at ``offset`` (rule 8); the transaction it completes,
        or None when the producer had none open. Raises INVALID_PRODUCER_EPOCH or
        TRANSACTION_COORDINATOR_FENCED (state unchanged) unless the origin is REPLICATION."""
        if producer_id < 0:
            raise ValueError(f"Invalid producer id {producer_id} for a transaction marker")
        if marker.control_type not in (ControlRecordType.COMMIT, ControlRecordType.ABORT):
            raise ValueError(f"{marker.control_type!r} is not an end-transaction marker")
        entry = self._producers.get(producer_id)
        self._check_producer_epoch(producer_id, producer_epoch, offset, entry, origin)
        current_coordinator_epoch = (
            entry.coordinator_epoch if entry is not None else NO_COORDINATOR_EPOCH
        )
        if current_coordinator_epoch > marker.coordinator_epoch:
            message = (
                f"Invalid coordinator epoch for producerId {producer_id} at offset {offset} in "
                f"partition {self.partition_dir.name}: {marker.coordinator_epoch} (zombie), "
                f"{current_coordinator_epoch} (current)"
            )
            if origin is not AppendOrigin.REPLICATION:
                raise TransactionCoordinatorFencedError(message)
            logger.info("%s", message)
        if entry is None:
            entry = ProducerStateEntry(producer_id)
            self._producers[producer_id] = entry
        first_offset = entry.current_txn_first_offset
        entry.end_transaction(producer_epoch, marker.coordinator_epoch, timestamp)
        if first_offset is None:
            return None
        return CompletedTxn(
            producer_id, first_offset, offset, marker.control_type is ControlRecordType.ABORT
        )

    def update_from_replicated_batch(
        self, header: BatchHeader, marker: EndTransactionMarker | None = None
    ) -> CompletedTxn | None:
        """Record a batch that is already in the log (follower append, recovery, reload).

        The leader validated it when it was written; here it is only remembered. A control
        batch needs its ``marker`` (None: a marker batch compaction emptied, which changes
        nothing, as in Kafka). Returns the transaction a marker completes; the caller writes it
        to the transaction index if it needs to and then calls :meth:`complete_txn`.
        """
        if header.producer_id < 0:
            return None
        if header.is_control:
            if marker is None:
                return None
            return self.append_end_txn_marker(
                header.producer_id,
                header.producer_epoch,
                marker,
                header.base_offset,
                header.max_timestamp,
                origin=AppendOrigin.REPLICATION,
            )
        self.check_and_update(
            header.producer_id,
            header.producer_epoch,
            header.base_sequence,
            header.last_sequence,
            header.last_offset,
            header.max_timestamp,
            is_from_client=False,
            is_transactional=header.is_transactional,
            first_offset=header.base_offset,
        )
        return None

    def _check_producer_epoch(
        self,
        producer_id: int,
        producer_epoch: int,
        offset: int,
        entry: ProducerStateEntry | None,
        origin: AppendOrigin,
    ) -> None:
        current_epoch = entry.producer_epoch if entry is not None else NO_PRODUCER_EPOCH
        if producer_epoch < current_epoch:
            message = (
                f"Producer {producer_id}'s epoch at offset {offset} in "
                f"{self.partition_dir.name} is {producer_epoch}, which is smaller than the last "
                f"seen epoch {current_epoch}"
            )
            if origin is not AppendOrigin.REPLICATION:
                raise InvalidProducerEpochError(message)
            logger.warning("%s", message)

    def _check_sequence(
        self,
        producer_id: int,
        producer_epoch: int,
        first_seq: int,
        entry: ProducerStateEntry | None,
    ) -> None:
        current_epoch = entry.producer_epoch if entry is not None else NO_PRODUCER_EPOCH
        if producer_epoch != current_epoch:
            # Only a higher epoch gets here (a lower one was fenced). It must restart at 0,
            # unless we know no epoch at all for the producer: then, as Kafka 2.5+ (KIP-360),
            # any sequence is accepted, because retention may have removed its state.
            if first_seq != 0 and current_epoch != NO_PRODUCER_EPOCH:
                raise OutOfOrderSequenceNumberError(
                    f"Invalid sequence number for new epoch of producer {producer_id} in "
                    f"{self.partition_dir.name}: {producer_epoch} (request epoch), "
                    f"{first_seq} (seq. number), {current_epoch} (current producer epoch)"
                )
            return
        # Same epoch: continue exactly after the last batch. An entry without batches (its
        # last record was a transaction marker) has last_seq NO_SEQUENCE, so it needs 0.
        current_last_seq = entry.last_seq if entry is not None else NO_SEQUENCE
        if not (current_epoch == NO_PRODUCER_EPOCH or _in_sequence(current_last_seq, first_seq)):
            raise OutOfOrderSequenceNumberError(
                f"Out of order sequence number for producer {producer_id} in "
                f"{self.partition_dir.name}: {first_seq} (incoming seq. number), "
                f"{current_last_seq} (current end sequence number)"
            )

    # ---------------------------------------------------------------------------------------
    # Queries and expiry
    # ---------------------------------------------------------------------------------------

    def save_entries(self, producer_ids: Iterable[int]) -> SavedProducerState:
        """Copies of these producers' entries and of the transaction maps, for
        :meth:`restore_entries` if an append fails.

        An append validates and updates producer state batch by batch; when a later batch of
        the same request (or the write itself) fails, nothing was appended, so the state must
        go back to what it was.
        """
        producers = self._producers
        saved: dict[int, ProducerStateEntry | None] = {}
        for pid in producer_ids:
            entry = producers.get(pid)
            saved[pid] = None if entry is None else entry.copy()
        return SavedProducerState(
            saved,
            {k: t.copy() for k, t in self._ongoing.items()} if self._ongoing else {},
            {k: t.copy() for k, t in self._unreplicated.items()} if self._unreplicated else {},
        )

    def restore_entries(self, saved: SavedProducerState) -> None:
        for pid, entry in saved.entries.items():
            if entry is None:
                self._producers.pop(pid, None)
            else:
                self._producers[pid] = entry
        self._ongoing = dict(saved.ongoing)
        self._unreplicated = dict(saved.unreplicated)

    # ---------------------------------------------------------------------------------------
    # Transactions: ongoing, completed, the first unstable offset
    # ---------------------------------------------------------------------------------------

    def _add_ongoing(self, txn: TxnMetadata) -> None:
        last = next(reversed(self._ongoing), None)
        self._ongoing[txn.first_offset] = txn
        if last is not None and last > txn.first_offset:
            self._ongoing = dict(sorted(self._ongoing.items()))

    @property
    def ongoing_txns(self) -> list[TxnMetadata]:
        """The open transactions, by first offset."""
        return list(self._ongoing.values())

    @property
    def unreplicated_txns(self) -> list[TxnMetadata]:
        """Completed transactions whose marker the high watermark has not passed yet."""
        return list(self._unreplicated.values())

    def last_stable_offset_of(self, completed: CompletedTxn) -> int:
        """The LSO to record with ``completed`` in the transaction index, before
        :meth:`complete_txn`: the first offset of the earliest open transaction of another
        producer, else the marker's offset + 1 (Kafka's ``lastStableOffset(CompletedTxn)``)."""
        for txn in self._ongoing.values():
            if txn.producer_id != completed.producer_id:
                return txn.first_offset
        return completed.last_offset + 1

    def complete_txn(self, completed: CompletedTxn) -> None:
        """Move the transaction from ongoing to unreplicated (until the HW passes its marker)."""
        txn = self._ongoing.pop(completed.first_offset, None)
        if txn is None:
            raise ValueError(
                f"Attempted to complete transaction {completed} on partition "
                f"{self.partition_dir.name} which was not started"
            )
        txn.last_offset = completed.last_offset
        last = next(reversed(self._unreplicated), None)
        self._unreplicated[completed.first_offset] = txn
        if last is not None and last > completed.first_offset:
            # Transactions complete in any order: keep the map by first offset.
            self._unreplicated = dict(sorted(self._unreplicated.items()))

    def first_unstable_offset(self) -> int | None:
        """The smallest first offset of an ongoing or unreplicated transaction, if any."""
        ongoing, unreplicated = self._ongoing, self._unreplicated
        if not unreplicated:  # no transaction, the usual case: no list built per read
            return next(iter(ongoing), None)
        if not ongoing:
            return next(iter(unreplicated))
        return min(next(iter(ongoing)), next(iter(unreplicated)))

    def first_undecided_offset(self) -> int | None:
        """The first offset of the earliest ongoing transaction (replication ignored)."""
        return next(iter(self._ongoing), None)

    def on_high_watermark_updated(self, high_watermark: int) -> None:
        """Forget completed transactions whose marker is below the high watermark."""
        self._remove_unreplicated_below(high_watermark)

    def _remove_unreplicated_below(self, offset: int) -> None:
        if not self._unreplicated:  # nothing to drop (every HW move asks): no new dict
            return
        self._unreplicated = {
            k: t
            for k, t in self._unreplicated.items()
            if t.last_offset is None or t.last_offset >= offset
        }

    def last_entry(self, producer_id: int) -> ProducerStateEntry | None:
        return self._producers.get(producer_id)

    @property
    def active_producers(self) -> dict[int, ProducerStateEntry]:
        """A copy of the map; the entries themselves are the live ones."""
        return dict(self._producers)

    @property
    def is_empty(self) -> bool:
        return not self._producers and not self._unreplicated

    @property
    def map_end_offset(self) -> int:
        """The offset (exclusive) up to which the state reflects the log."""
        return self._map_end_offset

    def update_map_end_offset(self, offset: int) -> None:
        self._map_end_offset = offset

    def _is_expired(self, now_ms: int, entry: ProducerStateEntry) -> bool:
        # A producer with an open transaction never expires here (the coordinator aborts it).
        return (
            entry.current_txn_first_offset is None
            and now_ms - entry.last_timestamp >= self.max_producer_id_expiration_ms
        )

    def remove_expired_producers(self, now_ms: int) -> None:
        """Forget producers idle for at least ``max_producer_id_expiration_ms``."""
        for producer_id in [p for p, e in self._producers.items() if self._is_expired(now_ms, e)]:
            del self._producers[producer_id]

    # ---------------------------------------------------------------------------------------
    # Truncation
    # ---------------------------------------------------------------------------------------

    def truncate_and_reload(self, log_start_offset: int, log_end_offset: int, now_ms: int) -> None:
        """Bring the state in line with a log that now spans ``[log_start_offset,
        log_end_offset)``: snapshots outside ``(log_start_offset, log_end_offset]`` are deleted
        (as Kafka does, including one exactly at the log start), and unless the state already
        ends at ``log_end_offset`` it is reloaded from the newest remaining snapshot. The
        caller then replays the log from :attr:`map_end_offset`."""
        for offset in self.list_snapshot_offsets():
            if offset > log_end_offset or offset <= log_start_offset:
                self._delete_snapshot(offset)
        if log_end_offset != self._map_end_offset:
            # The log end is at or below the HW here, so no transaction is unreplicated.
            self.load_from_latest_snapshot(log_start_offset, log_end_offset, now_ms=now_ms)
        else:
            self.truncate_head(log_start_offset)

    def truncate_head(self, log_start_offset: int) -> None:
        """The log start moved up (retention, DeleteRecords): drop snapshots below it.

        In-memory producers are kept, as in Kafka, so a producer whose batches were all deleted
        keeps its sequence state until it expires or the broker restarts.
        """
        self._remove_unreplicated_below(log_start_offset)
        self._map_end_offset = max(self._map_end_offset, log_start_offset)
        self.delete_snapshots_below(log_start_offset)
        offsets = self.list_snapshot_offsets()
        self._last_snap_offset = offsets[-1] if offsets else log_start_offset

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Forget everything (the log was emptied and restarts at ``offset``)."""
        self._producers.clear()
        self._ongoing.clear()
        self._unreplicated.clear()
        for snap in self.list_snapshot_offsets():
            self._delete_snapshot(snap)
        self._last_snap_offset = 0
        self._map_end_offset = offset

    # ---------------------------------------------------------------------------------------
    # Snapshots
    # ---------------------------------------------------------------------------------------

    def snapshot_path(self, offset: int) -> Path:
        return self.partition_dir / snapshot_file_name(offset)

    def take_snapshot(self) -> Path | None:
        """Write the state at :attr:`map_end_offset`; returns the file, or ``None`` when a
        snapshot at that offset was already taken (not worth another)."""
        if self._map_end_offset <= self._last_snap_offset:
            return None
        path = self.snapshot_path(self._map_end_offset)
        data = encode_snapshot([self._producers[p] for p in sorted(self._producers)])
        try:
            atomic_write(path, data, sync=True)
        except OSError as e:
            raise KafkaStorageError(f"Error while writing producer snapshot {path}: {e}") from e
        logger.info("wrote producer snapshot at offset %d to %s", self._map_end_offset, path)
        self._last_snap_offset = self._map_end_offset
        return path

    def load_from_latest_snapshot(
        self, log_start_offset: int, log_end_offset: int, *, now_ms: int | None = None
    ) -> int | None:
        """Replace the state with the newest readable snapshot in ``[log_start_offset,
        log_end_offset]`` and return its offset (then also :attr:`map_end_offset`).

        A corrupt snapshot is logged, deleted and the next older one tried. Without a usable
        snapshot the state is empty and :attr:`map_end_offset` is ``log_start_offset``; either
        way the caller replays the log from :attr:`map_end_offset`. With ``now_ms``, expired
        producers are not loaded. Snapshots outside the range are left alone. Each entry's
        ``current_txn_first_offset`` reopens its transaction (Kafka's ``loadProducerEntry``).
        """
        self._producers.clear()
        self._ongoing.clear()
        self._unreplicated.clear()
        self._delete_leftover_tmp_files()
        for offset in reversed(self.list_snapshot_offsets()):
            if not log_start_offset <= offset <= log_end_offset:
                continue
            path = self.snapshot_path(offset)
            try:
                entries = decode_snapshot(path.read_bytes())
            except CorruptSnapshotError as e:
                logger.warning("failed to load producer snapshot %s: %s; deleting it", path, e)
                self._delete_snapshot(offset)
                continue
            except OSError as e:
                raise KafkaStorageError(f"Error while reading producer snapshot {path}: {e}") from e
            for entry in entries:
                if now_ms is None or not self._is_expired(now_ms, entry):
                    self._producers[entry.producer_id] = entry
                    if entry.current_txn_first_offset is not None:
                        txn = TxnMetadata(entry.producer_id, entry.current_txn_first_offset)
                        self._ongoing[txn.first_offset] = txn
            self._ongoing = dict(sorted(self._ongoing.items()))
            self._last_snap_offset = self._map_end_offset = offset
            logger.info("loaded producer state from snapshot %s", path)
            return offset
        self._last_snap_offset = self._map_end_offset = log_start_offset
        return None

    def list_snapshot_offsets(self) -> list[int]:
        """Offsets of the snapshot files in the partition dir, ascending."""
        try:
            names = [p.name for p in self.partition_dir.iterdir() if p.is_file()]
        except FileNotFoundError:
            return []
        except OSError as e:
            raise KafkaStorageError(f"Error while listing {self.partition_dir}: {e}") from e
        offsets = []
        for name in names:
            match = _SNAPSHOT_NAME.fullmatch(name)
            if match:
                offsets.append(int(match.group(1)))
        return sorted(offsets)

    def truncate_snapshots(self, after_offset: int) -> None:
        """Delete snapshots above ``after_offset`` (the log was truncated to it)."""
        for offset in self.list_snapshot_offsets():
            if offset > after_offset:
                self._delete_snapshot(offset)
        if self._last_snap_offset > after_offset:
            remaining = self.list_snapshot_offsets()
            self._last_snap_offset = remaining[-1] if remaining else 0

    def delete_snapshots_below(self, offset: int) -> None:
        """Delete snapshots below ``offset`` (segments below it were deleted)."""
        for snap in self.list_snapshot_offsets():
            if snap < offset:
                self._delete_snapshot(snap)

    def _delete_snapshot(self, offset: int) -> None:
        path = self.snapshot_path(offset)
        try:
            path.unlink(missing_ok=True)
        except OSError as e:
            raise KafkaStorageError(f"Error while deleting producer snapshot {path}: {e}") from e

    def _delete_leftover_tmp_files(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            for p in self.partition_dir.glob(f"*{SNAPSHOT_SUFFIX}{TMP_SUFFIX}"):
                p.unlink(missing_ok=True)
