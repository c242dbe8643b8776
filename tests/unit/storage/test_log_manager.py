"""LogManager: placement over log dirs, Kafka's checkpoint files, the clean-shutdown marker and
recovery, meta.properties, periodic tasks on the injected clock, deleting logs, and the broker
config it is built from."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest

from kafkasim.common.clock import ManualClock
from kafkasim.common.errors import InconsistentBrokerMetadataError, KafkaStorageError
from kafkasim.common.types import TopicPartition
from kafkasim.storage import file_names
from kafkasim.storage.checkpoints import (
    CLEAN_SHUTDOWN_FILE,
    LOG_START_OFFSET_CHECKPOINT_FILE,
    META_PROPERTIES_FILE,
    RECOVERY_POINT_CHECKPOINT_FILE,
    REPLICATION_OFFSET_CHECKPOINT_FILE,
    InconsistentClusterIdError,
    has_clean_shutdown_marker,
)
from kafkasim.storage.config import LogConfig
from kafkasim.storage.log import Log
from kafkasim.storage.log_manager import (
    DELETE_DIR_PATTERN,
    LogManager,
    LogManagerSettings,
    log_delete_dir_name,
)
from kafkasim.storage.records.batch import RecordBatchBuilder

NOW_MS = 1_700_000_000_000
HOUR_MS = 3_600_000

MakeManager = Callable[..., LogManager]


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(NOW_MS)


@pytest.fixture
def make_manager(clock: ManualClock) -> Iterator[MakeManager]:
    """Builds managers; at teardown closes the file handles of every log still open (a
    manager a test abandoned to simulate a crash leaves them open)."""
    made: list[LogManager] = []

    def _make(
        dirs: Sequence[Path],
        config: LogConfig | None = None,
        *,
        settings: LogManagerSettings | None = None,
        broker_id: int | None = None,
        cluster_id: str | None = None,
    ) -> LogManager:
        manager = LogManager(
            list(dirs),
            config or LogConfig.from_props({}),
            clock,
            settings=settings,
            broker_id=broker_id,
            cluster_id=cluster_id,
        )
        made.append(manager)
        return manager

    yield _make
    for manager in made:
        crash(manager)


def crash(manager: LogManager) -> None:
    """Abandon a manager as a crash would: no flush, no checkpoints, no marker."""
    for log in manager.logs.values():
        log.close_handlers()


def one_record(timestamp: int = NOW_MS, value: bytes = b"value") -> bytes:
    builder = RecordBatchBuilder()
    builder.append(timestamp, b"key", value)
    return builder.build()


# -- placement ----------------------------------------------------------------------------


def test_new_partitions_go_to_the_dir_with_the_fewest_partitions(
    tmp_path: Path, make_manager: MakeManager
) -> None:
    """Kafka balances partition counts (not bytes) over log.dirs; ties go to the first dir."""
    dirs = [tmp_path / f"d{i}" for i in range(3)]
    manager = make_manager(dirs)
    manager.startup()
    placed = []
    for p in range(7):
        tp = TopicPartition("spread", p)
        manager.get_or_create_log(tp)
        placed.append(manager.dir_of(tp))
        assert (manager.dir_of(tp) / tp.dir_name()).is_dir()
    assert placed == [dirs[0], dirs[1], dirs[2], dirs[0], dirs[1], dirs[2], dirs[0]]
    counts = [sum(1 for d in placed if d == dir_) for dir_ in dirs]
    assert counts == [3, 2, 2]
    manager.shutdown()


@pytest.mark.parametrize(
    ("existing", "expected_next"),
    [
        ((0, 0, 0), 0),  # all tied: first dir
        ((1, 0, 0), 1),
        ((1, 1, 0), 2),
        ((2, 1, 1), 1),  # tie between d1 and d2: the earlier one
        ((0, 3, 0), 0),
        ((2, 2, 1), 2),
    ],
)
def test_placement_counts_partitions_already_on_disk_and_breaks_ties_by_dir_order(
    tmp_path: Path, make_manager: MakeManager, existing: tuple[int, int, int], expected_next: int
) -> None:
    """Partitions loaded at startup count too: a restart must not pile new ones on one dir."""
    dirs = [tmp_path / f"d{i}" for i in range(3)]
    for i, count in enumerate(existing):
        for p in range(count):
            dirs[i].mkdir(exist_ok=True)
            (dirs[i] / f"old{i}-{p}").mkdir()
    manager = make_manager(dirs)
    manager.startup()
    assert len(manager.logs) == sum(existing)
    assert manager.next_log_dir() == dirs[expected_next]
    manager.get_or_create_log(TopicPartition("new", 0))
    assert manager.dir_of(TopicPartition("new", 0)) == dirs[expected_next]
    manager.shutdown()


# -- checkpoint files ---------------------------------------------------------------------


def test_checkpoint_files_use_kafkas_exact_text_format(
    tmp_path: Path, make_manager: MakeManager
) -> None:
    """Kafka's tools (and a Kafka broker) read these files: version, count, then
    `topic partition offset` per line, per log dir holding only its own partitions."""
    dirs = [tmp_path / "d0", tmp_path / "d1"]
    manager = make_manager(dirs)
    manager.startup()
    orders0 = manager.get_or_create_log(TopicPartition("orders", 0))  # d0
    orders1 = manager.get_or_create_log(TopicPartition("orders", 1))  # d1
    payments = manager.get_or_create_log(TopicPartition("payments", 3))  # d0
    for _ in range(5):
        orders0.append_as_leader(one_record(), leader_epoch=0)
    for _ in range(2):
        orders1.append_as_leader(one_record(), leader_epoch=0)
    orders0.update_high_watermark(4)
    orders0.roll()
    orders0.maybe_increment_log_start_offset(2)
    orders1.update_high_watermark(2)
    assert payments.log_end_offset == 0

    manager.shutdown()

    assert (dirs[0] / RECOVERY_POINT_CHECKPOINT_FILE).read_text() == (
        "0\n2\norders 0 5\npayments 3 0\n"
    )
    assert (dirs[1] / RECOVERY_POINT_CHECKPOINT_FILE).read_text() == "0\n1\norders 1 2\n"
    assert (dirs[0] / REPLICATION_OFFSET_CHECKPOINT_FILE).read_text() == (
        "0\n2\norders 0 4\npayments 3 0\n"
    )
    assert (dirs[1] / REPLICATION_OFFSET_CHECKPOINT_FILE).read_text() == "0\n1\norders 1 2\n"
    assert (dirs[0] / LOG_START_OFFSET_CHECKPOINT_FILE).read_text() == (
        "0\n2\norders 0 2\npayments 3 0\n"
    )
    assert (dirs[1] / LOG_START_OFFSET_CHECKPOINT_FILE).read_text() == "0\n1\norders 1 0\n"


def test_checkpoints_are_read_back_at_startup(tmp_path: Path, make_manager: MakeManager) -> None:
    """A restart resumes from the checkpointed high watermark and log start offset."""
    first = make_manager([tmp_path / "d0"])
    first.startup()
    tp = TopicPartition("orders", 0)
    log = first.get_or_create_log(tp)
    for _ in range(4):
        log.append_as_leader(one_record(), leader_epoch=0)
    log.update_high_watermark(3)
    log.maybe_increment_log_start_offset(1)
    first.shutdown()

    second = make_manager([tmp_path / "d0"])
    second.startup()
    reloaded = second.get_log(tp)
    assert reloaded is not None
    assert (reloaded.log_start_offset, reloaded.high_watermark, reloaded.log_end_offset) == (
        1,
        3,
        4,
    )
    second.shutdown()


# -- clean shutdown and recovery ----------------------------------------------------------


def write_three_batches_and_tear_the_last(
    manager: LogManager, tp: TopicPartition
) -> tuple[Path, int]:
    """Three batches; the first has the largest timestamp so the time index never names the
    torn one. Returns the segment file and the size of its two whole batches."""
    log = manager.get_or_create_log(tp)
    log.append_as_leader(one_record(NOW_MS + 10), leader_epoch=0)
    log.append_as_leader(one_record(NOW_MS), leader_epoch=0)
    whole = log.active_segment.size
    log.append_as_leader(one_record(NOW_MS), leader_epoch=0)
    return file_names.log_file(log.dir, 0), whole


def tear(path: Path, whole: int) -> int:
    """Cut the file in the middle of its last batch, as a torn write leaves it."""
    torn = whole + 20
    os.truncate(path, torn)
    return torn


def test_startup_with_the_clean_shutdown_marker_skips_recovery(
    tmp_path: Path, make_manager: MakeManager
) -> None:
    """After a clean shutdown every log was flushed and closed: re-reading them is waste.
    Proof that recovery did not run: a tail torn after the shutdown is not truncated."""
    tp = TopicPartition("orders", 0)
    first = make_manager([tmp_path / "d0"])
    first.startup()
    path, whole = write_three_batches_and_tear_the_last(first, tp)
    first.shutdown()
    assert has_clean_shutdown_marker(tmp_path / "d0")
    torn = tear(path, whole)

    second = make_manager([tmp_path / "d0"])
    second.startup()

    assert path.stat().st_size == torn  # nobody looked at the tail
    second_log = second.get_log(tp)
    assert second_log is not None
    assert second_log.active_segment.size == torn
    crash(second)


def test_startup_without_the_marker_runs_recovery_and_truncates_a_torn_tail(
    tmp_path: Path, make_manager: MakeManager
) -> None:
    """A crash may leave a torn batch: recovery truncates the segment to its whole batches."""
    tp = TopicPartition("orders", 0)
    first = make_manager([tmp_path / "d0"])
    first.startup()
    path, whole = write_three_batches_and_tear_the_last(first, tp)
    crash(first)
    assert not has_clean_shutdown_marker(tmp_path / "d0")
    tear(path, whole)

    second = make_manager([tmp_path / "d0"])
    second.startup()

    assert path.stat().st_size == whole
    log = second.get_log(tp)
    assert log is not None
    assert log.log_end_offset == 2
    # The log is writable again right after the valid data.
    assert log.append_as_leader(one_record(), leader_epoch=0).first_offset == 2
    second.shutdown()


def test_the_clean_shutdown_marker_is_removed_at_startup(
    tmp_path: Path, make_manager: MakeManager
) -> None:
    """From startup on, a crash must be seen as one by the next start."""
    dirs = [tmp_path / "d0", tmp_path / "d1"]
    first = make_manager(dirs)
    first.startup()
    first.get_or_create_log(TopicPartition("orders", 0))
    first.shutdown()
    assert all((d / CLEAN_SHUTDOWN_FILE).exists() for d in dirs)

    second = make_manager(dirs)
    second.startup()

    assert not any((d / CLEAN_SHUTDOWN_FILE).exists() for d in dirs)
    second.shutdown()
    assert all((d / CLEAN_SHUTDOWN_FILE).exists() for d in dirs)


# -- meta.properties ----------------------------------------------------------------------


def test_meta_properties_is_written_to_every_log_dir(
    tmp_path: Path, make_manager: MakeManager
) -> None:
    """Kafka's version-0 meta.properties: it ties the dirs to one broker."""
    dirs = [tmp_path / "d0", tmp_path / "d1"]
    manager = make_manager(dirs, broker_id=7, cluster_id="c-1")
    manager.startup()
    for d in dirs:
        assert (d / META_PROPERTIES_FILE).read_text() == "version=0\nbroker.id=7\ncluster.id=c-1\n"
    manager.shutdown()


