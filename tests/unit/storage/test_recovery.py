"""Crash recovery (the loader): every damaged log recovers to its longest valid prefix.

A template log is written once per test, copied, damaged in one place, then reopened as
after an unclean shutdown. Recovery must never raise, never serve a batch whose CRC fails,
and keep every batch that lies wholly before the damage.
"""

from __future__ import annotations

import random
import shutil
from pathlib import Path

import pytest

from kafkasim.common.clock import ManualClock
from kafkasim.common.types import TopicPartition
from kafkasim.storage.config import LogConfig
from kafkasim.storage.log import Log
from kafkasim.storage.records.batch import CRC_OFFSET, RECORD_BATCH_OVERHEAD, BatchHeader
from kafkasim.storage.verify import verify
from tests.unit.storage.logtools import T0, make_batch, read_all

CONFIG = {"segment.bytes": 2000, "index.interval.bytes": 150}
TP = TopicPartition("topic", 0)


def _write_template(root: Path, batches: int = 60) -> tuple[Path, list[tuple[int, int, int]]]:
    """A closed-uncleanly log; returns its dir and (file index, position, size) per batch."""
    clock = ManualClock(T0)
    log = Log.open(root / "topic-0", LogConfig.from_props(CONFIG), clock, topic_partition=TP)
    rng = random.Random(7)
    for i in range(batches):
        n = rng.randint(1, 4)
        log.append_as_leader(
            make_batch(
                [b"v%03d-%d" % (i, j) * rng.randint(1, 6) for j in range(n)],
                timestamps=[T0 + i] * n,
            ),
            leader_epoch=i // 20,
        )
    log.flush()
    log.close_handlers()
    layout = []
    for n, seg in enumerate(sorted((root / "topic-0").glob("*.log"))):
        data = seg.read_bytes()
        pos = 0
        while pos < len(data):
            size = BatchHeader.parse(data, pos).size_in_bytes
            layout.append((n, pos, size))
            pos += size
    return root / "topic-0", layout


def _recover(dir_: Path, **kwargs: int) -> Log:
    return Log.open(
        dir_,
        LogConfig.from_props(CONFIG),
        ManualClock(T0),
        topic_partition=TP,
        had_clean_shutdown=False,
        **kwargs,
    )


def _batch_offsets(dir_: Path) -> list[tuple[int, int]]:
    """(base, last) offset of every batch on disk, in order."""
    out = []
    for seg in sorted(dir_.glob("*.log")):
        data = seg.read_bytes()
        pos = 0
        while pos < len(data):
            h = BatchHeader.parse(data, pos)
            out.append((h.base_offset, h.last_offset))
            pos += h.size_in_bytes
    return out


def _check_sound(log: Log) -> list[int]:
    """The recovered log serves only valid batches, offsets dense from 0, and verifies."""
    offsets = [r.offset for r in read_all(log)]  # read_all verifies every CRC
    assert offsets == list(range(log.log_end_offset))
    log.append_as_leader(make_batch([b"after-recovery"]), leader_epoch=9)
    assert log.log_end_offset == len(offsets) + 1
    log.close()
    assert verify(log.dir) == []
    return offsets


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[tuple[int, int, int]]]:
    return _write_template(tmp_path_factory.mktemp("template"))


def _copy(template: Path, tmp_path: Path) -> Path:
    dest = tmp_path / "topic-0"
    shutil.copytree(template, dest)
    return dest


def test_template_has_several_segments(template: tuple[Path, list[tuple[int, int, int]]]) -> None:
    _, layout = template
    assert len({n for n, _, _ in layout}) >= 4


