"""ProducerStateManager: duplicate detection over the last five batches, fencing, sequence
rules (gaps, new epochs, wrap at int32 max), and ProducerSnapshot files."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import tempfile
from collections.abc import Callable
from pathlib import Path

import crc32c
import pytest
from hypothesis import given
from hypothesis import strategies as st

from kafkasim.common.errors import InvalidProducerEpochError, OutOfOrderSequenceNumberError
from kafkasim.common.sentinels import INT32_MAX
from kafkasim.storage.producer_state import (
    NUM_BATCHES_TO_RETAIN,
    BatchMetadata,
    CorruptSnapshotError,
    ProducerStateEntry,
    ProducerStateManager,
    decode_snapshot,
    decrement_sequence,
    encode_snapshot,
    snapshot_file_name,
)
from kafkasim.storage.records.batch import increment_sequence

PID = 1000
T0 = 1_700_000_000_000


class Log:
    """Just enough of a partition log to drive producer state: assigns offsets, advances
    the map end offset after each append, and skips duplicates as the real log does."""

    def __init__(self, state: ProducerStateManager, next_offset: int = 0) -> None:
        self.state = state
        self.next_offset = next_offset

    def append(
        self,
        epoch: int,
        first_seq: int,
        count: int = 1,
        *,
        pid: int = PID,
        timestamp: int = T0,
        from_client: bool = True,
    ) -> BatchMetadata | None:
        last_seq = (first_seq + count - 1) % (INT32_MAX + 1)
        last_offset = self.next_offset + count - 1
        duplicate = self.state.check_and_update(
            pid, epoch, first_seq, last_seq, last_offset, timestamp, is_from_client=from_client
        )
        if duplicate is None:
            self.next_offset = last_offset + 1
            self.state.update_map_end_offset(self.next_offset)
        return duplicate


@pytest.fixture
def log(tmp_path: Path) -> Log:
    return Log(ProducerStateManager(tmp_path))


def entry_of(state: ProducerStateManager, pid: int = PID) -> ProducerStateEntry:
    entry = state.last_entry(pid)
    assert entry is not None, f"no state for producer {pid}"
    return entry


def send_batches(log: Log, count: int, *, size: int = 3, epoch: int = 0) -> list[BatchMetadata]:
    """``count`` in-order batches of ``size`` records; returns their metadata, oldest first."""
    sent = []
    for i in range(count):
        assert log.append(epoch, i * size, size) is None
        entry = log.state.last_entry(PID)
        assert entry is not None
        sent.append(entry.batch_metadata[-1])
    return sent


# -- accepted appends ----------------------------------------------------------------------


def test_first_batch_of_a_new_producer_is_recorded(log: Log) -> None:
    assert log.append(0, 0, 4, timestamp=T0 + 5) is None
    entry = log.state.last_entry(PID)
    assert entry is not None
    assert entry.producer_epoch == 0
    assert list(entry.batch_metadata) == [BatchMetadata(0, 3, 3, 3, T0 + 5)]
    assert entry.batch_metadata[0].first_offset == 0
    assert entry.last_timestamp == T0 + 5
    assert log.state.map_end_offset == 4
    assert log.state.active_producers == {PID: entry}


def test_unknown_producer_is_accepted_at_any_sequence(log: Log) -> None:
    """Kafka 2.5+ (KIP-360): its state may have been removed by retention, so no
    UNKNOWN_PRODUCER_ID; the sequence continues from what it sent."""
    assert log.append(3, 57, 2) is None
    assert log.append(3, 59) is None


def test_only_the_last_five_batches_are_kept(log: Log) -> None:
    sent = send_batches(log, 8)
    entry = log.state.last_entry(PID)
    assert entry is not None
    assert list(entry.batch_metadata) == sent[-NUM_BATCHES_TO_RETAIN:]
    assert entry.first_seq == sent[3].first_seq
    assert entry.last_seq == sent[-1].last_seq


# -- duplicates ----------------------------------------------------------------------------


@pytest.mark.parametrize("age", range(1, NUM_BATCHES_TO_RETAIN + 1))
def test_retry_of_each_of_the_last_five_batches_is_a_duplicate(log: Log, age: int) -> None:
    """A retry returns the original batch's metadata and changes nothing."""
    sent = send_batches(log, 7)
    original = sent[-age]
    before = (log.state.map_end_offset, list(entry_of(log.state).batch_metadata))
    duplicate = log.append(0, original.first_seq, original.last_seq - original.first_seq + 1)
    assert duplicate == original
    after = (log.state.map_end_offset, list(entry_of(log.state).batch_metadata))
    assert after == before


