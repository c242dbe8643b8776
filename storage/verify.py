"""Checks a partition directory (or a whole log dir) without changing it: ``verify-log``.

(One module, ~610 lines: one check per kind of file, all reporting through :class:`Problem`;
the transaction index's checks are in ``storage.verify_txn``.)

Every problem becomes a :class:`Problem` naming the file and what is wrong; an empty list
means every segment, index, snapshot and checkpoint is consistent. It opens indexes read-only
and never repairs anything (that is recovery's job, at broker start).

What is checked, per partition directory:

* every entry of every ``.log`` (v2 batches, and v0/v1 messages of logs written before Kafka
  0.11): header, size, checksum, then a strict decode of every record (the count matches the
  records present, nothing is left over, the codec is known and decompresses);
* offsets: each entry after the previous one, inside its segment (not below the base offset
  in the file name, within a 4-byte relative offset), segments not overlapping; *gaps*
  (offsets missing inside or between segments: a deleted segment, a rewritten base offset)
  are problems unless the log dir's cleaner checkpoint lists the partition (compaction makes
  gaps); leader epochs never go back;
* the offset index (each entry at the start of an entry whose offsets it names) and the time
  index (each entry naming the batch with that max timestamp), their zero-filled preallocated
  tail accepted on the last (active) segment, so a running broker's directory verifies clean;
* ``.snapshot`` files (producer state: name, CRC, layout, not beyond the log end, every
  producer's last batch below the snapshot's offset), the
  leader-epoch checkpoint and leftover temporary files;
* every ``.txnindex`` against the aborted transactions rebuilt from the batches
  (:mod:`storage.verify_txn`).

Per log dir: the offset checkpoint files and ``meta.properties`` (well formed, known version).
"""

from __future__ import annotations

import mmap
import os
from dataclasses import dataclass, field
from pathlib import Path

from kafkasim.common.errors import CorruptIndexError, KafkaError, KafkasimError
from kafkasim.common.sentinels import INT32_MAX
from kafkasim.common.types import TopicPartition
from kafkasim.storage import file_names
from kafkasim.storage.checkpoints import (
    CLEANER_OFFSET_CHECKPOINT_FILE,
    LEADER_EPOCH_CHECKPOINT_FILE,
    LOG_START_OFFSET_CHECKPOINT_FILE,
    META_PROPERTIES_FILE,
    RECOVERY_POINT_CHECKPOINT_FILE,
    REPLICATION_OFFSET_CHECKPOINT_FILE,
    LeaderEpochCheckpointFile,
    OffsetCheckpointFile,
    check_meta_properties,
)
from kafkasim.storage.offset_index import OffsetIndex
from kafkasim.storage.producer_state import decode_snapshot
from kafkasim.storage.records.batch import BatchHeader
from kafkasim.storage.records.entry import (
    MIN_ENTRY_SIZE,
    LogEntryHeader,
    check_entry_records,
    entry_crc,
    parse_entry_header,
)
from kafkasim.storage.time_index import TimeIndex
from kafkasim.storage.verify_txn import check_txn_indexes


@dataclass(frozen=True, slots=True)
class Problem:
    path: Path
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


@dataclass(frozen=True, slots=True)
class SegmentSummary:
    base_offset: int
    batches: int
    next_offset: int
    size: int
    max_timestamp: int
    epochs: tuple[tuple[int, int], ...]  # (epoch, first offset) where the epoch changes


@dataclass(slots=True)
class _IndexEntries:
    """The live entries of a segment's two indexes, checked as the scan passes them."""

    offsets: list[tuple[int, int]] = field(default_factory=list)  # (offset, position)
    times: list[tuple[int, int]] = field(default_factory=list)  # (timestamp, offset)
    index_path: Path | None = None
    time_path: Path | None = None
    next_offset_entry: int = 0
    next_time_entry: int = 0


@dataclass(slots=True)
class _Scan:
    """Running state of one segment's scan."""

    base: int
    next_offset: int
    gaps_allowed: bool
    epoch: int = -1
    max_ts: int = -1
    batches: int = 0
    epochs: list[tuple[int, int]] = field(default_factory=list)