@pytest.mark.parametrize("configured_id", [0, 2, 100])
def test_a_mismatching_broker_id_raises_inconsistent_broker_metadata(
    tmp_path: Path, make_manager: MakeManager, configured_id: int
) -> None:
    """Starting broker N on broker 1's data would silently serve the wrong replicas."""
    first = make_manager([tmp_path / "d0"], broker_id=1)
    first.startup()
    first.shutdown()

    second = make_manager([tmp_path / "d0"], broker_id=configured_id)
    with pytest.raises(InconsistentBrokerMetadataError, match=f"broker.id {configured_id}"):
        second.startup()


def test_a_log_dir_of_another_cluster_is_refused(tmp_path: Path, make_manager: MakeManager) -> None:
    """Kafka's InconsistentClusterIdException: the message names both cluster ids; nothing
    is loaded and the file is left as it was."""
    d = tmp_path / "d0"
    first = make_manager([d], broker_id=1, cluster_id="cluster-A")
    first.startup()
    first.shutdown()
    before = (d / META_PROPERTIES_FILE).read_bytes()
    with pytest.raises(InconsistentClusterIdError, match=r"cluster-B.*cluster-A"):
        make_manager([d], broker_id=1, cluster_id="cluster-B").startup()
    assert (d / META_PROPERTIES_FILE).read_bytes() == before