def test_cut_at_many_positions_recovers_the_whole_batches_before_the_cut(
    template: tuple[Path, list[tuple[int, int, int]]], tmp_path: Path
) -> None:
    src, layout = template
    segments = sorted(src.glob("*.log"))
    offsets_by_batch = _batch_offsets(src)
    rng = random.Random(2024)
    for trial in range(40):
        dir_ = _copy(src, tmp_path / f"cut{trial}")
        seg_no = rng.randrange(len(segments))
        seg = dir_ / segments[seg_no].name
        size = seg.stat().st_size
        cut = rng.randrange(size + 1)
        with open(seg, "r+b") as f:
            f.truncate(cut)
        whole = [
            i
            for i, (n, pos, sz) in enumerate(layout)
            if n < seg_no or (n == seg_no and pos + sz <= cut)
        ]
        expected_leo = offsets_by_batch[whole[-1]][1] + 1 if whole else 0
        log = _recover(dir_)
        assert log.log_end_offset == expected_leo, f"trial {trial}: cut {cut} of segment {seg_no}"
        _check_sound(log)


def test_flipped_byte_in_crc_covered_bytes_truncates_from_that_batch(
    template: tuple[Path, list[tuple[int, int, int]]], tmp_path: Path
) -> None:
    src, layout = template
    segments = sorted(src.glob("*.log"))
    offsets_by_batch = _batch_offsets(src)
    rng = random.Random(99)
    for trial in range(40):
        i = rng.randrange(len(layout))
        n, pos, size = layout[i]
        where = pos + rng.randrange(CRC_OFFSET, size)  # the CRC field itself or what it covers
        dir_ = _copy(src, tmp_path / f"flip{trial}")
        seg = dir_ / segments[n].name
        data = bytearray(seg.read_bytes())
        data[where] ^= 1 << rng.randrange(8)
        seg.write_bytes(bytes(data))
        log = _recover(dir_)
        assert log.log_end_offset == offsets_by_batch[i][0], f"trial {trial}: byte {where}"
        _check_sound(log)


@pytest.mark.parametrize("field", ["base_offset", "length", "leader_epoch", "magic"])
def test_flipped_byte_before_the_crc_never_breaks_recovery(
    template: tuple[Path, list[tuple[int, int, int]]], tmp_path: Path, field: str
) -> None:
    """Bytes 0-16 are outside the CRC (Kafka's design). A flipped length or magic is still
    caught (the CRC is computed over the wrong range; the magic is checked); a flipped base
    offset is caught when it breaks offset order; a flipped leader epoch cannot be detected.
    Whatever happens, recovery must not raise and must serve only sound batches."""
    src, layout = template
    segments = sorted(src.glob("*.log"))
    span = {"base_offset": (0, 8), "length": (8, 12), "leader_epoch": (12, 16), "magic": (16, 17)}[
        field
    ]
    rng = random.Random(field)
    for trial in range(15):
        n, pos, _ = layout[rng.randrange(len(layout))]
        dir_ = _copy(src, tmp_path / f"{field}{trial}")
        seg = dir_ / segments[n].name
        data = bytearray(seg.read_bytes())
        data[pos + rng.randrange(*span)] ^= 1 << rng.randrange(8)
        seg.write_bytes(bytes(data))
        log = _recover(dir_)
        records = read_all(log)
        offsets = [r.offset for r in records]
        assert offsets == sorted(set(offsets))
        log.close()


@pytest.mark.parametrize(
    "tail",
    [b"\x00" * 4096, b"garbage" * 100, bytes(range(256)) * 3],
    ids=["zero-filled", "text-garbage", "binary-garbage"],
)
def test_junk_after_the_last_batch_is_truncated(
    template: tuple[Path, list[tuple[int, int, int]]], tmp_path: Path, tail: bytes
) -> None:
    src, _ = template
    dir_ = _copy(src, tmp_path)
    last = sorted(dir_.glob("*.log"))[-1]
    leo = _batch_offsets(src)[-1][1] + 1
    with open(last, "ab") as f:
        f.write(tail)
    log = _recover(dir_)
    assert log.log_end_offset == leo
    assert last.stat().st_size == last.stat().st_size  # file exists, trimmed below
    _check_sound(log)


