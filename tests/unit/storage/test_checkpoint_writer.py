"""Checkpoint files written off the caller's thread (storage.checkpoint_writer): a broker
process's event loop does not wait for a checkpoint's fsyncs, the files are written in the
order asked for, and a clean shutdown's final checkpoints come after every older write."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from kafkasim.common.clock import ManualClock
from kafkasim.common.types import TopicPartition
from kafkasim.storage.checkpoint_writer import BackgroundCheckpointWriter, InlineCheckpointWriter
from kafkasim.storage.checkpoints import REPLICATION_OFFSET_CHECKPOINT_FILE, OffsetCheckpointFile
from kafkasim.storage.config import LogConfig
from kafkasim.storage.log import Log
from kafkasim.storage.log_manager import LogManager
from tests.unit.storage.test_log_manager import NOW_MS, one_record

TP = TopicPartition("orders", 0)
WAIT_S = 30


@pytest.fixture
def writer() -> Iterator[BackgroundCheckpointWriter]:
    made = BackgroundCheckpointWriter("test-checkpoints")
    yield made
    made.close()


class HeldWrites:
    """Replaces OffsetCheckpointFile.write: each write waits for ``release`` and records the
    thread it ran on and the entries it wrote."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.release = threading.Event()
        self.started = threading.Event()
        self.threads: list[str] = []
        real = OffsetCheckpointFile.write

        def held(file: OffsetCheckpointFile, entries: dict[TopicPartition, int]) -> None:
            self.threads.append(threading.current_thread().name)
            self.started.set()
            assert self.release.wait(WAIT_S)
            real(file, entries)

        monkeypatch.setattr(OffsetCheckpointFile, "write", held)


def manager_with(
    root: Path, writer: BackgroundCheckpointWriter, records: int = 1
) -> tuple[LogManager, Log]:
    """A started manager writing through ``writer``, and a log of ``records`` records."""
    manager = LogManager(
        [root], LogConfig.from_props({}), ManualClock(NOW_MS), checkpoint_writer=writer
    )
    manager.startup()
    log = manager.get_or_create_log(TP)
    for _ in range(records):
        log.append_as_leader(one_record(), leader_epoch=0)
    return manager, log


def test_a_checkpoint_is_written_on_the_writers_thread_and_the_caller_does_not_wait(
    tmp_path: Path, writer: BackgroundCheckpointWriter, monkeypatch: pytest.MonkeyPatch
) -> None:
    manager, log = manager_with(tmp_path, writer, records=3)
    log.update_high_watermark(3)
    held = HeldWrites(monkeypatch)

    manager.checkpoint_high_watermarks()  # returns while the write is held

    assert held.started.wait(WAIT_S)
    assert not (tmp_path / REPLICATION_OFFSET_CHECKPOINT_FILE).exists()
    held.release.set()
    writer.drain()
    assert held.threads[0].startswith("test-checkpoints")
    assert held.threads[0] != threading.current_thread().name
    assert OffsetCheckpointFile(tmp_path / REPLICATION_OFFSET_CHECKPOINT_FILE).read() == {TP: 3}
    manager.shutdown()


def test_the_file_holds_the_offsets_of_when_the_write_was_asked_for_and_the_newest_wins(
    tmp_path: Path, writer: BackgroundCheckpointWriter, monkeypatch: pytest.MonkeyPatch
) -> None:
    manager, log = manager_with(tmp_path, writer, records=5)
    held = HeldWrites(monkeypatch)
    log.update_high_watermark(2)
    manager.checkpoint_high_watermarks()  # snapshot: 2
    log.update_high_watermark(4)
    manager.checkpoint_high_watermarks()  # snapshot: 4, queued behind the first
    held.release.set()
    writer.drain()
    assert OffsetCheckpointFile(tmp_path / REPLICATION_OFFSET_CHECKPOINT_FILE).read() == {TP: 4}
    manager.shutdown()


def test_a_clean_shutdown_writes_its_checkpoints_after_every_older_write(
    tmp_path: Path, writer: BackgroundCheckpointWriter, monkeypatch: pytest.MonkeyPatch
) -> None:
    manager, log = manager_with(tmp_path, writer, records=5)
    held = HeldWrites(monkeypatch)
    log.update_high_watermark(1)
    manager.checkpoint_high_watermarks()  # held: an old snapshot still on its way
    assert held.started.wait(WAIT_S)
    log.update_high_watermark(5)
    threading.Timer(0.2, held.release.set).start()

    manager.shutdown()  # waits for the held write, then writes HW 5 itself

    assert OffsetCheckpointFile(tmp_path / REPLICATION_OFFSET_CHECKPOINT_FILE).read() == {TP: 5}
    assert held.threads[-1] == threading.current_thread().name  # the final ones: inline
    reopened = LogManager([tmp_path], LogConfig.from_props({}), ManualClock(NOW_MS))
    reopened.startup()
    again = reopened.get_log(TP)
    assert again is not None and again.high_watermark == 5
    reopened.shutdown()


def test_a_failed_background_write_is_logged_and_the_next_one_goes_through(
    tmp_path: Path,
    writer: BackgroundCheckpointWriter,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    manager, log = manager_with(tmp_path, writer)
    log.update_high_watermark(1)
    real = OffsetCheckpointFile.write
    calls: list[int] = []

    def flaky(file: OffsetCheckpointFile, entries: dict[TopicPartition, int]) -> None:
        calls.append(1)
        if len(calls) == 1:
            raise OSError(5, "Input/output error")
        real(file, entries)

    monkeypatch.setattr(OffsetCheckpointFile, "write", flaky)
    caplog.set_level(logging.ERROR, logger="kafkasim.storage.checkpoint_writer")
    manager.checkpoint_high_watermarks()
    writer.drain()
    assert writer.failures == 1
    assert "writing the replication-offset-checkpoint checkpoint failed" in caplog.text
    manager.checkpoint_high_watermarks()
    writer.drain()
    assert OffsetCheckpointFile(tmp_path / REPLICATION_OFFSET_CHECKPOINT_FILE).read() == {TP: 1}
    manager.shutdown()


def test_after_close_a_write_is_inline_and_the_inline_writer_writes_at_once(
    tmp_path: Path,
) -> None:
    done: list[str] = []
    closed = BackgroundCheckpointWriter("closed")
    closed.close()
    closed.submit("x", lambda: done.append(threading.current_thread().name))
    InlineCheckpointWriter().submit("y", lambda: done.append(threading.current_thread().name))
    assert done == [threading.current_thread().name] * 2
