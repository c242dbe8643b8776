"""Checkpoint files, meta.properties and the clean-shutdown marker: exact bytes, atomic
replacement, and reads that refuse malformed files naming the file."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kafkasim.common.errors import InconsistentBrokerMetadataError, KafkaStorageError
from kafkasim.common.types import TopicPartition
from kafkasim.storage.checkpoints import (
    CLEAN_SHUTDOWN_FILE,
    CLEANER_OFFSET_CHECKPOINT_FILE,
    LEADER_EPOCH_CHECKPOINT_FILE,
    LOG_START_OFFSET_CHECKPOINT_FILE,
    META_PROPERTIES_FILE,
    RECOVERY_POINT_CHECKPOINT_FILE,
    REPLICATION_OFFSET_CHECKPOINT_FILE,
    BrokerMetadata,
    CheckpointFile,
    EpochEntry,
    LeaderEpochCheckpointFile,
    OffsetCheckpointFile,
    check_broker_metadata,
    has_clean_shutdown_marker,
    read_meta_properties,
    remove_clean_shutdown_marker,
    write_clean_shutdown_marker,
    write_meta_properties,
)


def test_file_names_are_kafkas() -> None:
    """Operators and tools look for these exact names in a log dir."""
    assert RECOVERY_POINT_CHECKPOINT_FILE == "recovery-point-offset-checkpoint"
    assert REPLICATION_OFFSET_CHECKPOINT_FILE == "replication-offset-checkpoint"
    assert LOG_START_OFFSET_CHECKPOINT_FILE == "log-start-offset-checkpoint"
    assert CLEANER_OFFSET_CHECKPOINT_FILE == "cleaner-offset-checkpoint"
    assert LEADER_EPOCH_CHECKPOINT_FILE == "leader-epoch-checkpoint"
    assert META_PROPERTIES_FILE == "meta.properties"
    assert CLEAN_SHUTDOWN_FILE == ".kafka_cleanshutdown"


# -- golden bytes --------------------------------------------------------------------------


def test_offset_checkpoint_golden_bytes(tmp_path: Path) -> None:
    """Version 0, count, then `topic partition offset` lines sorted by partition."""
    path = tmp_path / RECOVERY_POINT_CHECKPOINT_FILE
    OffsetCheckpointFile(path).write(
        {TopicPartition("orders", 1): 42, TopicPartition("orders", 0): 7, TopicPartition("a", 3): 0}
    )
    assert path.read_bytes() == b"0\n3\na 3 0\norders 0 7\norders 1 42\n"


def test_empty_offset_checkpoint_golden_bytes(tmp_path: Path) -> None:
    path = tmp_path / REPLICATION_OFFSET_CHECKPOINT_FILE
    OffsetCheckpointFile(path).write({})
    assert path.read_bytes() == b"0\n0\n"
    assert OffsetCheckpointFile(path).read() == {}


def test_leader_epoch_checkpoint_golden_bytes(tmp_path: Path) -> None:
    """Version 0, count, then `epoch start_offset` lines in the order given."""
    path = tmp_path / LEADER_EPOCH_CHECKPOINT_FILE
    LeaderEpochCheckpointFile(path).write(
        [EpochEntry(0, 0), EpochEntry(3, 120), EpochEntry(4, 9001)]
    )
    assert path.read_bytes() == b"0\n3\n0 0\n3 120\n4 9001\n"


def test_leader_epoch_checkpoint_for_partition_dir(tmp_path: Path) -> None:
    checkpoint = LeaderEpochCheckpointFile.for_partition_dir(tmp_path)
    assert checkpoint.path == tmp_path / "leader-epoch-checkpoint"


def test_reads_what_kafka_writes(tmp_path: Path) -> None:
    """Kafka splits entry lines on any run of whitespace; extra spacing must still parse."""
    path = tmp_path / "cp"
    path.write_bytes(b"0\n2\nfoo  0\t5\nbar 12 -1\n")
    assert OffsetCheckpointFile(path).read() == {
        TopicPartition("foo", 0): 5,
        TopicPartition("bar", 12): -1,
    }


# -- round trips ---------------------------------------------------------------------------

_topics = st.from_regex(r"[a-zA-Z0-9._-]{1,20}", fullmatch=True)
_offset_maps = st.dictionaries(
    st.builds(TopicPartition, _topics, st.integers(0, 2**31 - 1)),
    st.integers(-(2**63), 2**63 - 1),
    max_size=20,
)


@given(_offset_maps)
def test_offset_checkpoint_round_trip(offsets: dict[TopicPartition, int]) -> None:
    """Any legal topic, any int32 partition, any int64 offset comes back unchanged."""
    with tempfile.TemporaryDirectory() as d:
        checkpoint = OffsetCheckpointFile(Path(d) / "cp")
        checkpoint.write(offsets)
        assert checkpoint.read() == offsets


@given(st.lists(st.builds(EpochEntry, st.integers(0, 2**31 - 1), st.integers(0, 2**63 - 1))))
def test_leader_epoch_checkpoint_round_trip(entries: list[EpochEntry]) -> None:
    with tempfile.TemporaryDirectory() as d:
        checkpoint = LeaderEpochCheckpointFile(Path(d) / "cp")
        checkpoint.write(entries)
        assert checkpoint.read() == entries


def test_missing_file_reads_as_empty(tmp_path: Path) -> None:
    assert OffsetCheckpointFile(tmp_path / "absent").read() == {}
    assert LeaderEpochCheckpointFile(tmp_path / "absent").read() == []


@pytest.mark.parametrize("content", [b"", b"0\n"], ids=["empty", "version-only"])
def test_truncated_to_header_reads_as_empty(tmp_path: Path, content: bytes) -> None:
    """As Kafka's reader: no version or no count line means no entries, not an error."""
    path = tmp_path / "cp"
    path.write_bytes(content)
    assert OffsetCheckpointFile(path).read() == {}


