"""The ``.log`` file of one segment: record batches stored back to back, exactly as received.

Format: a sequence of RecordBatch v2 batches (see ``storage.records.batch``), no file header,
no padding; a segment written before Kafka 0.11 holds v0/v1 messages instead (or before them),
which are read the same way (``storage.records.entry``) and served as they are. ``size`` is
the number of bytes in use; with ``preallocate`` the file on disk may be longer (zero-filled)
until it is trimmed on roll or close.

Invariant: bytes ``[0, size)`` hold whole batches in increasing offset order (recovery enforces
it after a crash). The offset search leans on it to remember where recent reads and searches
ended: the position right after the entry whose last offset is ``n`` is where offset ``n + 1``
is, since every entry before it ends at or below ``n``. A follower or consumer fetching where
its last fetch stopped finds its batch there without walking the index interval again (Kafka
walks it every time; the answer is the same). Appends keep these ends true; a truncation or a
new size forgets them.

Not thread-safe: the owning log serialises access. Crash story: appends are buffered by the OS
page cache until ``flush`` (fsync); a crash may lose or tear the unflushed tail, which recovery
truncates (the CRC catches torn or garbage blocks).
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import NamedTuple

from kafkasim.storage import disk_faults
from kafkasim.storage.records.batch import (
    BATCH_LENGTH_MIN,
    LAST_OFFSET_DELTA_OFFSET,
    LOG_OVERHEAD,
    MAGIC_V2,
    RECORD_BATCH_OVERHEAD,
    BatchHeader,
    TimestampType,
    decode_batch,
)
from kafkasim.storage.records.entry import (
    ENTRY_HEADER_BYTES,
    MIN_ENTRY_SIZE,
    LogEntryHeader,
    parse_entry_header,
)
from kafkasim.storage.records.legacy import decode_legacy

Buffer = bytes | bytearray | memoryview


class LogOffsetPosition(NamedTuple):
    """Where a batch sits: its last offset, its start position in the file and its size."""

    offset: int
    position: int
    size: int


class ScannedBlock(NamedTuple):
    """Bytes an offset search read (:meth:`FileRecords.locate`): ``data`` as the file held
    it from position ``start``, for the read that follows at once to take its bytes from."""

    start: int
    data: bytes


class TimestampAndOffset(NamedTuple):
    timestamp: int
    offset: int
    leader_epoch: int


_ENDS_KEPT = 16
"""Ends of reads and searches remembered per file (a partition's few readers: followers,
consumers)."""
_NOTHING_SCANNED = ScannedBlock(0, b"")
_SCAN_BLOCK_BYTES = 16 * 1024
"""Bytes read at once when walking entry headers (a few index intervals of small batches)."""
# baseOffset, batchLength, (partitionLeaderEpoch), magic, (crc, attributes), lastOffsetDelta
_V2_BOUNDS = struct.Struct(">qi4xb6xi")
assert _V2_BOUNDS.size == LAST_OFFSET_DELTA_OFFSET + 4


def _entry_header(block: memoryview, at: int) -> LogEntryHeader:
    """The header of the entry at ``at``, parsed from exactly the bytes a read of the header
    alone would return (so its checks and messages do not depend on the block around it)."""
    return parse_entry_header(block[at : at + ENTRY_HEADER_BYTES])


class FileRecords:
    """An append-only file of record batches (Kafka's ``FileRecords``)."""

    def __init__(
        self,
        path: Path,
        *,
        preallocate_bytes: int = 0,
        writable: bool = True,
    ) -> None:
        self.path = path
        flags = os.O_RDWR | os.O_CREAT if writable else os.O_RDONLY
        self._fd: int | None = os.open(path, flags, 0o644)
        length = os.fstat(self._fd).st_size
        if writable and length == 0 and preallocate_bytes > 0:
            os.posix_fallocate(self._fd, 0, preallocate_bytes)
        self._size = length
        # Bytes known to be on disk (what survives a power loss): what was there at open,
        # then whatever the last fsync covered.
        self.flushed_size = length
        self.writable = writable
        # Last offset n -> the position of the entry after the one ending at n (see the module
        # doc), for the last few reads and searches; oldest first.
        self._ends: dict[int, int] = {}

    # -- basic properties -------------------------------------------------------------------

    @property
    def size(self) -> int:
        """Bytes of batches in the file (the preallocated tail excluded once known)."""
        return self._size

    @property
    def fd(self) -> int:
        if self._fd is None:
            raise ValueError(f"{self.path} is closed")
        return self._fd

    def file_length(self) -> int:
        return os.fstat(self.fd).st_size

    def last_modified_ms(self) -> int:
        return os.fstat(self.fd).st_mtime_ns // 1_000_000

    # -- writing ----------------------------------------------------------------------------

    def append(self, chunks: Sequence[Buffer], total_bytes: int) -> int:
        """Write ``chunks`` (one or more whole batches) at the end; returns the start position.

        ``pwritev`` rather than ``write``: the file may be preallocated, and the batch header
        (rewritten offsets) goes out beside the untouched body without copying it.
        """
        position = self._size
        disk_faults.check_space(self.path)
        fd = self._fd
        if fd is None:
            fd = self.fd  # raises: closed
        written = os.pwritev(fd, chunks, position)
        while written < total_bytes:  # short writes are legal; finish the job
            joined = b"".join(bytes(c) for c in chunks)
            written += os.pwrite(fd, joined[written:], position + written)
        self._size += total_bytes
        return position

    def flush(self) -> None:
        os.fsync(self.fd)
        self.flushed_size = self._size

    def truncate_to(self, target_size: int) -> int:
        """Drop every byte from ``target_size`` on; returns the number of bytes removed."""
        if target_size < 0 or target_size > self.file_length():
            raise ValueError(
                f"cannot truncate {self.path} to {target_size}: file has {self.file_length()} bytes"
            )
        removed = self._size - target_size
        os.ftruncate(self.fd, target_size)
        self._size = target_size
        self._ends.clear()
        self.flushed_size = min(self.flushed_size, target_size)
        return max(removed, 0)

    def trim(self) -> None:
        """Cut a preallocated tail so that the file length equals ``size``."""
        if self.writable and self.file_length() != self._size:
            os.ftruncate(self.fd, self._size)

    def set_size(self, size: int) -> None:
        """Set bytes in use after recovery found where the valid batches end."""
        self._size = size
        self._ends.clear()

    # -- reading ----------------------------------------------------------------------------

    def read(self, position: int, size: int) -> bytes:
        """Up to ``size`` bytes from ``position`` (fewer at the end of the file)."""
        end = min(position + size, self._size)
        if end <= position:
            return b""
        return os.pread(self.fd, end - position, position)

    def read_entries(self, position: int, size: int, scanned: ScannedBlock | None = None) -> bytes:
        """The whole entries within ``size`` bytes from ``position`` (an entry's start): the
        longest prefix of the read that header lengths cut into whole entries. Remembers
        where they end for the next offset search (see the module doc).

        ``scanned``: what the search that found ``position`` read just before (nothing written
        since): the bytes are taken from it when it holds them all (a fetch near the log end,
        the usual case), saving a second ``pread``."""
        end = min(position + size, self._size)
        if (
            scanned is not None
            and scanned.start <= position
            and end <= scanned.start + len(scanned.data)
        ):
            data = scanned.data[position - scanned.start : max(end, position) - scanned.start]
        else:
            data = self.read(position, size)
        available = len(data)
        end = 0
        last_at = -1
        while end + LOG_OVERHEAD <= available:
            entry_size = LOG_OVERHEAD + int.from_bytes(data[end + 8 : end + 12], "big", signed=True)
            if entry_size < MIN_ENTRY_SIZE or end + entry_size > available:
                break
            last_at = end
            end += entry_size
        if last_at >= 0 and last_at + RECORD_BATCH_OVERHEAD <= end:
            base_offset, batch_length, magic, delta = _V2_BOUNDS.unpack_from(data, last_at)
            if magic == MAGIC_V2 and batch_length >= BATCH_LENGTH_MIN:
                self._note_end(base_offset + delta, position + end)
        return data if end == available else data[:end]

    def start_known(self, offset: int) -> int | None:
        """Where the entry holding ``offset`` (or the next one) starts, if a read or search
        ended right before it (the remembered end of the entry whose last offset is
        ``offset - 1``: see the module doc); None when that end is not remembered."""
        return self._ends.get(offset - 1)

    def _note_end(self, last_offset: int, position: int) -> None:
        """The entry ending at ``last_offset`` ends at ``position``: kept among the last
        ``_ENDS_KEPT`` such ends (the oldest goes)."""
        ends = self._ends
        if last_offset not in ends and len(ends) >= _ENDS_KEPT:
            del ends[next(iter(ends))]
        ends[last_offset] = position

    def batch_headers(self, start_position: int = 0) -> Iterator[tuple[int, LogEntryHeader]]:
        """(position, header) of each whole entry from ``start_position``, header-only reads:
        v2 batches, and v0/v1 messages in a segment written before Kafka 0.11.

        Raises CorruptRecordError on a header that cannot be an entry; stops quietly at a
        partial entry at the end (only recovery judges tails).
        """
        position = start_position
        size = self._size
        block = memoryview(b"")
        block_start = position
        while position + MIN_ENTRY_SIZE <= size:
            at = position - block_start
            if at + ENTRY_HEADER_BYTES > len(block):
                block = memoryview(os.pread(self.fd, _SCAN_BLOCK_BYTES, position))
                block_start, at = position, 0
            entry = _entry_header(block, at)
            if position + entry.size_in_bytes > size:
                return
            yield position, entry
            position += entry.size_in_bytes

    def search_for_offset_with_size(
        self, target_offset: int, start_position: int
    ) -> LogOffsetPosition | None:
        """The first batch from ``start_position`` whose last offset is ≥ ``target_offset``.

        The offset scan's hot path (every fetch walks up to an index interval of batches): the
        same walk as ``batch_headers``, one ``pread`` per block, but a well-formed v2 header is
        read for its last offset and size alone, inline; anything else goes through
        ``parse_entry_header``, which judges it (legacy messages, CorruptRecordError). Where a
        read or search ended right before ``target_offset`` (see the module doc), at or after
        ``start_position``, the walk starts there.
        """
        return self.locate(target_offset, start_position)[0]

    def locate(
        self, target_offset: int, start_position: int
    ) -> tuple[LogOffsetPosition | None, ScannedBlock]:
        """:meth:`search_for_offset_with_size`, and the last block it read (for
        :meth:`read_entries` right after: a segment's read of what it found)."""
        position = start_position
        known = self._ends.get(target_offset - 1)
        if known is not None and known > position:
            position = known
        size = self._size
        raw = b""
        block = memoryview(raw)
        block_len = 0
        block_start = position
        unpack_from = _V2_BOUNDS.unpack_from
        while position + MIN_ENTRY_SIZE <= size:
            at = position - block_start
            if at + ENTRY_HEADER_BYTES > block_len:
                raw = os.pread(self.fd, _SCAN_BLOCK_BYTES, position)
                block = memoryview(raw)
                block_len = len(raw)
                block_start, at = position, 0
            is_v2 = False
            if at + RECORD_BATCH_OVERHEAD <= block_len:
                base_offset, batch_length, magic, delta = unpack_from(block, at)
                is_v2 = magic == MAGIC_V2 and batch_length >= BATCH_LENGTH_MIN
            if is_v2:
                last_offset, entry_size = base_offset + delta, LOG_OVERHEAD + batch_length
            else:
                header = _entry_header(block, at)
                last_offset, entry_size = header.last_offset, header.size_in_bytes
            if position + entry_size > size:
                return None, _NOTHING_SCANNED
            if last_offset >= target_offset:
                self._note_end(last_offset, position + entry_size)
                found = LogOffsetPosition(last_offset, position, entry_size)
                return found, ScannedBlock(block_start, raw)
            position += entry_size
        return None, _NOTHING_SCANNED

    def search_for_timestamp(
        self, target_timestamp: int, start_position: int, starting_offset: int
    ) -> TimestampAndOffset | None:
        """The first record at or after ``starting_offset`` whose timestamp ≥ the target.

        Batches whose max timestamp is below the target are skipped on the header alone; only
        the one batch that must hold the answer is decoded.
        """
        for position, header in self.batch_headers(start_position):
            if header.max_timestamp < target_timestamp or header.last_offset < starting_offset:
                continue
            if (
                isinstance(header, BatchHeader)
                and header.timestamp_type is TimestampType.LOG_APPEND_TIME
            ):
                # Every record of a LogAppendTime batch carries the batch's timestamp: no need
                # to decode it to know the first record that qualifies.
                return TimestampAndOffset(
                    header.max_timestamp,
                    max(header.base_offset, starting_offset),
                    header.partition_leader_epoch,
                )
            data = self.read(position, header.size_in_bytes)
            if not isinstance(header, BatchHeader):
                for message in decode_legacy(data):
                    ts = -1 if message.timestamp is None else message.timestamp
                    if ts >= target_timestamp and message.offset >= starting_offset:
                        return TimestampAndOffset(ts, message.offset, -1)
                continue
            _, records = decode_batch(data)
            for record in records:
                if record.timestamp >= target_timestamp and record.offset >= starting_offset:
                    return TimestampAndOffset(
                        record.timestamp, record.offset, header.partition_leader_epoch
                    )
        return None

    def largest_timestamp_after(self, start_position: int) -> TimestampAndOffset:
        """The largest batch max-timestamp from ``start_position`` on (-1 if none)."""
        best = TimestampAndOffset(-1, -1, -1)
        for _, header in self.batch_headers(start_position):
            if header.max_timestamp > best.timestamp:
                best = TimestampAndOffset(
                    header.max_timestamp, header.last_offset, header.partition_leader_epoch
                )
        return best

    # -- file management --------------------------------------------------------------------

    def close(self) -> None:
        if self._fd is not None:
            self.trim()
            os.close(self._fd)
            self._fd = None

    def close_handler(self) -> None:
        """Close the descriptor without trimming (the file is being deleted or renamed)."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def rename_to(self, path: Path) -> None:
        os.replace(self.path, path)
        self.path = path

    def delete_if_exists(self) -> bool:
        self.close_handler()
        try:
            self.path.unlink()
        except FileNotFoundError:
            return False
        return True

    @property
    def closed(self) -> bool:
        return self._fd is None


__all__ = [
    "LOG_OVERHEAD",
    "FileRecords",
    "LogOffsetPosition",
    "TimestampAndOffset",
]