def test_the_cluster_id_is_added_to_a_meta_properties_without_one(
    tmp_path: Path, make_manager: MakeManager
) -> None:
    """A dir written before the id was known joins the cluster, and keeps its id after."""
    d = tmp_path / "d0"
    make_manager([d], broker_id=1).startup()
    assert (d / META_PROPERTIES_FILE).read_text() == "version=0\nbroker.id=1\n"
    again = make_manager([d], broker_id=1, cluster_id="cluster-A")
    again.startup()
    again.shutdown()
    assert (d / META_PROPERTIES_FILE).read_text() == (
        "version=0\nbroker.id=1\ncluster.id=cluster-A\n"
    )
    restarted = make_manager([d], broker_id=1, cluster_id="cluster-A")
    restarted.startup()
    restarted.shutdown()


def test_log_dirs_disagreeing_on_broker_id_raise(tmp_path: Path, make_manager: MakeManager) -> None:
    """Two dirs from two brokers: refuse to start rather than mix their data."""
    make_manager([tmp_path / "a"], broker_id=1).startup()
    make_manager([tmp_path / "b"], broker_id=2).startup()
    with pytest.raises(InconsistentBrokerMetadataError):
        make_manager([tmp_path / "a", tmp_path / "b"], broker_id=1).startup()


