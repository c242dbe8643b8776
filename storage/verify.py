"""Checks a partition directory (or a whole log dir) without changing it: ``verify-log``.

Every problem becomes a :class:`Problem` naming the file and what is wrong; an empty list
means every segment, index and checkpoint is consistent. It opens indexes read-only and never
repairs anything (that is recovery's job, at broker start).
"""

from __future__ import annotations

import mmap
import os
from dataclasses import dataclass
from pathlib import Path

from kafkasim.common.errors import CorruptIndexError, CorruptRecordError, KafkaError, KafkasimError
from kafkasim.common.types import TopicPartition
from kafkasim.storage import file_names
from kafkasim.storage.checkpoints import (
    CLEANER_OFFSET_CHECKPOINT_FILE,
    LEADER_EPOCH_CHECKPOINT_FILE,
    LOG_START_OFFSET_CHECKPOINT_FILE,
    RECOVERY_POINT_CHECKPOINT_FILE,
    REPLICATION_OFFSET_CHECKPOINT_FILE,
    LeaderEpochCheckpointFile,
    OffsetCheckpointFile,
)
from kafkasim.storage.offset_index import OffsetIndex
from kafkasim.storage.records.batch import RECORD_BATCH_OVERHEAD, BatchHeader, compute_crc
from kafkasim.storage.time_index import TimeIndex


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


