"""Checkpoint and metadata files: the small text files a broker keeps next to its logs.

::

    <log dir>/recovery-point-offset-checkpoint   OffsetCheckpointFile   offset flushed to disk
    <log dir>/replication-offset-checkpoint      OffsetCheckpointFile   high watermark
    <log dir>/log-start-offset-checkpoint        OffsetCheckpointFile   log start offset
    <log dir>/cleaner-offset-checkpoint          OffsetCheckpointFile   first dirty offset
    <log dir>/meta.properties                    Java properties        broker.id, cluster.id
    <log dir>/.kafka_cleanshutdown               empty marker           "skip recovery"
    <partition dir>/leader-epoch-checkpoint      LeaderEpochCheckpointFile

Every file is replaced whole: written to ``<file>.tmp``, fsync'd, renamed over the old file,
and the directory fsync'd, so a crash leaves either the old or the new version, never a mix.
A leftover ``.tmp`` is harmless (it is overwritten by the next write).
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Generic, NamedTuple, Protocol, TypeVar

from kafkasim.common.errors import InconsistentBrokerMetadataError, KafkaStorageError
from kafkasim.common.sentinels import INT32_MAX, INT32_MIN, INT64_MAX, INT64_MIN
from kafkasim.common.types import TopicPartition

T = TypeVar("T")

RECOVERY_POINT_CHECKPOINT_FILE = "recovery-point-offset-checkpoint"
REPLICATION_OFFSET_CHECKPOINT_FILE = "replication-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT_FILE = "log-start-offset-checkpoint"
CLEANER_OFFSET_CHECKPOINT_FILE = "cleaner-offset-checkpoint"
LEADER_EPOCH_CHECKPOINT_FILE = "leader-epoch-checkpoint"
META_PROPERTIES_FILE = "meta.properties"
CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"
TMP_SUFFIX = ".tmp"

# Java's Integer.parseInt / Long.parseLong accept an optional sign and ASCII digits only;
# Python's int() would also take spaces, underscores and non-ASCII digits.
_JAVA_INT = re.compile(r"[+-]?[0-9]+")
# BufferedReader.readLine ends a line at \n, \r or \r\n.
_LINE_BREAK = re.compile(r"\r\n|\r|\n")
_WHITESPACE = re.compile(r"\s+")


# --------------------------------------------------------------------------------------------
# Atomic whole-file replacement
# --------------------------------------------------------------------------------------------


def fsync_dir(directory: Path) -> None:
    """Make a rename or create inside ``directory`` durable."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(path: Path, data: bytes, *, sync: bool = True) -> None:
    """Replace ``path`` with ``data`` via ``<path>.tmp`` + fsync + rename + directory fsync.

    Raises ``OSError``; the callers turn it into KAFKA_STORAGE_ERROR naming the file.
    """
    tmp = path.with_name(path.name + TMP_SUFFIX)
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        if sync:
            os.fsync(f.fileno())
    os.replace(tmp, path)
    if sync:
        fsync_dir(path.parent)


def _parse_java_int(text: str, lo: int, hi: int) -> int | None:
    if not _JAVA_INT.fullmatch(text):
        return None
    value = int(text)
    return value if lo <= value <= hi else None


def _split_java(line: str) -> list[str]:
    """``line.split("\\s+")`` as Java does it: a leading separator yields an empty first field,
    trailing empty fields are dropped."""
    parts = _WHITESPACE.split(line)
    while parts and parts[-1] == "":
        parts.pop()
    return parts


# --------------------------------------------------------------------------------------------
# The generic checkpoint file
# --------------------------------------------------------------------------------------------


class EntryFormatter(Protocol[T]):
    """Turns one entry into one line of a checkpoint file and back."""

    def to_line(self, entry: T) -> str: ...

    def from_line(self, line: str) -> T | None:
        """The entry on ``line``, or ``None`` if the line is malformed."""
        ...


