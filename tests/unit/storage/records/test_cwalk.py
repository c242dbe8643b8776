"""The compiled record walk (``_cwalk.c``) accepts exactly what the record-by-record walk
accepts, with the same largest timestamp delta, and never reads out of bounds; validation uses
it when it is built and falls back to the Python walks when it is not (or when told not to).

The comparisons skip only where the extension is not built (another interpreter's venv
without a compiler); ``pip install -e`` builds it in the main venv, so CI runs them.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kafkasim.common.errors import InvalidRecordError, InvalidTimestampError
from kafkasim.common.sentinels import NO_TIMESTAMP
from kafkasim.storage.records import validation
from kafkasim.storage.records.batch import RECORDS_OFFSET, BatchHeader, RecordBatchBuilder
from kafkasim.storage.records.compiled import compiled
from kafkasim.storage.records.compression import CompressionType
from kafkasim.storage.records.validation import validate_batch_records
from kafkasim.storage.records.varint import encode_varint, encode_varlong
from tests.unit.storage.records.crafted import T0, Checks, batch_of, record, walk_answer
from tests.unit.storage.records.crafted import records_area as area_of
from tests.unit.storage.records.crafted import walk_checks as checks_of

try:
    from kafkasim.storage.records._cwalk import walk_records as cwalk
except ImportError:  # not built here: the fallback tests below still run
    cwalk = None

ROOT = Path(__file__).resolve().parents[4]
needs_cwalk = pytest.mark.skipif(
    cwalk is None, reason="kafkasim.storage.records._cwalk is not built in this environment"
)
UNBOUNDED = 1 << 70


def make_batch(
    rng: random.Random, n: int, *, headers: float = 0.0, nulls: bool = True, spread: int = 5_000
) -> bytes:
    builder = RecordBatchBuilder()
    for _ in range(n):
        key = None if nulls and rng.random() < 0.3 else rng.randbytes(rng.choice((0, 3, 70)))
        value = None if nulls and rng.random() < 0.1 else rng.randbytes(rng.choice((0, 50, 900)))
        extra: list[tuple[str, bytes | None]] = []
        if rng.random() < headers:
            extra = [("h", b"x"), ("ключ", None), ("", rng.randbytes(200))][: rng.randint(1, 3)]
        builder.append(T0 + rng.randint(-spread, spread), key, value, extra)
    return builder.build()


def same(area: bytes, count: int, checks: Checks) -> int | None:
    """The compiled walk's answer, asserted equal to the Python walk's (None: refused)."""
    assert cwalk is not None
    compiled = cwalk(area, count, **checks)  # type: ignore[arg-type]
    assert compiled == walk_answer(area, count, checks)
    return compiled


# -- valid batches: the same answer, for every shape -------------------------------------------


@needs_cwalk
@pytest.mark.parametrize("n", [1, 2, 15, 192, 1000])
@pytest.mark.parametrize("headers", [0.0, 0.3, 1.0])
def test_valid_batches_get_the_walks_answer(n: int, headers: float) -> None:
    batch = make_batch(random.Random(n), n, headers=headers)
    assert same(area_of(batch), n, checks_of(batch)) is not None


@needs_cwalk
def test_compacted_dense_or_not_and_timestamp_bounds() -> None:
    batch = make_batch(random.Random(1), 300, nulls=False, spread=1_000)
    area = area_of(batch)
    assert same(area, 300, checks_of(batch, compacted=True)) is not None
    assert same(area, 300, checks_of(batch, dense=False)) is not None
    # Bounds around the batch's deltas: inside, on the edge, and one inside the largest.
    first = BatchHeader.parse(memoryview(batch)).first_timestamp
    top = same(area, 300, checks_of(batch))
    assert top is not None
    assert same(area, 300, checks_of(batch, low=T0 - 1_000 - first, high=top)) == top
    assert same(area, 300, checks_of(batch, low=-UNBOUNDED, high=top - 1)) is None
    # Bounds beyond int64 on the wrong side refuse every record; on the right side none.
    assert same(area, 300, checks_of(batch, low=UNBOUNDED)) is None
    assert same(area, 300, checks_of(batch, high=-UNBOUNDED)) is None


@needs_cwalk
def test_a_compacted_topic_refuses_a_null_key() -> None:
    batch = batch_of([record(0), record(1, key=None), record(2)])
    assert same(area_of(batch), 3, checks_of(batch, compacted=True)) is None
    assert same(area_of(batch), 3, checks_of(batch)) == 0


@needs_cwalk
def test_records_without_a_timestamp_are_exempt_from_the_bounds() -> None:
    base = 5
    unset = NO_TIMESTAMP - base
    batch = batch_of([record(0, ts_delta=0), record(1, ts_delta=unset)], first_timestamp=base)
    checks = checks_of(batch, low=-10, high=10)
    assert same(area_of(batch), 2, checks) == 0
    # Bounds and base timestamps at the int64 edges.
    for base_ts in (-(1 << 63), (1 << 63) - 1, 1 << 64, -(1 << 64)):
        same(area_of(batch), 2, checks_of(batch, base_ts=base_ts, low=-10, high=10))


@needs_cwalk
def test_sparse_offsets_pass_only_when_not_dense_and_within_the_last_delta() -> None:
    records = [record(2 * i, ts_delta=i) for i in range(250)]
    batch = batch_of(records, last_offset_delta=498)
    assert same(area_of(batch), 250, checks_of(batch, dense=False)) == 249
    assert same(area_of(batch), 250, checks_of(batch)) is None
    assert same(area_of(batch), 250, checks_of(batch, dense=False, last_delta=497)) is None
    disorder = batch_of([record(0), record(2), record(1)], last_offset_delta=5)
    assert same(area_of(disorder), 3, checks_of(disorder, dense=False)) is None


@needs_cwalk
def test_buffers_of_every_kind_are_read_in_place() -> None:
    batch = make_batch(random.Random(2), 40, headers=0.5)
    area = area_of(batch)
    expected = same(area, 40, checks_of(batch))
    with memoryview(batch) as view:
        assert cwalk is not None
        assert cwalk(view[RECORDS_OFFSET:], 40, **checks_of(batch)) == expected  # type: ignore[arg-type]
        assert cwalk(bytearray(area), 40, **checks_of(batch)) == expected  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        cwalk("text", 1, **checks_of(batch))  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        cwalk(area, 40)  # type: ignore[call-arg]


@needs_cwalk
def test_the_checks_are_taken_by_position_or_by_name() -> None:
    """Validation passes the eight arguments by position (no keyword parse per append); the
    other callers name the checks; both answer alike, and a wrong call is a TypeError naming
    the argument."""
    assert cwalk is not None
    batch = make_batch(random.Random(3), 30)
    area = area_of(batch)
    checks = checks_of(batch)
    expected = same(area, 30, checks)
    assert expected is not None
    assert cwalk(area, 30, *checks.values()) == expected  # type: ignore[arg-type]
    assert cwalk(area, count=30, **checks) == expected  # type: ignore[arg-type]
    names = list(checks)
    assert cwalk(area, 30, *list(checks.values())[:3], **dict(list(checks.items())[3:])) == (  # type: ignore[arg-type]
        expected
    )
    wrong: list[tuple[Callable[[], object], str]] = [
        (lambda: cwalk(area, 30, *checks.values(), 0), "at most 8 arguments"),  # type: ignore[arg-type, misc]
        (lambda: cwalk(area, 30, **checks, extra=1), "unexpected keyword argument 'extra'"),  # type: ignore[arg-type, call-arg]
        (
            lambda: cwalk(area, 30, *checks.values(), **{names[-1]: 0}),  # type: ignore[arg-type, misc]
            f"multiple values for argument '{names[-1]}'",
        ),
        (lambda: cwalk(area, 30, 1, True), "missing required argument 'compacted'"),  # type: ignore[call-arg]
        (lambda: cwalk(area, 30, **{**checks, "low": 1.5}), "low must be an int"),  # type: ignore[arg-type]
    ]
    for call, message in wrong:
        with pytest.raises(TypeError, match=message):
            call()


@needs_cwalk
def test_no_records_is_left_to_the_walk() -> None:
    assert cwalk is not None
    assert cwalk(b"", 0, **checks_of(make_batch(random.Random(0), 1))) is None  # type: ignore[arg-type]
    assert cwalk(b"", -1, **checks_of(make_batch(random.Random(0), 1))) is None  # type: ignore[arg-type]


# -- broken batches: refused exactly where the walk refuses -------------------------------------


def long_varint(value: int, size: int) -> bytes:
    """The zig-zag encoding of ``value`` padded to ``size`` bytes (non-canonical but legal up to
    the type's maximum length)."""
    z = (value << 1) ^ (value >> 63)
    out = bytearray()
    for _ in range(size - 1):
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)


