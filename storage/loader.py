"""Loading a log from disk, and recovering it after an unclean shutdown (Kafka's LogLoader).

The passes, in order:

1. Remove temporary files: ``.deleted`` (deletion was decided), ``.cleaned`` (a compaction
   that never finished; the old segments are intact) and orphan index files; collect ``.swap``.
2. Complete interrupted swaps: a ``.swap`` segment is whole (it was flushed before the rename),
   so segments it overlaps are dropped and it takes its final name.
3. Open every segment; an index that is missing or fails its sanity check is rebuilt.
   A segment not re-read by pass 4 has its first entry checked against its file name: one
   below the segment's base offset is misplaced, and the segment is recovered.
4. After an unclean shutdown (no clean-shutdown marker), re-read every segment from the one
   holding the recovery point: validate each entry (size, checksum, offsets), rebuild indexes,
   the leader-epoch cache and producer state; truncate at the first invalid entry and delete
   every later segment. What was truncated is logged. Logs written before Kafka 0.11 (v0/v1
   messages, no ``.timeindex``) are read, indexed and kept as they are. Each recovered
   segment's ``.txnindex`` is rebuilt too (Kafka's ``recoverSegment``): a producer state is
   brought up to the segment's base offset (newest snapshot at or below it, then the batches
   after it replayed, markers completing transactions), then the segment's batches update it
   and every ABORT that completes a transaction is written to the index again.
4b. Segments in order: one that begins before the previous one ends is misplaced (its offsets
   would be served twice, or by the wrong segment): it and every later segment are deleted,
   as a truncation. A gap between segments is logged as a warning unless the log is compacted.
5. A log that ends below its checkpointed log start offset is emptied and restarts there.
6. No segment left: create an empty active one at the log start offset.
7. The recovery point becomes the log end after a clean shutdown, else the smaller of the
   checkpoint and the log end; the active segment's indexes grow back to full size; the epoch
   cache and producer state are cut to the log's range.

Offset holes and misplaced batches (issue 20, item 6): Kafka's recovery treats a batch it cannot
place (below its segment's base offset: ``LogSegment.ensureOffsetInRange``) as corruption and
truncates there; the replicas fill the log back from the leader. We do the same for every kind
of misplacement (below the base, overlapping or going back from the previous batch, a segment
beginning inside the previous one): they are truncation points, exactly like a bad CRC, so
nothing below the first bad batch is ever lost and no offset is served twice or from the wrong
place. Gaps (offsets missing between two batches or two segments, or a segment whose first batch
starts above its file name) are only *warned* about, never truncated or refused: the cleaner
makes them legitimately in compacted logs (and a log compacted once keeps them if its policy is
later changed), so a gap alone cannot prove a missing segment; on a log that is not compacted the
warning names the missing range. ``verify-log`` reports both kinds. Checks that need every
batch header (a batch in the middle of a cleanly closed segment) are recovery's and
``verify-log``'s: a clean start reads no more than each segment's first and last batches, as
Kafka's does.
"""

from __future__ import annotations

import logging
import random
from dataclasses import dataclass
from pathlib import Path

from kafkasim.common.clock import Clock
from kafkasim.common.errors import CorruptIndexError, CorruptRecordError
from kafkasim.storage import file_names
from kafkasim.storage.config import LogConfig
from kafkasim.storage.epoch_cache import LeaderEpochFileCache
from kafkasim.storage.log_transactions import apply_batch, complete_txns
from kafkasim.storage.producer_state import AppendOrigin, ProducerStateManager
from kafkasim.storage.records.batch import BatchHeader
from kafkasim.storage.segment import LogSegment, new_segment
from kafkasim.storage.segments import LogSegments

logger = logging.getLogger(__name__)

_SEGMENT_FILES = (
    file_names.log_file,
    file_names.index_file,
    file_names.time_index_file,
    file_names.txn_index_file,
)