class CheckpointFile(Generic[T]):
    """A versioned list of entries in a text file, replaced atomically on every write.

    Format (UTF-8, ``\\n`` line ends)::

        <version: int>
        <entry count: int>
        <entry line>        # one per entry, rendered by the formatter
        ...

    Invariants: the version line equals ``version``; the count line equals the number of entry
    lines; every entry line parses. ``read`` checks all three and raises KAFKA_STORAGE_ERROR
    naming the file and what is wrong. As in Kafka, a missing or empty file reads as no entries,
    and so does a file holding only the version line.

    Thread-safety: none; the owner (the log or the log manager) serialises calls.

    Crash story: ``write`` goes through ``<file>.tmp`` + fsync + rename + fsync of the
    directory, so after a crash the file holds either the previous or the new entries.
    """

    def __init__(self, path: Path, version: int, formatter: EntryFormatter[T]) -> None:
        self.path = Path(path)
        self.version = version
        self._formatter = formatter

    def write(self, entries: Iterable[T], *, sync: bool = True) -> None:
        lines = [self._formatter.to_line(e) for e in entries]
        for line in lines:
            if _LINE_BREAK.search(line):
                raise ValueError(f"checkpoint entry {line!r} for {self.path} spans lines")
        text = f"{self.version}\n{len(lines)}\n" + "".join(f"{line}\n" for line in lines)
        try:
            atomic_write(self.path, text.encode("utf-8"), sync=sync)
        except OSError as e:
            raise KafkaStorageError(
                f"Error while writing to checkpoint file {self.path}: {e}"
            ) from e

    def read(self) -> list[T]:
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return []
        except OSError as e:
            raise KafkaStorageError(f"Error while reading checkpoint file {self.path}: {e}") from e
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as e:
            raise KafkaStorageError(f"Checkpoint file {self.path} is not valid UTF-8: {e}") from e
        lines = _LINE_BREAK.split(text)
        if lines and lines[-1] == "":
            lines.pop()  # the terminator of the last line, not an empty line
        if not lines:
            return []
        version = _parse_java_int(lines[0], INT32_MIN, INT32_MAX)
        if version is None:
            raise self._malformed(lines[0])
        if version != self.version:
            raise KafkaStorageError(
                f"Unrecognised version {version} (expected {self.version}) "
                f"in checkpoint file {self.path}"
            )
        if len(lines) == 1:
            return []
        expected = _parse_java_int(lines[1], INT32_MIN, INT32_MAX)
        if expected is None:
            raise self._malformed(lines[1])
        entries: list[T] = []
        for line in lines[2:]:
            entry = self._formatter.from_line(line)
            if entry is None:
                raise self._malformed(line)
            entries.append(entry)
        if len(entries) != expected:
            raise KafkaStorageError(
                f"Expected {expected} entries in checkpoint file {self.path}, "
                f"but found {len(entries)}"
            )
        return entries

    def _malformed(self, line: str) -> Exception:
        return KafkaStorageError(f"Malformed line in checkpoint file {self.path}: {line!r}")


# --------------------------------------------------------------------------------------------
# Offset checkpoints (one per log dir)
# --------------------------------------------------------------------------------------------


class _TopicPartitionOffsetFormatter:
    def to_line(self, entry: tuple[TopicPartition, int]) -> str:
        tp, offset = entry
        if not tp.topic or _WHITESPACE.search(tp.topic):
            raise ValueError(f"topic name {tp.topic!r} cannot go in an offset checkpoint")
        return f"{tp.topic} {tp.partition} {offset}"

    def from_line(self, line: str) -> tuple[TopicPartition, int] | None:
        parts = _split_java(line)
        if len(parts) != 3 or not parts[0]:
            return None
        partition = _parse_java_int(parts[1], INT32_MIN, INT32_MAX)
        offset = _parse_java_int(parts[2], INT64_MIN, INT64_MAX)
        if partition is None or offset is None:
            return None
        return TopicPartition(parts[0], partition), offset


class OffsetCheckpointFile:
    """``topic partition offset`` per line, version 0, one file per log dir.

    Used for the recovery point, the high watermark (replication offset), the log start offset
    and the cleaner's first dirty offset. Entries are written sorted by topic and partition so
    the bytes are deterministic; if a file lists a partition twice the last line wins.

    Thread-safety and crash story: those of :class:`CheckpointFile`.
    """

    VERSION = 0

    def __init__(self, path: Path) -> None:
        self._file: CheckpointFile[tuple[TopicPartition, int]] = CheckpointFile(
            Path(path), self.VERSION, _TopicPartitionOffsetFormatter()
        )

    @property
    def path(self) -> Path:
        return self._file.path

    def write(self, offsets: Mapping[TopicPartition, int], *, sync: bool = True) -> None:
        self._file.write(sorted(offsets.items()), sync=sync)

    def read(self) -> dict[TopicPartition, int]:
        return dict(self._file.read())