def test_retry_of_the_sixth_most_recent_batch_is_out_of_order(log: Log) -> None:
    """It fell out of the cache: the broker cannot tell it from a sequence going backwards."""
    sent = send_batches(log, 7)
    sixth = sent[-(NUM_BATCHES_TO_RETAIN + 1)]
    with pytest.raises(OutOfOrderSequenceNumberError):
        log.append(0, sixth.first_seq, 3)


def test_duplicate_needs_the_exact_sequence_range(log: Log) -> None:
    send_batches(log, 3)  # sequences 0-2, 3-5, 6-8
    with pytest.raises(OutOfOrderSequenceNumberError):
        log.append(0, 3, 2)  # 3-4 overlaps 3-5 but is not it


def test_duplicate_needs_the_same_epoch(log: Log) -> None:
    send_batches(log, 2)
    assert log.append(1, 0, 3) is None  # epoch 1 restarting at 0 is new data, not a retry


def test_replicated_batches_are_not_deduplicated(log: Log) -> None:
    """Followers copy the leader's log verbatim; deduplication happened on the leader."""
    send_batches(log, 1)
    assert log.append(0, 0, 3, from_client=False) is None
    assert log.next_offset == 6


# -- refusals ------------------------------------------------------------------------------


@pytest.mark.parametrize("first_seq", [4, 5, 100, 2, 0], ids=["gap-1", "gap-2", "far", "back", "0"])
def test_sequence_that_is_not_the_next_one_is_out_of_order(log: Log, first_seq: int) -> None:
    send_batches(log, 1)  # sequences 0-2: the next must be 3
    with pytest.raises(OutOfOrderSequenceNumberError) as info:
        log.append(0, first_seq, 1)
    assert info.value.error_name == "OUT_OF_ORDER_SEQUENCE_NUMBER"
    assert info.value.code == 45
    assert "2 (current end sequence number)" in str(info.value)


def test_older_epoch_is_fenced(log: Log) -> None:
    send_batches(log, 1, epoch=5)
    with pytest.raises(InvalidProducerEpochError) as info:
        log.append(4, 3)
    assert info.value.error_name == "INVALID_PRODUCER_EPOCH"
    assert "smaller than the last seen epoch 5" in str(info.value)


def test_retry_from_a_fenced_epoch_is_refused_not_deduplicated(log: Log) -> None:
    send_batches(log, 1, epoch=0)
    assert log.append(1, 0) is None
    with pytest.raises(InvalidProducerEpochError):
        log.append(0, 0, 3)


def test_new_epoch_must_start_at_zero(log: Log) -> None:
    send_batches(log, 2, epoch=0)
    with pytest.raises(OutOfOrderSequenceNumberError, match="new epoch"):
        log.append(1, 6)
    assert log.append(1, 0, 2) is None
    entry = log.state.last_entry(PID)
    assert entry is not None
    assert entry.producer_epoch == 1
    assert [b.first_seq for b in entry.batch_metadata] == [0]  # the old epoch's batches are gone


def test_refused_batch_leaves_state_unchanged(log: Log) -> None:
    send_batches(log, 2, epoch=3)
    entry = log.state.last_entry(PID)
    assert entry is not None
    before = (entry.producer_epoch, list(entry.batch_metadata), entry.last_timestamp)
    for bad in ((3, 9), (2, 6), (4, 1)):
        with pytest.raises((OutOfOrderSequenceNumberError, InvalidProducerEpochError)):
            log.append(*bad, timestamp=T0 + 99)
    assert (entry.producer_epoch, list(entry.batch_metadata), entry.last_timestamp) == before