@dataclass(frozen=True, slots=True)
class LoadedLog:
    segments: LogSegments
    log_start_offset: int
    recovery_point: int
    next_offset: int
    truncated_bytes: int


def _open_segment(
    dir_: Path, base: int, config: LogConfig, clock: Clock, suffix: str = ""
) -> LogSegment:
    return LogSegment.open(
        dir_,
        base,
        index_interval_bytes=config.index_interval_bytes,
        max_index_size=config.segment_index_bytes,
        clock=clock,
        file_suffix=suffix,
    )


def load_log(
    dir_: Path,
    config: LogConfig,
    clock: Clock,
    *,
    recovery_point: int,
    log_start_offset: int,
    had_clean_shutdown: bool,
    epoch_cache: LeaderEpochFileCache,
    producer_state: ProducerStateManager,
) -> LoadedLog:
    # Pass 1: temporary files.
    swap_bases = _remove_temp_files_and_collect_swaps(dir_)

    # Pass 2: complete interrupted swaps (the cleaner's crash-safe replace).
    for base in swap_bases:
        _complete_swap(dir_, base, config, clock)

    # Pass 3: open segments; note those whose indexes cannot be trusted. Segments that pass 4
    # re-reads anyway (from the one holding the recovery point) are not checked here: after a
    # crash their indexes are expected to be stale.
    segments = LogSegments()
    needs_rebuild: set[int] = set()
    log_paths = sorted(dir_.glob(f"*{file_names.LOG_SUFFIX}"))
    bases = [file_names.offset_from_file_name(p.name) for p in log_paths]
    recover_from = (
        max([b for b in bases if b <= max(recovery_point, 0)], default=0)
        if not had_clean_shutdown
        else None
    )
    for log_path in log_paths:
        base = file_names.offset_from_file_name(log_path.name)
        missing = [
            p.name
            for p in (file_names.index_file(dir_, base), file_names.time_index_file(dir_, base))
            if not p.exists()
        ]
        segment = _open_segment(dir_, base, config, clock)
        if recover_from is not None and base >= recover_from:
            segments.add(segment)
            continue
        if missing:
            logger.warning(
                "%s: %s missing; rebuilding the indexes", dir_.name, " and ".join(missing)
            )
            needs_rebuild.add(base)
            segments.add(segment)
            continue
        try:
            segment.sanity_check()
        except CorruptIndexError as e:
            logger.warning("%s: %s; rebuilding the indexes", dir_.name, e)
            needs_rebuild.add(base)
        if base not in needs_rebuild and _misplaced_start(dir_.name, segment, config.compact):
            needs_rebuild.add(base)
        segments.add(segment)

    # Pass 4: recovery after an unclean shutdown (and of any segment with a bad index). A
    # rebuild that finds a bad batch truncates like recovery does: nothing after it survives,
    # or the log would have a hole where the torn tail was.
    truncated_total = 0
    to_recover = segments.from_offset(max(recovery_point, 0)) if not had_clean_shutdown else []
    to_recover = sorted(
        {*to_recover, *(s for s in segments if s.base_offset in needs_rebuild)},
        key=lambda s: s.base_offset,
    )
    replay = ProducerStateManager(dir_)
    replayed = False
    first_base = segments.first.base_offset if segments.first else 0
    for segment in to_recover:
        # This producer state serves the transaction indexes only; the log's own is pass 7's.
        if not replayed or replay.map_end_offset > segment.base_offset:
            start = max(log_start_offset, first_base)
            replay.load_from_latest_snapshot(start, segment.base_offset)
            replayed = True
        rebuild_producer_state(replay, segments, segment.base_offset)
        truncated = segment.recover(replay, epoch_cache, warn_on_gaps=not config.compact)
        if truncated > 0:
            truncated_total += truncated
            later = [s for s in segments if s.base_offset > segment.base_offset]
            logger.warning(
                "%s: recovery truncated %d invalid bytes from segment %d; deleting %d later "
                "segment(s)",
                dir_.name,
                truncated,
                segment.base_offset,
                len(later),
            )
            for other in later:
                segments.remove(other.base_offset)
                other.close_handlers()
                other.delete_if_exists()
            break

    # Pass 4b: segments that begin before the previous one ends; gaps between segments.
    truncated_total += _check_segment_order(dir_.name, segments, compact=config.compact)

    # Pass 5: a log that ends below its log start offset restarts there.
    next_offset = segments.active.read_next_offset() if segments else log_start_offset
    if segments and next_offset < log_start_offset:
        logger.warning(
            "%s: log end offset %d is below the log start offset %d; deleting all segments",
            dir_.name,
            next_offset,
            log_start_offset,
        )
        for segment in segments.clear():
            segment.close_handlers()
            segment.delete_if_exists()
        epoch_cache.clear_and_flush()

    # Pass 6: always one active segment.
    if not segments:
        start_offset = max(log_start_offset, 0)
        segments.add(new_segment(dir_, start_offset, config, clock, random.Random(start_offset)))
        next_offset = start_offset
    else:
        next_offset = segments.active.read_next_offset()

    # Pass 7: recovery point, active indexes, epoch cache and producer state within range.
    first_base = segments.first.base_offset if segments.first else 0
    log_start = max(log_start_offset, first_base)
    new_recovery_point = next_offset if had_clean_shutdown else min(recovery_point, next_offset)
    for segment in segments:
        if segment is not segments.active:
            segment.make_read_only()
    segments.active.make_active(config.segment_index_bytes)
    epoch_cache.truncate_from_end(next_offset)
    epoch_cache.truncate_from_start(log_start)
    _load_producer_state(producer_state, segments, log_start, next_offset, clock)
    return LoadedLog(
        segments, log_start, max(new_recovery_point, log_start), next_offset, truncated_total
    )


