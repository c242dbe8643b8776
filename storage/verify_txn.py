"""``verify-log``'s check of the aborted transaction indexes (``.txnindex``).

The aborted transactions are rebuilt from the partition's batches, walking the segments in
offset order as recovery replays them: a producer's transactional data batch opens its
transaction (at the batch's base offset) unless one is open; a COMMIT or ABORT marker closes
it; an ABORT gives the entry expected in the index of the segment holding the marker, with the
last stable offset of that moment (the first offset of the earliest transaction of another
producer still open, else the marker's offset + 1). Each ``.txnindex`` is then compared with
what its segment should hold: a *missing* entry (an aborted transaction the index does not
name), an *extra* entry (one no ABORT marker of the segment explains), and a *wrong* entry
(right producer and marker, wrong first offset or last stable offset) are each reported. A
corrupt file (a size that is not a whole number of 34-byte entries, an unknown version,
entries out of order) is reported as such and not compared.

What the walk cannot know, it does not judge:

* a log that no longer starts at offset 0 (retention) may hold markers of transactions opened
  before its first segment. A producer snapshot at the first segment's base offset (Kafka
  writes one at every roll) seeds the open transactions; without one, markers of producers not
  seen yet may or may not have an entry, and no last stable offset is checked;
* a compacted partition keeps an entry while data of its transaction remain, with the offsets
  of the time it was written (Kafka's cleaner copies it), while the cleaner may have removed
  the transaction's first batches and other transactions' data: there an entry is matched by
  producer and marker only, its first offset must not be after the first batch still present,
  and the last stable offset is not checked; an entry whose data are gone is not required.

Read-only: the index files are read, never created or repaired (recovery rebuilds them).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from kafkasim.common.errors import CorruptIndexError, KafkaError, KafkasimError
from kafkasim.storage import file_names
from kafkasim.storage.producer_entry import decode_snapshot
from kafkasim.storage.records.batch import (
    BatchHeader,
    ControlRecordType,
    decode_batch,
    parse_end_transaction_marker,
)
from kafkasim.storage.records.entry import iter_entries
from kafkasim.storage.txn_index import AbortedTxn, TransactionIndex


@dataclass
class _Walk:
    """Open transactions (producer id → first offset, in opening order) and what is known."""

    open_txns: dict[int, int] = field(default_factory=dict)
    seen: set[int] = field(default_factory=set)
    certain: bool = True  # every transaction open at the first segment's base offset is known


@dataclass
class SegmentTxns:
    """The aborted transactions one segment's index should hold, and markers not judged."""

    expected: list[AbortedTxn] = field(default_factory=list)
    unknown_markers: set[int] = field(default_factory=set)  # marker offsets of unseen producers
    aborts: dict[int, int] = field(default_factory=dict)  # ABORT marker offset → producer id


def _seed(dir_: Path, first_base: int) -> _Walk:
    walk = _Walk()
    if first_base == 0:
        return walk
    snapshot = dir_ / f"{file_names.filename_prefix(first_base)}{file_names.SNAPSHOT_SUFFIX}"
    try:
        entries = decode_snapshot(snapshot.read_bytes())
    except (OSError, KafkasimError):
        walk.certain = False
        return walk
    for entry in sorted(entries, key=lambda e: e.current_txn_first_offset or -1):
        walk.seen.add(entry.producer_id)
        if entry.current_txn_first_offset is not None:
            walk.open_txns[entry.producer_id] = entry.current_txn_first_offset
    return walk


def rebuild_aborted_txns(
    dir_: Path, segments: list[tuple[int, Path]]
) -> tuple[dict[int, SegmentTxns], bool]:
    """Per segment base offset, the aborted transactions its markers end; and whether the
    walk knew every open transaction (see the module doc). A segment is read up to its first
    unreadable entry (the batch checks report that)."""
    walk = _seed(dir_, segments[0][0]) if segments else _Walk()
    out: dict[int, SegmentTxns] = {}
    for base, log_path in segments:
        found = out.setdefault(base, SegmentTxns())
        try:
            data = log_path.read_bytes()
        except OSError:
            continue
        try:
            for position, header in iter_entries(data):
                if isinstance(header, BatchHeader) and header.producer_id >= 0:
                    _apply(walk, found, data, position, header)
        except KafkaError:
            continue
    return out, walk.certain


