"""The aborted transaction index (``.txnindex``) of one segment: Kafka's ``TransactionIndex``.

A ``read_committed`` consumer reads up to the last stable offset and must drop the records of
aborted transactions. The leader answers each such fetch with the aborted transactions that
overlap the range it returns (producer id and first offset); the consumer skips a producer's
records from that first offset up to its ABORT marker. This index is where the leader finds
them without reading the log: one entry per aborted transaction, in the segment holding the
transaction's ABORT marker (a transaction may begin in an earlier segment).

Byte format: a sequence of 34-byte entries (Kafka's ``AbortedTxn``), big-endian::

    version            int16   = 0
    producer_id        int64
    first_offset       int64   offset of the transaction's first batch
    last_offset        int64   offset of its ABORT marker
    last_stable_offset int64   the partition's LSO when the marker was written (see below)

Invariants: entries are in increasing ``last_offset`` (markers are appended in log order);
every ``last_offset`` is ≥ the segment's base offset. ``last_stable_offset`` is the first offset
of the earliest transaction still open (of another producer) when the marker was written, or
the marker's offset + 1 when none was: every transaction whose first offset lies below it had
completed by then, so a search for transactions overlapping ``[fetch_offset, upper)`` may stop
at the first entry whose ``last_stable_offset`` ≥ ``upper`` (Kafka's ``collectAbortedTxns``).

The file is created on the first entry (a segment without aborted transactions has none, as in
Kafka) and appended with ``write``; entries are also kept in memory once read. Thread-safety:
none; the owning log serialises access. Crash story: no checksum; the index of every segment
that recovery re-reads is reset and rebuilt from the segment's markers (producer state replayed
from the segments before it). :meth:`TransactionIndex.sanity_check` refuses, with
CorruptIndexError, a length that is not a multiple of 34 (a torn entry, which Kafka would
silently skip and then append after, misaligned), an unknown version, offsets that go back, or
a last offset below the base offset; the loader then rebuilds the segment.
"""

from __future__ import annotations

import contextlib
import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from kafkasim.common.errors import CorruptIndexError, InvalidOffsetError

ABORTED_TXN_VERSION = 0
_ENTRY = struct.Struct(">hqqqq")
ABORTED_TXN_SIZE = _ENTRY.size  # 34


class CompletedTxn(NamedTuple):
    """A transaction one producer's COMMIT or ABORT marker has just ended in this partition.

    ``last_offset`` is the marker's offset (Kafka's ``CompletedTxn``).
    """

    producer_id: int
    first_offset: int
    last_offset: int
    is_aborted: bool


class AbortedTxn(NamedTuple):
    """One entry of a ``.txnindex``."""

    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int
    version: int = ABORTED_TXN_VERSION

    @classmethod
    def of(cls, completed: CompletedTxn, last_stable_offset: int) -> AbortedTxn:
        return cls(
            completed.producer_id,
            completed.first_offset,
            completed.last_offset,
            last_stable_offset,
        )

    def encode(self) -> bytes:
        return _ENTRY.pack(
            self.version,
            self.producer_id,
            self.first_offset,
            self.last_offset,
            self.last_stable_offset,
        )

    @classmethod
    def decode(cls, data: bytes | memoryview, position: int = 0) -> AbortedTxn:
        version, producer_id, first, last, lso = _ENTRY.unpack_from(data, position)
        return cls(producer_id, first, last, lso, version)


@dataclass(frozen=True, slots=True)
class TxnIndexSearchResult:
    """Aborted transactions found in one segment's index, and whether the search may stop."""

    aborted_transactions: list[AbortedTxn]
    is_complete: bool


