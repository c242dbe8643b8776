"""``kafkasim demo storage``: the storage engine at work, narrated, on a fresh directory.

Writes batches into a small-segment log, shows the files Kafka users know, looks records up by
offset and by timestamp, applies retention, simulates a crash that tears the tail of the active
segment, recovers, and dumps a segment — then checks the log with ``verify-log``.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from kafkasim.cli import demo_cluster
from kafkasim.cli.dump_log import dump_log_file
from kafkasim.common.clock import ManualClock
from kafkasim.common.types import TopicPartition
from kafkasim.storage.config import LogConfig
from kafkasim.storage.log import Log
from kafkasim.storage.records.batch import RecordBatchBuilder
from kafkasim.storage.records.entry import decode_entries
from kafkasim.storage.verify import verify


def register(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser("demo", help="narrated demonstrations")
    p.add_argument("what", choices=["cluster", "storage"], help="which demonstration")
    p.add_argument(
        "--dir",
        type=Path,
        default=None,
        help="where to put the log (default: a temporary directory, removed after)",
    )
    p.add_argument(
        "--batches", type=int, default=300, help="storage: batches to write (default 300)"
    )
    p.add_argument("--quick", action="store_true", help="cluster: a shorter run")
    p.set_defaults(func=run)


@contextlib.contextmanager
def _workdir(path: Path | None) -> Iterator[Path]:
    if path is not None:
        path.mkdir(parents=True, exist_ok=True)
        yield path
        return
    tmp = Path(tempfile.mkdtemp(prefix="kafkasim-demo-"))
    try:
        yield tmp
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _step(title: str) -> None:
    print(f"\n== {title}")


def run(args: argparse.Namespace) -> int:
    if args.what == "cluster":
        return demo_cluster.run(args.dir, args.quick)
    if args.batches < 10:
        raise ValueError("--batches must be at least 10")
    with _workdir(args.dir) as root:
        return _storage_demo(root, args.batches)


def _storage_demo(root: Path, batch_count: int) -> int:
    clock = ManualClock(1_700_000_000_000)
    tp = TopicPartition("demo", 0)
    part_dir = root / tp.dir_name()
    if part_dir.exists():
        shutil.rmtree(part_dir)
    config = LogConfig.from_props(
        {
            "segment.bytes": 16 * 1024,
            "index.interval.bytes": 1024,
            "retention.ms": 60_000,
            "file.delete.delay.ms": 0,
        }
    )
    _step(f"write {batch_count} batches of 10 records into {part_dir}")
    log = Log.open(part_dir, config, clock, topic_partition=tp)
    for i in range(batch_count):
        builder = RecordBatchBuilder()
        for j in range(10):
            builder.append(clock.time_ms(), f"key-{j}".encode(), f"value-{i}-{j}".encode())
        log.append_as_leader(builder.build(), leader_epoch=0 if i < batch_count // 2 else 1)
        clock.advance(1_000)
    log.update_high_watermark(log.log_end_offset)
    print(
        f"log end offset {log.log_end_offset}, {log.num_segments} segments "
        f"(segment.bytes=16384), {log.size_in_bytes} bytes"
    )
    print(f"leader epochs: {[(e.epoch, e.start_offset) for e in log.epoch_cache.entries()]}")
    names = sorted(os.listdir(part_dir))
    print("files: " + " ".join(names[:7]) + (" ..." if len(names) > 7 else ""))

    _step("look up by offset and by timestamp")
    target = log.log_end_offset // 2
    fetched = log.read(target, 400)
    header, records = next(decode_entries(fetched.records))
    record = next(r for r in records if r.offset >= target)
    print(
        f"read(offset={target}) -> batch {records[0].offset}..{header.last_offset} from "
        f"segment {fetched.segment_base_offset} at position {fetched.position}; record "
        f"{record.offset} = {record.value!r}"
    )
    when = 1_700_000_000_000 + (batch_count // 3) * 1_000 + 500
    found = log.fetch_offset_by_timestamp(when)
    print(
        f"offset for timestamp {when}: {found.offset if found else None} "
        f"(first record at or after it)"
    )

    _step("retention: retention.ms=60000, the clock is now past most segments")
    before = log.num_segments
    deleted = log.delete_old_segments()
    log.run_pending_deletions()
    print(f"deleted {deleted} of {before} segments; log start offset is now {log.log_start_offset}")

    _step("crash: tear the last batch of the active segment, then recover")
    log.flush()
    active = log.active_segment.log.path
    leo_before = log.log_end_offset
    log.close_handlers()  # no clean shutdown
    size = active.stat().st_size
    with open(active, "r+b") as f:
        f.truncate(size - 37)
    recovered = Log.open(
        part_dir,
        config,
        clock,
        topic_partition=tp,
        recovery_point=0,
        log_start_offset=log.log_start_offset,
    )
    print(
        f"log end offset {leo_before} before the crash, {recovered.log_end_offset} after "
        f"recovery: the torn batch was truncated, every whole batch kept"
    )

    _step(f"dump-log of {active.name} (first lines)")
    recovered.close()
    with contextlib.redirect_stdout(_Head(8)) as head:
        dump_log_file(active, deep=False, print_data=False, max_message_size=1 << 20)
    head.flush_out()

    _step("verify-log")
    problems = verify(part_dir)
    for problem in problems:
        print(f"PROBLEM {problem}")
    print("no problems found" if not problems else f"{len(problems)} problem(s)")
    return 0 if not problems else 2


class _Head:
    """A stdout stand-in that keeps the first ``n`` lines."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.lines: list[str] = []
        self._buf = ""

    def write(self, text: str) -> int:
        self._buf += text
        return len(text)

    def flush(self) -> None:
        pass

    def flush_out(self) -> None:
        lines = self._buf.splitlines()
        for line in lines[: self.n]:
            print(line)
        if len(lines) > self.n:
            print(f"... ({len(lines) - self.n} more lines)")
