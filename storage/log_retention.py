"""Which old segments of a partition log retention deletes, and their delayed removal.

Kafka's ``UnifiedLog.deleteOldSegments``: by time (``retention.ms`` against a segment's
largest timestamp), by size (``retention.bytes``: the oldest segments while the log stays at
or above it without them) and by the log start offset (segments wholly below it), oldest first,
only segments wholly below the high watermark, and never an empty active segment. Deleted
segments are renamed ``.deleted`` and removed after ``file.delete.delay.ms``
(:class:`PendingDeletions`). :class:`~storage.log.Log` decides when and moves its offsets.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from kafkasim.storage import file_names
from kafkasim.storage.segment import LogSegment
from kafkasim.storage.segments import LogSegments

SegmentPredicate = Callable[[LogSegment, "LogSegment | None"], bool]
"""Whether a segment (given the next one, if any) may go."""


def breached_time_retention(retention_ms: int, now_ms: int) -> SegmentPredicate:
    """Segments whose largest timestamp is older than ``retention.ms`` (-1: keep forever)."""

    def breached(segment: LogSegment, _next: LogSegment | None) -> bool:
        return retention_ms >= 0 and now_ms - segment.largest_timestamp > retention_ms

    return breached


def breached_size_retention(retention_bytes: int, total: int) -> SegmentPredicate:
    """The oldest segments while the log stays at or above ``retention.bytes`` without them
    (-1: no limit)."""
    excess = total - retention_bytes if 0 <= retention_bytes <= total else -1

    def breached(segment: LogSegment, _next: LogSegment | None) -> bool:
        nonlocal excess
        if excess - segment.size >= 0:
            excess -= segment.size
            return True
        return False

    return breached


def below_log_start_offset(log_start_offset: int) -> SegmentPredicate:
    """Segments whose every offset is below the log start offset (the next one starts at or
    below it)."""

    def below(_segment: LogSegment, nxt: LogSegment | None) -> bool:
        return nxt is not None and nxt.base_offset <= log_start_offset

    return below


def deletable_segments(
    segments: LogSegments,
    predicate: SegmentPredicate,
    *,
    high_watermark: int,
    log_end_offset: int,
) -> list[LogSegment]:
    """The oldest segments, in order, that ``predicate`` lets go, up to the first it keeps:
    each wholly below the high watermark, and never the last segment when it is empty."""
    deletable: list[LogSegment] = []
    for segment in segments:
        nxt = segments.higher(segment.base_offset)
        upper_bound = nxt.base_offset if nxt is not None else log_end_offset
        last_and_empty = nxt is None and segment.size == 0
        if high_watermark >= upper_bound and not last_and_empty and predicate(segment, nxt):
            deletable.append(segment)
        else:
            break
    return deletable


class PendingDeletions:
    """Segments renamed ``.deleted``, each with the time after which its files go."""

    def __init__(self) -> None:
        self._due: list[tuple[int, LogSegment]] = []

    def retire(self, segment: LogSegment, due_ms: int) -> None:
        """Close ``segment`` (already out of the segment map), rename its files ``.deleted``
        and remove them at ``due_ms``."""
        segment.close_handlers()
        segment.change_file_suffixes("", file_names.DELETED_SUFFIX)
        self._due.append((due_ms, segment))

    def run(self, now_ms: int) -> int:
        """Remove the files whose delay has passed; returns how many segments."""
        due = [s for t, s in self._due if t <= now_ms]
        self._due = [(t, s) for t, s in self._due if t > now_ms]
        for segment in due:
            segment.delete_if_exists()
        return len(due)

    def close_handlers(self) -> None:
        for _, segment in self._due:
            segment.close_handlers()


def swap_in_cleaned(
    segments: LogSegments,
    new_segment: LogSegment,
    old_segments: Sequence[LogSegment],
    retire: Callable[[LogSegment], None],
) -> None:
    """Swap a cleaned segment in for the old ones (crash-safe via ``.swap``).

    ``new_segment`` arrives with ``.cleaned`` files. Order: rename them to ``.swap``; retire the
    old segments (``.deleted``); rename the swap files to their final names. A crash at any
    point is completed by the loader (a ``.swap`` wins over what it overlaps).
    """
    new_segment.change_file_suffixes(file_names.CLEANED_SUFFIX, file_names.SWAP_SUFFIX)
    for old in old_segments:
        if old.base_offset != new_segment.base_offset:
            segments.remove(old.base_offset)
        retire(old)
    new_segment.change_file_suffixes(file_names.SWAP_SUFFIX, "")
    segments.add(new_segment)