def _apply(walk: _Walk, found: SegmentTxns, data: bytes, position: int, h: BatchHeader) -> None:
    pid = h.producer_id
    if not h.is_control:
        walk.seen.add(pid)
        if h.is_transactional and pid not in walk.open_txns:
            walk.open_txns[pid] = h.base_offset
        return
    try:
        _, records = decode_batch(data, position, verify_crc=False)
        marker = parse_end_transaction_marker(records[0].key, records[0].value) if records else None
    except KafkaError:
        return
    if marker is None:
        return  # emptied by compaction: no state change, as in recovery
    if marker.control_type is ControlRecordType.ABORT:
        found.aborts[h.base_offset] = pid
    first = walk.open_txns.pop(pid, None)
    if first is None:
        if pid not in walk.seen and not walk.certain:
            found.unknown_markers.add(h.base_offset)
        walk.seen.add(pid)
        return
    walk.seen.add(pid)
    if marker.control_type is ControlRecordType.ABORT:
        lso = min(walk.open_txns.values(), default=h.base_offset + 1)
        found.expected.append(AbortedTxn(pid, first, h.base_offset, lso))


def _describe(txn: AbortedTxn) -> str:
    return (
        f"producerId {txn.producer_id} firstOffset {txn.first_offset} "
        f"lastOffset {txn.last_offset} lastStableOffset {txn.last_stable_offset}"
    )


def check_txn_indexes(
    dir_: Path, segments: list[tuple[int, Path]], *, compacted: bool
) -> list[tuple[Path, str]]:
    """Compare every segment's ``.txnindex`` with the aborted transactions its markers end;
    (file, what is wrong) for each problem."""
    problems: list[tuple[Path, str]] = []
    rebuilt, certain = rebuild_aborted_txns(dir_, segments)
    for base, _ in segments:
        path = file_names.txn_index_file(dir_, base)
        index = TransactionIndex(path, base)
        try:
            index.sanity_check()
        except CorruptIndexError as e:
            problems.append((path, f"corrupt transaction index: {e}"))
            continue
        except OSError as e:
            problems.append((path, f"unreadable transaction index: {e}"))
            continue
        seg = rebuilt.get(base, SegmentTxns())
        stored = {t.last_offset: t for t in index.all_aborted_txns()}
        expected = {t.last_offset: t for t in seg.expected}
        for last, want in expected.items():
            have = stored.get(last)
            if have is None or have.producer_id != want.producer_id:
                if not compacted:
                    problems.append((path, f"missing aborted transaction: {_describe(want)}"))
                continue
            wrong_first = (
                have.first_offset > want.first_offset
                if compacted
                else have.first_offset != want.first_offset
            )
            lso_checked = certain and not compacted
            if wrong_first or (lso_checked and have.last_stable_offset != want.last_stable_offset):
                problems.append(
                    (
                        path,
                        f"wrong aborted transaction entry: {_describe(have)}; the log says "
                        f"{_describe(want)}",
                    )
                )
        for last, have in stored.items():
            if last in seg.unknown_markers:
                continue
            if compacted and seg.aborts.get(last) == have.producer_id:
                continue  # the cleaner keeps the entry for one more pass after the data go
            want_entry = expected.get(last)
            if want_entry is None or want_entry.producer_id != have.producer_id:
                problems.append(
                    (
                        path,
                        f"extra aborted transaction entry: {_describe(have)} (no ABORT marker "
                        "of that producer ends a transaction at that offset in this segment)",
                    )
                )
    return problems
