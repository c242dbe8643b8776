"""The time index (``.timeindex``): a sparse map from timestamps to offsets of one segment."""

from __future__ import annotations

import struct
from typing import ClassVar, NamedTuple

from kafkasim.common.errors import CorruptIndexError, InvalidOffsetError
from kafkasim.common.sentinels import INT32_MAX, NO_TIMESTAMP
from kafkasim.storage.index import AbstractIndex

_ENTRY = struct.Struct(">qi")
_INT64 = struct.Struct(">q")
_INT32 = struct.Struct(">i")
_TIMESTAMP_AT = 0
_OFFSET_AT = 8


class TimestampOffset(NamedTuple):
    """A timestamp and the offset at or after which later timestamps can be found."""

    timestamp: int
    offset: int


class TimeIndex(AbstractIndex):
    """Maps timestamps to offsets of one segment; sparse.

    Byte format: 12-byte entries, big-endian: int64 timestamp (ms), then int32
    ``offset - base_offset``. Entry ``(T, O)`` says that T is the largest timestamp seen before
    (or at) offset O: any record with a timestamp greater than T comes after O.

    Invariant: timestamps strictly increase by slot (``maybe_append`` only appends a larger
    one), offsets never decrease, and every offset is >= ``base_offset``. The last slot is
    reserved for the entry written when the segment rolls or closes (see ``is_full``).

    Thread-safety: none. The log serialises every access to a segment and its indexes.

    Crash story: no checksum; after an unclean shutdown the loader rebuilds the index from the
    log. ``sanity_check()`` catches a wrong file length, a last timestamp below the first one
    and a last offset below the base offset.
    """

    entry_size: ClassVar[int] = _ENTRY.size
    _last: TimestampOffset | None = None
    """The last entry once read or appended (Kafka's ``_lastEntry``); None after truncation."""

    def is_full(self) -> bool:
        """True when only the reserved last slot is left."""
        # The last slot is kept for the roll/close entry (``skip_full_check=True``): a segment
        # that rolls because this index filled up must still record its final max timestamp.
        return self._entries >= self._max_entries - 1

    @property
    def last_entry(self) -> TimestampOffset:
        """The last entry, or ``(NO_TIMESTAMP, base_offset)`` if the index is empty."""
        if self._entries == 0:
            return TimestampOffset(NO_TIMESTAMP, self.base_offset)
        last = self._last
        if last is None:
            last = self._last = self._parse(self._entries - 1)
        return last

    def entry(self, n: int) -> TimestampOffset:
        """Entry number ``n`` (0-based); IndexError if there is no such entry."""
        self._require_open()
        self._check_slot(n)
        return self._parse(n)

    def lookup(self, timestamp: int) -> TimestampOffset:
        """The entry with the largest timestamp <= ``timestamp``; ``(-1, base_offset)`` if none."""
        slot = self._largest_lower_bound_slot(timestamp, _INT64, _TIMESTAMP_AT)
        if slot == -1:
            return TimestampOffset(NO_TIMESTAMP, self.base_offset)
        return self._parse(slot)

    def maybe_append(self, timestamp: int, offset: int, skip_full_check: bool = False) -> None:
        """Append ``(timestamp, offset)`` if ``timestamp`` is larger than the last timestamp.

        An equal timestamp is ignored: the roll and close paths re-offer the last entry.
        ``skip_full_check`` lets that roll/close entry use the reserved last slot.
        InvalidOffsetError if the index is full, or the offset or the timestamp goes backwards.
        """
        # Once per append of the log: the checks are inlined, their helpers called only to
        # raise (each call costs about what the whole entry write does).
        if self._closed or not self._writable:
            self._require_open()
            self._require_writable("append")
        entries = self._entries
        if not skip_full_check and entries >= self._max_entries - 1:  # is_full()
            raise InvalidOffsetError(
                f"attempt to append ({timestamp}, {offset}) to full time index {self.path} "
                f"({entries} of {self.max_entries} entries, the last one reserved)"
            )
        last = self._last or self.last_entry  # the cached entry without a property call
        if entries != 0 and offset < last.offset:
            raise InvalidOffsetError(
                f"attempt to append offset {offset} at slot {entries} of {self.path}, smaller "
                f"than the last offset appended ({last.offset})"
            )
        if entries != 0 and timestamp < last.timestamp:
            raise InvalidOffsetError(
                f"attempt to append timestamp {timestamp} at slot {entries} of {self.path}, "
                f"smaller than the last timestamp appended ({last.timestamp})"
            )
        if timestamp <= last.timestamp:
            return
        relative = offset - self._base_offset
        if not 0 <= relative <= INT32_MAX:
            self.relative_offset(offset)  # raises, naming the offset and the index
        if entries >= self._max_entries:
            raise InvalidOffsetError(
                f"attempt to append ({timestamp}, {offset}) to {self.path}: no slot left, "
                f"not even the reserved one ({entries} entries)"
            )
        _ENTRY.pack_into(self._view(), entries * self.entry_size, timestamp, relative)
        self._entries = entries + 1
        self._last = TimestampOffset(timestamp, offset)

    def truncate_to(self, offset: int) -> None:
        """Remove every entry whose offset is >= ``offset``; an exact hit goes too."""
        # Offsets may repeat here (a larger timestamp at the same offset), so find the first
        # slot with offset >= target as one past the last slot with offset < target.
        relative = offset - self.base_offset
        keep = self._largest_lower_bound_slot(relative - 1, _INT32, _OFFSET_AT) + 1
        self._truncate_to_entries(keep)

    def _truncate_to_entries(self, entries: int) -> None:
        super()._truncate_to_entries(entries)
        self._last = None

    def sanity_check(self) -> None:
        """CorruptIndexError on decreasing timestamps, an offset below base or a bad length."""
        if self.entries != 0:
            first_timestamp = _INT64.unpack_from(self._view(), _TIMESTAMP_AT)[0]
            last = self.last_entry
            if last.timestamp < first_timestamp:
                raise CorruptIndexError(
                    f"corrupt time index {self.path}: it has {self.entries} entries but the "
                    f"last timestamp {last.timestamp} is less than the first timestamp "
                    f"{first_timestamp}"
                )
            if last.offset < self.base_offset:
                raise CorruptIndexError(
                    f"corrupt time index {self.path}: it has {self.entries} entries but the "
                    f"last offset {last.offset} is less than the base offset {self.base_offset}"
                )
        if self.length_bytes % self.entry_size != 0:
            raise CorruptIndexError(
                f"corrupt time index {self.path}: its length {self.length_bytes} bytes is not "
                f"a multiple of the {self.entry_size}-byte entry size"
            )

    def _parse(self, slot: int) -> TimestampOffset:
        timestamp, relative = _ENTRY.unpack_from(self._view(), slot * self.entry_size)
        return TimestampOffset(timestamp, self.base_offset + relative)
