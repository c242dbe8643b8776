"""The leader's one-batch append path against the general one.

Why: ``log_append.plan_client_batch`` with ``LogSegment.append_batch_unless_rolling`` does the
usual append (one plain client batch) in one pass and only vouches for it. Whatever it takes
must leave the same segment files, indexes, leader epochs and answers as the general path
(``analyze_append``, ``validate_and_convert``, ``assign_offsets``, ``_maybe_roll``,
``LogSegment.append``); whatever it declines must come out of the general path with that
path's own error, and nothing half-written.
"""

from __future__ import annotations

import signal
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from unittest import mock

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kafkasim.common.errors import KafkaError
from kafkasim.storage import log as log_module
from kafkasim.storage.log import AppendOrigin, Log, LogAppendInfo
from kafkasim.storage.records import validation
from kafkasim.storage.records.batch import RecordBatchBuilder
from kafkasim.storage.records.compression import CompressionType
from kafkasim.storage.segment import LogSegment
from tests.unit.storage.logtools import T0, make_batch, open_log, read_all
from tests.unit.storage.records.crafted import CORRUPTIONS, with_header

Outcome = LogAppendInfo | tuple[type[KafkaError], str]

needs_compiled_walk = pytest.mark.skipif(
    validation.COMPILED_WALK is None,
    reason="the one-batch path walks records with the compiled walk only (without it, or "
    "with KAFKASIM_PURE_PYTHON set, every append takes the general path)",
)


@contextmanager
def _general_path_only() -> Iterator[None]:
    """The one-batch path declines every append: the general path does them all."""
    with mock.patch.object(log_module, "plan_client_batch", return_value=None):
        yield


def _append(log: Log, batch: bytes, epoch: int, origin: AppendOrigin) -> Outcome:
    try:
        return log.append_as_leader(batch, leader_epoch=epoch, origin=origin)
    except KafkaError as e:
        return type(e), e.message


def _files(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir()) if p.is_file()}


@st.composite
def _batches(draw: st.DrawFn) -> bytes:
    """Plain client batches mostly (the one-batch path's case, timestamps around the clock,
    null keys now and then), and every kind it must decline: a producer id, lz4, a
    maxTimestamp to correct, two batches, damaged ones."""
    kind = draw(st.sampled_from(["plain"] * 6 + ["pid", "lz4", "max_ts", "two", "damaged"]))
    if kind == "damaged":
        return draw(st.sampled_from([c[1] for c in CORRUPTIONS]))
    count = draw(st.integers(1, 8))
    builder = RecordBatchBuilder(
        compression=CompressionType.LZ4 if kind == "lz4" else CompressionType.NONE,
        producer_id=7 if kind == "pid" else -1,
        producer_epoch=0 if kind == "pid" else -1,
        base_sequence=draw(st.integers(0, 3)) if kind == "pid" else -1,
    )
    base_ts = T0 + draw(st.integers(-100, 900))  # new time-index entries now and then
    for _ in range(count):
        ts = base_ts + draw(st.sampled_from([0, 0, 0, 5, -5, 50_000, -50_000]))
        key = draw(st.sampled_from([b"k", b"k", b"k", None]))
        builder.append(ts, key, b"v" * draw(st.integers(0, 300)))
    batch = builder.build()
    if kind == "max_ts":
        return with_header(batch, max_timestamp=T0 + 1_000_000)
    if kind == "two":
        return batch + make_batch([b"x", b"y"])
    return batch


_CONFIGS = st.fixed_dictionaries(
    {
        "segment.bytes": st.sampled_from([700, 3000, 1 << 20]),
        "segment.ms": st.sampled_from([1, 100, 7 * 24 * 3600 * 1000]),
        "segment.index.bytes": st.sampled_from([48, 10 * 1024 * 1024]),
        "index.interval.bytes": st.sampled_from([0, 200, 4096]),
        "cleanup.policy": st.sampled_from(["delete", "compact"]),
        "message.timestamp.type": st.sampled_from(["CreateTime"] * 4 + ["LogAppendTime"]),
        "message.timestamp.difference.max.ms": st.sampled_from([1000, 9_223_372_036_854_775_807]),
        "compression.type": st.sampled_from(["producer"] * 4 + ["uncompressed", "lz4"]),
        "max.message.bytes": st.sampled_from([1 << 20, 1 << 20, 1500]),
    }
)