# --------------------------------------------------------------------------------------------
# Leader epoch checkpoint (one per partition dir)
# --------------------------------------------------------------------------------------------


class EpochEntry(NamedTuple):
    """The first offset written in a leader epoch."""

    epoch: int
    start_offset: int


class _EpochEntryFormatter:
    def to_line(self, entry: EpochEntry) -> str:
        return f"{entry.epoch} {entry.start_offset}"

    def from_line(self, line: str) -> EpochEntry | None:
        parts = _split_java(line)
        if len(parts) != 2:
            return None
        epoch = _parse_java_int(parts[0], INT32_MIN, INT32_MAX)
        start_offset = _parse_java_int(parts[1], INT64_MIN, INT64_MAX)
        if epoch is None or start_offset is None:
            return None
        return EpochEntry(epoch, start_offset)


class LeaderEpochCheckpoint(Protocol):
    """Where a :class:`~storage.epoch_cache.LeaderEpochFileCache` persists its entries."""

    def write(self, entries: Sequence[EpochEntry]) -> None: ...

    def read(self) -> list[EpochEntry]: ...


class LeaderEpochCheckpointFile:
    """``leader_epoch start_offset`` per line, version 0, one file per partition dir.

    The file does not check monotonicity; the cache that loads it does (see
    :class:`~storage.epoch_cache.LeaderEpochFileCache`). Every write is fsync'd.

    Thread-safety and crash story: those of :class:`CheckpointFile`.
    """

    VERSION = 0

    def __init__(self, path: Path) -> None:
        self._file: CheckpointFile[EpochEntry] = CheckpointFile(
            Path(path), self.VERSION, _EpochEntryFormatter()
        )

    @classmethod
    def for_partition_dir(cls, partition_dir: Path) -> LeaderEpochCheckpointFile:
        return cls(Path(partition_dir) / LEADER_EPOCH_CHECKPOINT_FILE)

    @property
    def path(self) -> Path:
        return self._file.path

    def write(self, entries: Sequence[EpochEntry]) -> None:
        self._file.write(entries, sync=True)

    def read(self) -> list[EpochEntry]:
        return self._file.read()


class InMemoryLeaderEpochCheckpoint:
    """The in-memory twin of :class:`LeaderEpochCheckpointFile` for tests and the simulation."""

    def __init__(self, entries: Sequence[EpochEntry] = ()) -> None:
        self._entries = list(entries)
        self.writes = 0

    def write(self, entries: Sequence[EpochEntry]) -> None:
        self._entries = list(entries)
        self.writes += 1

    def read(self) -> list[EpochEntry]:
        return list(self._entries)


# --------------------------------------------------------------------------------------------
# meta.properties (one per log dir)
# --------------------------------------------------------------------------------------------

META_PROPERTIES_VERSION = "0"
_ESCAPES_OUT = {"\t": "\\t", "\n": "\\n", "\r": "\\r", "\f": "\\f"}
_ESCAPES_IN = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


class BrokerMetadata(NamedTuple):
    """What ``meta.properties`` says about the broker that owns a log dir."""

    broker_id: int
    cluster_id: str | None


def _escape_property(text: str, *, is_key: bool) -> str:
    """Java ``Properties.store`` escaping (ISO-8859-1 output, ``\\uXXXX`` for the rest)."""
    out: list[str] = []
    for i, ch in enumerate(text):
        if ch in "\\=:#!":
            out.append("\\" + ch)
        elif ch == " " and (is_key or i == 0):
            out.append("\\ ")
        elif ch in _ESCAPES_OUT:
            out.append(_ESCAPES_OUT[ch])
        elif 0x20 <= ord(ch) <= 0x7E:
            out.append(ch)
        else:
            units = ch.encode("utf-16-be", "surrogatepass")
            out.extend(f"\\u{units[j] << 8 | units[j + 1]:04X}" for j in range(0, len(units), 2))
    return "".join(out)


def _unescape_property(text: str) -> str:
    out: list[str] = []
    i = 0
    while i < len(text):
        ch = text[i]
        if ch != "\\" or i + 1 == len(text):
            out.append(ch)
            i += 1
            continue
        nxt = text[i + 1]
        if nxt == "u":
            digits = text[i + 2 : i + 6]
            if not re.fullmatch(r"[0-9a-fA-F]{4}", digits):
                raise ValueError(f"malformed \\uxxxx escape: {text[i : i + 6]!r}")
            out.append(chr(int(digits, 16)))
            i += 6
            continue
        out.append(_ESCAPES_IN.get(nxt, nxt))
        i += 2
    # A backslash-u escape is one UTF-16 code unit; join surrogate pairs into characters.
    return "".join(out).encode("utf-16-le", "surrogatepass").decode("utf-16-le")