def raw_record(*fields: bytes) -> bytes:
    body = b"\x00" + b"".join(fields)
    return encode_varint(len(body)) + body


CRAFTED: list[tuple[str, list[bytes]]] = [
    ("length too long", [record(0), record(1, length_adjust=5), record(2)]),
    ("length too short", [record(0), record(1, length_adjust=-2), record(2)]),
    ("zero length", [record(0), b"\x00"]),
    ("negative length", [record(0), b"\x03" + record(1)[1:]]),
    ("negative header count", [record(0, raw_headers=b"\x01")]),
    ("header count past the end", [record(0, raw_headers=b"\x7e")]),
    ("non-UTF-8 header key", [record(0, raw_headers=b"\x02\x04\xff\xfe\x01")]),
    ("surrogate header key", [record(0, raw_headers=b"\x02\x06\xed\xa0\x80\x01")]),
    ("null header key", [record(0, raw_headers=b"\x02\x01\x01")]),
    ("header value past the end", [record(0, raw_headers=b"\x02\x02a\x10")]),
    ("negative header value is null", [record(0, raw_headers=b"\x02\x02a\x05")]),
    ("non-canonical varints", [raw_record(long_varint(0, 10), long_varint(0, 5), b"\x01\x01\x00")]),
    ("varlong of 11 bytes", [raw_record(long_varint(0, 11), b"\x00\x01\x01\x00")]),
    ("varint of 6 bytes", [raw_record(b"\x00", long_varint(0, 6), b"\x01\x01\x00")]),
    ("varint above 32 bits", [raw_record(b"\x00", b"\x80\x80\x80\x80\x10", b"\x01\x01\x00")]),
    ("varint of 32 bits", [raw_record(b"\x00", b"\x80\x80\x80\x80\x0f", b"\x01\x01\x00")]),
    ("varlong above 64 bits", [raw_record(b"\xff" * 9 + b"\x02", b"\x00\x01\x01\x00")]),
    ("varlong of 64 bits", [raw_record(b"\xff" * 9 + b"\x01", b"\x00\x01\x01\x00")]),
    ("largest varlong delta", [raw_record(encode_varlong((1 << 63) - 1), b"\x00\x01\x01\x00")]),
    ("negative key length is null", [raw_record(b"\x00\x00", encode_varint(-7), b"\x01\x00")]),
    ("key past the record", [raw_record(b"\x00\x00", encode_varint(50), b"\x01\x00")]),
    ("value past the record", [raw_record(b"\x00\x00\x01", encode_varint(50), b"\x00")]),
    ("no header count", [raw_record(b"\x00\x00\x01\x01")]),
    ("fields past the record", [raw_record(b"\x00\x00\x01\x01\x00\x00\x00")]),
]


