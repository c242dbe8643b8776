"""The log of one partition replica: its segments, offsets, producer state and epochs.

(One module, ~810 lines: the state every part of the log shares; appends, reads, retention and
transactions are in ``log_append``, ``log_read``, ``log_retention`` and ``log_transactions``.
The leader's one-batch append, ``_append_planned_batch``, is here because it moves this state
itself: the usual produce request's cost is the Python calls it saves.)

Kafka's ``UnifiedLog`` with its ``LocalLog``. It owns the segment map, the leader-epoch cache
and the producer state, and keeps:

  * ``log_start_offset`` ≤ ``high_watermark`` ≤ ``log_end_offset`` (LEO, the next offset);
  * ``last_stable_offset`` ≤ ``high_watermark``: below it every transaction is decided and
    its marker replicated (``read_committed`` consumers read up to it);
  * ``recovery_point``: every byte below it has been fsync'd (recovery starts there);
  * leader appends get dense, increasing offsets; follower appends must continue the log.

What an append holds, reads and retention's choices are worked out by functions over that
state (``log_append``, ``log_read``, ``log_retention``); this class orders them and moves the
offsets. It reads time only from its injected clock and starts no threads: the owner (the
broker's log manager) calls ``delete_old_segments``, ``flush`` and ``run_pending_deletions`` on
its own schedule; a roll's fsync goes to the owner's background writer when it has one
(``roll_flush``), and the log applies its outcome on its own thread. Not thread-safe: one
owner, one event loop.
"""

from __future__ import annotations

import logging
import random
import shutil
import zlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from pathlib import Path

from kafkasim.common.clock import Clock
from kafkasim.common.errors import (
    InvalidOffsetError,
    InvalidRecordError,
    KafkaError,
    KafkaStorageError,
    OffsetOutOfRangeError,
    RecordListTooLargeError,
)
from kafkasim.common.sentinels import (
    EARLIEST_LOCAL_TIMESTAMP,
    EARLIEST_TIMESTAMP,
    LATEST_TIERED_TIMESTAMP,
    LATEST_TIMESTAMP,
    MAX_TIMESTAMP,
    NO_TIMESTAMP,
)
from kafkasim.common.types import TopicPartition
from kafkasim.storage import file_names
from kafkasim.storage.checkpoints import LEADER_EPOCH_CHECKPOINT_FILE, LeaderEpochCheckpointFile
from kafkasim.storage.config import LogConfig
from kafkasim.storage.epoch_cache import LeaderEpochFileCache
from kafkasim.storage.file_records import Buffer, TimestampAndOffset
from kafkasim.storage.loader import load_log, rebuild_producer_state
from kafkasim.storage.log_append import (
    AppendOrigin,
    AppendRules,
    BatchEntry,
    LogAppendInfo,
    PlannedAppend,
    analyze_append,
    as_replicated,
    assign_offsets,
    check_client_sequences,
    plan_client_batch,
    validate_and_convert,
)
from kafkasim.storage.log_read import offset_by_timestamp, read_entries, read_segments
from kafkasim.storage.log_retention import (
    PendingDeletions,
    SegmentPredicate,
    below_log_start_offset,
    breached_size_retention,
    breached_time_retention,
    deletable_segments,
    swap_in_cleaned,
)
from kafkasim.storage.log_transactions import (
    FetchIsolation,
    aborted_txns_for_read,
    apply_batches,
    collect_aborted_txns,
    complete_txns,
    last_stable_offset,
)
from kafkasim.storage.producer_state import ProducerStateManager, SavedProducerState
from kafkasim.storage.records.batch import Record
from kafkasim.storage.records.entry import LogEntryHeader
from kafkasim.storage.roll_flush import RollFlushes
from kafkasim.storage.segment import FetchDataInfo, LogSegment, new_segment
from kafkasim.storage.segments import LogSegments
from kafkasim.storage.txn_index import AbortedTxn, CompletedTxn