def test_damage_in_a_middle_segment_deletes_every_later_segment(
    template: tuple[Path, list[tuple[int, int, int]]], tmp_path: Path
) -> None:
    src, _ = template
    dir_ = _copy(src, tmp_path)
    segments = sorted(dir_.glob("*.log"))
    victim = segments[1]
    data = bytearray(victim.read_bytes())
    data[-3] ^= 0xFF
    victim.write_bytes(bytes(data))
    log = _recover(dir_)
    assert [s.base_offset for s in log.segments] == [int(p.name[:20]) for p in segments[:2]]
    assert not any((dir_ / p.name).exists() for p in segments[2:])
    _check_sound(log)


@pytest.mark.parametrize("which", [".index", ".timeindex"])
def test_missing_index_is_rebuilt_even_after_a_clean_shutdown(
    template: tuple[Path, list[tuple[int, int, int]]], tmp_path: Path, which: str
) -> None:
    src, _ = template
    dir_ = _copy(src, tmp_path)
    first = sorted(dir_.glob(f"*{which}"))[0]
    first.unlink()
    log = Log.open(
        dir_,
        LogConfig.from_props(CONFIG),
        ManualClock(T0),
        topic_partition=TP,
        had_clean_shutdown=True,
    )
    assert first.exists()
    _check_sound(log)


def test_index_longer_than_its_log_is_rebuilt(
    template: tuple[Path, list[tuple[int, int, int]]], tmp_path: Path
) -> None:
    """An index entry pointing past the end of the log means the index is stale."""
    src, _ = template
    dir_ = _copy(src, tmp_path)
    first_log = sorted(dir_.glob("*.log"))[0]
    index = first_log.with_suffix(".index")
    base = int(first_log.name[:20])
    with open(index, "ab") as f:
        f.write((10_000).to_bytes(4, "big") + (first_log.stat().st_size + 500).to_bytes(4, "big"))
    log = Log.open(
        dir_,
        LogConfig.from_props(CONFIG),
        ManualClock(T0),
        topic_partition=TP,
        had_clean_shutdown=True,
    )
    seg = log.segments.get(base)
    assert seg is not None and seg.offset_index.last_offset < 10_000 + base
    _check_sound(log)


def test_garbage_index_is_rebuilt(
    template: tuple[Path, list[tuple[int, int, int]]], tmp_path: Path
) -> None:
    src, _ = template
    dir_ = _copy(src, tmp_path)
    index = sorted(dir_.glob("*.index"))[1]
    index.write_bytes(b"\xff" * 13)  # not a multiple of 8
    log = Log.open(
        dir_,
        LogConfig.from_props(CONFIG),
        ManualClock(T0),
        topic_partition=TP,
        had_clean_shutdown=True,
    )
    _check_sound(log)


def test_temporary_files_are_cleared_and_orphan_indexes_removed(
    template: tuple[Path, list[tuple[int, int, int]]], tmp_path: Path
) -> None:
    src, _ = template
    dir_ = _copy(src, tmp_path)
    (dir_ / "00000000000000099999.log.deleted").write_bytes(b"old")
    (dir_ / "00000000000000099999.log.cleaned").write_bytes(b"half-cleaned")
    (dir_ / "00000000000000088888.index").write_bytes(b"\x00" * 8)
    leo = _batch_offsets(src)[-1][1] + 1
    log = _recover(dir_)
    names = {p.name for p in dir_.iterdir()}
    assert "00000000000000099999.log.deleted" not in names
    assert "00000000000000099999.log.cleaned" not in names
    assert "00000000000000088888.index" not in names
    assert log.log_end_offset == leo
    _check_sound(log)


def test_segments_below_the_recovery_point_are_not_reread(
    template: tuple[Path, list[tuple[int, int, int]]], tmp_path: Path
) -> None:
    """Kafka re-reads only from the segment holding the recovery point: what was flushed
    before it is trusted (a corrupted old segment is the job of verify-log, not recovery)."""
    src, _ = template
    dir_ = _copy(src, tmp_path)
    segments = sorted(dir_.glob("*.log"))
    data = bytearray(segments[0].read_bytes())
    data[-3] ^= 0xFF
    segments[0].write_bytes(bytes(data))
    leo = _batch_offsets(src)[-1][1] + 1
    log = _recover(dir_, recovery_point=int(segments[2].name[:20]))
    assert log.log_end_offset == leo
    log.close()
    assert any("CRC" in p.message for p in verify(dir_))


