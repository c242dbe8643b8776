"""A log segment: one ``.log`` file, its sparse ``.index`` and ``.timeindex``, its ``.txnindex``.

(One module, ~600 lines: appends, reads, lookups, recovery and truncation all keep the same
files and their invariants in step; the recovery loop itself is in ``segment_recovery``.)

Invariants:
  * every offset in the segment is ≥ ``base_offset`` and fits a 4-byte relative offset;
  * an offset-index entry maps the *last* offset of a batch to that batch's *start* position,
    added after every ``index.interval.bytes`` of appended batches (so the first batch of a
    segment is never indexed: a lookup below the first entry starts at position 0);
  * time-index timestamps are strictly increasing; the roll/close entry records the segment's
    largest timestamp;
  * the ``.txnindex`` holds the aborted transactions whose ABORT marker is in this segment
    (file created on its first entry; see :mod:`storage.txn_index`).
Not thread-safe: the owning ``Log`` serialises access. Crash story: the ``.log`` may have a torn
tail and the indexes may be stale or garbage; :meth:`LogSegment.recover` rebuilds the indexes
(the transaction index too) from the batches and truncates at the first invalid batch.

Formats: a segment written before Kafka 0.11 holds v0/v1 messages (no ``.timeindex`` in v0);
they are recovered, indexed (last offset -> position, as Kafka does) and served as they are.
"""

from __future__ import annotations

import contextlib
import logging
import os
import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from kafkasim.common.clock import Clock
from kafkasim.common.errors import CorruptIndexError, CorruptRecordError, InvalidOffsetError
from kafkasim.common.frozen import fast_frozen_init
from kafkasim.common.sentinels import INT32_MAX
from kafkasim.storage import file_names
from kafkasim.storage.config import LogConfig
from kafkasim.storage.epoch_cache import LeaderEpochFileCache
from kafkasim.storage.file_records import (
    Buffer,
    FileRecords,
    LogOffsetPosition,
    ScannedBlock,
    TimestampAndOffset,
)
from kafkasim.storage.offset_index import OffsetIndex
from kafkasim.storage.producer_state import ProducerStateManager
from kafkasim.storage.records.entry import LogEntryHeader
from kafkasim.storage.segment_recovery import reindex_entries
from kafkasim.storage.time_index import TimeIndex
from kafkasim.storage.txn_index import AbortedTxn, TransactionIndex

log = logging.getLogger(__name__)


class AppendedBatch(NamedTuple):
    """Per-batch facts the segment needs to index an append (no record decoding)."""

    last_offset: int
    max_timestamp: int
    size: int


@fast_frozen_init
@dataclass(frozen=True, slots=True)
class FetchDataInfo:
    """The result of a read: where it started and the whole batches read; for a
    ``read_committed`` read (:meth:`~storage.log.Log.read` with ``TXN_COMMITTED``) also the
    aborted transactions overlapping them (None for other reads)."""

    fetch_offset: int
    segment_base_offset: int
    position: int
    records: bytes
    aborted_transactions: tuple[AbortedTxn, ...] | None = None


