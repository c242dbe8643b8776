"""The fuzzing harness of issue 20 (items 6, 7, 9), kept as a test.

A few hundred mutated copies of one log dir (a v2 partition with two leader epochs, gzip and
idempotent batches, a producer snapshot, and a v1 partition as Kafka 0.10 wrote it): bit flips,
truncations, deleted and renamed segments, rewritten base offsets, corrupted indexes, snapshots
and meta.properties, record-level corruption with a recomputed CRC. For each one:

* ``verify-log`` raises nothing and reports at least one problem (every corruption is flagged);
* ``dump-log`` of every file raises nothing;
* recovery (an unclean start from offset 0) raises nothing and keeps every record below the
  first damaged batch, at its offset, with its value.

Seeded, so a failure names its case and reproduces; sized to run in seconds.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import random
import shutil
import struct
from dataclasses import dataclass
from pathlib import Path

import pytest

from kafkasim.cli import dump_log
from kafkasim.common.clock import ManualClock
from kafkasim.common.types import TopicPartition
from kafkasim.storage.checkpoints import write_meta_properties
from kafkasim.storage.config import LogConfig
from kafkasim.storage.log import Log
from kafkasim.storage.records.batch import (
    ATTRIBUTES_OFFSET,
    RECORDS_COUNT_OFFSET,
    RecordBatchBuilder,
    compute_crc,
    decode_batch,
    iter_batches,
)
from kafkasim.storage.records.compression import CompressionType
from kafkasim.storage.records.entry import parse_entry_header
from kafkasim.storage.records.legacy import decode_legacy
from kafkasim.storage.verify import verify
from tests.unit.storage.legacy_logs import write_legacy_partition

CASES = 200
T0 = 1_700_000_000_000
NOTHING_LOST = 2**62  # a mutation that damages no batch: every record must survive
PROPS = {"segment.bytes": 1500, "index.interval.bytes": 120}


@dataclass(frozen=True)
class Entry:
    """One batch (or v0/v1 message) of the pristine dir."""

    path: Path  # relative to the log dir
    position: int
    size: int
    first_offset: int
    last_offset: int
    v2: bool


def _build(root: Path) -> None:
    log = Log.open(
        root / "topic-0",
        LogConfig.from_props(PROPS),
        ManualClock(T0),
        topic_partition=TopicPartition("topic", 0),
    )
    rng = random.Random(7)
    sequence = 0
    for i in range(60):
        idempotent = i % 5 == 0
        builder = RecordBatchBuilder(
            compression=CompressionType.GZIP if i % 4 == 1 else CompressionType.NONE,
            producer_id=42 if idempotent else -1,
            producer_epoch=0 if idempotent else -1,
            base_sequence=sequence if idempotent else -1,
        )
        count = rng.randint(1, 3)
        for j in range(count):
            builder.append(T0 + i, b"k%d" % rng.randrange(10), b"value-%d-%d" % (i, j))
        sequence += count if idempotent else 0
        log.append_as_leader(builder.build(), leader_epoch=0 if i < 30 else 1)
    log.close()
    write_legacy_partition(root / "old-0", magic=1, segments=3)
    write_meta_properties(root, 1, None)


def _entries(root: Path) -> list[Entry]:
    out: list[Entry] = []
    for seg in sorted(root.glob("*/*.log")):
        data = seg.read_bytes()
        rel = seg.relative_to(root)
        if seg.parent.name == "topic-0":
            for position, header in iter_batches(data):
                out.append(
                    Entry(
                        rel,
                        position,
                        header.size_in_bytes,
                        header.base_offset,
                        header.last_offset,
                        True,
                    )
                )
            continue
        position = 0
        for message in decode_legacy(data, deep=False):
            inner = decode_legacy(data[position : position + message.size_in_bytes])
            out.append(
                Entry(rel, position, message.size_in_bytes, inner[0].offset, message.offset, False)
            )
            position += message.size_in_bytes
    return out


def _records(log: Log, below: int) -> list[tuple[int, bytes | None]]:
    """Every record below ``below``, read through the log as a consumer fetches."""
    out: list[tuple[int, bytes | None]] = []
    offset = log.log_start_offset
    while offset < min(below, log.log_end_offset):
        data = log.read(offset, 1 << 16).records
        if not data:
            break
        position, progressed = 0, False
        while position < len(data) and offset < below:
            header = parse_entry_header(data, position)
            chunk = data[position : position + header.size_in_bytes]
            if header.magic == 2:
                records = [(r.offset, r.value) for r in decode_batch(chunk)[1]]
            else:
                records = [(m.offset, m.value) for m in decode_legacy(chunk)]
            out.extend(r for r in records if offset <= r[0] < below)
            offset = max(offset, header.last_offset + 1)
            position += header.size_in_bytes
            progressed = True
        if not progressed:
            break
    return out


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[Entry], dict[str, list]]:
    root = tmp_path_factory.mktemp("pristine")
    _build(root)
    assert verify(root) == [], [str(p) for p in verify(root)]
    records: dict[str, list] = {}
    for name in ("topic-0", "old-0"):
        log = _open(root / name)
        records[name] = _records(log, NOTHING_LOST)
        log.close()
    assert len(records["topic-0"]) > 60 and len(records["old-0"]) > 30
    return root, _entries(root), records


def _open(dir_: Path) -> Log:
    return Log.open(
        dir_,
        LogConfig.from_props(PROPS),
        ManualClock(T0),
        topic_partition=TopicPartition.from_dir_name(dir_.name),
        had_clean_shutdown=False,
        recovery_point=0,
    )


def _flip(path: Path, rng: random.Random, lo: int = 0, hi: int | None = None) -> int:
    data = bytearray(path.read_bytes())
    at = rng.randrange(lo, len(data) if hi is None else hi)
    data[at] ^= 1 << rng.randrange(8)
    path.write_bytes(bytes(data))
    return at


def _segment_files(path: Path, base: int) -> list[Path]:
    return [path.with_name(f"{base:020d}{s}") for s in (".log", ".index", ".timeindex")]


KINDS = (
    "bitflip",
    "truncate",
    "delete",
    "rename",
    "base_offset",
    "index",
    "snapshot",
    "meta",
    "records",
)


def _pick(rng: random.Random) -> tuple[str, str]:
    """A kind of damage and the partition it hits (the v1 one for flips and truncations)."""
    kind = rng.choice(KINDS)
    partition = "old-0" if kind in ("bitflip", "truncate") and rng.random() < 0.3 else "topic-0"
    return kind, partition


def _mutate(root: Path, entries: list[Entry], rng: random.Random, kind: str, partition: str) -> int:
    """Damage the copy at ``root``; returns the first damaged offset."""
    mine = [e for e in entries if e.path.parent.name == partition]
    segments = sorted({e.path for e in mine})
    if kind == "bitflip":
        entry = rng.choice(mine)
        _flip(root / entry.path, rng, entry.position, entry.position + entry.size)
        return entry.first_offset
    if kind == "truncate":
        entry = rng.choice(mine)
        cut = entry.position + rng.randrange(1, entry.size)
        with open(root / entry.path, "r+b") as f:
            f.truncate(cut)
        return entry.first_offset
    if kind in ("delete", "rename"):
        seg = rng.choice(segments[1:-1])
        base = int(seg.name[:20])
        if kind == "delete":
            for path in _segment_files(root / seg, base):
                path.unlink()
        else:
            new_base = base + rng.choice([-3, -1, 1, 2, 50])
            for path, target in zip(
                _segment_files(root / seg, base), _segment_files(root / seg, new_base), strict=True
            ):
                path.rename(target)
        return base
    if kind == "base_offset":
        entry = rng.choice(mine)
        data = bytearray((root / entry.path).read_bytes())
        delta = rng.choice([-300, -40, -2, -1, 1, 3, 170, 2**40])
        (current,) = struct.unpack_from(">q", data, entry.position)
        struct.pack_into(">q", data, entry.position, current + delta)
        (root / entry.path).write_bytes(bytes(data))
        return entry.first_offset
    if kind == "index":
        candidates = [
            p
            for s in segments
            for p in _segment_files(root / s, int(s.name[:20]))[1:]
            if p.stat().st_size > 0
        ]
        _flip(rng.choice(candidates), rng)
        return NOTHING_LOST
    if kind == "snapshot":
        _flip(rng.choice(sorted((root / partition).glob("*.snapshot"))), rng)
        return NOTHING_LOST
    if kind == "meta":
        (root / "meta.properties").write_text(
            rng.choice(
                [
                    "version=9\nbroker.id=1\n",
                    "version=0\nbroker.id=x\n",
                    "version=0\n",
                    "broker.id=1\n",
                    "version=0\nbroker.id=\\uZZ\n",
                ]
            )
        )
        return NOTHING_LOST
    entry = rng.choice([e for e in mine if e.v2])
    data = bytearray((root / entry.path).read_bytes())
    p = entry.position
    how = rng.randrange(4)
    if how == 0:
        struct.pack_into(">i", data, p + RECORDS_COUNT_OFFSET, rng.choice([5, 1000, 2**31 - 1]))
    elif how == 1:
        for i in range(p + 61, p + entry.size):
            data[i] = rng.randrange(256)
    else:
        (attributes,) = struct.unpack_from(">h", data, p + ATTRIBUTES_OFFSET)
        codec = 5 if how == 2 else (2 if attributes & 7 == 1 else 1)  # unknown, or wrong codec
        struct.pack_into(">h", data, p + ATTRIBUTES_OFFSET, (attributes & ~7) | codec)
    struct.pack_into(">I", data, p + 17, compute_crc(data, p, entry.size))
    (root / entry.path).write_bytes(bytes(data))
    return entry.first_offset


def _dump_everything(root: Path) -> None:
    files = [p for p in sorted(root.glob("*/*")) if p.suffix != ".checkpoint" and p.is_file()]
    args = argparse.Namespace(
        files=",".join(map(str, files)),
        offsets_decoder=False,
        print_data_log=True,
        deep_iteration=True,
        index_sanity_check=False,
        verify_index_only=False,
        max_message_size=5 * 1024 * 1024,
    )
    with contextlib.redirect_stdout(io.StringIO()):
        dump_log.run(args)


def test_mutated_log_dirs_are_flagged_dumped_and_recovered_without_loss(
    pristine: tuple[Path, list[Entry], dict[str, list]], tmp_path: Path
) -> None:
    root, entries, records = pristine
    kinds: dict[str, int] = {}
    for case in range(CASES):
        rng = random.Random(case)
        kind, partition = _pick(rng)
        copy = tmp_path / f"case-{case}"
        shutil.copytree(root / partition, copy / partition)
        shutil.copy(root / "meta.properties", copy)
        first_bad = _mutate(copy, entries, rng, kind, partition)
        kinds[kind] = kinds.get(kind, 0) + 1
        where = f"case {case} ({kind} in {partition}, first damaged offset {first_bad})"
        assert verify(copy), f"{where}: verify-log found nothing"
        _dump_everything(copy)
        log = _open(copy / partition)
        try:
            kept = _records(log, first_bad)
        finally:
            log.close()
        expected = [r for r in records[partition] if r[0] < first_bad]
        assert kept == expected, f"{where}: recovery lost records below the damage"
        shutil.rmtree(copy)
    assert len(kinds) == 9, kinds