def test_log_start_checkpoint_beyond_the_log_end_empties_the_log(
    template: tuple[Path, list[tuple[int, int, int]]], tmp_path: Path
) -> None:
    src, _ = template
    dir_ = _copy(src, tmp_path)
    log = _recover(dir_, log_start_offset=10_000)
    assert (log.log_start_offset, log.log_end_offset, log.num_segments) == (10_000, 10_000, 1)
    assert log.epoch_cache.entries() == []
    log.close()


def test_epoch_cache_is_rebuilt_from_batches_when_its_file_is_lost(
    template: tuple[Path, list[tuple[int, int, int]]], tmp_path: Path
) -> None:
    src, _ = template
    dir_ = _copy(src, tmp_path)
    (dir_ / "leader-epoch-checkpoint").unlink()
    log = _recover(dir_)
    assert [e.epoch for e in log.epoch_cache.entries()] == [0, 1, 2]
    assert log.epoch_cache.entries()[0].start_offset == 0
    log.close()


def test_epoch_cache_is_cut_back_to_the_recovered_log_end(
    template: tuple[Path, list[tuple[int, int, int]]], tmp_path: Path
) -> None:
    src, _ = template
    dir_ = _copy(src, tmp_path)
    # Cut the log inside epoch 1: epoch 2's entry must go.
    offsets = _batch_offsets(src)
    first_epoch2 = offsets[40][0]
    for seg in sorted(dir_.glob("*.log"), reverse=True):
        if int(seg.name[:20]) >= first_epoch2 - 5:
            seg.unlink()
            seg.with_suffix(".index").unlink()
            seg.with_suffix(".timeindex").unlink()
    log = _recover(dir_)
    assert log.log_end_offset < offsets[-1][1] + 1
    entries = log.epoch_cache.entries()
    assert all(e.start_offset < log.log_end_offset for e in entries)
    last_batch = log.read(offsets_before(log.log_end_offset, offsets), 1 << 20).records
    assert BatchHeader.parse(last_batch).partition_leader_epoch == entries[-1].epoch
    _check_sound(log)


def offsets_before(end: int, offsets: list[tuple[int, int]]) -> int:
    """Base offset of the last batch that ends before ``end``."""
    return max(base for base, last in offsets if last < end)


def test_idempotent_duplicates_are_still_caught_after_a_crash(tmp_path: Path) -> None:
    clock = ManualClock(T0)
    log = Log.open(tmp_path / "topic-0", LogConfig.from_props(CONFIG), clock, topic_partition=TP)
    batch = make_batch([b"once"], producer_id=5, producer_epoch=0, base_sequence=0)
    log.append_as_leader(batch, leader_epoch=0)
    log.flush()
    log.close_handlers()
    log = _recover(tmp_path / "topic-0")
    info = log.append_as_leader(batch, leader_epoch=0)
    assert info.duplicate and log.log_end_offset == 1
    log.close()


def test_preallocated_segment_recovers_its_zero_tail(tmp_path: Path) -> None:
    config = {**CONFIG, "preallocate": True}
    clock = ManualClock(T0)
    log = Log.open(tmp_path / "topic-0", LogConfig.from_props(config), clock, topic_partition=TP)
    for i in range(5):
        log.append_as_leader(make_batch([b"v%d" % i]), leader_epoch=0)
    log.flush()
    log.close_handlers()
    active = sorted((tmp_path / "topic-0").glob("*.log"))[-1]
    assert active.stat().st_size == 2000  # preallocated to segment.bytes
    log = Log.open(
        tmp_path / "topic-0",
        LogConfig.from_props(config),
        clock,
        topic_partition=TP,
        had_clean_shutdown=False,
    )
    assert log.log_end_offset == 5
    _check_sound(log)


def test_header_sized_prefix_constant_is_what_recovery_needs() -> None:
    assert RECORD_BATCH_OVERHEAD == 61