@pytest.mark.parametrize(
    "args",
    [
        (-1, 0, 0, 0, 0),
        (PID, -1, 0, 0, 0),
        (PID, 2**15, 0, 0, 0),
        (PID, 0, -1, 0, 0),
        (PID, 0, 0, INT32_MAX + 1, 0),
        (PID, 0, 0, 5, 3),
    ],
    ids=[
        "no-producer-id",
        "negative-epoch",
        "epoch-over-int16",
        "negative-seq",
        "seq-over-int32",
        "offset-below-zero",
    ],
)
def test_impossible_client_batch_fields_are_a_caller_error(
    log: Log, args: tuple[int, int, int, int, int]
) -> None:
    with pytest.raises(ValueError, match=r"producer|epoch|sequence|offset"):
        log.state.check_and_update(*args, T0, is_from_client=True)


# -- wrap-around ---------------------------------------------------------------------------


def test_sequence_wraps_from_int32_max_to_zero(log: Log) -> None:
    assert log.append(0, INT32_MAX - 2, 3) is None  # unknown producer: accepted mid-range
    assert entry_of(log.state).last_seq == INT32_MAX
    assert log.append(0, 0, 2) is None
    with pytest.raises(OutOfOrderSequenceNumberError):
        log.append(0, 3)


@pytest.mark.parametrize(
    ("seq", "delta", "incremented", "decremented"),
    [
        (5, 3, 8, 2),
        (INT32_MAX, 1, 0, INT32_MAX - 1),
        (INT32_MAX - 1, 4, 2, INT32_MAX - 5),
        (1, 3, 4, INT32_MAX - 1),
        (0, 0, 0, 0),
    ],
)
def test_sequence_arithmetic_wraps_like_record_batches(
    seq: int, delta: int, incremented: int, decremented: int
) -> None:
    assert increment_sequence(seq, delta) == incremented
    assert decrement_sequence(seq, delta) == decremented
    assert decrement_sequence(increment_sequence(seq, delta), delta) == seq


def test_batch_spanning_the_wrap(log: Log) -> None:
    """Records at MAX-1, MAX, 0, 1: offset delta 3, and its retry is still a duplicate."""
    assert log.append(0, INT32_MAX - 1, 4) is None
    batch = entry_of(log.state).batch_metadata[-1]
    assert (batch.first_seq, batch.last_seq, batch.offset_delta) == (INT32_MAX - 1, 1, 3)
    assert batch.first_offset == 0
    assert log.append(0, INT32_MAX - 1, 4) == batch
    assert log.append(0, 2) is None


# -- followers and recovery ----------------------------------------------------------------


def test_replicated_batches_skip_sequence_checks(
    log: Log, caplog: pytest.LogCaptureFixture
) -> None:
    """The leader validated them; a follower records whatever the leader wrote."""
    send_batches(log, 1, epoch=5)
    assert log.append(5, 40, from_client=False) is None  # a gap
    with caplog.at_level(logging.WARNING, logger="kafkasim.storage.producer_state"):
        assert log.append(4, 0, from_client=False) is None  # an older epoch: logged only
    assert "smaller than the last seen epoch 5" in caplog.text
    assert entry_of(log.state).producer_epoch == 4


def test_replicated_batch_without_sequences_is_recorded(log: Log) -> None:
    log.state.check_and_update(PID, 0, -1, -1, 10, T0, is_from_client=False)
    entry = log.state.last_entry(PID)
    assert entry is not None
    assert entry.batch_metadata[-1] == BatchMetadata(-1, -1, 10, 0, T0)


# -- expiry --------------------------------------------------------------------------------


def test_idle_producers_expire(tmp_path: Path) -> None:
    log = Log(ProducerStateManager(tmp_path, max_producer_id_expiration_ms=1_000))
    log.append(0, 0, pid=1, timestamp=T0)
    log.append(0, 0, pid=2, timestamp=T0 + 500)
    log.state.remove_expired_producers(T0 + 999)
    assert sorted(log.state.active_producers) == [1, 2]
    log.state.remove_expired_producers(T0 + 1_000)
    assert sorted(log.state.active_producers) == [2]
    log.state.remove_expired_producers(T0 + 1_500)
    assert log.state.is_empty


# -- snapshots -----------------------------------------------------------------------------