__all__ = [
    "EARLIEST_LOCAL_TIMESTAMP",
    "EARLIEST_TIMESTAMP",
    "LATEST_TIERED_TIMESTAMP",
    "LATEST_TIMESTAMP",
    "MAX_TIMESTAMP",
    "AppendOrigin",
    "FetchIsolation",
    "Log",
    "LogAppendInfo",
]

logger = logging.getLogger(__name__)
_CLIENT = AppendOrigin.CLIENT  # read per append: a module global, not an enum lookup


class Log:
    """A partition replica's log. Open one with :meth:`Log.open` (which runs recovery)."""

    def __init__(
        self,
        dir_: Path,
        topic_partition: TopicPartition,
        config: LogConfig,
        clock: Clock,
        segments: LogSegments,
        *,
        log_start_offset: int,
        recovery_point: int,
        epoch_cache: LeaderEpochFileCache,
        producer_state: ProducerStateManager,
        rng: random.Random | None = None,
    ) -> None:
        self.dir = dir_
        self.topic_partition = topic_partition
        self._apply_config(config)
        self._clock = clock
        self.segments = segments
        self.log_start_offset = log_start_offset
        self.recovery_point = recovery_point
        self.epoch_cache = epoch_cache
        self.producer_state = producer_state
        # Seeded from the name, not hash(): str hashes differ per process, replays must not.
        self._rng = rng or random.Random(zlib.crc32(str(topic_partition).encode()))
        self._next_offset = segments.active.read_next_offset()
        self.high_watermark = min(max(log_start_offset, 0), self._next_offset)
        self.last_flush_ms = clock.time_ms()
        self.flushes = 0  # flushes that fsynced something (a slowed disk waits for each)
        self._pending_deletions = PendingDeletions()
        self._closed = False
        # Told of an I/O error on an append (Kafka's LogDirFailureChannel): the log manager
        # takes the log dir offline. The append itself fails with KAFKA_STORAGE_ERROR.
        self.on_io_error: Callable[[OSError], None] | None = None
        # Where a roll's fsync runs: None, at the roll (the simulation, tests); otherwise on the
        # log manager's background writer (storage.roll_flush says why).
        self.roll_flushes: RollFlushes | None = None
        self._truncations = 0  # a background flush asked for before one does not count

    # -- opening ----------------------------------------------------------------------------

    @classmethod
    def open(
        cls,
        dir_: Path,
        config: LogConfig,
        clock: Clock,
        *,
        topic_partition: TopicPartition | None = None,
        recovery_point: int = 0,
        log_start_offset: int = 0,
        had_clean_shutdown: bool = False,
        rng: random.Random | None = None,
    ) -> Log:
        """Open (creating if needed) the log in ``dir_`` and recover it (see ``loader``)."""
        tp = topic_partition or TopicPartition.from_dir_name(dir_.name)
        dir_.mkdir(parents=True, exist_ok=True)
        epoch_cache = LeaderEpochFileCache(
            LeaderEpochCheckpointFile(dir_ / LEADER_EPOCH_CHECKPOINT_FILE)
        )
        producer_state = ProducerStateManager(dir_)
        loaded = load_log(
            dir_,
            config,
            clock,
            recovery_point=recovery_point,
            log_start_offset=log_start_offset,
            had_clean_shutdown=had_clean_shutdown,
            epoch_cache=epoch_cache,
            producer_state=producer_state,
        )
        return cls(
            dir_,
            tp,
            config,
            clock,
            loaded.segments,
            log_start_offset=loaded.log_start_offset,
            recovery_point=loaded.recovery_point,
            epoch_cache=epoch_cache,
            producer_state=producer_state,
            rng=rng,
        )

    # -- facts ------------------------------------------------------------------------------

    @property
    def log_end_offset(self) -> int:
        return self._next_offset

    @property
    def active_segment(self) -> LogSegment:
        return self.segments.active

    @property
    def size_in_bytes(self) -> int:
        return self.segments.size_in_bytes()

    @property
    def num_segments(self) -> int:
        return len(self.segments)

    @property
    def latest_epoch(self) -> int | None:
        return self.epoch_cache.latest_epoch

    def __repr__(self) -> str:
        return (
            f"Log({self.topic_partition}, start={self.log_start_offset}, "
            f"hw={self.high_watermark}, leo={self.log_end_offset}, segments={len(self.segments)})"
        )

    def update_config(self, config: LogConfig) -> None:
        self._apply_config(config)

    # -- high watermark ---------------------------------------------------------------------

    def update_high_watermark(self, offset: int) -> int:
        """Set the HW, clamped to [log_start_offset, log_end_offset]; returns the value kept.
        Completed transactions whose markers it passes stop holding the LSO back."""
        self.high_watermark = min(max(offset, self.log_start_offset), self.log_end_offset)
        self.producer_state.on_high_watermark_updated(self.high_watermark)
        return self.high_watermark

    @property
    def last_stable_offset(self) -> int:
        """The LSO: ``min(first unstable offset, high watermark)`` (see ``log_transactions``)."""
        return last_stable_offset(
            self.producer_state,
            log_start_offset=self.log_start_offset,
            high_watermark=self.high_watermark,
        )

    def maybe_increment_high_watermark(self, offset: int) -> bool:
        """Move the HW forward only (a leader's HW never goes back)."""
        if offset > self.high_watermark:
            self.update_high_watermark(offset)
            return True
        return False

    # -- appends ----------------------------------------------------------------------------

    def append_as_leader(
        self,
        records: Buffer,
        leader_epoch: int,
        origin: AppendOrigin = AppendOrigin.CLIENT,
    ) -> LogAppendInfo:
        """Validate batches, assign offsets, stamp the leader epoch, append.

        Per batch, without decoding records except where the validator walks them (see
        ``log_append``). In Kafka's order: roll if due (so the roll's producer snapshot covers
        the offsets below the new segment), then the producers' sequences and transactions,
        then the write, then the transactions its markers complete. All or nothing: when any
        batch is refused, or the write fails, nothing is appended and the producer state is as
        it was. Control batches (COMMIT/ABORT markers) are accepted from the COORDINATOR
        origin only (a client's: INVALID_RECORD, from the validator); a marker whose epochs are
        stale is INVALID_PRODUCER_EPOCH or TRANSACTION_COORDINATOR_FENCED.
        """
        if self._closed:
            self._check_open()  # raises
        view = memoryview(records)
        now_ms = self._clock.time_ms()
        is_client = origin is _CLIENT
        if is_client:
            # The usual request first: one plain client batch checked and written in one pass
            # (the same checks and effects; tests/unit/storage/test_log_append_paths.py).
            # Whatever it declines, a fault included, takes the general path below.
            planned = plan_client_batch(view, self._rules, now_ms, self._next_offset, leader_epoch)
            if planned is not None:
                info = self._append_planned_batch(view, planned, leader_epoch, now_ms)
                if info is not None:
                    return info
        rules = self._rules
        entries = analyze_append(view, rules, leader=True)
        if not entries:
            raise InvalidRecordError(f"{self.topic_partition}: the append holds no record batch")
        entries = validate_and_convert(entries, rules, now_ms, is_client=is_client)
        append_time = now_ms if rules.log_append_time else -1
        plan = assign_offsets(entries, self._next_offset, leader_epoch, append_time)
        saved = self._save_producers(entries)
        completed: list[CompletedTxn] = []
        try:
            segment = self._maybe_roll(plan, now_ms)
            if not is_client and saved is not None:
                completed = apply_batches(
                    self.producer_state,
                    (
                        (h, v, a.last_offset - h.last_offset_delta)
                        for (_, h, v), a in zip(entries, plan.batches, strict=True)
                    ),
                    origin,
                )
            elif is_client and saved is not None:
                duplicate = check_client_sequences(
                    self.producer_state,
                    entries,
                    plan,
                    rules,
                    append_time=append_time,
                    log_start_offset=self.log_start_offset,
                )
                if duplicate is not None:
                    return duplicate  # an idempotent retry: the original's offsets, no append
            self._write(segment, plan, now_ms, completed)
        except BaseException:
            if saved is not None:
                self.producer_state.restore_entries(saved)
            raise
        return plan.info(append_time, self.log_start_offset)

    def _append_planned_batch(
        self,
        view: memoryview,
        planned: tuple[bytes, int, int, int],
        leader_epoch: int,
        now_ms: int,
    ) -> LogAppendInfo | None:
        """Write the one batch ``plan_client_batch`` vouched for, as the general path would
        (no producer state to check: the batch has no producer id); None, with nothing done,
        when the append must roll or exceeds segment.bytes (the general path does both)."""
        head, last_offset, max_timestamp, record_count = planned
        size = len(view)
        config = self.config
        if size > config.segment_bytes:
            return None
        try:
            # The header's first 16 bytes rewritten, the rest of the batch as received.
            if not self.segments.active.append_batch_unless_rolling(
                head,
                view[16:],
                last_offset,
                max_timestamp,
                size=size,
                now_ms=now_ms,
                config=config,
            ):
                return None
        except OSError as e:
            raise self._write_failed(e) from e
        # _advance_log_end's work for the one epoch of a leader append.
        first_offset = self._next_offset
        latest = self.epoch_cache.latest_epoch
        if leader_epoch >= 0 and (latest is None or leader_epoch > latest):
            self.epoch_cache.assign(leader_epoch, first_offset)
        self._next_offset = next_offset = last_offset + 1
        self.producer_state.update_map_end_offset(next_offset)
        if next_offset - self.recovery_point >= config.flush_messages:
            self.flush()
        # _make from one tuple: half the cost of the named tuple's __new__ with its default.
        return LogAppendInfo._make(
            (
                first_offset,
                last_offset,
                max_timestamp,
                last_offset if max_timestamp > NO_TIMESTAMP else first_offset,
                NO_TIMESTAMP,
                self.log_start_offset,
                record_count,
                1,
                size,
                False,
            )
        )

    def append_as_follower(self, records: Buffer) -> LogAppendInfo:
        """Append batches exactly as the leader wrote them; offsets must continue the log."""
        self._check_open()
        view = memoryview(records)
        entries = analyze_append(view, self._rules, leader=False)
        if not entries:
            end = self._next_offset
            return LogAppendInfo(end, end - 1, -1, -1, -1, self.log_start_offset, 0, 0, 0)
        first = entries[0][1]
        if first.base_offset < self._next_offset:
            raise InvalidOffsetError(
                f"{self.topic_partition}: follower append starts at offset {first.base_offset} "
                f"but the log end offset is {self._next_offset}"
            )
        plan = as_replicated(view, entries)
        now_ms = self._clock.time_ms()
        segment = self._maybe_roll(plan, now_ms)
        saved = self._save_producers(entries)
        try:
            completed = apply_batches(
                self.producer_state,
                ((h, v, h.base_offset) for _, h, v in entries),
                AppendOrigin.REPLICATION,
            )
            self._write(segment, plan, now_ms, completed)
        except BaseException:
            if saved is not None:
                self.producer_state.restore_entries(saved)
            raise
        return plan.info(-1, self.log_start_offset)

    def _save_producers(self, entries: list[BatchEntry]) -> SavedProducerState | None:
        """The producer entries an append may change, saved to restore if it fails; None when
        no batch has a producer id (a loop, not a set comprehension: most appends have one
        batch without producer, and a comprehension's frame costs more than that)."""
        producer_ids: set[int] | None = None
        for _, header, _ in entries:
            if header.producer_id >= 0:
                if producer_ids is None:
                    producer_ids = set()
                producer_ids.add(header.producer_id)
        return None if producer_ids is None else self.producer_state.save_entries(producer_ids)

    def _maybe_roll(self, plan: PlannedAppend, now_ms: int) -> LogSegment:
        """The segment an append goes to: the active one, or a new one rolled at the append's
        first offset (Kafka's ``maybeRoll``), before the producer state sees the append."""
        total = plan.total
        if total > self.config.segment_bytes:
            raise RecordListTooLargeError(
                f"{self.topic_partition}: an append of {total} bytes exceeds segment.bytes="
                f"{self.config.segment_bytes}"
            )
        segment = self.segments.active
        if segment.should_roll(self.config, plan.max_timestamp, plan.last_offset, total, now_ms):
            segment = self.roll(plan.first_offset)
        return segment

    def _write(
        self,
        segment: LogSegment,
        plan: PlannedAppend,
        now_ms: int,
        completed: Sequence[CompletedTxn] = (),
    ) -> None:
        try:
            segment.append(plan.chunks, plan.batches, plan.total, now_ms)
            if completed:
                complete_txns(self.producer_state, segment.txn_index, completed)
        except OSError as e:
            raise self._write_failed(e) from e
        self._advance_log_end(plan.epochs, plan.last_offset)

    def _write_failed(self, e: OSError) -> KafkaError:
        """The error an append's failed write raises (after telling the dir's handler)."""
        # Nothing was counted as appended (sizes move only after a write succeeds); the
        # dir is as suspect as Kafka deems it: the handler takes it offline.
        if self.on_io_error is not None:
            self.on_io_error(e)
        return KafkaStorageError(
            f"Error while appending records to {self.topic_partition} in dir {self.dir.parent}: {e}"
        )

    def _advance_log_end(self, epochs: Sequence[tuple[int, int]], last_offset: int) -> None:
        """After a write: record new leader epochs, move the log end, flush if
        flush.messages is due."""
        cache = self.epoch_cache
        for epoch, start in epochs:
            latest = cache.latest_epoch
            if epoch >= 0 and (latest is None or epoch > latest):
                cache.assign(epoch, start)
        self._next_offset = last_offset + 1
        self.producer_state.update_map_end_offset(self._next_offset)
        if self._next_offset - self.recovery_point >= self.config.flush_messages:
            self.flush()

    def _apply_config(self, config: LogConfig) -> None:
        """Derive what the append path needs from the config once, not per append."""
        self.config = config
        self._rules = AppendRules.of(self.topic_partition, config)

    # -- rolling ----------------------------------------------------------------------------

    def roll(self, expected_next_offset: int | None = None) -> LogSegment:
        """Start a new active segment at the log end (or at ``expected_next_offset``)."""
        self._check_open()
        new_offset = max(expected_next_offset or 0, self._next_offset)
        active = self.segments.active
        if active.base_offset == new_offset and active.size == 0:
            return active  # nothing to roll: the active segment is already empty here
        if self.segments.get(new_offset) is not None:
            raise InvalidOffsetError(
                f"{self.topic_partition}: cannot roll to {new_offset}: a segment starts there"
            )
        active.on_become_inactive_segment()
        self.producer_state.update_map_end_offset(new_offset)
        self.producer_state.take_snapshot()
        segment = self.create_segment(new_offset)
        self.segments.add(segment)
        # Kafka flushes the old segment on its scheduler's thread: a broker process on its
        # background writer, the simulation here and now (virtual time has no threads).
        if self.roll_flushes is None:
            self.flush(new_offset)
        elif new_offset > self.recovery_point:
            self.roll_flushes.submit(
                self.segments.between(self.recovery_point, new_offset),
                new_offset,
                self._truncations,
            )
        return segment

    def create_segment(self, base_offset: int, *, file_suffix: str = "") -> LogSegment:
        """A new, empty segment file set at ``base_offset`` with this log's config (not yet in
        the segment map). Stale files of the same name (an earlier truncation) go first."""
        for make in (
            file_names.log_file,
            file_names.index_file,
            file_names.time_index_file,
            file_names.txn_index_file,
        ):
            make(self.dir, base_offset, file_suffix).unlink(missing_ok=True)
        return new_segment(
            self.dir, base_offset, self.config, self._clock, self._rng, file_suffix=file_suffix
        )

    # -- reads ------------------------------------------------------------------------------

    def read(
        self,
        start_offset: int,
        max_bytes: int,
        max_offset: int | None = None,
        min_one_message: bool = True,
        *,
        isolation: FetchIsolation | None = None,
    ) -> FetchDataInfo:
        """Whole batches from ``start_offset``, never a batch at or past ``max_offset``.

        The broker passes the high watermark as ``max_offset`` for consumers, or an
        ``isolation`` instead (Kafka's ``UnifiedLog.read``): LOG_END, HIGH_WATERMARK, or
        TXN_COMMITTED — up to the last stable offset, with the aborted transactions that
        overlap what is returned. Reading below the log start offset or above the log end
        offset is OFFSET_OUT_OF_RANGE.
        """
        self._check_open()
        if isolation is not None:
            if max_offset is not None:
                raise ValueError("read takes a max_offset or an isolation, not both")
            max_offset = (
                None
                if isolation is FetchIsolation.LOG_END
                else self.high_watermark
                if isolation is FetchIsolation.HIGH_WATERMARK
                else self.last_stable_offset
            )
        info = read_segments(
            self.segments,
            self.topic_partition,
            log_start_offset=self.log_start_offset,
            log_end_offset=self._next_offset,
            start_offset=start_offset,
            max_bytes=max_bytes,
            max_offset=max_offset,
            min_one_message=min_one_message,
        )
        if isolation is FetchIsolation.TXN_COMMITTED:
            aborted = aborted_txns_for_read(self.segments, info, self._next_offset)
            return replace(info, aborted_transactions=aborted)
        return info

    def collect_aborted_txns(self, fetch_offset: int, upper_bound_offset: int) -> list[AbortedTxn]:
        """Aborted transactions overlapping ``[fetch_offset, upper_bound_offset)`` (Kafka's
        ``collectAbortedTransactions``), for a read_committed fetch or the cleaner."""
        return collect_aborted_txns(self.segments, fetch_offset, upper_bound_offset)

    def batches(self, max_bytes: int = 1 << 20) -> Iterator[tuple[LogEntryHeader, list[Record]]]:
        """Every entry (v2 batch, or v0/v1 message of a log written before Kafka 0.11) from the
        log start offset to the log end, decoded, read ``max_bytes`` at a time: for rebuilding
        state from a whole log (the group coordinator loading ``__consumer_offsets``, a
        simulation's snapshot of each replica)."""
        return read_entries(self.read, self.log_start_offset, self.log_end_offset, max_bytes)

    def fetch_offset_by_timestamp(self, timestamp: int) -> TimestampAndOffset | None:
        """ListOffsets for a special timestamp (-1..-5) or a timestamp ≥ 0
        (:func:`~storage.log_read.offset_by_timestamp`)."""
        self._check_open()
        return offset_by_timestamp(
            self.segments,
            self.epoch_cache,
            self.topic_partition,
            timestamp,
            log_start_offset=self.log_start_offset,
            log_end_offset=self._next_offset,
        )

    def end_offset_for_epoch(self, leader_epoch: int) -> tuple[int, int]:
        """OffsetsForLeaderEpoch (KIP-101/279): (largest epoch ≤ requested, its end offset)."""
        return self.epoch_cache.end_offset_for(leader_epoch, self._next_offset)

    # -- truncation -------------------------------------------------------------------------

    def truncate_to(self, target_offset: int) -> bool:
        """Drop everything from ``target_offset`` on (follower divergence); True if it did."""
        self._check_open()
        if target_offset < 0:
            raise ValueError(f"cannot truncate {self.topic_partition} to {target_offset}")
        if target_offset >= self._next_offset:
            return False
        first = self.segments.first
        if first is None or first.base_offset > target_offset:
            self.truncate_fully_and_start_at(target_offset)
            return True
        logger.info(
            "%s: truncating log from %d to %d",
            self.topic_partition,
            self._next_offset,
            target_offset,
        )
        self._truncations += 1
        self.segments.truncate_to(target_offset)
        self._next_offset = self.segments.active.read_next_offset()
        self.epoch_cache.truncate_from_end(target_offset)
        self.log_start_offset = min(self.log_start_offset, target_offset)
        self.recovery_point = min(self.recovery_point, self._next_offset)
        self.high_watermark = min(self.high_watermark, self._next_offset)
        self._reload_producer_state()
        return True

    def truncate_fully_and_start_at(self, new_offset: int) -> None:
        """Delete every segment and restart the log empty at ``new_offset``."""
        self._check_open()
        logger.info("%s: truncating fully and starting at %d", self.topic_partition, new_offset)
        self._truncations += 1
        self.segments.delete_all()
        self.segments.add(self.create_segment(new_offset))
        self._next_offset = new_offset
        self.epoch_cache.clear_and_flush()
        self.log_start_offset = new_offset
        self.recovery_point = new_offset
        self.high_watermark = new_offset
        self.producer_state.truncate_fully_and_start_at(new_offset)

    def _reload_producer_state(self) -> None:
        self.producer_state.truncate_snapshots(self._next_offset)
        self.producer_state.truncate_and_reload(
            self.log_start_offset, self._next_offset, self._clock.time_ms()
        )
        rebuild_producer_state(self.producer_state, self.segments, self._next_offset)

    # -- retention and log start offset ------------------------------------------------------

    def maybe_increment_log_start_offset(self, new_start: int) -> bool:
        """delete-records: move the log start offset forward (never past the HW)."""
        self._check_open()
        if new_start > self.high_watermark:
            raise OffsetOutOfRangeError(
                f"Cannot increment the log start offset to {new_start} of partition "
                f"{self.topic_partition} since it is larger than the high watermark "
                f"{self.high_watermark}"
            )
        if new_start <= self.log_start_offset:
            return False
        self.log_start_offset = new_start
        self.epoch_cache.truncate_from_start(new_start)
        self.producer_state.delete_snapshots_below(new_start)
        self.recovery_point = max(self.recovery_point, new_start)
        return True

    def delete_old_segments(self) -> int:
        """Retention by time, size and log start offset; whole segments, oldest first.

        Only segments entirely below the high watermark go; if every segment would go, a new
        active segment is rolled first so that the log always has one. Returns how many.
        """
        self._check_open()
        deleted = 0
        config = self.config
        if config.delete:
            now_ms = self._clock.time_ms()
            deleted += self._delete_segments_by(
                breached_time_retention(config.retention_ms, now_ms), "time"
            )
            deleted += self._delete_segments_by(
                breached_size_retention(config.retention_bytes, self.size_in_bytes), "size"
            )
        deleted += self._delete_segments_by(
            below_log_start_offset(self.log_start_offset), "log start offset"
        )
        return deleted

    def _delete_segments_by(self, predicate: SegmentPredicate, reason: str) -> int:
        deletable = deletable_segments(
            self.segments,
            predicate,
            high_watermark=self.high_watermark,
            log_end_offset=self._next_offset,
        )
        if not deletable:
            return 0
        if len(deletable) == len(self.segments):
            self.roll()  # a log always keeps one segment
        for segment in deletable:
            logger.info(
                "%s: deleting segment %s (retention by %s)", self.topic_partition, segment, reason
            )
            self.segments.remove(segment.base_offset)
            self._retire(segment)
        first = self.segments.first
        if first is not None and first.base_offset > self.log_start_offset:
            self.log_start_offset = first.base_offset
            self.epoch_cache.truncate_from_start(self.log_start_offset)
            self.producer_state.delete_snapshots_below(self.log_start_offset)
        return len(deletable)

    def _retire(self, segment: LogSegment) -> None:
        """Rename an unmapped segment to ``.deleted``, remove it after
        ``file.delete.delay.ms``."""
        due = self._clock.time_ms() + self.config.file_delete_delay_ms
        self._pending_deletions.retire(segment, due)

    def replace_segments(self, new_segment: LogSegment, old_segments: Sequence[LogSegment]) -> None:
        """Swap a cleaned segment (``.cleaned`` files) in for the old ones, crash-safe
        (:func:`~storage.log_retention.swap_in_cleaned`)."""
        swap_in_cleaned(self.segments, new_segment, old_segments, self._retire)

    def run_pending_deletions(self) -> int:
        """Remove ``.deleted`` files whose delay has passed; returns how many segments."""
        return self._pending_deletions.run(self._clock.time_ms())

    # -- durability -------------------------------------------------------------------------

    def flush(self, up_to: int | None = None) -> None:
        """fsync segments holding offsets below ``up_to`` (default: LEO); advance the
        recovery point."""
        self._check_open()
        self.apply_background_flushes()
        target = self._next_offset if up_to is None else min(up_to, self._next_offset)
        if target <= self.recovery_point:
            return
        for segment in self.segments.between(self.recovery_point, target):
            segment.flush()
        self.recovery_point = target
        self.last_flush_ms = self._clock.time_ms()
        self.flushes += 1

    def apply_background_flushes(self) -> None:
        """Move the recovery point past what the background writer has fsynced since the last
        call (unless a truncation came in between); report a failed fsync to ``on_io_error``,
        as a failed append is."""
        if self.roll_flushes is None:
            return
        for done in self.roll_flushes.take_done():
            if done.error is not None:
                if self.on_io_error is not None:
                    self.on_io_error(done.error)
                continue
            if done.generation != self._truncations or done.up_to <= self.recovery_point:
                continue
            self.recovery_point = done.up_to
            for records, size in done.sizes:
                records.flushed_size = max(records.flushed_size, size)

    def flush_if_due(self) -> bool:
        """The ``flush.ms`` rule, for the owner's periodic check."""
        if self._clock.time_ms() - self.last_flush_ms >= self.config.flush_ms:
            self.flush()
            return True
        return False

    # -- lifecycle --------------------------------------------------------------------------

    def close(self) -> None:
        """Clean close: snapshot producer state, close segments (trimming indexes and files)."""
        if self._closed:
            return
        self.producer_state.update_map_end_offset(self._next_offset)
        self.producer_state.take_snapshot()
        self.flush()
        for segment in self.segments:
            segment.close()
        self._pending_deletions.close_handlers()
        self._closed = True

    def drop_unflushed(self) -> None:
        """Lose every byte not yet fsynced, as a power loss would (the simulation's crash).

        Indexes and checkpoints are left as they are: recovery must cope with that.
        """
        for segment in self.segments:
            if segment.log.closed:
                continue
            if segment.log.size > segment.log.flushed_size:
                segment.log.truncate_to(segment.log.flushed_size)
            segment.txn_index.drop_unflushed()

    def close_handlers(self) -> None:
        """Close file handles without flushing (a crash, in tests and the simulation)."""
        for segment in self.segments:
            segment.close_handlers()
        self._closed = True

    def delete(self) -> None:
        """Remove the whole partition directory."""
        self.close_handlers()
        shutil.rmtree(self.dir, ignore_errors=True)

    def rename_dir(self, new_dir: Path) -> None:
        self.dir.rename(new_dir)
        self.dir = new_dir

    def _check_open(self) -> None:
        if self._closed:
            raise KafkaStorageError(f"log {self.topic_partition} in {self.dir} is closed")