def test_write_replaces_atomically_and_leaves_no_tmp(tmp_path: Path) -> None:
    """The new content arrives by rename; no .tmp is left behind."""
    path = tmp_path / "cp"
    checkpoint = OffsetCheckpointFile(path)
    checkpoint.write({TopicPartition("t", 0): 1})
    checkpoint.write({TopicPartition("t", 0): 2})
    assert checkpoint.read() == {TopicPartition("t", 0): 2}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cp"]


def test_stale_tmp_from_a_crash_is_ignored_and_overwritten(tmp_path: Path) -> None:
    """A crash between writing .tmp and the rename leaves the old file authoritative."""
    path = tmp_path / "cp"
    checkpoint = OffsetCheckpointFile(path)
    checkpoint.write({TopicPartition("t", 0): 1})
    (tmp_path / "cp.tmp").write_bytes(b"0\n1\nt 0 99")  # torn write of the next version
    assert checkpoint.read() == {TopicPartition("t", 0): 1}
    checkpoint.write({TopicPartition("t", 0): 3})
    assert checkpoint.read() == {TopicPartition("t", 0): 3}
    assert not (tmp_path / "cp.tmp").exists()


def test_write_to_missing_dir_is_a_storage_error(tmp_path: Path) -> None:
    path = tmp_path / "no-such-dir" / "cp"
    with pytest.raises(KafkaStorageError, match="no-such-dir"):
        OffsetCheckpointFile(path).write({TopicPartition("t", 0): 1})


def test_topic_with_whitespace_is_refused(tmp_path: Path) -> None:
    """It could not be read back: entry fields are whitespace-separated."""
    with pytest.raises(ValueError, match="topic name"):
        OffsetCheckpointFile(tmp_path / "cp").write({TopicPartition("a b", 0): 1})


