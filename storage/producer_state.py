"""Idempotent-producer state of one partition: Kafka's ProducerStateManager, minus transactions.

(One module, ~610 lines: the sequence rules, the entries and the snapshot format are one
manager's state, and much of it is the theory of operation below.)

Theory of operation
-------------------
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

Followers and log recovery replay batches that a leader already validated, so they only update
the state (an older epoch is logged, not refused).

The state is valid up to :attr:`ProducerStateManager.map_end_offset` (exclusive); the log
advances it after each append and takes snapshots at segment rolls and at clean shutdown.
"""

from __future__ import annotations

import contextlib
import logging
import re
import struct
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import NamedTuple

import crc32c

from kafkasim.common.errors import (
    InvalidProducerEpochError,
    KafkaStorageError,
    OutOfOrderSequenceNumberError,
    StorageInternalError,
)
from kafkasim.common.sentinels import INT16_MAX, INT32_MAX, NO_TIMESTAMP
from kafkasim.storage.checkpoints import TMP_SUFFIX, atomic_write
from kafkasim.storage.records.batch import (
    NO_PRODUCER_EPOCH,
    NO_SEQUENCE,
    BatchHeader,
)

logger = logging.getLogger(__name__)

NUM_BATCHES_TO_RETAIN = 5
NO_COORDINATOR_EPOCH = -1

PRODUCER_SNAPSHOT_VERSION = 1
SNAPSHOT_SUFFIX = ".snapshot"
_SNAPSHOT_NAME = re.compile(r"([0-9]+)\.snapshot")

# ProducerSnapshot: version int16, crc uint32, producer_entries array (int32 count) of
# producer_id int64, epoch int16, last_sequence int32, last_offset int64, offset_delta int32,
# timestamp int64, coordinator_epoch int32, current_txn_first_offset int64. Big-endian.
_HEADER = struct.Struct(">hI")
_COUNT = struct.Struct(">i")
_ENTRY = struct.Struct(">qhiqiqiq")
_ENTRIES_OFFSET = _HEADER.size  # the CRC covers everything after itself


def decrement_sequence(sequence: int, decrement: int) -> int:
    """``sequence - decrement`` wrapping below 0 to 2**31 - 1."""
    return (sequence - decrement) % (INT32_MAX + 1)


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


class CorruptSnapshotError(StorageInternalError):
    """A producer snapshot failed its version, CRC or structure check; it is deleted."""


class BatchMetadata(NamedTuple):
    """Sequence range, offsets and max timestamp of one batch appended by a producer."""

    first_seq: int
    last_seq: int
    last_offset: int
    offset_delta: int  # last offset - first offset of the batch (= record count - 1)
    timestamp: int

    @property
    def first_offset(self) -> int:
        return self.last_offset - self.offset_delta


@dataclass
class ProducerStateEntry:
    """What the partition remembers about one producer id.

    ``batch_metadata`` holds the most recent batches of the current epoch, oldest first, at
    most :data:`NUM_BATCHES_TO_RETAIN`; a new epoch empties it. ``coordinator_epoch`` and
    ``current_txn_first_offset`` are kept (and snapshotted) for transactions, which kafkasim
    does not otherwise implement.
    """

    producer_id: int
    producer_epoch: int = NO_PRODUCER_EPOCH
    batch_metadata: deque[BatchMetadata] = field(
        default_factory=lambda: deque(maxlen=NUM_BATCHES_TO_RETAIN)
    )
    coordinator_epoch: int = NO_COORDINATOR_EPOCH
    current_txn_first_offset: int | None = None
    last_timestamp: int = NO_TIMESTAMP

    @property
    def is_empty(self) -> bool:
        return not self.batch_metadata

    @property
    def first_seq(self) -> int:
        return self.batch_metadata[0].first_seq if self.batch_metadata else NO_SEQUENCE

    @property
    def last_seq(self) -> int:
        return self.batch_metadata[-1].last_seq if self.batch_metadata else NO_SEQUENCE

    @property
    def last_data_offset(self) -> int:
        return self.batch_metadata[-1].last_offset if self.batch_metadata else -1

    @property
    def last_offset_delta(self) -> int:
        return self.batch_metadata[-1].offset_delta if self.batch_metadata else 0

    def maybe_update_producer_epoch(self, producer_epoch: int) -> bool:
        """Switch to ``producer_epoch``, forgetting the batches of the old one."""
        if producer_epoch == self.producer_epoch:
            return False
        self.batch_metadata.clear()
        self.producer_epoch = producer_epoch
        return True

    def add_batch(self, producer_epoch: int, batch: BatchMetadata) -> None:
        self.maybe_update_producer_epoch(producer_epoch)
        self.batch_metadata.append(batch)  # the deque drops the oldest beyond its maxlen
        self.last_timestamp = batch.timestamp

    def find_duplicate_batch(
        self, producer_epoch: int, first_seq: int, last_seq: int
    ) -> BatchMetadata | None:
        """The cached batch of this epoch with exactly this sequence range, if any."""
        if producer_epoch != self.producer_epoch:
            return None
        for batch in self.batch_metadata:
            if batch.first_seq == first_seq and batch.last_seq == last_seq:
                return batch
        return None


