"""A roll's fsync off the event loop (storage/roll_flush.py): the append that rolls returns
before the old segment is on disk, the recovery point moves only once it is, a truncation in
between keeps the recovery point where the truncation put it, a failed fsync takes the log dir
offline, and the log manager applies finished flushes on its tick and before its final
checkpoints. Without a background writer (the simulation) the roll fsyncs at once, as before."""

from __future__ import annotations

import errno
import os
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from kafkasim.common.clock import ManualClock
from kafkasim.common.types import TopicPartition
from kafkasim.storage import roll_flush
from kafkasim.storage.checkpoint_writer import BackgroundCheckpointWriter
from kafkasim.storage.checkpoints import RECOVERY_POINT_CHECKPOINT_FILE, OffsetCheckpointFile
from kafkasim.storage.config import LogConfig
from kafkasim.storage.log import Log
from kafkasim.storage.log_manager import LogManager
from kafkasim.storage.roll_flush import RollFlushes
from tests.unit.storage.test_log_manager import NOW_MS, one_record

TP = TopicPartition("orders", 0)
WAIT_S = 30
# Small segments: a roll every few records.
CONFIG = LogConfig.from_props({"segment.bytes": 1024})
VALUE = b"v" * 300


class HeldWriter:
    """A background writer whose writes run only when the test says so."""

    in_background = True

    def __init__(self) -> None:
        self.writes: list[tuple[str, Callable[[], None]]] = []

    def submit(self, what: str, write: Callable[[], None]) -> None:
        self.writes.append((what, write))

    def run_all(self) -> None:
        writes, self.writes = self.writes, []
        for _, write in writes:
            write()

    def drain(self) -> None:
        self.run_all()

    def close(self) -> None:
        self.run_all()


class FsyncedFiles:
    """Records the file names the background flush fsyncs (and can make it fail)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.names: list[str] = []
        self.error: OSError | None = None
        real = os.fsync

        def fsync(fd: int) -> None:
            self.names.append(Path(os.readlink(f"/proc/self/fd/{fd}")).name)
            if self.error is not None:
                raise self.error
            real(fd)

        monkeypatch.setattr(roll_flush, "_fsync", fsync)


@pytest.fixture
def held() -> HeldWriter:
    return HeldWriter()


def log_with(root: Path, writer: HeldWriter | None) -> Log:
    log = Log.open(root / TP.dir_name(), CONFIG, ManualClock(NOW_MS), topic_partition=TP)
    if writer is not None:
        log.roll_flushes = RollFlushes(writer, str(TP))
    return log


def append_until_roll(log: Log) -> int:
    """Append until the log rolls; the new active segment's base offset."""
    segments = len(log.segments)
    while len(log.segments) == segments:
        log.append_as_leader(one_record(value=VALUE), leader_epoch=0)
    return log.segments.active.base_offset


def test_the_roll_returns_first_and_the_recovery_point_moves_once_the_fsync_is_done(
    tmp_path: Path, held: HeldWriter, monkeypatch: pytest.MonkeyPatch
) -> None:
    fsynced = FsyncedFiles(monkeypatch)
    log = log_with(tmp_path, held)
    rolled_at = append_until_roll(log)
    assert rolled_at > 0
    assert log.recovery_point == 0  # nothing on disk yet: the fsync waits on the writer
    assert [what for what, _ in held.writes] == [f"flush of {TP} below offset {rolled_at}"]
    assert fsynced.names == []
    log.apply_background_flushes()
    assert log.recovery_point == 0

    held.run_all()
    old = f"{0:020d}"
    assert sorted(fsynced.names) == sorted([f"{old}.log", f"{old}.index", f"{old}.timeindex"])
    assert log.recovery_point == 0  # applied by the log's own thread, not the writer's
    log.apply_background_flushes()
    assert log.recovery_point == rolled_at
    assert log.segments.first is not None
    assert log.segments.first.log.flushed_size == log.segments.first.size


def test_without_a_background_writer_the_roll_fsyncs_at_once(tmp_path: Path) -> None:
    log = log_with(tmp_path, None)
    rolled_at = append_until_roll(log)
    assert log.recovery_point == rolled_at


def test_a_truncation_before_the_flush_ends_keeps_the_recovery_point_it_set(
    tmp_path: Path, held: HeldWriter
) -> None:
    log = log_with(tmp_path, held)
    append_until_roll(log)
    log.truncate_to(1)  # a follower's truncation into the rolled segment
    assert log.log_end_offset == 1
    held.run_all()
    log.apply_background_flushes()
    assert log.recovery_point == 0  # not rolled_at: that is past the log's end now
    # Appends after the truncation are flushed by a later roll as usual.
    again = append_until_roll(log)
    held.run_all()
    log.apply_background_flushes()
    assert log.recovery_point == again


def test_a_failed_fsync_is_an_io_error_of_the_log_dir(
    tmp_path: Path, held: HeldWriter, monkeypatch: pytest.MonkeyPatch
) -> None:
    fsynced = FsyncedFiles(monkeypatch)
    fsynced.error = OSError(errno.EIO, "Input/output error")
    log = log_with(tmp_path, held)
    reported: list[OSError] = []
    log.on_io_error = reported.append
    append_until_roll(log)
    held.run_all()
    assert reported == []  # told on the log's thread
    log.apply_background_flushes()
    assert reported == [fsynced.error]
    assert log.recovery_point == 0


def test_the_files_stay_valid_when_the_log_is_deleted_before_the_flush(
    tmp_path: Path, held: HeldWriter
) -> None:
    log = log_with(tmp_path, held)
    append_until_roll(log)
    log.delete()
    held.run_all()  # fsyncs the files it opened at the roll: no error
    assert log.roll_flushes is not None
    (done,) = log.roll_flushes.take_done()
    assert done.error is None


@pytest.fixture
def writer() -> Iterator[BackgroundCheckpointWriter]:
    made = BackgroundCheckpointWriter("test-roll-flush")
    yield made
    made.close()


def test_a_broker_process_appends_on_while_the_rolled_segment_is_fsynced(
    tmp_path: Path, writer: BackgroundCheckpointWriter, monkeypatch: pytest.MonkeyPatch
) -> None:
    entered, release = threading.Event(), threading.Event()
    threads: list[str] = []
    real = os.fsync

    def slow_fsync(fd: int) -> None:
        threads.append(threading.current_thread().name)
        entered.set()
        if not release.wait(WAIT_S):
            raise AssertionError("the fsync was never released")
        real(fd)

    monkeypatch.setattr(roll_flush, "_fsync", slow_fsync)
    manager = LogManager([tmp_path], CONFIG, ManualClock(NOW_MS), checkpoint_writer=writer)
    manager.startup()
    log = manager.get_or_create_log(TP)
    rolled_at = append_until_roll(log)
    assert entered.wait(WAIT_S)  # the writer's thread is inside the fsync...
    log.append_as_leader(one_record(), leader_epoch=0)  # ...and appends go on meanwhile
    assert threads and all(t.startswith("test-roll-flush") for t in threads)
    manager.tick()
    assert log.recovery_point == 0
    release.set()
    writer.drain()
    manager.tick()
    assert log.recovery_point == rolled_at
    end = log.log_end_offset
    manager.shutdown()
    checkpoint = OffsetCheckpointFile(tmp_path / RECOVERY_POINT_CHECKPOINT_FILE).read()
    assert checkpoint == {TP: end}
