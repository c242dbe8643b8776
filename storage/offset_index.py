"""The offset index (``.index``): a sparse map from offsets to byte positions in a ``.log``."""

from __future__ import annotations

import struct
from typing import ClassVar, NamedTuple

from kafkasim.common.errors import CorruptIndexError, InvalidOffsetError
from kafkasim.common.sentinels import INT32_MAX
from kafkasim.storage.index import AbstractIndex

_ENTRY = struct.Struct(">ii")
_INT32 = struct.Struct(">i")
_OFFSET_AT = 0
_POSITION_AT = 4


class OffsetPosition(NamedTuple):
    """An offset and the byte position in the segment's log of the batch that holds it."""

    offset: int
    position: int


class OffsetIndex(AbstractIndex):
    """Maps offsets of one segment to byte positions in its log file; sparse.

    Byte format: 8-byte entries, big-endian: int32 ``offset - base_offset``, then int32 byte
    position of a batch in the segment's ``.log``. The segment indexes a batch's last offset at
    the batch's start position, roughly every ``index.interval.bytes``.

    Invariant: offsets strictly increase by slot, every offset is >= ``base_offset``, and so
    (for entries written by a segment) do positions. ``lookup(o)`` answers with the greatest
    entry whose offset is <= ``o``; the reader scans the log forward from its position.

    Thread-safety: none. The log serialises every access to a segment and its indexes.

    Crash story: no checksum; after an unclean shutdown the loader rebuilds the index from the
    log. ``sanity_check()`` catches a wrong file length or a last offset below the base offset.
    """

    entry_size: ClassVar[int] = _ENTRY.size
    _last_offset: int | None = None
    """The last entry's offset once read or appended (Kafka's ``_lastOffset``); None after
    truncation. (Only the offset: an append, once per log append, builds no tuple.)"""

    def lookup(self, target_offset: int) -> OffsetPosition:
        """The greatest entry with offset <= ``target_offset``; ``(base_offset, 0)`` if none."""
        relative = target_offset - self.base_offset
        slot = self._largest_lower_bound_slot(relative, _INT32, _OFFSET_AT)
        if slot == -1:
            return OffsetPosition(self.base_offset, 0)
        return self._parse(slot)

    def fetch_upper_bound_offset(
        self, fetch_offset: OffsetPosition, fetch_size: int
    ) -> OffsetPosition | None:
        """The first entry at or past ``fetch_offset.position + fetch_size`` bytes, if any.

        Its offset is sure to lie outside a fetch of ``fetch_size`` bytes from ``fetch_offset``
        (not necessarily the smallest such offset).
        """
        target = fetch_offset.position + fetch_size
        slot = self._smallest_upper_bound_slot(target, _INT32, _POSITION_AT)
        if slot == -1:
            return None
        return self._parse(slot)

    def entry(self, n: int) -> OffsetPosition:
        """Entry number ``n`` (0-based); IndexError if there is no such entry."""
        self._require_open()
        self._check_slot(n)
        return self._parse(n)

    @property
    def last_offset(self) -> int:
        """The offset of the last entry, or ``base_offset`` if the index is empty."""
        if self._entries == 0:
            return self.base_offset
        last = self._last_offset
        if last is None:
            last = self._last_offset = self._parse(self._entries - 1).offset
        return last

    def append(self, offset: int, position: int) -> None:
        """Add ``offset -> position``; ``offset`` must exceed every offset already indexed.

        InvalidOffsetError if the index is full, the offset is not larger than the last one, or
        it does not fit an int32 relative to ``base_offset``.
        """
        # Once per append of the log: the checks are inlined, their helpers called only to
        # raise (each call costs about what the whole entry write does).
        if self._closed or not self._writable:
            self._require_open()
            self._require_writable("append")
        entries = self._entries
        if entries >= self._max_entries:
            raise InvalidOffsetError(
                f"attempt to append offset {offset} to full index {self.path} "
                f"({entries} of {self.max_entries} entries)"
            )
        last = self._last_offset
        if entries != 0 and offset <= (self.last_offset if last is None else last):
            raise InvalidOffsetError(
                f"attempt to append offset {offset} at slot {entries} of {self.path}, no larger "
                f"than the last offset appended ({self.last_offset})"
            )
        relative = offset - self._base_offset
        if not 0 <= relative <= INT32_MAX:
            self.relative_offset(offset)  # raises, naming the offset and the index
        if not 0 <= position <= INT32_MAX:
            raise ValueError(f"position {position} for offset {offset} does not fit an int32")
        _ENTRY.pack_into(self._view(), entries * self.entry_size, relative, position)
        self._entries = entries + 1
        self._last_offset = offset

    def truncate_to(self, offset: int) -> None:
        """Remove every entry whose offset is >= ``offset``; an exact hit goes too."""
        # The first slot with offset >= target is one past the last slot with offset < target.
        relative = offset - self.base_offset
        keep = self._largest_lower_bound_slot(relative - 1, _INT32, _OFFSET_AT) + 1
        self._truncate_to_entries(keep)

    def _truncate_to_entries(self, entries: int) -> None:
        super()._truncate_to_entries(entries)
        self._last_offset = None

    def sanity_check(self) -> None:
        """CorruptIndexError if the last offset is below the base or the length is not n * 8."""
        if self.entries != 0 and self.last_offset < self.base_offset:
            raise CorruptIndexError(
                f"corrupt offset index {self.path}: it has {self.entries} entries but the last "
                f"offset {self.last_offset} is less than the base offset {self.base_offset}"
            )
        if self.length_bytes % self.entry_size != 0:
            raise CorruptIndexError(
                f"corrupt offset index {self.path}: its length {self.length_bytes} bytes is not "
                f"a multiple of the {self.entry_size}-byte entry size"
            )

    def _parse(self, slot: int) -> OffsetPosition:
        relative, position = _ENTRY.unpack_from(self._view(), slot * self.entry_size)
        return OffsetPosition(self.base_offset + relative, position)