def snapshot_file_name(offset: int) -> str:
    """``<offset zero-padded to 20 digits>.snapshot``, as segment files are named."""
    return f"{offset:020d}{SNAPSHOT_SUFFIX}"


def encode_snapshot(entries: list[ProducerStateEntry]) -> bytes:
    """The ProducerSnapshot bytes for ``entries`` (in the order given)."""
    body = bytearray(_COUNT.pack(len(entries)))
    for e in entries:
        body += _ENTRY.pack(
            e.producer_id,
            e.producer_epoch,
            e.last_seq,
            e.last_data_offset,
            e.last_offset_delta,
            e.last_timestamp,
            e.coordinator_epoch,
            -1 if e.current_txn_first_offset is None else e.current_txn_first_offset,
        )
    return _HEADER.pack(PRODUCER_SNAPSHOT_VERSION, crc32c.crc32c(bytes(body))) + bytes(body)


def decode_snapshot(data: bytes) -> list[ProducerStateEntry]:
    """Parse ProducerSnapshot bytes; raises CorruptSnapshotError saying what is wrong."""
    if len(data) < _HEADER.size + _COUNT.size:
        raise CorruptSnapshotError(f"snapshot is {len(data)} bytes, shorter than its header")
    version, stored_crc = _HEADER.unpack_from(data, 0)
    if version != PRODUCER_SNAPSHOT_VERSION:
        raise CorruptSnapshotError(f"snapshot contained an unknown file version {version}")
    computed_crc = crc32c.crc32c(data[_ENTRIES_OFFSET:])
    if stored_crc != computed_crc:
        raise CorruptSnapshotError(
            f"snapshot is corrupt (CRC is no longer valid). Stored crc: {stored_crc}. "
            f"Computed crc: {computed_crc}"
        )
    (count,) = _COUNT.unpack_from(data, _ENTRIES_OFFSET)
    expected_size = _ENTRIES_OFFSET + _COUNT.size + count * _ENTRY.size
    if count < 0 or len(data) != expected_size:
        raise CorruptSnapshotError(
            f"snapshot of {len(data)} bytes does not hold the {count} entries it announces"
        )
    entries: list[ProducerStateEntry] = []
    for i in range(count):
        (
            producer_id,
            producer_epoch,
            last_seq,
            last_offset,
            offset_delta,
            timestamp,
            coordinator_epoch,
            current_txn_first_offset,
        ) = _ENTRY.unpack_from(data, _ENTRIES_OFFSET + _COUNT.size + i * _ENTRY.size)
        entry = ProducerStateEntry(
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            coordinator_epoch=coordinator_epoch,
            current_txn_first_offset=(
                current_txn_first_offset if current_txn_first_offset >= 0 else None
            ),
            last_timestamp=timestamp,
        )
        # Only the last batch is in the snapshot; a negative offset means there was none
        # (the producer's last entry was a transaction marker).
        if last_offset >= 0:
            entry.batch_metadata.append(
                BatchMetadata(
                    first_seq=decrement_sequence(last_seq, offset_delta),
                    last_seq=last_seq,
                    last_offset=last_offset,
                    offset_delta=offset_delta,
                    timestamp=timestamp,
                )
            )
        entries.append(entry)
    return entries