_APPENDS = st.lists(
    st.tuples(
        _batches(),
        st.sampled_from([0, 0, 0, 1, 30]),  # clock advance before the append, ms
        st.sampled_from([0, 0, 0, 1, 2]),  # leader epoch
        st.sampled_from([AppendOrigin.CLIENT] * 5 + [AppendOrigin.COORDINATOR]),
    ),
    min_size=1,
    max_size=25,
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(config=_CONFIGS, appends=_APPENDS)
def test_the_one_batch_path_leaves_what_the_general_path_leaves(
    config: dict[str, object], appends: list[tuple[bytes, int, int, AppendOrigin]]
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        fast, fast_clock = open_log(Path(tmp) / "fast", **config)
        general, general_clock = open_log(Path(tmp) / "general", **config)
        epoch_floor = 0
        for batch, advance_ms, epoch, origin in appends:
            epoch_floor = max(epoch_floor, epoch)  # a leader's epoch never goes back
            fast_clock.advance(advance_ms)
            general_clock.advance(advance_ms)
            got = _append(fast, batch, epoch_floor, origin)
            with _general_path_only():
                expected = _append(general, batch, epoch_floor, origin)
            assert got == expected
            assert fast.log_end_offset == general.log_end_offset
            assert fast.epoch_cache.entries() == general.epoch_cache.entries()
            assert [s.base_offset for s in fast.segments] == [
                s.base_offset for s in general.segments
            ]
        assert read_all(fast) == read_all(general)
        fast.close()
        general.close()
        assert _files(fast.dir) == _files(general.dir)


def test_reading_goes_on_after_a_batch_that_ends_past_its_last_record(tmp_path: Path) -> None:
    """A coordinator's append is trusted: a batch of three records (offset deltas 0-2) whose
    last offset delta is 9 is kept, and the log ends at 10, as after compaction. A reader
    goes on from the batch's end (10), not from its last record (3), which reads the same
    batch again: the comparison above drew this case once and ``read_all`` never returned.
    Bounded by an alarm, so that the old loop fails here instead of hanging."""
    log, _ = open_log(tmp_path)
    sparse = with_header(make_batch([b"v0", b"v1", b"v2"]), last_offset_delta=9)
    log.append_as_leader(sparse, leader_epoch=0, origin=AppendOrigin.COORDINATOR)
    assert log.log_end_offset == 10

    def stuck(*_: object) -> None:
        raise AssertionError("read_all read the same batch again and again")

    previous = signal.signal(signal.SIGALRM, stuck)
    signal.alarm(10)
    try:
        assert [r.offset for r in read_all(log)] == [0, 1, 2]
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    log.close()


@needs_compiled_walk
def test_a_plain_client_batch_takes_the_one_batch_path(tmp_path: Path) -> None:
    """The comparison above is not vacuous: the usual append is written by the one-batch path,
    and a roll that falls due sends the append to the general path, which rolls."""
    log, _ = open_log(tmp_path, **{"segment.bytes": 1000, "index.interval.bytes": 0})
    real = LogSegment.append_batch_unless_rolling
    answers: list[bool] = []

    def spy(segment: LogSegment, *args: object, **kwargs: object) -> bool:
        answers.append(real(segment, *args, **kwargs))  # type: ignore[arg-type]
        return answers[-1]

    with mock.patch.object(LogSegment, "append_batch_unless_rolling", spy):
        for _ in range(4):
            log.append_as_leader(make_batch([b"v" * 200, b"w" * 200]), leader_epoch=0)
    assert answers == [True, True, False, True]  # the third must roll first
    assert [s.base_offset for s in log.segments] == [0, 4]
    assert [r.offset for r in read_all(log)] == list(range(8))
    log.close()


@needs_compiled_walk
def test_a_failed_write_on_the_one_batch_path_is_a_storage_error(tmp_path: Path) -> None:
    """The same KAFKA_STORAGE_ERROR, dir handler call and untouched log end as the general
    path's failed write."""
    log, _ = open_log(tmp_path)
    failures: list[OSError] = []
    log.on_io_error = failures.append
    log.append_as_leader(make_batch([b"a"]), leader_epoch=0)
    with (
        mock.patch("kafkasim.storage.file_records.os.pwritev", side_effect=OSError(5, "EIO")),
        mock.patch.object(LogSegment, "append", side_effect=AssertionError("general path")),
    ):
        outcome = _append(log, make_batch([b"b"]), 0, AppendOrigin.CLIENT)
    assert isinstance(outcome, tuple)
    assert outcome[1].startswith("Error while appending records to topic-0")
    assert len(failures) == 1
    assert log.log_end_offset == 1
    log.close()
