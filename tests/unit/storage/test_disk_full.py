"""A full disk: an append fails with KAFKA_STORAGE_ERROR and leaves the log as it was, the
log manager takes the dir offline (once) and tells the broker, and no new log is made there."""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path

import pytest

from kafkasim.common.clock import ManualClock
from kafkasim.common.errors import KafkaStorageError
from kafkasim.common.types import TopicPartition
from kafkasim.storage import disk_faults
from kafkasim.storage.config import LogConfig
from kafkasim.storage.log_manager import LogManager
from tests.unit.storage.logtools import T0, make_batch, open_log, read_all, reopen


@pytest.fixture(autouse=True)
def _free_disks() -> Iterator[None]:
    yield
    disk_faults.free_all()


def test_an_append_to_a_full_disk_fails_and_changes_nothing(tmp_path: Path) -> None:
    log, _ = open_log(tmp_path)
    errors: list[OSError] = []
    log.on_io_error = errors.append
    log.append_as_leader(make_batch([b"a", b"b"]), leader_epoch=0)
    size = log.segments.active.size
    disk_faults.fill([tmp_path])
    with pytest.raises(KafkaStorageError, match=r"topic-0 .*No space left on device"):
        log.append_as_leader(make_batch([b"c"]), leader_epoch=0)
    assert len(errors) == 1 and errors[0].errno == 28  # ENOSPC
    assert log.log_end_offset == 2
    assert log.segments.active.size == size
    disk_faults.free([tmp_path])
    info = log.append_as_leader(make_batch([b"d"]), leader_epoch=0)
    assert info.first_offset == 2
    assert [r.value for r in read_all(log)] == [b"a", b"b", b"d"]
    log.close()


def test_other_dirs_keep_their_space(tmp_path: Path) -> None:
    log, _ = open_log(tmp_path / "one")
    disk_faults.fill([tmp_path / "two"])
    assert log.append_as_leader(make_batch([b"a"]), leader_epoch=0).first_offset == 0
    log.close()


def test_the_log_manager_takes_the_dir_offline_once_and_says_so(tmp_path: Path) -> None:
    dirs = [tmp_path / "d1"]
    manager = LogManager(dirs, LogConfig.from_props({}), ManualClock(T0))
    manager.startup()
    failures: list[tuple[Path, str]] = []
    manager.on_dir_failure = lambda d, reason: failures.append((d, reason))
    log = manager.get_or_create_log(TopicPartition("t", 0))
    disk_faults.fill(dirs)
    for _ in range(2):
        with pytest.raises(KafkaStorageError):
            log.append_as_leader(make_batch([b"x"]), leader_epoch=0)
    assert manager.offline_dirs == {dirs[0]}
    assert len(failures) == 1
    assert failures[0][0] == dirs[0] and "No space left on device" in failures[0][1]
    with pytest.raises(KafkaStorageError, match=r"Can not create log for t-1: log dir .* offline"):
        manager.get_or_create_log(TopicPartition("t", 1))
    for open_log_ in manager.logs.values():
        open_log_.close_handlers()


def test_a_torn_last_batch_is_cut_inside_it_and_recovery_truncates_it(tmp_path: Path) -> None:
    """A power cut in the middle of an append: the last batch keeps only a prefix, never
    what was fsynced; recovery drops the torn batch and keeps every whole one before it."""
    log, clock = open_log(tmp_path)
    log.append_as_leader(make_batch([b"a", b"b"]), leader_epoch=0)
    log.flush()
    whole = log.segments.active.size
    log.append_as_leader(make_batch([b"c", b"d", b"e"]), leader_epoch=0)
    size = log.segments.active.size
    cut = disk_faults.tear_last_batch(log, random.Random(7))
    assert cut is not None and whole < cut < size
    assert log.segments.active.log.file_length() == cut
    recovered = reopen(log, clock, clean=False)
    assert recovered.log_end_offset == 2
    assert [r.value for r in read_all(recovered)] == [b"a", b"b"]
    recovered.close()


def test_a_fsynced_last_batch_cannot_be_torn(tmp_path: Path) -> None:
    log, _ = open_log(tmp_path)
    assert disk_faults.tear_last_batch(log, random.Random(1)) is None  # no batch yet
    log.append_as_leader(make_batch([b"a"]), leader_epoch=0)
    log.flush()
    size = log.segments.active.size
    assert disk_faults.tear_last_batch(log, random.Random(1)) is None
    assert log.segments.active.size == size
    log.close()