def _misplaced_start(name: str, segment: LogSegment, compact: bool) -> bool:
    """Whether a segment's first entry is below its base offset (then it must be recovered);
    a first entry above it is a gap, warned about on a log that is not compacted."""
    try:
        header = segment.first_entry()
        segment.read_next_offset()  # the tail after the last index entry must read, too
    except CorruptRecordError as e:
        logger.warning("%s: %s: %s; recovering the segment", name, segment.log.path.name, e)
        return True
    if header is None:
        return False
    # A v0/v1 wrapper's first offset needs decompression: its last one is checked instead.
    first = header.base_offset if isinstance(header, BatchHeader) else header.last_offset
    if first < segment.base_offset:
        logger.warning(
            "%s: segment %d begins with offset %d, below its base offset (misplaced batch); "
            "recovering the segment",
            name,
            segment.base_offset,
            first,
        )
        return True
    if first > segment.base_offset and not compact and isinstance(header, BatchHeader):
        logger.warning(
            "%s: offsets %d..%d are missing at the start of segment %d",
            name,
            segment.base_offset,
            first - 1,
            segment.base_offset,
        )
    return False


def _check_segment_order(name: str, segments: LogSegments, *, compact: bool) -> int:
    """Pass 4b: delete, from the first segment that begins before its predecessor ends, every
    segment (returns the bytes removed); warn about gaps between segments (not compacted)."""
    previous: LogSegment | None = None
    previous_end = 0
    for segment in segments:
        end = segment.read_next_offset()
        if previous is not None and segment.base_offset < previous_end:
            later = [s for s in segments if s.base_offset >= segment.base_offset]
            removed = sum(s.size for s in later)
            logger.warning(
                "%s: segment %d begins before segment %d ends (at %d): misplaced; deleting "
                "it and %d later segment(s) (%d bytes)",
                name,
                segment.base_offset,
                previous.base_offset,
                previous_end - 1,
                len(later) - 1,
                removed,
            )
            for other in later:
                segments.remove(other.base_offset)
                other.close_handlers()
                other.delete_if_exists()
            return removed
        if previous is not None and segment.base_offset > previous_end and not compact:
            logger.warning(
                "%s: offsets %d..%d are missing between segments %d and %d (a deleted segment?)",
                name,
                previous_end,
                segment.base_offset - 1,
                previous.base_offset,
                segment.base_offset,
            )
        previous, previous_end = segment, end
    return 0