@needs_cwalk
@pytest.mark.parametrize(("name", "records"), CRAFTED, ids=[c[0] for c in CRAFTED])
@pytest.mark.parametrize("dense", [True, False])
def test_crafted_records_get_the_walks_answer(name: str, records: list[bytes], dense: bool) -> None:
    batch = batch_of(records)
    same(area_of(batch), len(records), checks_of(batch, dense=dense))


@needs_cwalk
@pytest.mark.parametrize("claimed", [1, 2, 19, 21, 100_000, 2**31 - 1, 2**63, 2**80])
def test_a_header_claiming_another_count_is_refused(claimed: int) -> None:
    batch = make_batch(random.Random(5), 20)
    assert same(area_of(batch), claimed, checks_of(batch)) is None


@needs_cwalk
@pytest.mark.parametrize("seed", range(60))
def test_damaged_record_areas_get_the_walks_answer(seed: int) -> None:
    rng = random.Random(2000 + seed)
    n = rng.choice((3, 30, 250))
    batch = make_batch(rng, n, headers=0.3)
    area = bytearray(area_of(batch))
    for _ in range(rng.choice((1, 1, 3))):
        area[rng.randrange(len(area))] = rng.randrange(256)
    if rng.random() < 0.2:
        del area[rng.randrange(len(area)) :]
    if rng.random() < 0.2:
        tail = rng.randrange(1, 12)
        area[-tail:] = bytes([0x80 | rng.randrange(128) for _ in range(tail)])
    same(bytes(area), n + rng.choice((0, 0, 0, -1, 1)), checks_of(batch))


MUTATION = st.tuples(
    st.sampled_from(["set", "insert", "delete", "truncate"]),
    st.integers(0, 1 << 16),
    st.integers(0, 255),
)


@needs_cwalk
@settings(max_examples=400, deadline=None)
@given(
    seed=st.integers(0, 1 << 32),
    n=st.integers(1, 40),
    mutations=st.lists(MUTATION, min_size=1, max_size=4),
    flags=st.tuples(st.booleans(), st.booleans()),
    count_shift=st.sampled_from([0, 0, 0, -1, 1]),
)
def test_random_mutations_of_valid_batches_get_the_walks_answer(
    seed: int,
    n: int,
    mutations: list[tuple[str, int, int]],
    flags: tuple[bool, bool],
    count_shift: int,
) -> None:
    dense, compacted = flags
    rng = random.Random(seed)
    batch = make_batch(rng, n, headers=0.3, nulls=not compacted or rng.random() < 0.5)
    area = bytearray(area_of(batch))
    for kind, where, byte in mutations:
        at = where % (len(area) + 1)
        if kind == "set" and at < len(area):
            area[at] = byte
        elif kind == "insert":
            area[at:at] = bytes([byte])
        elif kind == "delete":
            del area[at : at + 1 + byte % 8]
        elif kind == "truncate":
            del area[at:]
    checks = checks_of(batch, dense=dense, compacted=compacted)
    # At least one record: validation never walks an empty batch (test_no_records_...).
    same(bytes(area), max(1, n + count_shift), checks)


