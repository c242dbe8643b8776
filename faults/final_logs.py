"""A replica's final log as the checker reads it: the data records apart from the
transaction markers (control batches), for every backend — the simulation reads its brokers'
logs in memory, the real-process backends read the segment files."""

from __future__ import annotations

from collections.abc import Iterable

from kafkasim.faults.history import MARKER_TYPES
from kafkasim.storage.records.batch import BatchHeader, Record, parse_control_key
from kafkasim.storage.records.entry import LogEntryHeader

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