# -- periodic tasks -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("waited_ms", "retention_ran"),
    [
        (0, False),
        (299_999, False),
        (300_000, True),
        (300_001, True),
    ],
)
def test_tick_runs_retention_only_when_the_check_interval_has_passed(
    tmp_path: Path,
    make_manager: MakeManager,
    clock: ManualClock,
    waited_ms: int,
    retention_ran: bool,
) -> None:
    """log.retention.check.interval.ms (default 5 minutes) paces retention, on the injected
    clock: ticking often must not run it more often."""
    manager = make_manager([tmp_path / "d0"], LogConfig.from_props({"retention.ms": HOUR_MS}))
    manager.startup()
    log = manager.get_or_create_log(TopicPartition("orders", 0))
    log.append_as_leader(one_record(NOW_MS - 2 * HOUR_MS), leader_epoch=0)
    log.roll()
    log.update_high_watermark(log.log_end_offset)
    assert manager.settings.retention_check_interval_ms == 300_000

    clock.advance(waited_ms)
    manager.tick()

    assert (log.num_segments == 1) is retention_ran
    manager.shutdown()


def test_tick_runs_retention_once_per_interval(
    tmp_path: Path, make_manager: MakeManager, clock: ManualClock
) -> None:
    """After a run the interval starts again from that run."""
    settings = LogManagerSettings(retention_check_interval_ms=1_000, cleaner_enable=False)
    manager = make_manager(
        [tmp_path / "d0"], LogConfig.from_props({"retention.ms": HOUR_MS}), settings=settings
    )
    manager.startup()
    log = manager.get_or_create_log(TopicPartition("orders", 0))
    log.append_as_leader(one_record(NOW_MS), leader_epoch=0)
    log.roll()
    log.update_high_watermark(log.log_end_offset)
    clock.advance(HOUR_MS + 1)  # segment 0 expires now
    manager.tick()  # retention runs: the interval has long passed
    assert log.num_segments == 1

    log.append_as_leader(one_record(clock.time_ms() - 2 * HOUR_MS), leader_epoch=0)
    log.roll()
    log.update_high_watermark(log.log_end_offset)
    clock.advance(999)
    manager.tick()
    assert log.num_segments == 2
    clock.advance(1)
    manager.tick()
    assert log.num_segments == 1
    manager.shutdown()


def test_tick_leaves_the_high_watermark_checkpoint_to_the_replica_manager(
    tmp_path: Path, make_manager: MakeManager, clock: ManualClock
) -> None:
    """Only the replica manager's task writes replication-offset-checkpoint (at
    replica.high.watermark.checkpoint.interval.ms): tick() never does, however long it
    waited, so the broker does not fsync that file a second time on its event loop."""
    settings = LogManagerSettings(cleaner_enable=False)
    manager = make_manager([tmp_path / "d0"], settings=settings)
    manager.startup()
    log = manager.get_or_create_log(TopicPartition("orders", 0))
    log.append_as_leader(one_record(), leader_epoch=0)
    log.update_high_watermark(1)
    hw_file = tmp_path / "d0" / REPLICATION_OFFSET_CHECKPOINT_FILE
    before = hw_file.read_text() if hw_file.exists() else None

    clock.advance(10 * 60_000)
    manager.tick()

    assert (hw_file.read_text() if hw_file.exists() else None) == before
    manager.checkpoint_high_watermarks()
    assert hw_file.read_text() == "0\n1\norders 0 1\n"
    manager.shutdown()


