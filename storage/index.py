"""The memory-mapped index file shared by the offset index and the time index.

An index is a file of fixed-size, big-endian entries sorted by their key. A writable index is
preallocated to ``max_index_size`` (``segment.index.bytes``) so that appends never grow the
file; ``trim_to_valid_size()`` cuts it back to the used entries when its segment rolls or
closes, which is what lets a reopened index count its entries as ``length // entry_size``.
"""

from __future__ import annotations

import io
import mmap
import os
import struct
from abc import ABC, abstractmethod
from pathlib import Path
from types import TracebackType
from typing import ClassVar, Self

from kafkasim.common.errors import InvalidOffsetError
from kafkasim.common.sentinels import INT32_MAX

# Lookups first search the last 8 KiB of entries (Kafka's ``warmEntries``), see
# ``_largest_lower_bound_slot``.
WARM_SECTION_BYTES = 8192

_CLOSED = "index is closed"


class AbstractIndex(ABC):
    """A sorted, memory-mapped file of fixed-size entries for one log segment.

    Byte format: ``entries`` consecutive entries of ``entry_size`` bytes each, big-endian, from
    byte 0; a writable index may carry a zero-filled preallocated tail after them, which is
    not part of the index. The format of one entry belongs to the subclass.

    Invariant: ``0 <= entries <= max_entries == length_bytes // entry_size`` and entries are
    sorted by key (the subclass enforces this on append). Offsets are stored relative to
    ``base_offset`` as an int32 in ``[0, 2**31 - 1]``.

    Thread-safety: none. The log serialises every access to a segment and its indexes.

    Crash story: no checksum. A file left untrimmed by a crash reopens with every slot counted
    as an entry (zeroes after the real ones); the loader sees the unclean shutdown and rebuilds
    the index from the log (``reset()`` then appends).
    """

    entry_size: ClassVar[int]

    def __init__(
        self,
        path: Path,
        base_offset: int,
        max_index_size: int = 10 * 1024 * 1024,
        writable: bool = True,
    ) -> None:
        self._path = Path(path)
        self._base_offset = base_offset
        self._max_index_size = max_index_size
        self._writable = writable
        self._warm_entries = WARM_SECTION_BYTES // self.entry_size
        self._mmap: mmap.mmap | None = None
        self._closed = False

        flags = os.O_RDWR | os.O_CREAT if writable else os.O_RDONLY
        fd = os.open(self._path, flags, 0o644)
        try:
            length = os.fstat(fd).st_size
            preallocate = length == 0 and writable
            if preallocate:
                if max_index_size < self.entry_size:
                    raise ValueError(
                        f"invalid max index size {max_index_size} for {self._path}: "
                        f"smaller than one {self.entry_size}-byte entry"
                    )
                length = self._round_down(max_index_size)
                os.ftruncate(fd, length)
            self._length = length
            self._map(fd)
        finally:
            os.close(fd)
        self._max_entries = self._length // self.entry_size
        # A file with content is trusted to have been trimmed to its entries on roll/close.
        self._entries = 0 if preallocate else self._max_entries

    # -- properties ---------------------------------------------------------------------------

    @property
    def path(self) -> Path:
        """The index file."""
        return self._path

    @property
    def base_offset(self) -> int:
        """The base offset of the segment this index belongs to."""
        return self._base_offset

    @property
    def max_index_size(self) -> int:
        """The size in bytes a writable index is preallocated (and reset) to."""
        return self._max_index_size

    @property
    def max_entries(self) -> int:
        """How many entries the file can hold at its current length."""
        return self._max_entries

    @property
    def entries(self) -> int:
        """How many entries the index holds."""
        return self._entries

    @property
    def length_bytes(self) -> int:
        """The current size of the file in bytes (including any preallocated tail)."""
        return self._length

    @property
    def size_in_bytes(self) -> int:
        """The bytes used by entries: ``entries * entry_size``."""
        return self._entries * self.entry_size

    @property
    def writable(self) -> bool:
        """Whether the index is mapped for writing."""
        return self._writable

    @property
    def closed(self) -> bool:
        """Whether ``close()``, ``close_handler()`` or ``delete_if_exists()`` has run."""
        return self._closed

    def is_full(self) -> bool:
        """True iff there is no free slot left for an append."""
        return self._entries >= self._max_entries

    # -- offsets ------------------------------------------------------------------------------

    def relative_offset(self, offset: int) -> int:
        """``offset - base_offset``; InvalidOffsetError when it does not fit an int32 >= 0."""
        relative = offset - self._base_offset
        if relative < 0 or relative > INT32_MAX:
            raise InvalidOffsetError(
                f"offset {offset} does not fit index {self._path}: relative to base offset "
                f"{self._base_offset} it is {relative}, outside [0, {INT32_MAX}]"
            )
        return relative

    def can_append_offset(self, offset: int) -> bool:
        """Whether ``offset`` can be stored relative to ``base_offset`` in this index."""
        return 0 <= offset - self._base_offset <= INT32_MAX

    # -- size management ----------------------------------------------------------------------

    def resize(self, new_size: int) -> bool:
        """Set the file length to ``new_size`` rounded down to whole entries and remap it.

        Entries are kept; shrinking below them is an error (use ``truncate_to`` first).
        Returns whether the length changed.
        """
        self._require_open()
        self._require_writable("resize")
        rounded = self._round_down(new_size)
        if rounded < self.size_in_bytes:
            raise ValueError(
                f"cannot resize {self._path} to {rounded} bytes: its {self._entries} entries "
                f"need {self.size_in_bytes}"
            )
        if rounded == self._length:
            return False
        self._unmap()
        fd = os.open(self._path, os.O_RDWR)
        try:
            os.ftruncate(fd, rounded)
            self._length = rounded
            self._map(fd)
        finally:
            os.close(fd)
        self._max_entries = rounded // self.entry_size
        return True

    def trim_to_valid_size(self) -> None:
        """Drop the preallocated tail: resize the file to ``entries * entry_size``."""
        self.resize(self.size_in_bytes)

    def reset(self) -> None:
        """Remove every entry and resize back to ``max_index_size`` (used by recovery)."""
        self._require_writable("reset")
        self.truncate()
        self.resize(self._max_index_size)

    def truncate(self) -> None:
        """Remove every entry (the file keeps its length)."""
        self._truncate_to_entries(0)

    @abstractmethod
    def truncate_to(self, offset: int) -> None:
        """Remove every entry whose offset is >= ``offset``; a larger offset changes nothing."""

    @abstractmethod
    def sanity_check(self) -> None:
        """Raise CorruptIndexError, naming the file and the fault, if the index is corrupt."""

    # -- file lifecycle -----------------------------------------------------------------------

    def flush(self) -> None:
        """Write dirty pages of the map to disk (msync)."""
        if self._mmap is not None and self._writable:
            self._mmap.flush()

    def set_writable(self, writable: bool) -> None:
        """Remap the file for reading and writing, or for reading only."""
        self._require_open()
        if writable == self._writable:
            return
        self.flush()
        fd = os.open(self._path, os.O_RDWR if writable else os.O_RDONLY)
        try:
            self._unmap()
            self._writable = writable
            self._map(fd)
        finally:
            os.close(fd)

    def close(self) -> None:
        """Trim a writable index to its entries, then unmap it. Idempotent."""
        if self._closed:
            return
        if self._writable:
            self.trim_to_valid_size()
        self.close_handler()

    def close_handler(self) -> None:
        """Unmap without trimming (the file stays as it is). Idempotent."""
        self._unmap()
        self._closed = True

    def delete_if_exists(self) -> bool:
        """Unmap and delete the file; return whether it existed."""
        self.close_handler()
        try:
            self._path.unlink()
        except FileNotFoundError:
            return False
        return True

    def rename_to(self, path: Path) -> None:
        """Atomically rename the file; ``path`` becomes the index's path even on failure."""
        try:
            os.replace(self._path, path)
        finally:
            self._path = Path(path)

    def update_parent_dir(self, parent_dir: Path) -> None:
        """Record that the directory holding the file was moved to ``parent_dir``."""
        self._path = Path(parent_dir) / self._path.name

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(path={str(self._path)!r}, base_offset={self._base_offset}, "
            f"entries={self._entries}, max_entries={self._max_entries})"
        )

    # -- for subclasses -----------------------------------------------------------------------

    def _truncate_to_entries(self, entries: int) -> None:
        self._entries = entries

    def _view(self) -> mmap.mmap:
        """The map, for reading or writing slots below ``max_entries``."""
        if self._mmap is None:
            # Only a zero-length file has no map, and it has no slot to read or write.
            raise ValueError(f"{self._path}: {_CLOSED if self._closed else 'no entries'}")
        return self._mmap

    def _require_open(self) -> None:
        if self._closed:
            raise ValueError(f"{self._path}: {_CLOSED}")

    def _require_writable(self, action: str) -> None:
        if not self._writable:
            raise io.UnsupportedOperation(f"{self._path} is open read-only: cannot {action}")

    def _check_slot(self, n: int) -> None:
        if not 0 <= n < self._entries:
            raise IndexError(f"no entry {n} in {self._path}, which has {self._entries} entries")

    def _largest_lower_bound_slot(self, target: int, field: struct.Struct, field_at: int) -> int:
        """The last slot whose field (``field`` at byte ``field_at`` of the entry) is <= target.

        -1 if the index is empty or its first entry is already above ``target``. Fields must be
        non-decreasing by slot. Every read is a ``unpack_from`` on the map: no copy of the index.
        """
        self._require_open()
        entries = self._entries
        if entries == 0:
            return -1
        view = self._view()
        unpack = field.unpack_from
        size = self.entry_size
        # Warm section first: appends and in-sync lookups touch only the tail of the index, so
        # its pages stay in the page cache; a plain binary search over the whole file would hop
        # through pages untouched for a long time (page faults). Kafka's AbstractIndex does the
        # same with the last 8 KiB, small enough that every warm lookup touches all its pages.
        first_hot = max(0, entries - 1 - self._warm_entries)
        if unpack(view, first_hot * size + field_at)[0] <= target:
            lo, hi = first_hot, entries - 1
        elif unpack(view, field_at)[0] > target:
            return -1
        else:
            lo, hi = 0, first_hot - 1
        # Invariant: field(lo) <= target, and the answer is in [lo, hi].
        while lo < hi:
            mid = (lo + hi + 1) >> 1
            if unpack(view, mid * size + field_at)[0] <= target:
                lo = mid
            else:
                hi = mid - 1
        return lo

    def _smallest_upper_bound_slot(self, target: int, field: struct.Struct, field_at: int) -> int:
        """The first slot whose field is >= target (integer fields), or -1 if there is none."""
        slot = self._largest_lower_bound_slot(target - 1, field, field_at) + 1
        return -1 if slot == self._entries else slot

    # -- internals ----------------------------------------------------------------------------

    def _round_down(self, size: int) -> int:
        return max(0, size) // self.entry_size * self.entry_size

    def _map(self, fd: int) -> None:
        # Python cannot map a zero-length file: such an index simply has no map and no slots.
        if self._length == 0:
            self._mmap = None
            return
        access = mmap.ACCESS_WRITE if self._writable else mmap.ACCESS_READ
        self._mmap = mmap.mmap(fd, self._length, access=access)

    def _unmap(self) -> None:
        if self._mmap is not None:
            self._mmap.close()
            self._mmap = None