def scan_segment(
    log_path: Path,
    base_offset: int,
    problems: list[Problem],
    *,
    start_offset: int | None = None,
    gaps_allowed: bool = True,
    last: bool = True,
    indexes: _IndexEntries | None = None,
) -> SegmentSummary:
    """Validate every entry of one ``.log`` file: header, checksum, records, offsets in order,
    in range and (unless ``gaps_allowed``) without holes from ``start_offset`` (default: the
    base offset). Checks ``indexes`` against the entries on the way. A zero-filled tail
    (preallocated space) is accepted in the ``last`` segment."""
    size = log_path.stat().st_size
    scan = _Scan(base_offset, base_offset if start_offset is None else start_offset, gaps_allowed)
    idx = indexes or _IndexEntries()
    position = 0
    if size > 0:
        with open(log_path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
            view = memoryview(mm)
            try:
                position = _scan_entries(view, log_path, scan, idx, problems, last=last)
            finally:
                view.release()
    _leftover_index_entries(idx, scan, position, problems)
    return SegmentSummary(
        base_offset, scan.batches, scan.next_offset, size, scan.max_ts, tuple(scan.epochs)
    )


def _scan_entries(
    view: memoryview,
    log_path: Path,
    scan: _Scan,
    idx: _IndexEntries,
    problems: list[Problem],
    *,
    last: bool,
) -> int:
    """Walk the entries; returns the position where the readable entries end."""
    size = len(view)
    position = 0
    previous_last = scan.base - 1
    while position < size:
        if (
            last
            and not any(view[position : position + MIN_ENTRY_SIZE])
            and not any(view[position:])
        ):
            break  # preallocated, zero-filled tail of the active segment
        if size - position < MIN_ENTRY_SIZE:
            problems.append(
                Problem(
                    log_path,
                    f"{size - position} trailing bytes at position {position} do not hold "
                    "a batch header",
                )
            )
            break
        try:
            header = parse_entry_header(view, position)
        except KafkaError as e:
            problems.append(Problem(log_path, e.message))
            break
        end = position + header.size_in_bytes
        if end > size:
            problems.append(
                Problem(
                    log_path,
                    f"batch at position {position} claims {header.size_in_bytes} bytes, "
                    f"{size - position} remain (torn write)",
                )
            )
            break
        first = _check_entry(view, position, header, log_path, problems)
        _check_offsets(position, first, header, scan=scan, log_path=log_path, problems=problems)
        _check_index_entries(position, previous_last, header, idx, problems)
        if header.partition_leader_epoch < -1 or 0 <= header.partition_leader_epoch < scan.epoch:
            problems.append(
                Problem(
                    log_path,
                    f"batch at position {position} has leader epoch "
                    f"{header.partition_leader_epoch} after epoch {scan.epoch}",
                )
            )
        elif header.partition_leader_epoch > scan.epoch:
            scan.epoch = header.partition_leader_epoch
            scan.epochs.append((header.partition_leader_epoch, first))
        scan.max_ts = max(scan.max_ts, header.max_timestamp)
        scan.next_offset = max(scan.next_offset, header.last_offset + 1)
        previous_last = header.last_offset
        scan.batches += 1
        position = end
    return position


def _check_entry(
    view: memoryview,
    position: int,
    header: LogEntryHeader,
    log_path: Path,
    problems: list[Problem],
) -> int:
    """Checksum, then every record; returns the entry's first offset."""
    first = header.base_offset if isinstance(header, BatchHeader) else header.last_offset
    crc = entry_crc(view, position, header)
    if crc != header.crc:
        problems.append(
            Problem(
                log_path,
                f"batch at position {position} (offsets {first}..{header.last_offset}, magic "
                f"{header.magic}) has CRC {header.crc:#010x}, content hashes to {crc:#010x}",
            )
        )
        return first
    try:
        return check_entry_records(view, position).first_offset
    except KafkaError as e:
        problems.append(
            Problem(
                log_path,
                f"batch at position {position} (offsets {first}..{header.last_offset}) has "
                f"invalid records: {e.message}",
            )
        )
        return first


def _check_offsets(
    position: int,
    first: int,
    header: LogEntryHeader,
    *,
    scan: _Scan,
    log_path: Path,
    problems: list[Problem],
) -> None:
    last = header.last_offset
    where = f"batch at position {position} (offsets {first}..{last})"
    if first < scan.base:
        problems.append(
            Problem(log_path, f"{where} starts below the segment's base offset {scan.base}")
        )
    elif first < scan.next_offset:
        problems.append(
            Problem(log_path, f"{where} starts at offset {first}, expected ≥ {scan.next_offset}")
        )
    elif first > scan.next_offset and not scan.gaps_allowed:
        problems.append(
            Problem(
                log_path,
                f"offsets {scan.next_offset}..{first - 1} are missing before the {where} "
                "(only compaction leaves gaps)",
            )
        )
    if last < first or not 0 <= last - scan.base <= INT32_MAX:
        problems.append(
            Problem(log_path, f"{where}: offset {last} does not fit segment {scan.base}")
        )


def _check_index_entries(
    position: int,
    previous_last: int,
    header: LogEntryHeader,
    idx: _IndexEntries,
    problems: list[Problem],
) -> None:
    """Index entries up to this entry: each offset-index entry at an entry's start naming its
    last offset (a v0/v1 log may name any offset of the message set that starts there), each
    time-index entry naming a v2 batch's last offset and its max timestamp."""
    offsets, times = idx.offsets, idx.times
    while idx.next_offset_entry < len(offsets) and offsets[idx.next_offset_entry][1] <= position:
        n = idx.next_offset_entry
        offset, at = offsets[n]
        if at < position:
            problems.append(
                Problem(
                    idx.index_path or Path(),
                    f"entry {n} (offset {offset}) points at position {at}, where no batch starts",
                )
            )
        elif isinstance(header, BatchHeader):
            if offset != header.last_offset:
                problems.append(
                    Problem(
                        idx.index_path or Path(),
                        f"entry {n}: index offset {offset}, log offset {header.last_offset} "
                        f"at position {at}",
                    )
                )
        elif not previous_last < offset <= header.last_offset:
            problems.append(
                Problem(
                    idx.index_path or Path(),
                    f"entry {n}: index offset {offset}, but the message set at position {at} "
                    f"holds offsets {previous_last + 1}..{header.last_offset}",
                )
            )
        idx.next_offset_entry += 1
    while idx.next_time_entry < len(times) and times[idx.next_time_entry][1] <= header.last_offset:
        n = idx.next_time_entry
        timestamp, offset = times[n]
        if isinstance(header, BatchHeader):
            if offset != header.last_offset or timestamp != header.max_timestamp:
                problems.append(
                    Problem(
                        idx.time_path or Path(),
                        f"entry {n} (timestamp {timestamp}, offset {offset}) does not name a "
                        "batch's last offset and max timestamp",
                    )
                )
        elif offset <= previous_last or timestamp > header.max_timestamp:
            problems.append(
                Problem(
                    idx.time_path or Path(),
                    f"entry {n} (timestamp {timestamp}, offset {offset}) does not match the "
                    f"message at offset {header.last_offset}",
                )
            )
        idx.next_time_entry += 1


def _leftover_index_entries(
    idx: _IndexEntries, scan: _Scan, end: int, problems: list[Problem]
) -> None:
    for n in range(idx.next_offset_entry, len(idx.offsets)):
        offset, at = idx.offsets[n]
        problems.append(
            Problem(
                idx.index_path or Path(),
                f"entry {n} (offset {offset}) points at position {at}, where no batch starts "
                f"(the readable batches end at {end})",
            )
        )
    for n in range(idx.next_time_entry, len(idx.times)):
        timestamp, offset = idx.times[n]
        problems.append(
            Problem(
                idx.time_path or Path(),
                f"entry {n} (timestamp {timestamp}) names offset {offset}, beyond the last batch "
                f"of the segment (next offset {scan.next_offset})",
            )
        )


def read_indexes(dir_: Path, base: int, problems: list[Problem], *, last: bool) -> _IndexEntries:
    """The live entries of both indexes of segment ``base``, after their own sanity checks.

    A zero-filled tail (the preallocated space of the active segment's index) ends the
    entries; in any segment but the last it means the index was never trimmed.
    """
    out = _IndexEntries()
    index_path = file_names.index_file(dir_, base)
    time_path = file_names.time_index_file(dir_, base)
    out.index_path, out.time_path = index_path, time_path
    for path in (index_path, time_path):
        if not path.exists() and not (path is time_path and _legacy_v0(dir_, base)):
            problems.append(Problem(path, "index file is missing (recovery rebuilds it)"))
    if index_path.exists():
        offset_index = OffsetIndex(
            index_path, base, max(index_path.stat().st_size, 8), writable=False
        )
        try:
            count = _entries_before_zero_tail(index_path, offset_index.entries, 8)
            entries = [tuple(offset_index.entry(n)) for n in range(count)]
            live = _live_entries(entries, (base, 0), index_path, problems, last=last)
            out.offsets = [(o, p) for o, p in live]
            for n in range(1, len(out.offsets)):
                if out.offsets[n][0] <= out.offsets[n - 1][0] or (
                    out.offsets[n][1] <= out.offsets[n - 1][1]
                ):
                    problems.append(Problem(index_path, f"entry {n} does not follow entry {n - 1}"))
                    out.offsets = out.offsets[:n]
                    break
            if offset_index.length_bytes % OffsetIndex.entry_size:
                raise CorruptIndexError(
                    f"its length {offset_index.length_bytes} is not a multiple of 8"
                )
        except CorruptIndexError as e:
            problems.append(Problem(index_path, str(e)))
        finally:
            offset_index.close_handler()
    if time_path.exists():
        time_index = TimeIndex(time_path, base, max(time_path.stat().st_size, 12), writable=False)
        try:
            count = _entries_before_zero_tail(time_path, time_index.entries, 12)
            entries = [tuple(time_index.entry(n)) for n in range(count)]
            live = _live_entries(entries, (0, base), time_path, problems, last=last)
            out.times = [(t, o) for t, o in live]
            for n in range(1, len(out.times)):
                if out.times[n][0] <= out.times[n - 1][0] or out.times[n][1] < out.times[n - 1][1]:
                    problems.append(
                        Problem(
                            time_path,
                            f"entry {n}: timestamp {out.times[n][0]} at offset {out.times[n][1]}"
                            f" does not follow {out.times[n - 1][0]} at {out.times[n - 1][1]}",
                        )
                    )
                    out.times = out.times[:n]
                    break
            if time_index.length_bytes % TimeIndex.entry_size:
                raise CorruptIndexError(
                    f"its length {time_index.length_bytes} is not a multiple of 12"
                )
        except CorruptIndexError as e:
            problems.append(Problem(time_path, str(e)))
        finally:
            time_index.close_handler()
    return out


def _entries_before_zero_tail(path: Path, entries: int, entry_size: int) -> int:
    """How many entries to look at: those before the zero-filled tail, plus one zero entry
    (so that :func:`_live_entries` sees where the tail starts), without parsing the tail."""
    used = len(path.read_bytes().rstrip(b"\0"))
    return min(entries, -(-used // entry_size) + 1)


def _live_entries(
    entries: list[tuple[int, ...]],
    zero: tuple[int, int],
    path: Path,
    problems: list[Problem],
    *,
    last: bool,
) -> list[tuple[int, ...]]:
    for n in range(1, len(entries)):
        if entries[n] == zero:
            if any(e != zero for e in entries[n:]):
                problems.append(Problem(path, f"entry {n} is zero but later entries are not"))
            elif not last:
                problems.append(
                    Problem(
                        path,
                        f"entry {n} is zero (preallocated space not trimmed: unclean shutdown?)",
                    )
                )
            return entries[:n]
    if len(entries) == 1 and entries[0] == zero:
        return []  # an empty, preallocated index
    return entries


def _legacy_v0(dir_: Path, base: int) -> bool:
    """Whether the segment starts with a v0 message (Kafka 0.9 wrote no ``.timeindex``)."""
    with open(file_names.log_file(dir_, base), "rb") as f:
        head = f.read(17)
    return len(head) == 17 and head[16] == 0


def check_snapshots(dir_: Path, log_end: int, problems: list[Problem]) -> None:
    """Producer-state snapshots: a parsable name, intact content, not beyond the log end, and
    every producer's last batch below the offset in the name (the snapshot holds the state of
    the offsets below it, as Kafka takes it at a roll before the next batch's producer)."""
    for path in sorted(dir_.glob(f"*{file_names.SNAPSHOT_SUFFIX}")):
        try:
            offset = file_names.offset_from_file_name(path.name)
        except ValueError as e:
            problems.append(Problem(path, str(e)))
            continue
        try:
            entries = decode_snapshot(path.read_bytes())
        except KafkasimError as e:
            problems.append(Problem(path, str(e)))
            continue
        if offset > log_end:
            problems.append(
                Problem(path, f"snapshot at offset {offset} is beyond the log end {log_end}")
            )
        for entry in entries:
            if entry.last_data_offset >= offset:
                problems.append(
                    Problem(
                        path,
                        f"snapshot at offset {offset} holds producer {entry.producer_id}'s "
                        f"batch ending at offset {entry.last_data_offset}, not below {offset}",
                    )
                )


def verify_partition_dir(dir_: Path, *, compacted: bool | None = None) -> list[Problem]:
    """Every check for one ``<topic>-<partition>`` directory. ``compacted`` (default: whether
    the log dir's cleaner checkpoint lists the partition) allows offset gaps."""
    problems: list[Problem] = []
    if compacted is None:
        compacted = _is_compacted(dir_)
    logs = sorted(dir_.glob(f"*{file_names.LOG_SUFFIX}"))
    if not logs:
        problems.append(Problem(dir_, "no .log segment file"))
    bases: list[tuple[int, Path]] = []
    for log_path in logs:
        try:
            bases.append((file_names.offset_from_file_name(log_path.name), log_path))
        except ValueError as e:
            problems.append(Problem(log_path, str(e)))
    previous_next: int | None = None
    epochs: list[tuple[int, int]] = []
    for i, (base, log_path) in enumerate(bases):
        last = i == len(bases) - 1
        if previous_next is not None and base < previous_next:
            problems.append(
                Problem(
                    log_path,
                    f"segment starts at {base} but the previous one ends at {previous_next - 1}",
                )
            )
        elif previous_next is not None and base > previous_next and not compacted:
            problems.append(
                Problem(
                    log_path,
                    f"offsets {previous_next}..{base - 1} are missing before this segment "
                    "(a deleted segment? only compaction leaves gaps)",
                )
            )
        indexes = read_indexes(dir_, base, problems, last=last)
        summary = scan_segment(
            log_path, base, problems, gaps_allowed=compacted, last=last, indexes=indexes
        )
        previous_next = summary.next_offset
        for epoch, start in summary.epochs:
            if not epochs or epoch > epochs[-1][0]:
                epochs.append((epoch, start))
    for path, message in check_txn_indexes(dir_, bases, compacted=compacted):
        problems.append(Problem(path, message))
    for name in os.listdir(dir_):
        if name.endswith(file_names.TEMP_SUFFIXES):
            problems.append(
                Problem(dir_ / name, "temporary file left over (recovery removes or completes it)")
            )
    check_snapshots(dir_, previous_next or 0, problems)
    _check_epoch_checkpoint(dir_, epochs, previous_next or 0, problems)
    return problems


def _check_epoch_checkpoint(
    dir_: Path, epochs: list[tuple[int, int]], log_end: int, problems: list[Problem]
) -> None:
    checkpoint = dir_ / LEADER_EPOCH_CHECKPOINT_FILE
    if not checkpoint.exists():
        return
    try:
        stored = [(e.epoch, e.start_offset) for e in LeaderEpochCheckpointFile(checkpoint).read()]
    except KafkaError as e:
        problems.append(Problem(checkpoint, e.message))
        return
    in_log = [e for e in epochs if e[1] < log_end]
    missing = [e for e in in_log if e not in stored and e[0] > (stored[-1][0] if stored else -1)]
    if missing:
        problems.append(
            Problem(checkpoint, f"epochs {missing} appear in the log but not in the checkpoint")
        )


def _is_compacted(dir_: Path) -> bool:
    """Whether the cleaner has a checkpoint for this partition (it compacted it at least once)."""
    path = dir_.parent / CLEANER_OFFSET_CHECKPOINT_FILE
    try:
        tp = TopicPartition.from_dir_name(dir_.name)
        return path.exists() and tp in OffsetCheckpointFile(path).read()
    except (ValueError, KafkasimError):
        return False


def verify_log_dir(dir_: Path) -> list[Problem]:
    """Checkpoints and ``meta.properties`` of a log dir and every partition directory in it."""
    problems: list[Problem] = []
    for name in (
        RECOVERY_POINT_CHECKPOINT_FILE,
        REPLICATION_OFFSET_CHECKPOINT_FILE,
        LOG_START_OFFSET_CHECKPOINT_FILE,
        CLEANER_OFFSET_CHECKPOINT_FILE,
    ):
        path = dir_ / name
        if path.exists():
            try:
                OffsetCheckpointFile(path).read()
            except KafkasimError as e:
                problems.append(Problem(path, str(e)))
    try:
        check_meta_properties(dir_)
    except KafkasimError as e:
        problems.append(Problem(dir_ / META_PROPERTIES_FILE, str(e)))
    for child in sorted(dir_.iterdir()):
        if child.is_dir():
            try:
                TopicPartition.from_dir_name(child.name)
            except ValueError:
                continue
            problems.extend(verify_partition_dir(child))
    return problems


def verify(path: Path) -> list[Problem]:
    """A partition directory if it holds segments, else a log dir."""
    if not path.is_dir():
        return [Problem(path, "not a directory")]
    if any(path.glob(f"*{file_names.LOG_SUFFIX}")):
        return verify_partition_dir(path)
    return verify_log_dir(path)
