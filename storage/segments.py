"""The ordered map of a log's segments by base offset (Kafka's ``LogSegments``).

Invariant: base offsets strictly increase; the last segment is the active one. Floor and
higher lookups are binary searches over the base offsets. Not thread-safe.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator

from kafkasim.storage.segment import LogSegment


class LogSegments:
    def __init__(self) -> None:
        self._bases: list[int] = []
        self._segments: list[LogSegment] = []

    def add(self, segment: LogSegment) -> LogSegment | None:
        """Insert (or replace the segment with the same base offset); returns the replaced one."""
        i = bisect.bisect_left(self._bases, segment.base_offset)
        if i < len(self._bases) and self._bases[i] == segment.base_offset:
            old = self._segments[i]
            self._segments[i] = segment
            return old
        self._bases.insert(i, segment.base_offset)
        self._segments.insert(i, segment)
        return None

    def remove(self, base_offset: int) -> None:
        i = bisect.bisect_left(self._bases, base_offset)
        if i < len(self._bases) and self._bases[i] == base_offset:
            del self._bases[i]
            del self._segments[i]

    def clear(self) -> list[LogSegment]:
        removed = self._segments
        self._bases, self._segments = [], []
        return removed

    def truncate_to(self, offset: int) -> None:
        """Delete the segments starting above ``offset`` and truncate the (then) active one to
        it (Kafka's ``LocalLog.truncateTo``); the log moves its offsets."""
        for segment in [s for s in self._segments if s.base_offset > offset]:
            self.remove(segment.base_offset)
            segment.close_handlers()
            segment.delete_if_exists()
        self.active.truncate_to(offset)

    def delete_all(self) -> None:
        """Remove every segment from the map and delete its files."""
        for segment in self.clear():
            segment.close_handlers()
            segment.delete_if_exists()

    def __len__(self) -> int:
        return len(self._segments)

    def __iter__(self) -> Iterator[LogSegment]:
        return iter(list(self._segments))

    def __bool__(self) -> bool:
        return bool(self._segments)

    def get(self, base_offset: int) -> LogSegment | None:
        i = bisect.bisect_left(self._bases, base_offset)
        if i < len(self._bases) and self._bases[i] == base_offset:
            return self._segments[i]
        return None

    @property
    def first(self) -> LogSegment | None:
        return self._segments[0] if self._segments else None

    @property
    def last(self) -> LogSegment | None:
        return self._segments[-1] if self._segments else None

    @property
    def active(self) -> LogSegment:
        if not self._segments:
            raise LookupError("log has no segments")
        return self._segments[-1]

    def floor(self, offset: int) -> LogSegment | None:
        """The segment with the greatest base offset ≤ ``offset``."""
        i = bisect.bisect_right(self._bases, offset) - 1
        return self._segments[i] if i >= 0 else None

    def higher(self, base_offset: int) -> LogSegment | None:
        """The segment after the one with this base offset."""
        i = bisect.bisect_right(self._bases, base_offset)
        return self._segments[i] if i < len(self._segments) else None

    def from_offset(self, offset: int) -> list[LogSegment]:
        """Segments that may hold offsets ≥ ``offset`` (the floor segment onwards)."""
        i = max(bisect.bisect_right(self._bases, offset) - 1, 0)
        return self._segments[i:]

    def between(self, start: int, end: int) -> list[LogSegment]:
        """Segments holding offsets in [start, end) (floor of start up to before end)."""
        i = max(bisect.bisect_right(self._bases, start) - 1, 0)
        j = bisect.bisect_left(self._bases, end)
        return self._segments[i:j]

    def size_in_bytes(self) -> int:
        return sum(s.size for s in self._segments)