def test_snapshot_golden_bytes(log: Log) -> None:
    """ProducerSnapshot v1: version, CRC-32C of the rest, then the entries, big-endian."""
    log.next_offset = 105
    log.append(2, 5, 5, timestamp=T0 + 123)  # sequences 5-9 at offsets 105-109
    path = log.state.take_snapshot()
    assert path is not None
    assert path.name == "00000000000000000110.snapshot"

    def be(value: int, size: int) -> bytes:
        return value.to_bytes(size, "big", signed=True)

    body = (
        be(1, 4)  # producer_entries count
        + be(PID, 8)  # producer_id
        + be(2, 2)  # epoch
        + be(9, 4)  # last_sequence
        + be(109, 8)  # last_offset
        + be(4, 4)  # offset_delta
        + be(T0 + 123, 8)  # timestamp
        + be(-1, 4)  # coordinator_epoch
        + be(-1, 8)  # current_txn_first_offset
    )
    expected = be(1, 2) + crc32c.crc32c(body).to_bytes(4, "big") + body
    assert path.read_bytes() == expected


def test_snapshot_file_names_are_20_digit_offsets() -> None:
    assert snapshot_file_name(0) == "00000000000000000000.snapshot"
    assert snapshot_file_name(12345) == "00000000000000012345.snapshot"


def test_snapshot_round_trip_keeps_only_the_last_batch(tmp_path: Path) -> None:
    """After a restart from a snapshot alone, only the last batch is known: its retry is still
    a duplicate, an older retry is answered OUT_OF_ORDER_SEQUENCE_NUMBER."""
    log = Log(ProducerStateManager(tmp_path))
    sent = send_batches(log, 4, epoch=7)
    log.append(0, 0, pid=PID + 1, timestamp=T0 + 9)
    snapshot = log.state.take_snapshot()
    assert snapshot is not None
    assert not list(tmp_path.glob("*.tmp"))

    restarted = Log(ProducerStateManager(tmp_path), log.next_offset)
    assert restarted.state.load_from_latest_snapshot(0, log.next_offset) == log.next_offset
    assert restarted.state.map_end_offset == log.next_offset
    entry = restarted.state.last_entry(PID)
    assert entry is not None
    assert (entry.producer_epoch, list(entry.batch_metadata)) == (7, [sent[-1]])
    assert sorted(restarted.state.active_producers) == [PID, PID + 1]

    last = sent[-1]
    assert restarted.append(7, last.first_seq, 3) == last
    with pytest.raises(OutOfOrderSequenceNumberError):
        restarted.append(7, sent[-2].first_seq, 3)
    assert restarted.append(7, last.last_seq + 1) is None


def test_take_snapshot_only_when_the_map_end_moved(log: Log) -> None:
    assert log.state.take_snapshot() is None  # nothing at offset 0
    log.append(0, 0)
    assert log.state.take_snapshot() is not None
    assert log.state.take_snapshot() is None
    assert log.state.list_snapshot_offsets() == [1]


def _snapshots_at(tmp_path: Path, *offsets: int) -> ProducerStateManager:
    """A manager with one snapshot at each offset; producer PID's last sequence = offset."""
    state = ProducerStateManager(tmp_path)
    for offset in offsets:
        state.check_and_update(PID, 0, offset, offset, offset - 1, T0, is_from_client=False)
        state.update_map_end_offset(offset)
        assert state.take_snapshot() is not None
    return state


def _last_seq_after_load(tmp_path: Path, log_start: int, log_end: int) -> int | None:
    state = ProducerStateManager(tmp_path)
    state.load_from_latest_snapshot(log_start, log_end)
    entry = state.last_entry(PID)
    return entry.last_seq if entry is not None else None


@pytest.mark.parametrize(
    "corrupt",
    [
        lambda b: b[:-1] + bytes([b[-1] ^ 0x01]),
        lambda b: b[:-5],
        lambda b: b[:3],
        lambda b: b"",
        lambda b: b"\x00\x02" + b[2:],
        lambda b: b + b"\x00",
    ],
    ids=["bit-flip", "short", "torn-header", "empty", "unknown-version", "trailing-byte"],
)
def test_corrupt_snapshot_is_deleted_and_the_next_older_used(
    tmp_path: Path, corrupt: Callable[[bytes], bytes], caplog: pytest.LogCaptureFixture
) -> None:
    _snapshots_at(tmp_path, 10, 20)
    newest = tmp_path / snapshot_file_name(20)
    newest.write_bytes(corrupt(newest.read_bytes()))
    with caplog.at_level(logging.WARNING, logger="kafkasim.storage.producer_state"):
        state = ProducerStateManager(tmp_path)
        assert state.load_from_latest_snapshot(0, 30) == 10
    assert str(newest) in caplog.text
    assert entry_of(state).last_seq == 10
    assert state.list_snapshot_offsets() == [10]


