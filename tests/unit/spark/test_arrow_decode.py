"""The read tasks' Arrow decoding (``spark.arrow_decode``): exactly the batch the consumer's
column walk gives (``spark.cluster_io.decode_columns`` turned into Arrow), whatever the
message format, compression, record sizes, range or isolation, the same errors for damaged
batches, and the vectorised walk really taking plain v2 batches (no Spark needed).

Every test runs twice: with the records' fields found by the compiled walk
(``_cwalk.plain_fields``; skipped where it is not built) and by numpy, and the two are
compared directly on sound, damaged and random payloads."""

from __future__ import annotations

import random

import numpy as np
import pyarrow as pa
import pytest

from kafkasim.common.errors import CorruptRecordError, InvalidRecordError
from kafkasim.common.types import TopicPartition
from kafkasim.spark import arrow_decode
from kafkasim.spark.arrow_decode import I64, ArrowChunkDecoder, columns_batch
from kafkasim.spark.cluster_io import decode_columns
from kafkasim.spark.rows import arrow_schema
from kafkasim.storage.records.batch import (
    RECORD_BATCH_OVERHEAD,
    BatchHeader,
    TimestampType,
    encode_batch,
    set_log_append_time,
)
from kafkasim.storage.records.compression import CompressionType
from kafkasim.storage.records.entry import parse_entry_header
from tests.unit.client.test_record_columns import T0, _recrc, mixed, transactions

TP = TopicPartition("t", 3)
COMPILED_FIELDS = arrow_decode._COMPILED_FIELDS