def _parse_properties(text: str) -> dict[str, str]:
    """Java ``Properties.load`` for one-line entries: ``#``/``!`` comments, ``=``, ``:`` or
    whitespace between key and value, backslash escapes (line continuations not supported)."""
    props: dict[str, str] = {}
    for raw in _LINE_BREAK.split(text):
        line = raw.lstrip(" \t\f")
        if not line or line[0] in "#!":
            continue
        i = 0
        while i < len(line) and line[i] not in "=: \t\f":
            i += 2 if line[i] == "\\" else 1
        key, rest = line[:i], line[i:].lstrip(" \t\f")
        if rest[:1] in ("=", ":"):
            rest = rest[1:].lstrip(" \t\f")
        props[_unescape_property(key)] = _unescape_property(rest)
    return props


def read_meta_properties(log_dir: Path) -> dict[str, str] | None:
    """The properties in ``<log_dir>/meta.properties``, or ``None`` if there is no such file.

    A leftover ``meta.properties.tmp`` from an interrupted write is deleted first, as Kafka does.
    """
    path = Path(log_dir) / META_PROPERTIES_FILE
    with contextlib.suppress(FileNotFoundError):
        path.with_name(path.name + TMP_SUFFIX).unlink()
    try:
        return _read_properties(path)
    except FileNotFoundError:
        return None