def test_all_snapshots_corrupt_starts_empty_at_log_start(tmp_path: Path) -> None:
    _snapshots_at(tmp_path, 10)
    (tmp_path / snapshot_file_name(10)).write_bytes(b"junk")
    state = ProducerStateManager(tmp_path)
    assert state.load_from_latest_snapshot(4, 30) is None
    assert state.is_empty
    assert state.map_end_offset == 4


@pytest.mark.parametrize(
    ("log_start", "log_end", "last_seq"),
    [(0, 30, 20), (0, 20, 20), (0, 19, 10), (0, 9, None), (11, 30, 20), (21, 30, None)],
)
def test_load_picks_the_newest_snapshot_within_the_log(
    tmp_path: Path, log_start: int, log_end: int, last_seq: int | None
) -> None:
    """A snapshot above the log end describes data that is gone; one below the log start
    cannot be replayed forward."""
    _snapshots_at(tmp_path, 10, 20)
    assert _last_seq_after_load(tmp_path, log_start, log_end) == last_seq


def test_load_with_now_skips_expired_producers(tmp_path: Path) -> None:
    _snapshots_at(tmp_path, 10)
    state = ProducerStateManager(tmp_path, max_producer_id_expiration_ms=1_000)
    assert state.load_from_latest_snapshot(0, 10, now_ms=T0 + 1_000) == 10
    assert state.is_empty


def test_truncate_snapshots_deletes_those_above(tmp_path: Path) -> None:
    state = _snapshots_at(tmp_path, 10, 20, 30)
    state.truncate_snapshots(20)
    assert state.list_snapshot_offsets() == [10, 20]
    state.truncate_snapshots(5)
    assert state.list_snapshot_offsets() == []


def test_snapshot_can_be_retaken_after_truncation(tmp_path: Path) -> None:
    state = _snapshots_at(tmp_path, 10, 20)
    state.truncate_snapshots(15)
    state.update_map_end_offset(20)
    assert state.take_snapshot() == tmp_path / snapshot_file_name(20)


def test_delete_snapshots_below(tmp_path: Path) -> None:
    state = _snapshots_at(tmp_path, 10, 20, 30)
    state.delete_snapshots_below(20)
    assert state.list_snapshot_offsets() == [20, 30]


def test_list_snapshot_offsets_ignores_other_files(tmp_path: Path) -> None:
    for name in ("00000000000000000000.log", "00000000000000000007.snapshot.tmp", "x.snapshot"):
        (tmp_path / name).write_bytes(b"")
    state = _snapshots_at(tmp_path, 3)
    assert state.list_snapshot_offsets() == [3]
    assert ProducerStateManager(tmp_path / "absent").list_snapshot_offsets() == []


def test_leftover_tmp_snapshot_is_removed_on_load(tmp_path: Path) -> None:
    (tmp_path / "00000000000000000007.snapshot.tmp").write_bytes(b"torn")
    ProducerStateManager(tmp_path).load_from_latest_snapshot(0, 10)
    assert not list(tmp_path.iterdir())


def test_truncate_and_reload_after_log_truncation(tmp_path: Path) -> None:
    """Kafka's rule: snapshots outside (log start, log end] go, then reload the newest."""
    state = _snapshots_at(tmp_path, 5, 10, 20, 30)
    state.truncate_and_reload(5, 25, T0)
    assert state.list_snapshot_offsets() == [10, 20]
    assert state.map_end_offset == 20
    assert entry_of(state).last_seq == 20


def test_truncate_and_reload_at_the_map_end_only_moves_the_head(tmp_path: Path) -> None:
    state = _snapshots_at(tmp_path, 10, 20)
    state.check_and_update(PID + 1, 0, 0, 0, 20, T0, is_from_client=False)
    state.update_map_end_offset(21)
    state.truncate_and_reload(12, 21, T0)
    assert state.list_snapshot_offsets() == [20]
    assert sorted(state.active_producers) == [PID, PID + 1]  # in-memory state kept
    assert state.map_end_offset == 21