# -- validation: compiled when built, the Python walks otherwise --------------------------------


def validations(batches: list[bytes]) -> list[int | str]:
    """What validate_batch_records answers for each batch: its max timestamp, or the error."""
    out: list[int | str] = []
    for batch in batches:
        try:
            out.append(validate_batch_records(batch, 0, dense_offsets=True, compacted=True))
        except (InvalidRecordError, InvalidTimestampError) as e:
            out.append(f"{e.error_name}: {e.message}")
    return out


def sample_batches() -> list[bytes]:
    rng = random.Random(11)
    good = [make_batch(rng, n, headers=h, nulls=False) for n in (1, 15, 300) for h in (0, 0.5)]
    lz4 = RecordBatchBuilder(compression=CompressionType.LZ4)
    for i in range(200):
        lz4.append(T0 + i, b"k", b"v" * i)
    bad = [
        batch_of([record(i) for i in range(250)] + [record(250, length_adjust=1)]),
        batch_of([record(0), record(1, key=None)]),
        batch_of([record(0, raw_headers=b"\x02\x04\xff\xfe\x01")]),
    ]
    return [*good, lz4.build(), *bad]


@needs_cwalk
def test_validation_uses_the_compiled_walk_on_the_records_in_place(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    if os.environ.get("KAFKASIM_PURE_PYTHON", "") in ("", "0"):
        assert validation.COMPILED_WALK is cwalk  # built: in use
    seen: list[type] = []

    def spy(data: bytes, count: int, *checks: int | bool) -> int | None:
        seen.append(type(data))
        assert cwalk is not None
        return cwalk(data, count, *checks)  # type: ignore[arg-type]

    monkeypatch.setattr(validation, "COMPILED_WALK", spy)
    batch = make_batch(random.Random(3), 15, nulls=False)
    assert validations([batch]) == [BatchHeader.parse(memoryview(batch)).max_timestamp]
    assert seen == [memoryview]  # uncompressed: no copy of the record area


@pytest.mark.parametrize("walk", ["compiled", "python"])
def test_every_walk_answers_validation_alike(walk: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Same maximum timestamps and the same messages (naming the record) on every path."""
    if walk == "compiled" and cwalk is None:
        pytest.skip("kafkasim.storage.records._cwalk is not built in this environment")
    monkeypatch.setattr(validation, "COMPILED_WALK", cwalk if walk == "compiled" else None)
    got = validations(sample_batches())
    assert isinstance(got[0], int)
    assert got[-3].startswith("INVALID_RECORD: record batch at position 0 (none, 251 records): ")
    assert "record 250 at byte" in str(got[-3])
    assert "record 1: compacted topic cannot accept message without key" in str(got[-2])
    assert "record 0: record header key is not UTF-8" in str(got[-1])
    monkeypatch.setattr(validation, "COMPILED_WALK", None)
    assert got == validations(sample_batches())


def run_probe(env: dict[str, str]) -> str:
    probe = (
        "from kafkasim.storage.records import validation as v; print(v.COMPILED_WALK is not None)"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe],
        check=True,
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT), **env},
    )
    return out.stdout.strip()


def test_the_environment_switch_forces_the_python_walks() -> None:
    assert run_probe({"KAFKASIM_PURE_PYTHON": "1"}) == "False"
    assert run_probe({"KAFKASIM_PURE_PYTHON": "0"}) == str(cwalk is not None)


def test_a_build_that_does_not_load_falls_back(monkeypatch: pytest.MonkeyPatch) -> None:
    """A .so of another interpreter (a Docker image's copy) raises ImportError on import."""
    real_import: Callable[..., object] = __import__

    def failing(name: str, *args: object, **kwargs: object) -> object:
        if name.endswith("_cwalk"):
            raise ImportError("undefined symbol: _PyFoo (another interpreter's build)")
        return real_import(name, *args, **kwargs)

    monkeypatch.delenv("KAFKASIM_PURE_PYTHON", raising=False)
    monkeypatch.setattr("builtins.__import__", failing)
    assert compiled("walk_records") is None
    assert compiled("plain_fields") is None