# -- deleting logs ------------------------------------------------------------------------


def test_delete_log_removes_the_partition_directory(
    tmp_path: Path, make_manager: MakeManager
) -> None:
    """A deleted topic's data must go from disk, and from every later checkpoint."""
    manager = make_manager([tmp_path / "d0"])
    manager.startup()
    tp = TopicPartition("doomed", 0)
    log = manager.get_or_create_log(tp)
    log.append_as_leader(one_record(), leader_epoch=0)
    keep = manager.get_or_create_log(TopicPartition("kept", 0))

    assert manager.delete_log(tp)

    assert not (tmp_path / "d0" / tp.dir_name()).exists()
    assert [p.name for p in (tmp_path / "d0").iterdir() if p.is_dir()] == ["kept-0"]
    assert manager.get_log(tp) is None
    assert not manager.delete_log(tp)
    assert keep.dir.is_dir()
    manager.shutdown()
    assert (tmp_path / "d0" / RECOVERY_POINT_CHECKPOINT_FILE).read_text() == "0\n1\nkept 0 0\n"


def test_a_leftover_delete_directory_is_removed_at_startup(
    tmp_path: Path, make_manager: MakeManager
) -> None:
    """A crash between the rename to ``-delete`` and the removal must not resurrect a log."""
    d = tmp_path / "d0"
    leftover = d / "doomed-0.0123456789abcdef0123456789abcdef-delete"
    leftover.mkdir(parents=True)
    (leftover / "00000000000000000000.log").write_bytes(b"x" * 100)
    manager = make_manager([d])
    manager.startup()
    assert not leftover.exists()
    assert manager.logs == {}
    manager.shutdown()


LONGEST_TOPIC = "t" * 249  # Kafka's longest legal topic name


@pytest.mark.parametrize("topic", ["doomed", LONGEST_TOPIC])
def test_delete_dir_name_fits_the_file_name_limit(topic: str) -> None:
    """Kafka's logDeleteDirName: <topic>-<partition>.<uuid>-delete, the topic cut short so
    that the name fits in 255 bytes; a short topic is kept whole."""
    tp = TopicPartition(topic, 2_147_483_647)
    name = log_delete_dir_name(tp)
    assert len(name.encode()) <= 255
    assert DELETE_DIR_PATTERN.match(name)
    assert name.endswith("-2147483647." + name.split(".")[-1])
    prefix = name.rsplit("-2147483647.", 1)[0]
    assert topic.startswith(prefix)
    assert prefix == topic if len(topic) < 200 else len(name) == 255


def test_deleting_a_topic_with_the_longest_legal_name(
    tmp_path: Path, make_manager: MakeManager
) -> None:
    """A 249-character topic: its -delete rename used to fail with ENAMETOOLONG, leaving the
    partition dir behind to be loaded again at the next start."""
    d = tmp_path / "d0"
    manager = make_manager([d])
    manager.startup()
    tp = TopicPartition(LONGEST_TOPIC, 0)
    manager.get_or_create_log(tp).append_as_leader(one_record(), leader_epoch=0)
    assert manager.delete_log(tp)
    assert [p for p in d.iterdir() if p.is_dir()] == []
    assert manager.offline_dirs == set()
    manager.shutdown()
    again = make_manager([d])
    again.startup()
    assert again.logs == {}
    again.shutdown()


def test_a_leftover_shortened_delete_directory_is_removed_at_startup(
    tmp_path: Path, make_manager: MakeManager
) -> None:
    d = tmp_path / "d0"
    leftover = d / log_delete_dir_name(TopicPartition(LONGEST_TOPIC, 7))
    leftover.mkdir(parents=True)
    (leftover / "00000000000000000000.log").write_bytes(b"x" * 100)
    manager = make_manager([d])
    manager.startup()
    assert not leftover.exists()
    assert manager.logs == {}
    manager.shutdown()


