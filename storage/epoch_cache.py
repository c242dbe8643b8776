"""The leader epoch cache of one partition replica (KIP-101, KIP-279).

Each leader stamps its epoch on every batch it appends (``partitionLeaderEpoch``); every
replica remembers, per epoch, the first offset written in it. A replica that becomes a follower
asks the leader "where does my latest epoch end on your log?" (OffsetsForLeaderEpoch, answered
by :meth:`LeaderEpochFileCache.end_offset_for`) and truncates to that answer instead of to its
own high watermark, which is what loses acknowledged data or lets logs diverge (KIP-101).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from kafkasim.common.errors import StorageInternalError
from kafkasim.storage.checkpoints import EpochEntry, LeaderEpochCheckpoint

logger = logging.getLogger(__name__)

# OffsetsForLeaderEpochResponse.UNDEFINED_EPOCH / UNDEFINED_EPOCH_OFFSET.
UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1


class LeaderEpochFileCache:
    """Ordered ``leader epoch -> start offset`` of one replica, persisted on every change.

    Invariants (checked by :meth:`sanity_check`): epochs strictly increase and so do start
    offsets. The start offsets are *strictly* increasing, not merely non-decreasing, because
    :meth:`assign` removes every entry whose start offset is ``>=`` the new one: an epoch in
    which nothing was written is replaced by the next epoch that starts at the same offset.
    Epochs and offsets are never negative.

    Format: the entries live in a ``leader-epoch-checkpoint``
    (:class:`~storage.checkpoints.LeaderEpochCheckpointFile`, ``epoch start_offset`` lines).
    Loading goes through :meth:`assign`, so a file that breaks the invariants is repaired (later
    entries win) rather than trusted.

    Thread-safety: none; the owning log serialises calls under its lock.

    Crash story: every change (assign, truncation from either end, clear) rewrites the whole
    checkpoint with fsync before returning, so the file never misses an entry the cache had.
    Kafka 3.x flushes truncations asynchronously; we do not. A crash can still leave entries
    for batches that were not yet flushed to the log; log recovery truncates the cache to the
    recovered log end offset and re-assigns epochs from the ``partitionLeaderEpoch`` of the
    batches it re-reads, so the cache ends up describing exactly the recovered log.
    """

    def __init__(self, checkpoint: LeaderEpochCheckpoint) -> None:
        self._checkpoint = checkpoint
        self._entries: list[EpochEntry] = []
        for entry in checkpoint.read():
            self._assign(entry)

    # ---------------------------------------------------------------------------------------
    # Changes (each one persisted)
    # ---------------------------------------------------------------------------------------

    def assign(self, epoch: int, start_offset: int) -> None:
        """Record that ``epoch`` starts at ``start_offset``.

        As Kafka (2.1+): nothing happens if ``epoch`` is the latest epoch and ``start_offset``
        is not below its start. Otherwise entries that would break monotonicity are removed
        from the end first (those with ``epoch >=`` the new epoch or ``start_offset >=`` the
        new start), then the entry is appended. So an epoch below the latest is not ignored:
        it truncates the later epochs, trusting the latest append (the log is the truth).
        """
        if self._assign(EpochEntry(epoch, start_offset)):
            self._flush()

    def truncate_from_end(self, end_offset: int) -> None:
        """Remove every entry whose start offset is ``>= end_offset`` (log truncated to it)."""
        latest = self.latest_entry
        if end_offset < 0 or latest is None or latest.start_offset < end_offset:
            return
        removed = self._remove_from_end(lambda e: e.start_offset >= end_offset)
        self._flush()
        logger.debug(
            "cleared %s from epoch cache after truncating to end offset %d, %d entries left",
            removed,
            end_offset,
            len(self._entries),
        )

    def truncate_from_start(self, start_offset: int) -> None:
        """Drop entries wholly below ``start_offset`` (log start moved up to it).

        The last entry starting at or below ``start_offset`` is kept but moved to start there,
        because its epoch still covers the first offset left in the log. An entry that starts
        exactly at ``start_offset`` is kept unchanged.
        """
        removed: list[EpochEntry] = []
        while self._entries and self._entries[0].start_offset <= start_offset:
            removed.append(self._entries.pop(0))
        if not removed:
            return
        self._entries.insert(0, EpochEntry(removed[-1].epoch, start_offset))
        self._flush()
        logger.debug(
            "cleared %s and rewrote first entry %s after truncating to start offset %d",
            removed,
            self._entries[0],
            start_offset,
        )

    def clear_and_flush(self) -> None:
        """Delete all entries (the log was deleted or truncated fully)."""
        self._entries.clear()
        self._flush()

    # ---------------------------------------------------------------------------------------
    # Queries
    # ---------------------------------------------------------------------------------------

    @property
    def latest_entry(self) -> EpochEntry | None:
        return self._entries[-1] if self._entries else None

    @property
    def earliest_entry(self) -> EpochEntry | None:
        return self._entries[0] if self._entries else None

    @property
    def latest_epoch(self) -> int | None:
        """The latest epoch that has messages assigned to it."""
        entries = self._entries  # read on every leader append: no second property call
        return entries[-1].epoch if entries else None

    @property
    def epochs(self) -> list[int]:
        return [e.epoch for e in self._entries]

    def entries(self) -> list[EpochEntry]:
        return list(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def epoch_for_offset(self, offset: int) -> int | None:
        """The epoch the batch at ``offset`` was written in, or ``None`` if it is below the
        first entry."""
        found: int | None = None
        for entry in self._entries:
            if entry.start_offset > offset:
                break
            found = entry.epoch
        return found

    def end_offset_for(self, requested_epoch: int, log_end_offset: int) -> tuple[int, int]:
        """Kafka's ``endOffsetFor``: ``(epoch, end offset)`` for OffsetsForLeaderEpoch.

        The epoch is the largest known epoch ``<= requested_epoch``; its end offset is the start
        offset of the first larger epoch, or ``log_end_offset`` if the latest epoch is asked for.

        ============================  ==============================================
        requested epoch               answer
        ============================  ==============================================
        UNDEFINED_EPOCH (-1)          (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)
        the latest epoch              (requested, log_end_offset)
        above the latest, or empty    (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)
        below the earliest            (requested, earliest start offset)
        otherwise                     (largest epoch <= requested, start of next one)
        ============================  ==============================================

        Below the earliest, Kafka 2.1+ answers with the requested epoch and the first start
        offset (the data below was removed from the log, so the follower should replicate from
        the leader's start); 0.11-2.0 answered UNDEFINED so the follower fell back to its HW.
        """
        if requested_epoch == UNDEFINED_EPOCH:
            # A bootstrapping follower, or one on a message format without leader epochs.
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if requested_epoch == self.latest_epoch:
            # The leader's own current epoch is still being written to: it ends at the LEO.
            return requested_epoch, log_end_offset
        higher = next((e for e in self._entries if e.epoch > requested_epoch), None)
        if higher is None:
            # Above every known epoch (cannot happen for a request from a correct follower).
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        floor = None
        for entry in self._entries:
            if entry.epoch > requested_epoch:
                break
            floor = entry
        if floor is None:
            return requested_epoch, higher.start_offset
        return floor.epoch, higher.start_offset

    def sanity_check(self) -> None:
        """Raise StorageInternalError if the invariants of the class docstring do not hold."""
        for prev, entry in zip(self._entries, self._entries[1:], strict=False):
            if entry.epoch <= prev.epoch or entry.start_offset <= prev.start_offset:
                raise StorageInternalError(
                    f"leader epoch cache is not monotonic: {prev} is followed by {entry}"
                )
        for entry in self._entries:
            if entry.epoch < 0 or entry.start_offset < 0:
                raise StorageInternalError(f"leader epoch cache holds a negative entry {entry}")

    # ---------------------------------------------------------------------------------------
    # Internals
    # ---------------------------------------------------------------------------------------

    def _assign(self, entry: EpochEntry) -> bool:
        if entry.epoch < 0 or entry.start_offset < 0:
            raise ValueError(f"Received invalid partition leader epoch entry {entry}")
        latest = self.latest_entry
        if (
            latest is not None
            and entry.epoch == latest.epoch
            and entry.start_offset >= latest.start_offset
        ):
            return False
        removed = self._remove_from_end(
            lambda e: e.epoch >= entry.epoch or e.start_offset >= entry.start_offset
        )
        self._entries.append(entry)
        # Removing one entry that starts where the new one does is routine (its epoch wrote
        # nothing); anything more means the replica saw out-of-order epochs.
        if len(removed) > 1 or (removed and removed[0].start_offset != entry.start_offset):
            logger.warning(
                "new epoch entry %s caused truncation of conflicting entries %s; "
                "cache now contains %d entries",
                entry,
                removed,
                len(self._entries),
            )
        return True

    def _remove_from_end(self, matches: Callable[[EpochEntry], bool]) -> list[EpochEntry]:
        """Pop entries from the end while they match; returned latest first, as Kafka logs."""
        removed: list[EpochEntry] = []
        while self._entries and matches(self._entries[-1]):
            removed.append(self._entries.pop())
        return removed

    def _flush(self) -> None:
        self._checkpoint.write(list(self._entries))