# -- malformed files ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (b"1\n0\n", "Unrecognised version 1"),
        (b"x\n0\n", "Malformed line"),
        (b" 0\n0\n", "Malformed line"),
        (b"0\n2\nt 0 1\n", "Expected 2 entries"),
        (b"0\n1\nt 0 1\nt 1 2\n", "Expected 1 entries"),
        (b"0\n1\nt 0\n", "Malformed line"),
        (b"0\n1\nt 0 1 2\n", "Malformed line"),
        (b"0\n1\nt zero 1\n", "Malformed line"),
        (b"0\n1\nt 0 1_0\n", "Malformed line"),
        (b"0\n1\nt 2147483648 1\n", "Malformed line"),
        (b"0\n1\n t 0 1\n", "Malformed line"),
        (b"0\n1\nt 0 1\n\n", "Malformed line"),
        (b"0\nmany\n", "Malformed line"),
        (b"0\n1\n\xff 0 1\n", "not valid UTF-8"),
    ],
    ids=[
        "bad-version",
        "garbage-version",
        "padded-version",
        "fewer-lines-than-count",
        "more-lines-than-count",
        "missing-field",
        "extra-field",
        "non-numeric-partition",
        "python-only-int-syntax",
        "partition-over-int32",
        "leading-space",
        "blank-line",
        "garbage-count",
        "not-utf8",
    ],
)
def test_malformed_offset_checkpoint_names_file_and_problem(
    tmp_path: Path, content: bytes, problem: str
) -> None:
    path = tmp_path / RECOVERY_POINT_CHECKPOINT_FILE
    path.write_bytes(content)
    with pytest.raises(KafkaStorageError) as info:
        OffsetCheckpointFile(path).read()
    assert str(path) in str(info.value)
    assert problem in str(info.value)


@pytest.mark.parametrize(
    "content",
    [b"0\n1\n1\n", b"0\n1\n1 2 3\n", b"0\n1\n1 x\n", b"0\n1\n2147483648 0\n"],
    ids=["one-field", "three-fields", "non-numeric", "epoch-over-int32"],
)
def test_malformed_leader_epoch_checkpoint(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / LEADER_EPOCH_CHECKPOINT_FILE
    path.write_bytes(content)
    with pytest.raises(KafkaStorageError, match="Malformed line") as info:
        LeaderEpochCheckpointFile(path).read()
    assert str(path) in str(info.value)


def test_crlf_line_ends_are_accepted(tmp_path: Path) -> None:
    """Java's readLine ends lines at \\r\\n too."""
    path = tmp_path / "cp"
    path.write_bytes(b"0\r\n1\r\n5 10\r\n")
    assert LeaderEpochCheckpointFile(path).read() == [EpochEntry(5, 10)]


def test_generic_checkpoint_file_with_custom_formatter(tmp_path: Path) -> None:
    """CheckpointFile is generic over its entry type; the version is the caller's."""

    class Words:
        def to_line(self, entry: str) -> str:
            return entry

        def from_line(self, line: str) -> str | None:
            return line if line.isalpha() else None

    path = tmp_path / "words"
    checkpoint = CheckpointFile(path, 7, Words())
    checkpoint.write(["alpha", "beta"])
    assert path.read_bytes() == b"7\n2\nalpha\nbeta\n"
    assert checkpoint.read() == ["alpha", "beta"]
    with pytest.raises(ValueError, match="spans lines"):
        checkpoint.write(["two\nlines"])


# -- meta.properties ----------------------------------------------------------------------


def test_meta_properties_golden_bytes(tmp_path: Path) -> None:
    write_meta_properties(tmp_path, 3, "BIbPq3azQnSIjx2QURxtBA")
    assert (tmp_path / "meta.properties").read_bytes() == (
        b"version=0\nbroker.id=3\ncluster.id=BIbPq3azQnSIjx2QURxtBA\n"
    )
    assert not (tmp_path / "meta.properties.tmp").exists()


def test_meta_properties_without_cluster_id(tmp_path: Path) -> None:
    """Before the broker has talked to ZooKeeper the cluster id is unknown and omitted."""
    write_meta_properties(tmp_path, 0, None)
    assert (tmp_path / "meta.properties").read_bytes() == b"version=0\nbroker.id=0\n"
    assert read_meta_properties(tmp_path) == {"version": "0", "broker.id": "0"}


def test_reads_meta_properties_as_java_writes_them(tmp_path: Path) -> None:
    """Java's Properties.store adds comment lines and may order keys any way."""
    (tmp_path / "meta.properties").write_bytes(
        b"#\n#Sat Sep 23 13:04:14 SGT 2023\ncluster.id=BIbPq3azQnSIjx2QURxtBA\n"
        b"version=0\nbroker.id=1009\n"
    )
    assert read_meta_properties(tmp_path) == {
        "cluster.id": "BIbPq3azQnSIjx2QURxtBA",
        "version": "0",
        "broker.id": "1009",
    }


def test_meta_properties_escapes_round_trip(tmp_path: Path) -> None:
    """A cluster id with characters Properties escapes comes back unchanged."""
    odd = "a=b:c#d!e\\f é \U0001f600"
    write_meta_properties(tmp_path, 1, odd)
    props = read_meta_properties(tmp_path)
    assert props is not None
    assert props["cluster.id"] == odd


def test_missing_meta_properties_is_none_and_stale_tmp_removed(tmp_path: Path) -> None:
    (tmp_path / "meta.properties.tmp").write_bytes(b"broker.id=")
    assert read_meta_properties(tmp_path) is None
    assert not (tmp_path / "meta.properties.tmp").exists()


def test_negative_broker_id_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"broker\.id"):
        write_meta_properties(tmp_path, -1, None)