def _remove_temp_files_and_collect_swaps(dir_: Path) -> list[int]:
    swaps: set[int] = set()
    for path in sorted(dir_.iterdir()):
        name = path.name
        if not path.is_file():
            continue
        if name.endswith(file_names.DELETED_SUFFIX) or name.endswith(file_names.CLEANED_SUFFIX):
            path.unlink()
        elif name.endswith(file_names.SWAP_SUFFIX):
            if ".log" in name:
                swaps.add(file_names.offset_from_file_name(name))
            elif file_names.TXN_INDEX_SUFFIX not in name:
                # Swap offset and time indexes are rebuilt from the swap log; its transaction
                # index was flushed before the swap began and cannot be (no producer state).
                path.unlink()
        elif name.endswith(
            (file_names.INDEX_SUFFIX, file_names.TIME_INDEX_SUFFIX, file_names.TXN_INDEX_SUFFIX)
        ):
            base = file_names.offset_from_file_name(name)
            if not file_names.log_file(dir_, base).exists():
                logger.info("%s: removing orphan index %s", dir_.name, name)
                path.unlink()
    return sorted(swaps)


def _complete_swap(dir_: Path, base: int, config: LogConfig, clock: Clock) -> None:
    swap = _open_segment(dir_, base, config, clock, suffix=file_names.SWAP_SUFFIX)
    swap.recover()
    end = swap.read_next_offset()
    swap.close()
    for log_path in sorted(dir_.glob(f"*{file_names.LOG_SUFFIX}")):
        other = file_names.offset_from_file_name(log_path.name)
        if base <= other < end:
            logger.info("%s: completing swap: dropping segment %d", dir_.name, other)
            for make in _SEGMENT_FILES:
                make(dir_, other).unlink(missing_ok=True)
    for make in _SEGMENT_FILES:
        src = make(dir_, base, file_names.SWAP_SUFFIX)
        if src.exists():
            src.rename(make(dir_, base))


def _load_producer_state(
    producer_state: ProducerStateManager,
    segments: LogSegments,
    log_start: int,
    next_offset: int,
    clock: Clock,
) -> None:
    producer_state.truncate_snapshots(next_offset)
    producer_state.load_from_latest_snapshot(log_start, next_offset)
    rebuild_producer_state(producer_state, segments, next_offset)
    producer_state.remove_expired_producers(clock.time_ms())


def rebuild_producer_state(
    producer_state: ProducerStateManager, segments: LogSegments, log_end_offset: int
) -> None:
    """Replay the batches from the state's map end offset up to ``log_end_offset`` into
    producer state (Kafka's ``rebuildProducerState``): headers only, except a marker's one
    record; markers complete their transactions (the indexes already hold the aborted ones)."""
    start = producer_state.map_end_offset
    for segment in segments.from_offset(start):
        if segment.base_offset >= log_end_offset:
            break
        position = segment.offset_index.lookup(start).position if start > segment.base_offset else 0
        for batch_position, header in segment.log.batch_headers(position):
            if header.last_offset >= log_end_offset:
                break
            # Legacy (v0/v1) messages carry no producer state, as in Kafka.
            if header.last_offset < start or not isinstance(header, BatchHeader):
                continue
            if header.producer_id < 0:
                continue
            batch = (
                segment.log.read(batch_position, header.size_in_bytes) if header.is_control else b""
            )
            completed = apply_batch(
                producer_state,
                header,
                batch,
                base_offset=header.base_offset,
                last_offset=header.last_offset,
                origin=AppendOrigin.REPLICATION,
            )
            if completed is not None:
                complete_txns(producer_state, None, (completed,))
    producer_state.update_map_end_offset(log_end_offset)