def scan_segment(log_path: Path, base_offset: int, problems: list[Problem]) -> SegmentSummary:
    """Validate every batch of one ``.log`` file (header, CRC, offsets in order and in range)."""
    size = log_path.stat().st_size
    batches = 0
    next_offset = base_offset
    max_ts = -1
    epochs: list[tuple[int, int]] = []
    if size == 0:
        return SegmentSummary(base_offset, 0, next_offset, 0, max_ts, ())
    with open(log_path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        view = memoryview(mm)
        try:
            position = 0
            while position < size:
                if size - position < RECORD_BATCH_OVERHEAD:
                    problems.append(
                        Problem(
                            log_path,
                            f"{size - position} trailing bytes at "
                            f"position {position} do not hold a batch header",
                        )
                    )
                    break
                try:
                    header = BatchHeader.parse(view, position)
                except CorruptRecordError as e:
                    problems.append(Problem(log_path, e.message))
                    break
                end = position + header.size_in_bytes
                if end > size:
                    problems.append(
                        Problem(
                            log_path,
                            f"batch at position {position} claims "
                            f"{header.size_in_bytes} bytes, {size - position} "
                            "remain (torn write)",
                        )
                    )
                    break
                crc = compute_crc(view, position, header.size_in_bytes)
                if crc != header.crc:
                    problems.append(
                        Problem(
                            log_path,
                            f"batch at position {position} (offsets "
                            f"{header.base_offset}..{header.last_offset}) has CRC "
                            f"{header.crc:#010x}, content hashes to {crc:#010x}",
                        )
                    )
                if header.base_offset < next_offset:
                    problems.append(
                        Problem(
                            log_path,
                            f"batch at position {position} starts at "
                            f"offset {header.base_offset}, expected ≥ "
                            f"{next_offset}",
                        )
                    )
                if not 0 <= header.last_offset - base_offset <= 2**31 - 1:
                    problems.append(
                        Problem(
                            log_path,
                            f"offset {header.last_offset} does not fit "
                            f"segment {base_offset} as a relative offset",
                        )
                    )
                if header.partition_leader_epoch >= 0 and (
                    not epochs or epochs[-1][0] != header.partition_leader_epoch
                ):
                    epochs.append((header.partition_leader_epoch, header.base_offset))
                max_ts = max(max_ts, header.max_timestamp)
                next_offset = header.last_offset + 1
                batches += 1
                position = end
        finally:
            view.release()
    return SegmentSummary(base_offset, batches, next_offset, size, max_ts, tuple(epochs))


def check_indexes(dir_: Path, summary: SegmentSummary, problems: list[Problem]) -> None:
    """Sanity-check both indexes and that each offset-index entry points at its batch."""
    base = summary.base_offset
    log_path = file_names.log_file(dir_, base)
    index_path = file_names.index_file(dir_, base)
    time_path = file_names.time_index_file(dir_, base)
    for path in (index_path, time_path):
        if not path.exists():
            problems.append(Problem(path, "index file is missing (recovery rebuilds it)"))
    if index_path.exists():
        offset_index = OffsetIndex(
            index_path, base, max(index_path.stat().st_size, 8), writable=False
        )
        try:
            offset_index.sanity_check()
            with open(log_path, "rb") as f:
                for n in range(offset_index.entries):
                    entry = offset_index.entry(n)
                    if entry.offset == base and entry.position == 0 and n > 0:
                        problems.append(
                            Problem(
                                index_path,
                                f"entry {n} is zero (preallocated "
                                "space not trimmed: unclean shutdown?)",
                            )
                        )
                        break
                    raw = os.pread(f.fileno(), RECORD_BATCH_OVERHEAD, entry.position)
                    try:
                        header = BatchHeader.parse(raw)
                    except CorruptRecordError:
                        problems.append(
                            Problem(
                                index_path,
                                f"entry {n} (offset {entry.offset})"
                                f" points at position {entry.position}, where "
                                "no batch starts",
                            )
                        )
                        continue
                    if header.last_offset != entry.offset:
                        problems.append(
                            Problem(
                                index_path,
                                f"entry {n}: index offset "
                                f"{entry.offset}, log offset "
                                f"{header.last_offset} at position "
                                f"{entry.position}",
                            )
                        )
        except CorruptIndexError as e:
            problems.append(Problem(index_path, str(e)))
        finally:
            offset_index.close_handler()
    if time_path.exists():
        time_index = TimeIndex(time_path, base, max(time_path.stat().st_size, 12), writable=False)
        try:
            time_index.sanity_check()
            previous = -1
            for n in range(time_index.entries):
                ts_entry = time_index.entry(n)
                if ts_entry.timestamp <= previous:
                    problems.append(
                        Problem(
                            time_path,
                            f"entry {n}: timestamp "
                            f"{ts_entry.timestamp} not above the previous "
                            f"{previous}",
                        )
                    )
                    break
                if ts_entry.timestamp > summary.max_timestamp >= 0:
                    problems.append(
                        Problem(
                            time_path,
                            f"entry {n}: timestamp "
                            f"{ts_entry.timestamp} is later than any record in "
                            f"the segment ({summary.max_timestamp})",
                        )
                    )
                previous = ts_entry.timestamp
        except CorruptIndexError as e:
            problems.append(Problem(time_path, str(e)))
        finally:
            time_index.close_handler()


def verify_partition_dir(dir_: Path) -> list[Problem]:
    """Every check for one ``<topic>-<partition>`` directory."""
    problems: list[Problem] = []
    logs = sorted(dir_.glob(f"*{file_names.LOG_SUFFIX}"))
    if not logs:
        problems.append(Problem(dir_, "no .log segment file"))
    previous_next = None
    epochs: list[tuple[int, int]] = []
    for log_path in logs:
        try:
            base = file_names.offset_from_file_name(log_path.name)
        except ValueError as e:
            problems.append(Problem(log_path, str(e)))
            continue
        if previous_next is not None and base < previous_next:
            problems.append(
                Problem(
                    log_path,
                    f"segment starts at {base} but the previous one ends at {previous_next - 1}",
                )
            )
        summary = scan_segment(log_path, base, problems)
        check_indexes(dir_, summary, problems)
        previous_next = summary.next_offset
        for epoch, start in summary.epochs:
            if not epochs or epoch > epochs[-1][0]:
                epochs.append((epoch, start))
    for name in os.listdir(dir_):
        if name.endswith(file_names.TEMP_SUFFIXES):
            problems.append(
                Problem(dir_ / name, "temporary file left over (recovery removes or completes it)")
            )
    checkpoint = dir_ / LEADER_EPOCH_CHECKPOINT_FILE
    if checkpoint.exists():
        try:
            stored = [
                (e.epoch, e.start_offset) for e in LeaderEpochCheckpointFile(checkpoint).read()
            ]
        except KafkaError as e:
            problems.append(Problem(checkpoint, e.message))
        else:
            in_log = [e for e in epochs if e[1] < (previous_next or 0)]
            missing = [
                e for e in in_log if e not in stored and e[0] > (stored[-1][0] if stored else -1)
            ]
            if missing:
                problems.append(
                    Problem(
                        checkpoint, f"epochs {missing} appear in the log but not in the checkpoint"
                    )
                )
    return problems


def verify_log_dir(dir_: Path) -> list[Problem]:
    """Checkpoints of a log dir and every partition directory in it."""
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
