"""The bulk record walk accepts exactly what the record-by-record walk accepts.

``walk_records`` may decline a batch (None: the walk then judges it), but whenever it answers,
the walk must pass the same batch with the same largest timestamp delta; every fault the walk
finds must make the bulk walk decline, so that the message still names the record. Where the
compiled walk (``_cwalk``) is built, every comparison holds it to the walk's answer exactly
(test_cwalk.py has its own cases).
"""

from __future__ import annotations

import random

import pytest

from kafkasim.common.errors import InvalidRecordError
from kafkasim.storage.records.batch import BatchHeader, RecordBatchBuilder
from kafkasim.storage.records.validation import validate_batch_records
from kafkasim.storage.records.walk_vector import MIN_RECORDS, walk_records
from tests.unit.storage.records.crafted import T0, Checks, batch_of, record
from tests.unit.storage.records.crafted import records_area as _area
from tests.unit.storage.records.crafted import walk_answer as _walk_result
from tests.unit.storage.records.crafted import walk_checks as _checks

try:
    from kafkasim.storage.records._cwalk import walk_records as cwalk
except ImportError:  # not built here: the bulk walk is still compared
    cwalk = None


def _batch(rng: random.Random, n: int, *, headers: bool = False) -> bytes:
    builder = RecordBatchBuilder()
    for i in range(n):
        key = None if rng.random() < 0.3 else rng.randbytes(rng.choice((0, 3, 70)))
        value = None if rng.random() < 0.1 else rng.randbytes(rng.choice((0, 50, 100, 900)))
        extra = [("h", b"x")] if headers and i == n // 2 else []
        builder.append(T0 + rng.randint(-5_000, 5_000), key, value, extra)
    return builder.build()


def _agree(area: bytes, count: int, checks: Checks) -> int | None:
    bulk = walk_records(area, count, **checks)  # type: ignore[arg-type]
    walked = _walk_result(area, count, checks)
    if bulk is not None:
        assert walked == bulk
    if cwalk is not None:
        assert cwalk(area, count, **checks) == walked  # type: ignore[arg-type]
    return bulk


def _declined(area: bytes, count: int, checks: Checks) -> bool:
    """The bulk walk declines; the compiled one (if built) answers as the walk does."""
    if cwalk is not None:
        assert cwalk(area, count, **checks) == _walk_result(area, count, checks)  # type: ignore[arg-type]
    return walk_records(area, count, **checks) is None  # type: ignore[arg-type]


@pytest.mark.parametrize("seed", range(6))
def test_valid_batches_get_the_walks_answer_in_bulk(seed: int) -> None:
    rng = random.Random(seed)
    batch = _batch(rng, rng.choice((MIN_RECORDS, 300, 1000)))
    header = BatchHeader.parse(memoryview(batch))
    bulk = _agree(_area(batch), header.records_count, _checks(batch))
    assert bulk is not None  # no headers, short varints: the bulk walk vouches


@pytest.mark.parametrize(
    "overrides",
    [
        {"compacted": True},  # null keys on a compacted topic
        {"low": -1_000, "high": 1_000},  # timestamps out of range
        {"dense": False, "last_delta": 10},  # offsets past lastOffsetDelta
    ],
)
def test_a_rule_broken_somewhere_makes_the_bulk_walk_decline(
    overrides: dict[str, int | bool],
) -> None:
    batch = _batch(random.Random(7), 400)
    header = BatchHeader.parse(memoryview(batch))
    checks = _checks(batch, **overrides)
    assert _walk_result(_area(batch), header.records_count, checks) is None
    assert _declined(_area(batch), header.records_count, checks)


def test_records_with_headers_are_left_to_the_walk() -> None:
    batch = _batch(random.Random(3), 300, headers=True)
    assert _walk_result(_area(batch), 300, _checks(batch)) is not None
    assert _declined(_area(batch), 300, _checks(batch))


def test_sparse_increasing_offsets_pass_when_not_dense() -> None:
    records = [record(2 * i, ts_delta=i) for i in range(250)]
    batch = batch_of(records, last_offset_delta=498)
    checks = _checks(batch, dense=False)
    assert _agree(_area(batch), 250, checks) == 249
    assert _declined(_area(batch), 250, _checks(batch))


@pytest.mark.parametrize("seed", range(40))
def test_damaged_record_areas_never_pass_in_bulk_what_the_walk_refuses(seed: int) -> None:
    rng = random.Random(1000 + seed)
    batch = _batch(rng, 250)
    area = bytearray(_area(batch))
    for _ in range(rng.choice((1, 1, 3))):
        area[rng.randrange(len(area))] = rng.randrange(256)
    if rng.random() < 0.2:
        del area[rng.randrange(len(area)) :]
    count = 250 + rng.choice((0, 0, 0, -1, 1))
    _agree(bytes(area), count, _checks(batch))


@pytest.mark.parametrize("claimed", [MIN_RECORDS, 100_000, 2**31 - 1])
def test_a_header_claiming_more_records_than_the_area_holds_is_declined_at_once(
    claimed: int,
) -> None:
    """The count is the client's: nothing is sized by it before it is bounded by the area."""
    area = _area(_batch(random.Random(5), 20))
    assert _declined(area, claimed, _checks(_batch(random.Random(5), 20)))


@pytest.mark.parametrize("seed", range(20))
def test_garbage_at_the_end_of_the_area_is_declined_not_read_past(seed: int) -> None:
    """Varints that start in the last bytes and run on are read into the padding, never out
    of it (no IndexError: the walk then names the fault)."""
    rng = random.Random(seed)
    batch = _batch(rng, 200)
    area = bytearray(_area(batch))
    tail = rng.randrange(1, 12)
    area[-tail:] = bytes([0x80 | rng.randrange(128) for _ in range(tail)])
    assert _declined(bytes(area), 200, _checks(batch))


def test_a_fault_in_a_large_batch_is_named_as_the_walk_names_it() -> None:
    """Above MIN_RECORDS the bulk walk runs first; the error still names the record."""
    records = [record(i) for i in range(300)]
    records[250] = record(250, length_adjust=1)
    batch = batch_of(records)
    header = BatchHeader.parse(memoryview(batch))
    with pytest.raises(InvalidRecordError, match="record 250 "):
        validate_batch_records(batch, 0, header, dense_offsets=True)