def _read_properties(path: Path) -> dict[str, str]:
    """The properties in ``path``; FileNotFoundError, or KAFKA_STORAGE_ERROR naming the file."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise
    except OSError as e:
        raise KafkaStorageError(f"Failed to read {path}: {e}") from e
    try:
        # Java writes properties in ISO-8859-1 with \\u escapes for anything else.
        return _parse_properties(data.decode("latin-1"))
    except ValueError as e:
        raise KafkaStorageError(f"Malformed properties file {path}: {e}") from e


def check_meta_properties(log_dir: Path) -> BrokerMetadata | None:
    """What ``<log_dir>/meta.properties`` says (None: no such file), read without changing
    anything (``verify-log``); KAFKA_STORAGE_ERROR when it is unreadable or malformed."""
    try:
        props = _read_properties(Path(log_dir) / META_PROPERTIES_FILE)
    except FileNotFoundError:
        return None
    return _broker_metadata(log_dir, props)


def write_meta_properties(log_dir: Path, broker_id: int, cluster_id: str | None) -> None:
    """Write ``version=0``, ``broker.id`` and (when known) ``cluster.id`` atomically.

    Unlike Java's ``Properties.store`` no date comment is written, so the bytes are
    deterministic; readers skip comments either way.
    """
    if not 0 <= broker_id <= INT32_MAX:
        raise ValueError(f"broker.id must be in [0, {INT32_MAX}], got {broker_id}")
    props = {"version": META_PROPERTIES_VERSION, "broker.id": str(broker_id)}
    if cluster_id is not None:
        props["cluster.id"] = cluster_id
    text = "".join(
        f"{_escape_property(k, is_key=True)}={_escape_property(v, is_key=False)}\n"
        for k, v in props.items()
    )
    path = Path(log_dir) / META_PROPERTIES_FILE
    try:
        atomic_write(path, text.encode("latin-1"), sync=True)
    except OSError as e:
        raise KafkaStorageError(f"Failed to write {path}: {e}") from e


def _broker_metadata(log_dir: Path, props: Mapping[str, str]) -> BrokerMetadata:
    path = Path(log_dir) / META_PROPERTIES_FILE
    version = props.get("version")
    if version != META_PROPERTIES_VERSION:
        raise KafkaStorageError(
            f"Unrecognized version of the server meta.properties file {path}: {version!r}"
        )
    broker_id = _parse_java_int(props.get("broker.id", ""), 0, INT32_MAX)
    if broker_id is None:
        raise KafkaStorageError(
            f"Property broker.id in {path} is not an integer in [0, {INT32_MAX}]: "
            f"{props.get('broker.id')!r}"
        )
    return BrokerMetadata(broker_id, props.get("cluster.id"))


def stored_broker_metadata(log_dirs: Iterable[Path]) -> BrokerMetadata | None:
    """What the log dirs' ``meta.properties`` agree on (None: no dir has the file yet).
    InconsistentBrokerMetadataError listing every dir when two disagree."""
    found: dict[Path, BrokerMetadata] = {}
    for log_dir in log_dirs:
        props = read_meta_properties(log_dir)
        if props is not None:
            found[Path(log_dir)] = _broker_metadata(log_dir, props)
    if not found:
        return None
    distinct = set(found.values())
    if len(distinct) > 1:
        listing = "".join(f"- {d} -> {m}\n" for d, m in found.items())
        raise InconsistentBrokerMetadataError(
            "BrokerMetadata is not consistent across log.dirs. This could happen if multiple "
            "brokers shared a log directory (log.dirs) or partial data was manually copied "
            f"from another broker. Found:\n{listing}"
        )
    (stored,) = distinct
    return stored


class InconsistentClusterIdError(InconsistentBrokerMetadataError):
    """The log dirs belong to another cluster (Kafka's InconsistentClusterIdException): the
    ``cluster.id`` in their ``meta.properties`` is not the one in ZooKeeper's ``/cluster/id``."""


def check_broker_metadata(
    log_dirs: Iterable[Path], broker_id: int, cluster_id: str | None = None
) -> BrokerMetadata | None:
    """Check that the log dirs' ``meta.properties`` agree with each other, with ``broker_id``
    and, when given, with ``cluster_id`` (the cluster's id from ZooKeeper).

    Returns the agreed metadata, or ``None`` when no dir has the file yet (a new broker).
    Dirs without the file are skipped: the broker writes it to them at start-up.
    Raises InconsistentBrokerMetadataError listing every dir when two dirs disagree (the same
    broker id and cluster id are required, as Kafka compares the whole record), or when the
    stored broker.id is not ``broker_id``; InconsistentClusterIdError when they hold another
    cluster.id than ``cluster_id`` (a dir without one is adopted by this cluster);
    KAFKA_STORAGE_ERROR when a file is unreadable or malformed.
    """
    dirs = list(log_dirs)
    stored = stored_broker_metadata(dirs)
    if stored is None:
        return None
    if stored.broker_id != broker_id:
        found = [d for d in dirs if (Path(d) / META_PROPERTIES_FILE).exists()]
        raise InconsistentBrokerMetadataError(
            f"Configured broker.id {broker_id} doesn't match stored broker.id "
            f"{stored.broker_id} in meta.properties of {sorted(str(d) for d in found)}. "
            "If you moved your data, make sure your configured broker.id matches. If you intend "
            "to create a new broker, you should remove all data in your data directories "
            "(log.dirs)."
        )
    if cluster_id is not None and stored.cluster_id is not None and stored.cluster_id != cluster_id:
        raise InconsistentClusterIdError(
            f"The Cluster ID {cluster_id} doesn't match stored clusterId {stored.cluster_id} in "
            "meta.properties. The broker is trying to join the wrong cluster. Configured "
            "zookeeper.connect may be wrong."
        )
    return stored


# --------------------------------------------------------------------------------------------
# Clean-shutdown marker (one per log dir)
# --------------------------------------------------------------------------------------------


def _storage_op(what: str, path: Path, op: Callable[[], None]) -> None:
    try:
        op()
    except OSError as e:
        raise KafkaStorageError(f"Failed to {what} {path}: {e}") from e


def write_clean_shutdown_marker(log_dir: Path) -> None:
    """Record that every log in ``log_dir`` was flushed and closed: the next start skips
    recovery."""
    path = Path(log_dir) / CLEAN_SHUTDOWN_FILE

    def create() -> None:
        with open(path, "wb") as f:
            os.fsync(f.fileno())
        fsync_dir(path.parent)

    _storage_op("create clean-shutdown marker", path, create)


def has_clean_shutdown_marker(log_dir: Path) -> bool:
    return (Path(log_dir) / CLEAN_SHUTDOWN_FILE).is_file()


def remove_clean_shutdown_marker(log_dir: Path) -> None:
    """Delete the marker (done once the logs are loaded, before any new write)."""
    path = Path(log_dir) / CLEAN_SHUTDOWN_FILE

    def remove() -> None:
        path.unlink(missing_ok=True)
        fsync_dir(path.parent)

    _storage_op("remove clean-shutdown marker", path, remove)