class LogSegment:
    """One segment: ``<base>.log`` + ``.index`` + ``.timeindex`` (+ ``.txnindex``)."""

    def __init__(
        self,
        log_file: FileRecords,
        offset_index: OffsetIndex,
        time_index: TimeIndex,
        base_offset: int,
        *,
        index_interval_bytes: int,
        roll_jitter_ms: int,
        clock: Clock,
        txn_index: TransactionIndex,
    ) -> None:
        self.log = log_file
        self.offset_index = offset_index
        self.time_index = time_index
        self.txn_index = txn_index
        self.base_offset = base_offset
        self.index_interval_bytes = index_interval_bytes
        self.roll_jitter_ms = roll_jitter_ms
        self._clock = clock
        self.created_ms = clock.time_ms()
        # In-memory "last modified": the clock time of the last append (or the file's mtime when
        # opened). The cleaner's tombstone horizon reads it; an injected clock keeps it exact.
        # A modification time later than the clock's "now" is not believable (a simulation's
        # virtual clock, or a clock that jumped back): cap it, or tombstone horizons and
        # retention would be judged on another time line.
        self.last_modified_ms = (
            min(log_file.last_modified_ms(), self.created_ms) if log_file.size else self.created_ms
        )
        self.bytes_since_last_index_entry = 0
        self._rolling_based_timestamp: int | None = None
        self._max_ts_and_offset: tuple[int, int] | None = None

    # -- opening ----------------------------------------------------------------------------

    @classmethod
    def open(
        cls,
        dir_: Path,
        base_offset: int,
        *,
        index_interval_bytes: int,
        max_index_size: int,
        clock: Clock,
        roll_jitter_ms: int = 0,
        preallocate_bytes: int = 0,
        file_suffix: str = "",
        writable: bool = True,
    ) -> LogSegment:
        return cls(
            FileRecords(
                file_names.log_file(dir_, base_offset, file_suffix),
                preallocate_bytes=preallocate_bytes,
                writable=writable,
            ),
            OffsetIndex(
                file_names.index_file(dir_, base_offset, file_suffix),
                base_offset,
                max_index_size,
                writable=writable,
            ),
            TimeIndex(
                file_names.time_index_file(dir_, base_offset, file_suffix),
                base_offset,
                max_index_size,
                writable=writable,
            ),
            base_offset,
            index_interval_bytes=index_interval_bytes,
            roll_jitter_ms=roll_jitter_ms,
            clock=clock,
            txn_index=TransactionIndex(
                file_names.txn_index_file(dir_, base_offset, file_suffix), base_offset
            ),
        )

    # -- facts ------------------------------------------------------------------------------

    @property
    def size(self) -> int:
        return self.log.size

    def __repr__(self) -> str:
        return f"LogSegment(base_offset={self.base_offset}, size={self.size})"

    def _load_max_timestamp(self) -> tuple[int, int]:
        if self._max_ts_and_offset is None:
            last = self.time_index.last_entry
            best = (last.timestamp, last.offset)
            # Entries exist only every index.interval.bytes: scan what came after the last one.
            position = self.offset_index.lookup(last.offset).position if last.timestamp >= 0 else 0
            tail = self.log.largest_timestamp_after(position)
            if tail.timestamp > best[0]:
                best = (tail.timestamp, tail.offset)
            self._max_ts_and_offset = best
        return self._max_ts_and_offset

    @property
    def max_timestamp_so_far(self) -> int:
        return self._load_max_timestamp()[0]

    @property
    def offset_of_max_timestamp_so_far(self) -> int:
        return self._load_max_timestamp()[1]

    @property
    def largest_timestamp(self) -> int:
        """Largest record timestamp in the segment; retention judges by it, not by mtime.

        A segment whose records carry no timestamp (-1) falls back to its last-modified
        time, as Kafka's ``LogSegment.largestTimestamp`` does.
        """
        max_ts = self.max_timestamp_so_far
        return max_ts if max_ts >= 0 else self.last_modified_ms

    def persist_last_modified(self) -> None:
        """Put ``last_modified_ms`` (clock time) on the files, so a restart reads it back."""
        ns = self.last_modified_ms * 1_000_000
        paths = (self.log.path, self.offset_index.path, self.time_index.path, self.txn_index.path)
        for path in paths:
            with contextlib.suppress(FileNotFoundError):
                os.utime(path, ns=(ns, ns))

    def can_convert_to_relative_offset(self, offset: int) -> bool:
        return 0 <= offset - self.base_offset <= INT32_MAX

    def read_next_offset(self) -> int:
        """The offset after the last batch of this segment (``base_offset`` if empty)."""
        position = self.offset_index.lookup(self.offset_index.last_offset).position
        next_offset = self.base_offset
        for _, header in self.log.batch_headers(position):
            next_offset = header.last_offset + 1
        return next_offset

    def first_entry(self) -> LogEntryHeader | None:
        """The header of the first entry (None if the segment is empty); raises
        CorruptRecordError when it cannot be read."""
        for _, header in self.log.batch_headers(0):
            return header
        return None

    # -- writing ----------------------------------------------------------------------------

    def append(
        self, chunks: Sequence[Buffer], batches: Sequence[AppendedBatch], total: int, now_ms: int
    ) -> None:
        """Append whole batches (already validated and given offsets) and index them.

        ``total`` is the sum of the batch sizes (the caller has it already); ``now_ms`` the
        clock's time of the append (the log read it once for the whole append), which becomes
        the segment's last-modified time."""
        if total == 0:
            return
        last_offset = batches[-1].last_offset
        if not self.can_convert_to_relative_offset(last_offset):
            raise InvalidOffsetError(
                f"offset {last_offset} does not fit segment {self.base_offset} (relative int32)"
            )
        position = self.log.size
        if position == 0:
            self._rolling_based_timestamp = max(b.max_timestamp for b in batches)
        self.log.append(chunks, total)
        max_ts, max_ts_offset = self._max_ts_and_offset or self._load_max_timestamp()
        since_last = self.bytes_since_last_index_entry
        interval = self.index_interval_bytes
        for last, batch_max_ts, size in batches:
            if batch_max_ts > max_ts:
                max_ts, max_ts_offset = batch_max_ts, last
            if since_last > interval:
                self.offset_index.append(last, position)
                self.time_index.maybe_append(max_ts, max_ts_offset)
                since_last = 0
            since_last += size
            position += size
        self.bytes_since_last_index_entry = since_last
        self._max_ts_and_offset = (max_ts, max_ts_offset)
        self.last_modified_ms = now_ms

    def append_batch_unless_rolling(
        self,
        head: Buffer,
        body: Buffer,
        last_offset: int,
        max_timestamp: int,
        *,
        size: int,
        now_ms: int,
        config: LogConfig,
    ) -> bool:
        """:meth:`append` of one batch (the usual append) unless :meth:`should_roll` says the
        log must roll first: False then, with nothing written. The batch is written as
        ``head`` + ``body`` (``size`` bytes together). The same roll rules, checks, file bytes
        and index entries as ``should_roll`` then ``append``, in one call without the lists
        and per-batch tuples of the general form: the leader's common append, per batch."""
        records = self.log
        position = records.size
        # should_roll's conditions, its time rule's usual case inline (a segment whose
        # rolling timestamp is known; the helper works it out otherwise).
        if position > 0:
            rolling = self._rolling_based_timestamp
            waited = (
                max_timestamp - rolling
                if rolling is not None and rolling >= 0
                else self._time_waited_for_roll(now_ms, max_timestamp)
            )
            if waited > config.segment_ms - self.roll_jitter_ms:
                return False
        if (
            position > config.segment_bytes - size
            or self.offset_index.is_full()
            or self.time_index.is_full()
            or not 0 <= last_offset - self.base_offset <= INT32_MAX
        ):
            return False
        if position == 0:
            self._rolling_based_timestamp = max_timestamp
        records.append((head, body), size)
        max_ts, max_ts_offset = self._max_ts_and_offset or self._load_max_timestamp()
        if max_timestamp > max_ts:
            max_ts, max_ts_offset = max_timestamp, last_offset
        since_last = self.bytes_since_last_index_entry
        if since_last > self.index_interval_bytes:
            self.offset_index.append(last_offset, position)
            self.time_index.maybe_append(max_ts, max_ts_offset)
            since_last = 0
        self.bytes_since_last_index_entry = since_last + size
        self._max_ts_and_offset = (max_ts, max_ts_offset)
        self.last_modified_ms = now_ms
        return True

    def should_roll(
        self,
        config: LogConfig,
        max_timestamp_in_messages: int,
        max_offset_in_messages: int,
        messages_size: int,
        now_ms: int,
    ) -> bool:
        """Kafka's four roll conditions (size, time, full index, relative-offset overflow) for
        an append of ``messages_size`` bytes up to ``max_offset_in_messages``, under
        ``config``'s segment.bytes and segment.ms (Kafka's ``RollParams``, passed as arguments:
        no tuple built per append)."""
        size = self.log.size
        return (
            size > config.segment_bytes - messages_size
            or (
                size > 0
                and self._time_waited_for_roll(now_ms, max_timestamp_in_messages)
                > config.segment_ms - self.roll_jitter_ms
            )
            or self.offset_index.is_full()
            or self.time_index.is_full()
            or not self.can_convert_to_relative_offset(max_offset_in_messages)
        )

    def _time_waited_for_roll(self, now_ms: int, message_timestamp: int) -> int:
        if self._rolling_based_timestamp is None and self.size > 0:
            first = next(self.log.batch_headers(0), None)
            if first is not None:
                self._rolling_based_timestamp = first[1].max_timestamp
        if self._rolling_based_timestamp is not None and self._rolling_based_timestamp >= 0:
            return message_timestamp - self._rolling_based_timestamp
        return now_ms - self.created_ms

    def on_become_inactive_segment(self) -> None:
        """Roll: write the final time-index entry, trim indexes and file, go read-only."""
        max_ts, max_ts_offset = self._load_max_timestamp()
        self.time_index.maybe_append(max_ts, max_ts_offset, skip_full_check=True)
        self.offset_index.trim_to_valid_size()
        self.time_index.trim_to_valid_size()
        self.log.trim()
        self.make_read_only()
        self.persist_last_modified()

    def make_read_only(self) -> None:
        """Inactive segments never change: trim, then remap their indexes read-only."""
        for index in (self.offset_index, self.time_index):
            if index.writable:
                index.trim_to_valid_size()
        self.offset_index.set_writable(False)
        self.time_index.set_writable(False)

    def make_active(self, max_index_size: int) -> None:
        """Become writable again (the active segment, or one a truncation reopens)."""
        self.offset_index.set_writable(True)
        self.time_index.set_writable(True)
        self.resize_indexes(max_index_size)

    def resize_indexes(self, size: int) -> None:
        self.offset_index.resize(size)
        self.time_index.resize(size)

    def flush(self) -> None:
        self.log.flush()
        self.offset_index.flush()
        self.time_index.flush()
        self.txn_index.flush()
        self.persist_last_modified()

    # -- reading ----------------------------------------------------------------------------

    def translate_offset(self, offset: int, start_position: int = 0) -> LogOffsetPosition | None:
        """The batch holding ``offset`` (or the next one): floor index entry, then a scan."""
        return self._locate(offset, start_position)[0]

    def _locate(
        self, offset: int, start_position: int = 0
    ) -> tuple[LogOffsetPosition | None, ScannedBlock]:
        """:meth:`translate_offset`, and the bytes its scan read last (for a read right after:
        ``FileRecords.locate``)."""
        log = self.log
        # A remembered end right before ``offset`` is where the scan would get to from the
        # index's entry (at or before it: that entry's batch ends at or below ``offset``), and
        # where ``locate`` would start it anyway: the index is not searched (a fetch where the
        # last one stopped, the usual case, skips a binary search of the index).
        start = log.start_known(offset)
        if start is None:
            start = self.offset_index.lookup(offset).position
        return log.locate(offset, max(start, start_position))

    def read(
        self,
        start_offset: int,
        max_size: int,
        max_position: int | None = None,
        min_one_message: bool = False,
    ) -> FetchDataInfo | None:
        """Whole batches from the one holding ``start_offset``, at most ``max_size`` bytes.

        ``max_position`` bounds the read (the log passes the position of the high watermark);
        ``min_one_message`` lets one batch larger than ``max_size`` through so that a consumer
        never gets stuck. Returns None when ``start_offset`` is past the last batch here.
        """
        if max_size < 0:
            raise ValueError(f"invalid max size {max_size} for log read from segment {self}")
        start, scanned = self._locate(start_offset)  # its scan's bytes serve the read below
        if start is None:
            return None
        limit = self.size if max_position is None else min(max_position, self.size)
        adjusted = max(max_size, start.size) if min_one_message else max_size
        fetch_size = min(limit - start.position, adjusted)
        if fetch_size <= 0:
            return FetchDataInfo(start_offset, self.base_offset, start.position, b"")
        data = self.log.read_entries(start.position, fetch_size, scanned)
        return FetchDataInfo(start_offset, self.base_offset, start.position, data)

    def find_offset_by_timestamp(
        self, timestamp: int, starting_offset: int
    ) -> TimestampAndOffset | None:
        """First record at or after ``starting_offset`` with timestamp ≥ ``timestamp``."""
        ts_offset = self.time_index.lookup(timestamp)
        position = self.offset_index.lookup(max(ts_offset.offset, starting_offset)).position
        return self.log.search_for_timestamp(timestamp, position, starting_offset)

    # -- recovery and truncation ------------------------------------------------------------

    def sanity_check(self) -> None:
        """Raise CorruptIndexError when an index cannot be trusted.

        Beyond each index's own check: a missing file, an offset-index entry pointing past the
        end of the log, or a time-index entry for an offset the log does not hold all mean the
        index is stale (an index longer than its log) and must be rebuilt.
        """
        for index in (self.offset_index, self.time_index):
            if not index.path.exists():
                raise CorruptIndexError(f"index file {index.path} is missing")
            index.sanity_check()
        self.txn_index.sanity_check()
        if self.offset_index.entries:
            last = self.offset_index.entry(self.offset_index.entries - 1)
            if last.position >= self.log.size:
                raise CorruptIndexError(
                    f"index {self.offset_index.path} has an entry at position {last.position}, "
                    f"past the end of its {self.log.size}-byte log"
                )
        if self.time_index.entries:
            last_ts = self.time_index.last_entry
            try:
                next_offset = self.read_next_offset()
            except CorruptRecordError as e:
                raise CorruptIndexError(
                    f"{self.log.path} has an invalid batch after its last index entry: {e}"
                ) from e
            if last_ts.offset >= next_offset and self.log.size > 0:
                raise CorruptIndexError(
                    f"time index {self.time_index.path} names offset {last_ts.offset}, "
                    "beyond the last batch of its log"
                )
        elif (
            self.log.size > 0
            and self.time_index.length_bytes == 0
            and (self.offset_index.entries > 0)
        ):
            raise CorruptIndexError(f"time index {self.time_index.path} is empty")

    def recover(
        self,
        producer_state: ProducerStateManager | None = None,
        epoch_cache: LeaderEpochFileCache | None = None,
        *,
        warn_on_gaps: bool = False,
    ) -> int:
        """Rebuild the indexes from the entries; truncate at the first invalid one.

        With ``producer_state`` (brought up to this segment's base offset by the caller), the
        producers' batches update it and the ``.txnindex`` is rebuilt from the markers.

        An entry (a v2 batch, or a v0/v1 message of a log written before Kafka 0.11) is valid
        when its header parses (magic 0, 1 or 2, sane length), it fits in the file, its
        checksum matches (CRC-32C for v2, CRC-32 for v0/v1), and its offsets fit this segment
        and come after the previous entry's. An entry whose offsets are below the segment's
        base offset or do not come after the previous entry's is misplaced (a rewritten
        ``baseOffset``, which no CRC covers): corruption, truncated like a bad CRC. A gap in
        the offsets is not: compaction makes them. ``warn_on_gaps`` (a log that is not
        compacted) logs a warning for each one. Returns the number of bytes truncated.
        """
        self.offset_index.reset()
        self.time_index.reset()
        if producer_state is not None:
            # Rebuilt from the markers; without producer state (a ``.swap`` segment, whose
            # index was flushed before the swap began) the index is kept as it is.
            self.txn_index.reset()
        self.bytes_since_last_index_entry = 0
        file_length = self.log.file_length()
        valid_bytes, max_ts, max_ts_offset = reindex_entries(
            self, file_length, producer_state, epoch_cache, warn_on_gaps=warn_on_gaps
        )
        truncated = file_length - valid_bytes
        self.log.set_size(file_length)
        if truncated > 0:
            self.log.truncate_to(valid_bytes)
        self.offset_index.trim_to_valid_size()
        self._max_ts_and_offset = (max_ts, max_ts_offset)
        self.time_index.maybe_append(max_ts, max_ts_offset, skip_full_check=True)
        self.time_index.trim_to_valid_size()
        return truncated

    def truncate_to(self, offset: int) -> int:
        """Drop every batch from the one holding ``offset``; returns bytes removed."""
        mapping = self.translate_offset(offset)
        # Let the segment become active again after a follower truncation.
        self.make_active(self.offset_index.max_index_size)
        self.offset_index.truncate_to(offset)
        self.time_index.truncate_to(offset)
        self.txn_index.truncate_to(offset)
        if mapping is None:
            return 0
        removed = self.log.truncate_to(mapping.position)
        self.bytes_since_last_index_entry = 0
        if self.log.size == 0:
            self.created_ms = self._clock.time_ms()
            self._rolling_based_timestamp = None
        self._max_ts_and_offset = None
        return removed

    # -- file management --------------------------------------------------------------------

    def change_file_suffixes(self, old_suffix: str, new_suffix: str) -> None:
        def swap(path: Path) -> Path:
            name = path.name
            if old_suffix:
                name = name.removesuffix(old_suffix)
            return path.with_name(name + new_suffix)

        self.log.rename_to(swap(self.log.path))
        self.offset_index.rename_to(swap(self.offset_index.path))
        self.time_index.rename_to(swap(self.time_index.path))
        self.txn_index.rename_to(swap(self.txn_index.path))

    def close(self) -> None:
        """Clean close: final time-index entry, trimmed indexes and file."""
        if self.log.closed:
            return
        if self.time_index.writable:
            max_ts, max_ts_offset = self._load_max_timestamp()
            self.time_index.maybe_append(max_ts, max_ts_offset, skip_full_check=True)
        self.offset_index.close()
        self.time_index.close()
        self.txn_index.close()
        self.log.close()
        self.persist_last_modified()

    def close_handlers(self) -> None:
        self.offset_index.close_handler()
        self.time_index.close_handler()
        self.txn_index.close()
        self.log.close_handler()

    def delete_if_exists(self) -> None:
        self.log.delete_if_exists()
        self.offset_index.delete_if_exists()
        self.time_index.delete_if_exists()
        self.txn_index.delete_if_exists()


def new_segment(
    dir_: Path,
    base_offset: int,
    config: LogConfig,
    clock: Clock,
    rng: random.Random,
    *,
    file_suffix: str = "",
) -> LogSegment:
    """A fresh segment file set at ``base_offset`` with this config's sizes."""
    jitter = 0
    if config.segment_jitter_ms > 0:
        jitter = rng.randrange(min(config.segment_jitter_ms, config.segment_ms))
    return LogSegment.open(
        dir_,
        base_offset,
        index_interval_bytes=config.index_interval_bytes,
        max_index_size=config.segment_index_bytes,
        clock=clock,
        roll_jitter_ms=jitter,
        preallocate_bytes=config.segment_bytes if config.preallocate else 0,
        file_suffix=file_suffix,
    )
