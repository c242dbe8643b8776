"""A replica's final log as the checker reads it: the data records apart from the
transaction markers (control batches), for every backend — the simulation reads its brokers'
logs in memory, the real-process backends read the segment files."""

from __future__ import annotations

from collections.abc import Iterable

from kafkasim.faults.history import MARKER_TYPES
from kafkasim.storage.records.batch import BatchHeader, Record, parse_control_key
from kafkasim.storage.records.entry import LogEntryHeader, decode_entries

Entry = tuple[int, str]


def split_entries(
    batches: Iterable[tuple[LogEntryHeader, list[Record]]],
    entries: list[Entry],
    markers: list[Entry],
) -> None:
    """Append each batch's data records to ``entries`` as ``(offset, value)`` and its
    transaction markers to ``markers`` as ``(offset, "COMMIT"|"ABORT")`` (a control batch
    holds one marker and no data)."""
    for header, records in batches:
        if isinstance(header, BatchHeader) and header.is_control:
            types = ((r.offset, parse_control_key(r.key).name) for r in records)
            markers.extend(m for m in types if m[1] in MARKER_TYPES)
            continue
        entries.extend((r.offset, (r.value or b"").decode(errors="replace")) for r in records)


ChunkMemo = dict[bytes, tuple[list[Entry], list[Entry]]]
"""Entries and markers of the chunks of log (runs of whole entries) split so far, by bytes."""


def split_chunks(
    chunks: Iterable[bytes], entries: list[Entry], markers: list[Entry], memo: ChunkMemo
) -> None:
    """:func:`split_entries` of each chunk's entries, decoded; a chunk found in ``memo`` (the
    same bytes read from another replica's log: in-sync replicas hold the leader's batches
    byte for byte) is not decoded again, its split being a function of its bytes alone. The
    simulation's snapshot of three replicas decoded every record three times (~4% of a
    leader-crash run's CPU)."""
    for chunk in chunks:
        found = memo.get(chunk)
        if found is None:
            found = ([], [])
            split_entries(decode_entries(chunk), *found)
            memo[chunk] = found
        entries += found[0]
        markers += found[1]