def test_truncate_fully_and_start_at(tmp_path: Path) -> None:
    state = _snapshots_at(tmp_path, 10, 20)
    state.truncate_fully_and_start_at(50)
    assert state.is_empty
    assert state.list_snapshot_offsets() == []
    assert state.map_end_offset == 50


# -- properties ----------------------------------------------------------------------------


@st.composite
def producer_entries(draw: st.DrawFn) -> ProducerStateEntry:
    """Any entry a snapshot can hold: with or without a last batch and an open transaction."""
    timestamp = draw(st.integers(-1, 2**62))
    entry = ProducerStateEntry(
        draw(st.integers(0, 2**63 - 1)),
        draw(st.integers(0, 2**15 - 1)),
        coordinator_epoch=draw(st.integers(-1, 2**31 - 1)),
        current_txn_first_offset=draw(st.one_of(st.none(), st.integers(0, 2**62))),
        last_timestamp=timestamp,
    )
    if draw(st.booleans()):
        first_seq, delta = draw(st.integers(0, INT32_MAX)), draw(st.integers(0, 1000))
        last_seq = (first_seq + delta) % (INT32_MAX + 1)
        last_offset = draw(st.integers(delta, 2**62))
        entry.batch_metadata.append(
            BatchMetadata(first_seq, last_seq, last_offset, delta, timestamp)
        )
    return entry


@given(st.lists(producer_entries(), max_size=10, unique_by=lambda e: e.producer_id))
def test_snapshot_codec_round_trip(entries: list[ProducerStateEntry]) -> None:
    assert decode_snapshot(encode_snapshot(entries)) == entries


@given(st.binary(max_size=64))
def test_decoding_garbage_raises_corrupt_snapshot_only(data: bytes) -> None:
    with contextlib.suppress(CorruptSnapshotError):
        decode_snapshot(data)


@given(st.lists(st.tuples(st.integers(1, 4), st.integers(0, 6)), min_size=1, max_size=30))
def test_retries_of_recent_batches_never_change_state(plan: list[tuple[int, int]]) -> None:
    """A producer that sends in order and retries any of its last batches: every retry of one
    of the last five is a duplicate returning the original, older ones are refused, and the
    state always equals that of the in-order stream alone."""
    with tempfile.TemporaryDirectory() as d:
        log, sent, next_seq = Log(ProducerStateManager(Path(d))), [], 0
        for size, retry_age in plan:
            assert log.append(0, next_seq, size) is None
            sent.append(entry_of(log.state).batch_metadata[-1])
            next_seq += size
            if 1 <= retry_age <= len(sent):
                old = sent[-retry_age]
                count = old.last_seq - old.first_seq + 1
                if retry_age <= NUM_BATCHES_TO_RETAIN:
                    assert log.append(0, old.first_seq, count) == old
                else:
                    with pytest.raises(OutOfOrderSequenceNumberError):
                        log.append(0, old.first_seq, count)
            entry = log.state.last_entry(PID)
            assert entry is not None
            assert list(entry.batch_metadata) == sent[-NUM_BATCHES_TO_RETAIN:]
            assert log.state.map_end_offset == sent[-1].last_offset + 1


def test_an_entry_copy_has_every_field_and_its_own_batches() -> None:
    """``save_entries`` copies entries with ``ProducerStateEntry.copy``: every field (a field
    added later and left out of the copy fails here), a deque of its own with the same bound."""
    entry = ProducerStateEntry(7)
    for entry_field in dataclasses.fields(entry):
        if entry_field.name != "batch_metadata":
            setattr(entry, entry_field.name, 100 + len(entry_field.name))  # all non-default
    entry.add_batch(entry.producer_epoch, BatchMetadata(0, 4, 10, 4, 1234))
    copy = entry.copy()
    assert copy == entry and copy is not entry
    assert copy.batch_metadata is not entry.batch_metadata
    assert copy.batch_metadata.maxlen == entry.batch_metadata.maxlen
    entry.add_batch(entry.producer_epoch, BatchMetadata(5, 9, 15, 4, 1300))
    assert len(copy.batch_metadata) == 1