@pytest.fixture(autouse=True, params=["compiled", "numpy"])
def fields_walk(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Each test with each way of finding the records' fields."""
    if request.param == "compiled":
        if COMPILED_FIELDS is None:
            pytest.skip("kafkasim.storage.records._cwalk is not built in this environment")
        monkeypatch.setattr(arrow_decode, "_COMPILED_FIELDS", COMPILED_FIELDS)
    else:
        monkeypatch.setattr(arrow_decode, "_COMPILED_FIELDS", None)
    return str(request.param)


def varied() -> bytes:
    """12-3011: three v2 batches of 1,000 records whose lengths change all the time (offset
    deltas past 64, timestamp deltas of one to four varint bytes, values of 0 to 9,000 bytes,
    null keys and values), the second one compressed."""
    rng = random.Random(7)
    parts = []
    for b, compression in enumerate((CompressionType.NONE, CompressionType.LZ4) * 2):
        base = 12 + 1000 * b
        records = [
            (
                T0 + i * rng.choice((1, 50, 5000, 10**6)),
                None if i % 7 == 0 else b"k%d" % i,
                None if i % 11 == 0 else bytes([i % 256]) * rng.choice((0, 1, 100, 9000)),
            )
            for i in range(1000)
        ]
        parts.append(encode_batch(records, base_offset=base, compression=compression))
    return b"".join(parts[:3])


def fixed(count: int = 5000, base_offset: int = 0) -> bytes:
    """``count`` records of 100-byte values, 2,000 a batch, as a producer writes them."""
    parts = []
    for first in range(0, count, 2000):
        n = min(2000, count - first)
        records = [(T0 + i // 3, None, i.to_bytes(4, "big") * 25) for i in range(first, first + n)]
        parts.append(encode_batch(records, base_offset=base_offset + first))
    return b"".join(parts)


def decoded(
    data: bytes,
    position: int,
    until: int,
    aborted: list[tuple[int, int]] | None = None,
    *,
    headers: bool = False,
    walk: bool = False,
) -> tuple[pa.Table, int]:
    """The Arrow decoding of ``data`` as a table, or with ``walk`` the column walk's."""
    schema = arrow_schema(headers)
    if walk:
        columns, after = decode_columns(TP, data, position, until, aborted)
        return pa.Table.from_batches([columns_batch(columns, schema)]), after
    batches, after = ArrowChunkDecoder(TP.topic, TP.partition, schema).decode(
        data, position, until, aborted
    )
    assert all(b.schema.equals(schema) for b in batches)
    return pa.Table.from_batches(batches, schema=schema), after


def assert_same(data: bytes, position: int, until: int, **kwargs: object) -> pa.Table:
    got, got_after = decoded(data, position, until, **kwargs)  # type: ignore[arg-type]
    want, want_after = decoded(data, position, until, walk=True, **kwargs)  # type: ignore[arg-type]
    assert got_after == want_after
    assert got.num_rows == want.num_rows
    assert got.equals(want)
    return got


@pytest.mark.parametrize("headers", [False, True])
@pytest.mark.parametrize(
    ("position", "until"), [(0, 12), (4, 9), (3, 4), (8, 100), (0, 3), (11, 12)]
)
def test_mixed_formats_give_what_the_column_walk_gives(
    position: int, until: int, headers: bool
) -> None:
    table = assert_same(mixed(), position, until, headers=headers)
    assert table.column("offset").to_pylist() == list(range(position, min(until, 12)))
    assert set(table.column("topic").to_pylist()) <= {TP.topic}
    assert set(table.column("partition").to_pylist()) <= {TP.partition}


@pytest.mark.parametrize("headers", [False, True])
@pytest.mark.parametrize(
    ("position", "until"), [(12, 3012), (12, 20), (500, 1700), (1011, 1013), (2999, 5000)]
)
def test_records_of_changing_lengths_give_what_the_column_walk_gives(
    position: int, until: int, headers: bool
) -> None:
    assert_same(varied(), position, until, headers=headers)


@pytest.mark.parametrize(("position", "until"), [(0, 5000), (1, 4999), (1999, 2001)])
def test_equal_records_give_what_the_column_walk_gives(position: int, until: int) -> None:
    table = assert_same(fixed(), position, until)
    assert table.column("value")[0].as_py() == position.to_bytes(4, "big") * 25
    assert table.column("key").null_count == table.num_rows


def test_a_fetch_becomes_one_record_batch() -> None:
    batches, after = ArrowChunkDecoder(TP.topic, TP.partition, arrow_schema(False)).decode(
        fixed(), 0, 5000
    )
    assert after == 5000
    assert [b.num_rows for b in batches] == [5000]


def test_read_committed_drops_aborted_transactions_and_markers() -> None:
    data = transactions()
    for aborted in ([(1, 0)], None):
        assert_same(data, 0, 7, aborted=aborted)
    table, after = decoded(data, 0, 7, [(1, 0)])
    assert table.column("value").to_pylist() == [b"p2-0", b"p1-2"]
    assert after == 7


def test_the_vectorised_walk_takes_plain_batches_and_leaves_headers_to_the_column_walk() -> None:
    decoder = ArrowChunkDecoder(TP.topic, TP.partition, arrow_schema(True))

    def segment(data: bytes) -> pa.RecordBatch | None:
        header = parse_entry_header(data, 0)
        assert isinstance(header, BatchHeader)
        return decoder._batch_segment(data, 0, header, 0, 10**6)

    assert all(segment(data) is not None for data in (fixed(1000), varied()))
    assert segment(encode_batch([(T0, b"k", b"v", (("h", b"x"),))])) is None


def test_damaged_batches_raise_the_column_walks_errors() -> None:
    good = encode_batch([(T0, b"k", b"value"), (T0, b"k", b"other")])
    flipped = bytearray(good)
    flipped[-1] ^= 0xFF
    with pytest.raises(CorruptRecordError, match="CRC"):
        decoded(bytes(flipped), 0, 2)
    longer = bytearray(good)
    longer[RECORD_BATCH_OVERHEAD] += 2  # the first record one byte longer than its fields
    short = bytearray(good)
    short[RECORD_BATCH_OVERHEAD - 1] = 3  # a record count of 3 where there are 2
    big_delta = bytearray(good)
    big_delta[RECORD_BATCH_OVERHEAD + 3] = 4  # offset delta 2 > the batch's last delta 1
    for damaged in (longer, short, big_delta):
        data = _recrc(damaged)
        with pytest.raises(InvalidRecordError) as ours:
            decoded(data, 0, 3)
        with pytest.raises(InvalidRecordError) as theirs:
            decoded(data, 0, 3, walk=True)
        assert str(ours.value) == str(theirs.value)


def with_headers_between() -> bytes:
    """0-2999: plain batches of 1,000 records, the second one's records carrying a header, so
    that the numpy decoding stops at it and takes up again after it."""
    parts = []
    for b in range(3):
        extra: tuple[object, ...] = ((("h", b"%d" % b),),) if b == 1 else ()
        records = [(T0 + i, b"key%03d" % (i % 1000), b"v" * 30, *extra) for i in range(1000)]
        parts.append(encode_batch(records, base_offset=1000 * b))  # type: ignore[arg-type]
    return b"".join(parts)


@pytest.mark.parametrize("headers", [False, True])
@pytest.mark.parametrize(("position", "until"), [(0, 3000), (500, 2500), (999, 2001)])
def test_batches_around_one_with_headers_keep_their_order(
    position: int, until: int, headers: bool
) -> None:
    table = assert_same(with_headers_between(), position, until, headers=headers)
    assert table.column("offset").to_pylist() == list(range(position, until))


def test_plain_batches_are_decoded_in_place_in_the_fetched_bytes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Uncompressed batches are read where they lie in the fetch: no copy of their records."""

    def copied(*args: object) -> bytes:
        raise AssertionError("record_area copied the records of a plain batch")

    want = assert_same(fixed(), 0, 5000)
    monkeypatch.setattr(arrow_decode, "record_area", copied)
    got, after = decoded(fixed(), 0, 5000)
    assert after == 5000
    assert got.equals(want)


def test_keys_and_values_of_equal_length_null_or_mixed() -> None:
    """Every key of one length beside values partly null and of changing lengths, then all
    values null and all keys empty: each column taken as the walk takes it."""
    first = [(T0 + i, b"k%04d" % i, None if i % 3 == 0 else b"x" * (i % 5)) for i in range(300)]
    second = [(T0, b"", None) for _ in range(200)]
    data = encode_batch(first) + encode_batch(second, base_offset=300)
    table = assert_same(data, 0, 500)
    assert table.column("value").null_count == 100 + 200
    assert table.column("key").to_pylist()[299:301] == [b"k0299", b""]


def test_damage_in_a_later_batch_of_a_fetch_raises_the_column_walks_error() -> None:
    good = fixed(4000)
    damaged = bytearray(
        encode_batch([(T0, b"k", b"value"), (T0, b"k", b"other")], base_offset=4000)
    )
    damaged[RECORD_BATCH_OVERHEAD + 3] = 4  # offset delta 2 > the batch's last delta 1
    data = good + _recrc(damaged)
    with pytest.raises(InvalidRecordError) as ours:
        decoded(data, 0, 4002)
    with pytest.raises(InvalidRecordError) as theirs:
        decoded(data, 0, 4002, walk=True)
    assert str(ours.value) == str(theirs.value)


def test_plain_batches_of_unlike_record_lengths_are_decoded_together(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Batches whose runs of equal length end at different rounds (one record, equal
    records, lengths that change past every round) decoded in one go give the walk's rows."""
    rng = random.Random(3)
    changing = [(T0 + i, b"k", b"x" * rng.randrange(0, 3000)) for i in range(400)]
    data = (
        encode_batch([(T0, None, b"one")], base_offset=0)
        + encode_batch(changing, base_offset=1)
        + fixed(2000, base_offset=401)
        + encode_batch([(T0 + 5, b"last", None)], base_offset=2401)
    )
    want = assert_same(data, 0, 2402)
    for position, until in ((0, 2402), (1, 2401), (300, 500)):
        assert_same(data, position, until)
    monkeypatch.setattr(arrow_decode, "record_area", None)  # never called for plain batches
    got, after = decoded(data, 0, 2402)
    assert (got.equals(want), after) == (True, 2402)


def test_record_positions_refuse_a_negative_length_that_fits_the_run() -> None:
    """Lengths 0, -1 (non-canonically in two bytes, 0x81 0x00) and 0 lead exactly to the
    payload's end one byte apart: the runs take them unless the length's sign is checked."""
    buf = np.frombuffer(bytes([0x00, 0x81, 0x00]) + bytes(16), dtype=np.uint8)
    begins, ends, counts = (np.array([n], dtype=np.int64) for n in (0, 3, 3))
    assert arrow_decode._record_positions(buf, begins, ends, counts) is None
    starts = np.zeros(3, dtype=np.int64)
    bodies = np.zeros(3, dtype=np.int64)
    assert (
        arrow_decode._record_positions_one_by_one(buf, starts, bodies, done=0, pos=0, end=3) == -1
    )


def test_record_positions_give_each_records_body() -> None:
    lengths = [3, 200, 3, 3, 70]  # one- and two-byte length varints
    parts = []
    for n in lengths:
        z = n * 2
        parts.append((bytes([z]) if z < 0x80 else bytes([z & 0x7F | 0x80, z >> 7])) + bytes(n))
    payload = b"".join(parts)
    buf = np.frombuffer(payload + bytes(16), dtype=np.uint8)
    found = arrow_decode._record_positions(
        buf,
        np.array([0], dtype=np.int64),
        np.array([len(payload)], dtype=np.int64),
        np.array([len(lengths)], dtype=np.int64),
    )
    assert found is not None
    starts, bodies = found
    expected_starts = np.cumsum([0] + [len(p) for p in parts[:-1]])
    assert starts.tolist() == expected_starts.tolist()
    assert (bodies - starts).tolist() == [1, 2, 1, 1, 2]
    walked_starts = np.zeros(len(lengths), dtype=np.int64)
    walked_bodies = np.zeros(len(lengths), dtype=np.int64)
    end = arrow_decode._record_positions_one_by_one(
        buf, walked_starts, walked_bodies, done=0, pos=0, end=len(payload)
    )
    assert end == len(payload)
    assert walked_starts.tolist() == starts.tolist()
    assert walked_bodies.tolist() == bodies.tolist()


@pytest.mark.parametrize(("position", "until"), [(0, 6), (1, 5), (3, 6)])
def test_plain_batches_of_both_timestamp_types_decoded_together(position: int, until: int) -> None:
    log_append = bytearray(
        encode_batch(
            [(T0 + 5, None, b"c"), (T0 + 6, None, b"d"), (T0 + 7, None, b"e")],
            base_offset=3,
            timestamp_type=TimestampType.LOG_APPEND_TIME,
        )
    )
    set_log_append_time(log_append, 0, T0 + 99)
    create = encode_batch([(T0 + o, None, b"v%d" % o) for o in range(3)])
    data = create + bytes(log_append)
    batches, _ = ArrowChunkDecoder(TP.topic, TP.partition, arrow_schema(False)).decode(
        data, position, until
    )
    assert len(batches) == 1  # one group, decoded in one pass
    table = assert_same(data, position, until)
    wanted = range(position, until)
    assert table.column("timestampType").to_pylist() == [0 if o < 3 else 1 for o in wanted]
    assert [t.timestamp() * 1000 for t in table.column("timestamp").to_pylist()] == [
        T0 + o if o < 3 else T0 + 99 for o in wanted
    ]


def payloads(seed: int) -> list[tuple[bytes, I64, I64, I64]]:
    """Record areas of one to three batches one after another (data, each's begin, end and
    record count), some of them damaged: a byte changed, a record count off by one, the data
    cut short or run on (the last area's end moved with it)."""
    rng = random.Random(seed)
    out = []
    for _ in range(40):
        areas, counts = [], []
        for _ in range(rng.randint(1, 3)):
            n = rng.choice((1, 2, 70, 300))
            records = [
                (
                    T0 + rng.choice((0, 1, -1, 70, 10**7, 10**9)) * i,
                    None if rng.random() < 0.2 else rng.randbytes(rng.choice((0, 5, 200))),
                    None if rng.random() < 0.1 else rng.randbytes(rng.choice((0, 100, 9000))),
                    *(((("h", b"x"),),) if rng.random() < 0.002 else ()),
                )
                for i in range(n)
            ]
            areas.append(encode_batch(records)[RECORD_BATCH_OVERHEAD:])  # type: ignore[arg-type]
            counts.append(n)
        ends = np.cumsum([len(a) for a in areas], dtype=np.int64)
        begins = ends - [len(a) for a in areas]
        data = bytearray(b"".join(areas))
        damage = rng.random()
        if damage < 0.3:
            data[rng.randrange(len(data))] = rng.randrange(256)
        elif damage < 0.4:
            counts[rng.randrange(len(counts))] += rng.choice((-1, 1))
        elif damage < 0.5:
            data = data[: rng.randrange(int(begins[-1]) + 1, len(data))]
        elif damage < 0.6:
            data += rng.randbytes(rng.randint(1, 9))
        ends[-1] = len(data)
        out.append((bytes(data), begins, ends, np.array(counts, dtype=np.int64)))
    return out


@pytest.mark.parametrize("seed", range(8))
def test_the_compiled_fields_are_the_numpy_fields(seed: int, fields_walk: str) -> None:
    """``_plain_fields`` gives the same answer either way (the same arrays, or None for both)
    on sound and damaged record areas, and the compiled walk never reads out of the data."""
    if fields_walk != "compiled":
        pytest.skip("compares the compiled walk with numpy")
    taken = 0
    for data, begins, ends, counts in payloads(seed):
        compiled = arrow_decode._plain_fields(np.frombuffer(data, np.uint8), begins, ends, counts)
        arrow_decode._COMPILED_FIELDS = None
        try:
            padded = np.frombuffer(data + bytes(16), np.uint8)
            numpy = arrow_decode._plain_fields(padded, begins, ends, counts)
        finally:
            arrow_decode._COMPILED_FIELDS = COMPILED_FIELDS
        if numpy is None:
            assert compiled is None
        else:
            assert compiled is not None
            assert [c.tolist() for c in compiled] == [c.tolist() for c in numpy]
            taken += 1
    assert 10 < taken < 40  # both answers are compared, many times each


def test_the_compiled_fields_read_the_fetched_bytes_in_place(fields_walk: str) -> None:
    """With the compiled walk, the fetched bytes are not copied (no padding is needed)."""
    data = fixed()
    buf = arrow_decode._buffer(data)
    assert np.shares_memory(buf, np.frombuffer(data, np.uint8)) == (fields_walk == "compiled")


def test_the_compiled_fields_refuse_arguments_of_the_wrong_kind(fields_walk: str) -> None:
    if fields_walk != "compiled":
        pytest.skip("the compiled walk's own arguments")
    assert COMPILED_FIELDS is not None
    one = np.array([1], dtype=np.int64)
    area = encode_batch([(T0, b"k", b"v")])[RECORD_BATCH_OVERHEAD:]
    out = np.zeros((6, 1), dtype=np.int64)
    size = np.array([len(area)], dtype=np.int64)
    assert COMPILED_FIELDS(area, np.zeros(1, np.int64), size, one, out) is True
    assert out[:, 0].tolist()[1:] == [0, 0 + 5, 1, 0 + 7, 1]  # offset delta, key, value
    with pytest.raises(TypeError, match="begins must be a buffer of int64"):
        COMPILED_FIELDS(area, np.zeros(1, np.int32), size, one, out)
    with pytest.raises(TypeError, match="not 'str'"):
        COMPILED_FIELDS("text", np.zeros(1, np.int64), size, one, out)
    frozen = out.copy()
    frozen.flags.writeable = False
    with pytest.raises((TypeError, BufferError, ValueError)):
        COMPILED_FIELDS(area, np.zeros(1, np.int64), size, one, frozen)
    with pytest.raises(ValueError, match="one length"):
        COMPILED_FIELDS(area, np.zeros(2, np.int64), size, one, out)
    # Spans outside the data, or more records than ``out`` holds: refused, nothing read.
    for begins, ends, counts in ((-1, 5, 1), (0, len(area) + 1, 1), (3, 2, 1), (0, 5, 2)):
        spans = [np.array([v], dtype=np.int64) for v in (begins, ends, counts)]
        assert COMPILED_FIELDS(area, *spans, out) is False