def _dirs(tmp_path: Path, count: int) -> list[Path]:
    dirs = [tmp_path / f"logs{i}" for i in range(count)]
    for d in dirs:
        d.mkdir()
    return dirs


def test_agreeing_dirs_pass_and_new_dirs_are_skipped(tmp_path: Path) -> None:
    a, b, fresh = _dirs(tmp_path, 3)
    write_meta_properties(a, 5, "c1")
    write_meta_properties(b, 5, "c1")
    assert check_broker_metadata([a, b, fresh], 5) == BrokerMetadata(5, "c1")


def test_no_meta_properties_anywhere_is_a_new_broker(tmp_path: Path) -> None:
    assert check_broker_metadata(_dirs(tmp_path, 2), 5) is None


@pytest.mark.parametrize(
    ("second", "ids"),
    [((6, "c1"), "broker id"), ((5, "c2"), "cluster id"), ((5, None), "missing cluster id")],
)
def test_disagreeing_dirs_are_inconsistent(
    tmp_path: Path, second: tuple[int, str | None], ids: str
) -> None:
    """Two log dirs owned by different brokers or clusters: refuse to start, list both."""
    a, b = _dirs(tmp_path, 2)
    write_meta_properties(a, 5, "c1")
    write_meta_properties(b, *second)
    with pytest.raises(InconsistentBrokerMetadataError, match="not consistent") as info:
        check_broker_metadata([a, b], 5)
    assert str(a) in str(info.value)
    assert str(b) in str(info.value)


def test_stored_broker_id_differs_from_configured(tmp_path: Path) -> None:
    (a,) = _dirs(tmp_path, 1)
    write_meta_properties(a, 5, "c1")
    with pytest.raises(InconsistentBrokerMetadataError, match=r"Configured broker\.id 6"):
        check_broker_metadata([a], 6)


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (b"version=1\nbroker.id=1\n", "Unrecognized version"),
        (b"broker.id=1\n", "Unrecognized version"),
        (b"version=0\nbroker.id=x\n", "broker.id"),
        (b"version=0\n", "broker.id"),
    ],
    ids=["kraft-version", "no-version", "bad-broker-id", "no-broker-id"],
)
def test_unusable_meta_properties_is_a_storage_error(
    tmp_path: Path, content: bytes, problem: str
) -> None:
    (a,) = _dirs(tmp_path, 1)
    (a / "meta.properties").write_bytes(content)
    with pytest.raises(KafkaStorageError, match=problem) as info:
        check_broker_metadata([a], 1)
    assert "meta.properties" in str(info.value)


# -- clean-shutdown marker ----------------------------------------------------------------


def test_clean_shutdown_marker_lifecycle(tmp_path: Path) -> None:
    """Written at clean shutdown, seen at start-up, removed before the logs are written to."""
    assert not has_clean_shutdown_marker(tmp_path)
    write_clean_shutdown_marker(tmp_path)
    assert has_clean_shutdown_marker(tmp_path)
    assert (tmp_path / ".kafka_cleanshutdown").read_bytes() == b""
    remove_clean_shutdown_marker(tmp_path)
    assert not has_clean_shutdown_marker(tmp_path)
    remove_clean_shutdown_marker(tmp_path)  # idempotent


def test_clean_shutdown_marker_in_missing_dir_is_a_storage_error(tmp_path: Path) -> None:
    with pytest.raises(KafkaStorageError, match="clean-shutdown marker"):
        write_clean_shutdown_marker(tmp_path / "gone")