def test_a_failed_delete_rename_takes_the_dir_offline_and_is_an_error(
    tmp_path: Path, make_manager: MakeManager, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As Kafka's renameDir: KAFKA_STORAGE_ERROR for the caller (the controller hears of it)
    and the log dir goes offline; the partition dir is still there for the retry."""
    d = tmp_path / "d0"
    manager = make_manager([d])
    failures: list[Path] = []
    manager.on_dir_failure = lambda failed, _reason: failures.append(failed)
    manager.startup()
    tp = TopicPartition("doomed", 0)
    manager.get_or_create_log(tp)

    def refuse(_log: Log, _target: Path) -> None:
        raise OSError(36, "File name too long")

    monkeypatch.setattr(Log, "rename_dir", refuse)
    with pytest.raises(KafkaStorageError, match="doomed-0"):
        manager.delete_log(tp)
    assert failures == [d] and manager.offline_dirs == {d}
    assert (d / tp.dir_name()).is_dir()


def test_the_same_partition_in_two_dirs_is_an_error(
    tmp_path: Path, make_manager: MakeManager, clock: ManualClock
) -> None:
    """Two copies of one replica: which one is right cannot be decided, so refuse to start."""
    dirs = [tmp_path / "d0", tmp_path / "d1"]
    tp = TopicPartition("twice", 0)
    for d in dirs:
        Log.open(d / tp.dir_name(), LogConfig.from_props({}), clock, topic_partition=tp).close()
    manager = make_manager(dirs)
    with pytest.raises(KafkaStorageError, match="twice-0"):
        manager.startup()


# -- built from broker config -------------------------------------------------------------


def test_from_broker_config_honours_log_dirs(tmp_path: Path, clock: ManualClock) -> None:
    """log.dirs (comma separated) wins over log.dir."""
    a, b = tmp_path / "a", tmp_path / "b"
    manager = LogManager.from_broker_config(
        {"log.dirs": f"{a},{b}", "log.dir": str(tmp_path / "ignored"), "broker.id": "3"}, clock
    )
    assert manager.dirs == [a, b]


def test_from_broker_config_falls_back_to_log_dir(tmp_path: Path, clock: ManualClock) -> None:
    """Without log.dirs Kafka uses the single log.dir."""
    manager = LogManager.from_broker_config({"log.dir": str(tmp_path / "one")}, clock)
    assert manager.dirs == [tmp_path / "one"]


@pytest.mark.parametrize(
    ("props", "expected_retention_ms"),
    [
        ({}, 168 * HOUR_MS),
        ({"log.retention.hours": 2}, 2 * HOUR_MS),
        ({"log.retention.hours": 2, "log.retention.minutes": 5}, 5 * 60_000),
        ({"log.retention.minutes": 5, "log.retention.ms": 1234}, 1234),
        ({"log.retention.hours": 2, "log.retention.minutes": -1}, -1),
    ],
)
def test_from_broker_config_honours_retention_unit_precedence(
    tmp_path: Path, clock: ManualClock, props: dict[str, object], expected_retention_ms: int
) -> None:
    """ms over minutes over hours, as Kafka's KafkaConfig.logRetentionTimeMillis."""
    manager = LogManager.from_broker_config({"log.dir": str(tmp_path), **props}, clock)
    assert manager.default_config.retention_ms == expected_retention_ms


def test_from_broker_config_takes_the_retention_check_interval(
    tmp_path: Path, clock: ManualClock
) -> None:
    """log.retention.check.interval.ms paces tick(); its default is Kafka's 300000."""
    default = LogManager.from_broker_config({"log.dir": str(tmp_path)}, clock)
    assert default.settings.retention_check_interval_ms == 300_000
    custom = LogManager.from_broker_config(
        {"log.dir": str(tmp_path), "log.retention.check.interval.ms": "1000"}, clock
    )
    assert custom.settings.retention_check_interval_ms == 1000


def test_a_new_broker_s_empty_log_dir_is_not_warned_about_but_an_unclean_one_is(
    tmp_path: Path, make_manager: MakeManager, caplog: pytest.LogCaptureFixture
) -> None:
    """No marker in an empty dir is a first start, not an unclean shutdown (Kafka recovers
    nothing there and says nothing); a dir with partitions and no marker is warned about."""
    caplog.set_level("WARNING", logger="kafkasim.storage.log_manager")
    first = make_manager([tmp_path])
    first.startup()
    assert "no clean shutdown marker" not in caplog.text
    first.get_or_create_log(TopicPartition("t", 0)).append_as_leader(one_record(), leader_epoch=0)
    crash(first)
    make_manager([tmp_path]).startup()
    assert "no clean shutdown marker" in caplog.text
