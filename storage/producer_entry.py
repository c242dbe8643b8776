"""What a partition remembers of one producer, and the snapshot file that persists it.

Kafka's ``ProducerStateEntry``, ``BatchMetadata`` and the ProducerSnapshot v1 codec of its
``ProducerStateManager`` (split from :mod:`storage.producer_state`, whose manager owns the
entries, validates appends against them and decides when snapshots are written).

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
      timestamp              int64   max timestamp of the last batch (or the last marker's)
      coordinator_epoch      int32
      current_txn_first_offset int64 (-1 if no transaction is open)

Version 1 is the only version Kafka has written since 0.11, and it always carried
``current_txn_first_offset``; snapshots written before kafkasim tracked transactions hold -1
there and read the same way.
"""

from __future__ import annotations

import struct
from collections import deque
from dataclasses import dataclass, field
from typing import NamedTuple

from kafkasim.common.errors import StorageInternalError
from kafkasim.common.sentinels import INT32_MAX, NO_TIMESTAMP
from kafkasim.storage.file_names import SNAPSHOT_SUFFIX
from kafkasim.storage.records.batch import NO_PRODUCER_EPOCH, NO_SEQUENCE
from kafkasim.storage.records.crc import crc32c

NUM_BATCHES_TO_RETAIN = 5
NO_COORDINATOR_EPOCH = -1

PRODUCER_SNAPSHOT_VERSION = 1

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
    most :data:`NUM_BATCHES_TO_RETAIN`; a new epoch empties it. ``current_txn_first_offset``
    is the first offset of the producer's open transaction in this partition (None when none
    is open); ``coordinator_epoch`` is the epoch of the transaction coordinator that wrote the
    producer's last marker, so that a marker from an older coordinator can be refused.
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

    def copy(self) -> ProducerStateEntry:
        """An independent copy (its own ``batch_metadata`` deque; the batches themselves are
        immutable): ``dataclasses.replace`` costs several times more, and an append copies
        the entry of every producer it touches (``ProducerStateManager.save_entries``)."""
        return ProducerStateEntry(
            self.producer_id,
            self.producer_epoch,
            deque(self.batch_metadata, maxlen=NUM_BATCHES_TO_RETAIN),
            self.coordinator_epoch,
            self.current_txn_first_offset,
            self.last_timestamp,
        )

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

    def end_transaction(self, producer_epoch: int, coordinator_epoch: int, timestamp: int) -> None:
        """A COMMIT or ABORT marker was appended (Kafka's ``ProducerStateEntry.update`` with a
        marker's fields): the transaction is closed, a new epoch forgets the old batches."""
        self.maybe_update_producer_epoch(producer_epoch)
        self.coordinator_epoch = coordinator_epoch
        self.current_txn_first_offset = None
        self.last_timestamp = timestamp

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
    return _HEADER.pack(PRODUCER_SNAPSHOT_VERSION, crc32c(bytes(body))) + bytes(body)


def decode_snapshot(data: bytes) -> list[ProducerStateEntry]:
    """Parse ProducerSnapshot bytes; raises CorruptSnapshotError saying what is wrong."""
    if len(data) < _HEADER.size + _COUNT.size:
        raise CorruptSnapshotError(f"snapshot is {len(data)} bytes, shorter than its header")
    version, stored_crc = _HEADER.unpack_from(data, 0)
    if version != PRODUCER_SNAPSHOT_VERSION:
        raise CorruptSnapshotError(f"snapshot contained an unknown file version {version}")
    computed_crc = crc32c(data[_ENTRIES_OFFSET:])
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