class ProducerStateManager:
    """Per-producer idempotence state of one partition, and its snapshots.

    Invariants: every entry's batches belong to its current epoch, are in sequence order and
    number at most :data:`NUM_BATCHES_TO_RETAIN`; the in-memory state reflects exactly the
    batches below :attr:`map_end_offset` (the log advances it with
    :meth:`update_map_end_offset` after each append, including non-idempotent batches).

    Snapshot format (``<partition dir>/<20-digit map end offset>.snapshot``, Kafka's
    ProducerSnapshot v1, big-endian)::

        version                  int16   = 1
        crc                      uint32  CRC-32C of every byte after this field
        producer_entries         int32 count, then per producer:
          producer_id            int64
          epoch                  int16
          last_sequence          int32   (-1 if no batch is known)
          last_offset            int64   (-1 if no batch is known)
          offset_delta           int32   last offset - first offset of the last batch
          timestamp              int64   max timestamp of the last batch
          coordinator_epoch      int32
          current_txn_first_offset int64 (-1 if no transaction is open)

    Only the *last* batch of each producer is in a snapshot. After a restart the cache of
    recent batches is rebuilt from the snapshot plus the batches replayed from the log above
    it; a producer whose last few batches lie below the snapshot offset has just one cached
    batch, so a retry of one of its older in-flight batches is no longer recognised as a
    duplicate and is answered OUT_OF_ORDER_SEQUENCE_NUMBER instead (the batch is not written
    twice either way). Kafka has the same limitation.

    Thread-safety: none; the owning log serialises calls under its lock.

    Crash story: snapshots are written to ``.tmp``, fsync'd and renamed, so a snapshot file is
    whole or absent; a snapshot that is nevertheless unreadable (bad CRC, short, unknown
    version) is deleted and the next older one used. Snapshots above the recovered log end
    offset are deleted, and the state between the snapshot and the log end is rebuilt by
    replaying the log's batches with ``is_from_client=False``.
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
    ) -> BatchMetadata | None:
        """Validate one idempotent batch and record it; see the module's theory of operation.

        Returns the cached metadata of the original when a client batch is a duplicate (the
        state is then unchanged and the caller must not append it), else ``None`` after
        recording the batch. ``offset_delta`` is derived from the sequence range, which for a
        v2 batch always spans ``last offset delta`` records. Raises INVALID_PRODUCER_EPOCH or
        OUT_OF_ORDER_SEQUENCE_NUMBER for a client batch that is refused (state unchanged).
        """
        if producer_id < 0:
            raise ValueError(f"Invalid producer id {producer_id} for producer state update")
        if is_from_client:
            _check_client_batch_fields(producer_epoch, first_seq, last_seq, last_offset)
        # Replicated and recovered batches passed the leader's checks and their CRC: take them
        # as they are (Kafka does not re-validate them either).
        offset_delta = (
            decrement_sequence(last_seq, first_seq) if first_seq >= 0 and last_seq >= 0 else 0
        )

        entry = self._producers.get(producer_id)
        if is_from_client and entry is not None:
            duplicate = entry.find_duplicate_batch(producer_epoch, first_seq, last_seq)
            if duplicate is not None:
                return duplicate

        current_epoch = entry.producer_epoch if entry is not None else NO_PRODUCER_EPOCH
        if producer_epoch < current_epoch:
            message = (
                f"Producer {producer_id}'s epoch at offset {last_offset - offset_delta} in "
                f"{self.partition_dir.name} is {producer_epoch}, which is smaller than the last "
                f"seen epoch {current_epoch}"
            )
            if is_from_client:
                raise InvalidProducerEpochError(message)
            logger.warning("%s", message)
        if is_from_client:
            self._check_sequence(producer_id, producer_epoch, first_seq, entry)

        if entry is None:
            entry = ProducerStateEntry(producer_id)
            self._producers[producer_id] = entry
        entry.add_batch(
            producer_epoch,
            BatchMetadata(first_seq, last_seq, last_offset, offset_delta, timestamp),
        )
        return None

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

    def update_from_replicated_batch(self, header: BatchHeader) -> None:
        """Record a batch that is already in the log (follower append, recovery, reload).

        The leader validated its sequence when it was written; here it is only remembered.
        """
        if header.producer_id >= 0 and not header.is_control:
            self.check_and_update(
                header.producer_id,
                header.producer_epoch,
                header.base_sequence,
                header.last_sequence,
                header.last_offset,
                header.max_timestamp,
                is_from_client=False,
            )

    def save_entries(self, producer_ids: Iterable[int]) -> dict[int, ProducerStateEntry | None]:
        """Copies of these producers' entries, for :meth:`restore_entries` if an append fails.

        An append validates and updates producer state batch by batch; when a later batch of
        the same request (or the write itself) fails, nothing was appended, so the state must
        go back to what it was.
        """
        saved: dict[int, ProducerStateEntry | None] = {}
        for pid in producer_ids:
            entry = self._producers.get(pid)
            saved[pid] = (
                None
                if entry is None
                else replace(
                    entry, batch_metadata=deque(entry.batch_metadata, maxlen=NUM_BATCHES_TO_RETAIN)
                )
            )
        return saved

    def restore_entries(self, saved: Mapping[int, ProducerStateEntry | None]) -> None:
        for pid, entry in saved.items():
            if entry is None:
                self._producers.pop(pid, None)
            else:
                self._producers[pid] = entry

    def last_entry(self, producer_id: int) -> ProducerStateEntry | None:
        return self._producers.get(producer_id)

    @property
    def active_producers(self) -> dict[int, ProducerStateEntry]:
        """A copy of the map; the entries themselves are the live ones."""
        return dict(self._producers)

    @property
    def is_empty(self) -> bool:
        return not self._producers

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
            self.load_from_latest_snapshot(log_start_offset, log_end_offset, now_ms=now_ms)
        else:
            self.truncate_head(log_start_offset)

    def truncate_head(self, log_start_offset: int) -> None:
        """The log start moved up (retention, DeleteRecords): drop snapshots below it.

        In-memory producers are kept, as in Kafka, so a producer whose batches were all deleted
        keeps its sequence state until it expires or the broker restarts.
        """
        self._map_end_offset = max(self._map_end_offset, log_start_offset)
        self.delete_snapshots_below(log_start_offset)
        offsets = self.list_snapshot_offsets()
        self._last_snap_offset = offsets[-1] if offsets else log_start_offset

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Forget everything (the log was emptied and restarts at ``offset``)."""
        self._producers.clear()
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
        producers are not loaded. Snapshots outside the range are left alone.
        """
        self._producers.clear()
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
