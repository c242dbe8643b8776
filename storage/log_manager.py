"""The log manager: every partition log of a broker across its log dirs, and their upkeep.

Per log dir it keeps Kafka's files — ``meta.properties``, ``recovery-point-offset-checkpoint``,
``replication-offset-checkpoint``, ``log-start-offset-checkpoint``, ``cleaner-offset-checkpoint``
and the clean-shutdown marker — and it places a new partition in the dir holding the fewest.

It starts no threads of its own. The owner calls :meth:`tick` (or the individual tasks) on its
schedule; the checkpoint files' I/O goes through a ``CheckpointWriter`` (inline by default; a
broker process hands it to a thread of its own, as Kafka's scheduler threads write them);
each task runs when its interval (``log.retention.check.interval.ms``,
``log.flush.offset.checkpoint.interval.ms``, ``log.cleaner.backoff.ms`` …) has passed on the
injected clock. Crash story: the marker is removed at startup and written at clean shutdown
only after every log is closed and every checkpoint written, so a crash at any time means
recovery from the recovery-point checkpoint on the next start.
"""

from __future__ import annotations

import functools
import logging
import re
import shutil
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from kafkasim.common.clock import Clock
from kafkasim.common.config import Config
from kafkasim.common.errors import KafkaStorageError
from kafkasim.common.types import TopicPartition
from kafkasim.storage.checkpoint_writer import CheckpointWriter, InlineCheckpointWriter
from kafkasim.storage.checkpoints import (
    CLEANER_OFFSET_CHECKPOINT_FILE,
    LOG_START_OFFSET_CHECKPOINT_FILE,
    RECOVERY_POINT_CHECKPOINT_FILE,
    REPLICATION_OFFSET_CHECKPOINT_FILE,
    OffsetCheckpointFile,
    check_broker_metadata,
    has_clean_shutdown_marker,
    read_meta_properties,
    remove_clean_shutdown_marker,
    write_clean_shutdown_marker,
    write_meta_properties,
)
from kafkasim.storage.cleaner import LogCleaner, cleanable_range, needs_cleaning
from kafkasim.storage.config import (
    BROKER_LOG_CONFIG_DEF,
    LogConfig,
    log_dirs,
    topic_defaults_from_broker,
)
from kafkasim.storage.log import Log
from kafkasim.storage.roll_flush import RollFlushes

logger = logging.getLogger(__name__)

DELETE_DIR_SUFFIX = "-delete"
# A partition dir renamed for deletion: <topic, maybe shortened>-<partition>.<uuid>-delete.
DELETE_DIR_PATTERN = re.compile(r"^.+-[0-9]+\.[0-9a-f]{32}" + DELETE_DIR_SUFFIX + "$")
FILE_NAME_MAX_BYTES = 255  # NAME_MAX of the usual file systems (ext4, xfs, btrfs, APFS)


def log_delete_dir_name(tp: TopicPartition) -> str:
    """The name a partition dir is renamed to before it is deleted (Kafka's
    ``logDeleteDirName``): ``<topic>-<partition>.<uuid>-delete``, the topic cut short so that
    the whole name fits in 255 bytes (a legal topic name has up to 249 ASCII characters)."""
    suffix = f"-{tp.partition}.{uuid.uuid4().hex}{DELETE_DIR_SUFFIX}"
    return tp.topic[: max(0, FILE_NAME_MAX_BYTES - len(suffix))] + suffix


@dataclass(frozen=True, slots=True)
class LogManagerSettings:
    """Broker-level settings of the manager itself (not of any one log)."""

    retention_check_interval_ms: int = 300_000
    flush_offset_checkpoint_interval_ms: int = 60_000
    flush_start_offset_checkpoint_interval_ms: int = 60_000
    cleaner_enable: bool = True
    cleaner_backoff_ms: int = 15_000
    dedupe_buffer_size: int = 128 * 1024 * 1024

    @classmethod
    def from_broker(cls, broker: Config) -> LogManagerSettings:
        return cls(
            retention_check_interval_ms=broker["log.retention.check.interval.ms"],
            flush_offset_checkpoint_interval_ms=broker["log.flush.offset.checkpoint.interval.ms"],
            flush_start_offset_checkpoint_interval_ms=broker[
                "log.flush.start.offset.checkpoint.interval.ms"
            ],
            cleaner_enable=broker["log.cleaner.enable"],
            cleaner_backoff_ms=broker["log.cleaner.backoff.ms"],
            dedupe_buffer_size=broker["log.cleaner.dedupe.buffer.size"],
        )