class TransactionIndex:
    """The ``.txnindex`` of the segment starting at ``base_offset`` (see the module doc)."""

    def __init__(self, path: Path, base_offset: int) -> None:
        self.path = path
        self.base_offset = base_offset
        self._entries: list[AbortedTxn] | None = None  # read from the file on first use
        self._fd: int | None = None
        self.flushed_size = self._file_size()

    # -- reading ----------------------------------------------------------------------------

    def _file_size(self) -> int:
        try:
            return self.path.stat().st_size
        except FileNotFoundError:
            return 0

    def _load(self) -> list[AbortedTxn]:
        if self._entries is None:
            try:
                data = self.path.read_bytes()
            except FileNotFoundError:
                data = b""
            whole = len(data) - len(data) % ABORTED_TXN_SIZE
            self._entries = [AbortedTxn.decode(data, p) for p in range(0, whole, ABORTED_TXN_SIZE)]
        return self._entries

    def all_aborted_txns(self) -> list[AbortedTxn]:
        return list(self._load())

    @property
    def last_offset(self) -> int | None:
        entries = self._load()
        return entries[-1].last_offset if entries else None

    def collect_aborted_txns(
        self, fetch_offset: int, upper_bound_offset: int
    ) -> TxnIndexSearchResult:
        """Entries overlapping ``[fetch_offset, upper_bound_offset)``: ``last_offset`` ≥
        ``fetch_offset`` and ``first_offset`` < ``upper_bound_offset``. Complete (no need to
        search later segments) at the first entry whose last stable offset reaches the bound."""
        found: list[AbortedTxn] = []
        for txn in self._load():
            if txn.last_offset >= fetch_offset and txn.first_offset < upper_bound_offset:
                found.append(txn)
            if txn.last_stable_offset >= upper_bound_offset:
                return TxnIndexSearchResult(found, True)
        return TxnIndexSearchResult(found, False)

    def sanity_check(self) -> None:
        """CorruptIndexError for a torn entry, an unknown version, last offsets that do not
        increase, or one below the segment's base offset."""
        size = self._file_size()
        if size % ABORTED_TXN_SIZE:
            raise CorruptIndexError(
                f"transaction index {self.path} is {size} bytes, not a whole number of "
                f"{ABORTED_TXN_SIZE}-byte entries"
            )
        self._entries = None
        previous: int | None = None
        for txn in self._load():
            if txn.version != ABORTED_TXN_VERSION:
                raise CorruptIndexError(
                    f"unexpected aborted transaction version {txn.version} in transaction "
                    f"index {self.path}, current version is {ABORTED_TXN_VERSION}"
                )
            if txn.last_offset < self.base_offset:
                raise CorruptIndexError(
                    f"last offset of aborted transaction {txn} in index {self.path} is less "
                    f"than start offset {self.base_offset}"
                )
            if previous is not None and txn.last_offset <= previous:
                raise CorruptIndexError(
                    f"aborted transaction {txn} in index {self.path} does not come after the "
                    f"previous entry (last offset {previous})"
                )
            previous = txn.last_offset

    # -- writing ----------------------------------------------------------------------------

    def _open(self) -> int:
        if self._fd is None:
            self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        return self._fd

    def append(self, txn: AbortedTxn) -> None:
        """Add an entry; InvalidOffsetError unless its last offset is above the previous one."""
        entries = self._load()
        if entries and entries[-1].last_offset >= txn.last_offset:
            raise InvalidOffsetError(
                f"the last offset of appended transactions must increase sequentially, but "
                f"{txn.last_offset} is not greater than current last offset "
                f"{entries[-1].last_offset} of index {self.path}"
            )
        os.write(self._open(), txn.encode())
        entries.append(txn)

    def truncate_to(self, offset: int) -> None:
        """Drop the entries whose marker is at or after ``offset`` (the segment was truncated
        there): Kafka's ``truncateTo`` cuts at the first entry with ``last_offset`` ≥ it."""
        entries = self._load()
        for i, txn in enumerate(entries):
            if txn.last_offset >= offset:
                self._truncate_file(i * ABORTED_TXN_SIZE)
                del entries[i:]
                return

    def reset(self) -> None:
        """Remove every entry (recovery rebuilds them)."""
        self._truncate_file(0)
        self._entries = []

    def _truncate_file(self, size: int) -> None:
        if self._fd is not None:
            os.ftruncate(self._fd, size)
        elif self.path.exists():
            os.truncate(self.path, size)
        self.flushed_size = min(self.flushed_size, size)

    def drop_unflushed(self) -> None:
        """Lose what was written since the last flush, as a power loss would (simulation)."""
        if self._file_size() > self.flushed_size:
            self._truncate_file(self.flushed_size)
            self._entries = None

    def flush(self) -> None:
        if self._fd is not None:
            os.fsync(self._fd)
            self.flushed_size = self._file_size()

    # -- file management --------------------------------------------------------------------

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def rename_to(self, path: Path) -> None:
        """Rename the file (if there is one) and keep the new name for later appends."""
        self.close()
        with contextlib.suppress(FileNotFoundError):
            self.path.rename(path)
        self.path = path

    def delete_if_exists(self) -> bool:
        self.close()
        self._entries = []
        try:
            self.path.unlink()
        except FileNotFoundError:
            return False
        return True