class LogManager:
    def __init__(
        self,
        dirs: Iterable[Path],
        default_config: LogConfig,
        clock: Clock,
        *,
        settings: LogManagerSettings | None = None,
        broker_id: int | None = None,
        cluster_id: str | None = None,
        topic_config: Callable[[str], LogConfig] | None = None,
        checkpoint_writer: CheckpointWriter | None = None,
    ) -> None:
        self.dirs = [Path(d) for d in dirs]
        self._checkpoint_writer: CheckpointWriter = checkpoint_writer or InlineCheckpointWriter()
        if not self.dirs:
            raise KafkaStorageError("a log manager needs at least one log dir")
        if len(set(self.dirs)) != len(self.dirs):
            raise KafkaStorageError(f"duplicate log dirs: {[str(d) for d in self.dirs]}")
        self.default_config = default_config
        self.settings = settings or LogManagerSettings()
        self._clock = clock
        self.broker_id = broker_id
        self.cluster_id = cluster_id
        self._topic_config = topic_config
        self._logs: dict[TopicPartition, Log] = {}
        self._dir_of: dict[TopicPartition, Path] = {}
        # Log dirs taken offline by an I/O error (Kafka's LogDirFailureChannel), and who is
        # told: the broker, which halts (see Broker._on_log_dir_failure).
        self.offline_dirs: set[Path] = set()
        self.on_dir_failure: Callable[[Path, str], None] | None = None
        self._cleaner = LogCleaner(self.settings.dedupe_buffer_size)
        self._cleaner_checkpoints: dict[TopicPartition, int] = {}
        now = clock.time_ms()
        self._last_run: dict[str, int] = {
            "retention": now,
            "recovery": now,
            "start": now,
            "cleaner": now,
        }
        self._started = False

    @classmethod
    def from_broker_config(
        cls, broker_props: dict[str, object], clock: Clock, **kwargs: object
    ) -> LogManager:
        """Build from broker keys (``log.dirs``, ``log.segment.bytes`` …)."""
        broker = BROKER_LOG_CONFIG_DEF.parse(broker_props, allow_unknown=True)
        defaults = LogConfig.from_props(topic_defaults_from_broker(broker))
        return cls(
            [Path(d) for d in log_dirs(broker)],
            defaults,
            clock,
            settings=LogManagerSettings.from_broker(broker),
            **kwargs,  # type: ignore[arg-type]
        )

    # -- startup and shutdown ---------------------------------------------------------------

    def startup(self) -> None:
        """Check metadata (``meta.properties``: the broker id and, once known, the cluster
        id), load and recover every log, then arm crash detection."""
        for d in self.dirs:
            d.mkdir(parents=True, exist_ok=True)
        if self.broker_id is not None:
            check_broker_metadata(self.dirs, self.broker_id, self.cluster_id)
            for d in self.dirs:
                # Kafka checkpoints the broker metadata to every dir at start-up: a new dir
                # gets it, and a dir written before the cluster id was known gets the id.
                props = read_meta_properties(d)
                if props is None or (
                    self.cluster_id is not None and props.get("cluster.id") is None
                ):
                    write_meta_properties(d, self.broker_id, self.cluster_id)
        for d in self.dirs:
            self._load_dir(d)
        self._started = True

    def _load_dir(self, d: Path) -> None:
        clean = has_clean_shutdown_marker(d)
        recovery = OffsetCheckpointFile(d / RECOVERY_POINT_CHECKPOINT_FILE).read()
        starts = OffsetCheckpointFile(d / LOG_START_OFFSET_CHECKPOINT_FILE).read()
        hws = OffsetCheckpointFile(d / REPLICATION_OFFSET_CHECKPOINT_FILE).read()
        self._cleaner_checkpoints.update(
            OffsetCheckpointFile(d / CLEANER_OFFSET_CHECKPOINT_FILE).read()
        )
        # A dir with no partition in it has nothing to recover: a new broker's first start
        # (or a dir never written to) is not an unclean shutdown, and is not warned about.
        if not clean and any(child.is_dir() for child in d.iterdir()):
            logger.warning(
                "%s: no clean shutdown marker; recovering logs from their recovery points", d
            )
        for child in sorted(d.iterdir()):
            if not child.is_dir():
                continue
            if DELETE_DIR_PATTERN.match(child.name):
                # A deletion that did not finish (Kafka deletes these at start-up too).
                logger.info("%s: deleting %s, left by an unfinished topic deletion", d, child)
                shutil.rmtree(child, ignore_errors=True)
                continue
            try:
                tp = TopicPartition.from_dir_name(child.name)
            except ValueError:
                logger.warning("%s: ignoring directory %s (not <topic>-<partition>)", d, child)
                continue
            if tp in self._logs:
                raise KafkaStorageError(
                    f"partition {tp} has a log in both {self._dir_of[tp]} and {d}"
                )
            log = Log.open(
                child,
                self.config_for(tp.topic),
                self._clock,
                topic_partition=tp,
                recovery_point=recovery.get(tp, 0),
                log_start_offset=starts.get(tp, 0),
                had_clean_shutdown=clean,
            )
            log.update_high_watermark(hws.get(tp, log.log_start_offset))
            self._adopt(tp, log, d)
        # From now on, a crash must be seen as one.
        remove_clean_shutdown_marker(d)

    def shutdown(self) -> None:
        """Clean shutdown: close logs, write every checkpoint, then the marker (after every
        checkpoint write asked for before: they are older)."""
        self._checkpoint_writer.close()
        for log in self._logs.values():
            log.close()
        self.checkpoint_recovery_points()
        self.checkpoint_log_start_offsets()
        self.checkpoint_high_watermarks()
        self.checkpoint_cleaner_offsets()
        for d in self.dirs:
            write_clean_shutdown_marker(d)
        self._started = False

    # -- logs -------------------------------------------------------------------------------

    def config_for(self, topic: str) -> LogConfig:
        return self._topic_config(topic) if self._topic_config else self.default_config

    def get_log(self, tp: TopicPartition) -> Log | None:
        return self._logs.get(tp)

    @property
    def logs(self) -> dict[TopicPartition, Log]:
        return dict(self._logs)

    def dir_of(self, tp: TopicPartition) -> Path:
        return self._dir_of[tp]

    def next_log_dir(self) -> Path:
        """The log dir holding the fewest partitions (Kafka's rule; first dir on ties)."""
        counts = {d: 0 for d in self.dirs}
        for d in self._dir_of.values():
            counts[d] += 1
        return min(self.dirs, key=lambda d: (counts[d], self.dirs.index(d)))

    def get_or_create_log(self, tp: TopicPartition, config: LogConfig | None = None) -> Log:
        existing = self._logs.get(tp)
        if existing is not None:
            return existing
        d = self.next_log_dir()
        if d in self.offline_dirs:
            raise KafkaStorageError(f"Can not create log for {tp}: log dir {d} is offline")
        log = Log.open(
            d / tp.dir_name(), config or self.config_for(tp.topic), self._clock, topic_partition=tp
        )
        self._adopt(tp, log, d)
        logger.info("created log for %s in %s", tp, d)
        return log

    def _adopt(self, tp: TopicPartition, log: Log, d: Path) -> None:
        self._logs[tp] = log
        self._dir_of[tp] = d
        log.on_io_error = functools.partial(self._dir_failed, d)
        if self._checkpoint_writer.in_background:
            log.roll_flushes = RollFlushes(self._checkpoint_writer, str(tp))

    def _dir_failed(self, d: Path, error: OSError) -> None:
        """An I/O error in ``d``: the dir is offline from now on (reported once)."""
        if d in self.offline_dirs:
            return
        self.offline_dirs.add(d)
        reason = f"Error while writing to log dir {d}: {error}"
        logger.error("%s; the dir is offline", reason)
        if self.on_dir_failure is not None:
            self.on_dir_failure(d, reason)

    def delete_log(self, tp: TopicPartition) -> bool:
        """Rename the partition dir to :func:`log_delete_dir_name`, then remove it; False if
        there is no such log.

        A failed rename is an I/O error of the log dir, as in Kafka's ``renameDir``: the dir
        goes offline (the broker halts) and KAFKA_STORAGE_ERROR is raised, so the controller
        hears of the failure and asks again once the broker is back. A failed removal after
        the rename is only logged: the renamed dir is recognised and removed at the next
        start-up."""
        log = self._logs.pop(tp, None)
        if log is None:
            return False
        d = self._dir_of.pop(tp)
        log.close_handlers()
        self._cleaner_checkpoints.pop(tp, None)
        target = d / log_delete_dir_name(tp)
        try:
            log.rename_dir(target)
        except OSError as e:
            self._dir_failed(d, e)
            raise KafkaStorageError(
                f"Error while renaming dir for {tp} in log dir {d} for deletion: {e}"
            ) from e
        try:
            shutil.rmtree(target)
        except OSError as e:
            logger.warning("%s: could not delete %s (%s); retried at start-up", tp, target, e)
        return True

    # -- periodic tasks ---------------------------------------------------------------------

    def _due(self, task: str, interval_ms: int) -> bool:
        now = self._clock.time_ms()
        if now - self._last_run[task] >= interval_ms:
            self._last_run[task] = now
            return True
        return False

    def tick(self) -> None:
        """Run whichever periodic tasks are due; cheap when none is. The high watermarks are
        not among them: their owner, the replica manager, checkpoints them every
        ``replica.high.watermark.checkpoint.interval.ms`` (Kafka's ReplicaManager task); a
        second writer here fsynced the same file again on the event loop every 5 s."""
        s = self.settings
        for log in self._logs.values():
            log.apply_background_flushes()
            log.flush_if_due()
            log.run_pending_deletions()
        if self._due("retention", s.retention_check_interval_ms):
            self.cleanup_logs()
        if self._due("recovery", s.flush_offset_checkpoint_interval_ms):
            self.checkpoint_recovery_points()
        if self._due("start", s.flush_start_offset_checkpoint_interval_ms):
            self.checkpoint_log_start_offsets()
        if s.cleaner_enable and self._due("cleaner", s.cleaner_backoff_ms):
            self.run_cleaner()

    def cleanup_logs(self) -> int:
        """Retention for every log (time and size for ``delete``; log start always)."""
        total = 0
        for log in self._logs.values():
            total += log.delete_old_segments()
        return total

    def run_cleaner(self) -> int:
        """Compact every compacted log that is dirty enough; returns how many were cleaned."""
        cleaned = 0
        now = self._clock.time_ms()
        for tp, log in self._logs.items():
            if not log.config.compact:
                continue
            rng = cleanable_range(log, self._cleaner_checkpoints.get(tp), now)
            if needs_cleaning(log, rng, now):
                result = self._cleaner.clean(log, rng)
                self._cleaner_checkpoints[tp] = result.first_dirty_offset
                cleaned += 1
        if cleaned:
            self.checkpoint_cleaner_offsets()
        return cleaned

    # -- checkpoints ------------------------------------------------------------------------

    def _write_per_dir(self, file_name: str, value: Callable[[Log], int]) -> None:
        """Every dir's ``file_name`` from one snapshot of ``value`` taken now; the files are
        written by the checkpoint writer (see storage.checkpoint_writer)."""
        snapshot = [
            (d, {tp: value(log) for tp, log in self._logs.items() if self._dir_of[tp] == d})
            for d in self.dirs
        ]

        def write() -> None:
            for d, entries in snapshot:
                OffsetCheckpointFile(d / file_name).write(entries)

        self._checkpoint_writer.submit(file_name, write)

    def checkpoint_recovery_points(self) -> None:
        self._write_per_dir(RECOVERY_POINT_CHECKPOINT_FILE, lambda log: log.recovery_point)

    def checkpoint_log_start_offsets(self) -> None:
        self._write_per_dir(LOG_START_OFFSET_CHECKPOINT_FILE, lambda log: log.log_start_offset)

    def checkpoint_high_watermarks(self) -> None:
        self._write_per_dir(REPLICATION_OFFSET_CHECKPOINT_FILE, lambda log: log.high_watermark)

    def checkpoint_cleaner_offsets(self) -> None:
        for d in self.dirs:
            entries = {
                tp: off
                for tp, off in self._cleaner_checkpoints.items()
                if self._dir_of.get(tp) == d
            }
            OffsetCheckpointFile(d / CLEANER_OFFSET_CHECKPOINT_FILE).write(entries)
