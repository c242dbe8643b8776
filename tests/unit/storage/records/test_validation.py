"""Record-level validation (Kafka's LogValidator): what a batch with a good CRC can still hide.

Why: the CRC only proves the bytes are the ones the sender hashed. A client that recomputes it
can claim 2^31-1 records while holding 3, send garbage as records, an unknown codec, or the
gzip flag on plain bytes; each, once stored, makes the partition unreadable past it. Every
batch here has its CRC recomputed after the damage.
"""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kafkasim.common.errors import CorruptRecordError, InvalidRecordError, InvalidTimestampError
from kafkasim.storage.records.batch import (
    RECORDS_OFFSET,
    BatchHeader,
    ControlRecordType,
    TimestampType,
    decode_batch,
    encode_batch,
    encode_control_batch,
    validate_batch,
)
from kafkasim.storage.records.compression import CompressionType
from kafkasim.storage.records.legacy import encode_legacy
from kafkasim.storage.records.validation import (
    check_produce_records,
    validate_batch_records,
    validate_leader_batch,
)
from tests.unit.storage.records.crafted import (
    T0,
    batch_of,
    claims,
    good_batch,
    record,
    with_header,
    with_records_area,
)

NOW = T0 + 10_000
CODECS = list(CompressionType)


def leader(
    batch: bytes,
    *,
    is_client: bool = True,
    compacted: bool = False,
    log_append_time: bool = False,
    limit: int = 2**63 - 1,
) -> tuple[BatchHeader, memoryview]:
    view = memoryview(batch)
    return validate_leader_batch(
        view,
        BatchHeader.parse(view),
        is_client=is_client,
        compacted=compacted,
        log_append_time=log_append_time,
        max_timestamp_difference_ms=limit,
        now_ms=NOW,
    )


# -- valid batches pass, unchanged -------------------------------------------------------------


@pytest.mark.parametrize("codec", CODECS, ids=[c.kafka_name for c in CODECS])
def test_a_valid_batch_of_every_codec_passes_unchanged(codec: CompressionType) -> None:
    batch = good_batch(5, compression=codec)
    assert validate_batch_records(batch, dense_offsets=True, compacted=True) == T0 + 4
    header, out = leader(batch, compacted=True, limit=60_000)
    assert bytes(out) == batch
    assert header == BatchHeader.parse(batch)


def test_idempotent_and_transactional_fields_are_kept() -> None:
    batch = good_batch(4, producer_id=77, producer_epoch=3, base_sequence=10, is_transactional=True)
    header, out = leader(with_header(batch, max_timestamp=T0 + 999))  # max fixed: a rewrite
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (77, 3, 10)
    assert header.is_transactional and header.max_timestamp == T0 + 3
    validate_batch(out)  # the CRC was recomputed over the rewritten header


def test_a_control_batch_from_the_broker_is_walked_and_accepted() -> None:
    marker = encode_control_batch(
        ControlRecordType.COMMIT, producer_id=5, producer_epoch=0, timestamp=T0
    )
    header, out = leader(marker, is_client=False, compacted=True)
    assert header.is_control and bytes(out) == marker


def test_empty_batch_is_not_walked() -> None:
    empty = encode_batch([])
    assert validate_batch_records(empty) == -1


def test_an_empty_batch_carrying_record_data_is_invalid_record() -> None:
    """Kafka's record iterator finds "records still remaining" after the 0 it was told of."""
    batch = with_header(good_batch(2), records_count=0, last_offset_delta=0)
    with pytest.raises(InvalidRecordError, match="declares 0 records but carries"):
        validate_batch_records(batch)


def test_an_empty_batch_with_an_unknown_codec_is_corrupt_message() -> None:
    batch = with_header(encode_batch([]), attributes=6)
    with pytest.raises(CorruptRecordError, match="type id 6"):
        validate_batch_records(batch)


# -- record count and record area --------------------------------------------------------------


@pytest.mark.parametrize("claimed", [4, 5, 1000, 2**31 - 1])
@pytest.mark.parametrize("codec", CODECS, ids=[c.kafka_name for c in CODECS])
def test_a_header_claiming_more_records_than_present_is_invalid_record(
    claimed: int, codec: CompressionType
) -> None:
    batch = claims(good_batch(3, compression=codec), claimed)
    with pytest.raises(
        InvalidRecordError, match=f"premature end of records: record 3 of {claimed}"
    ):
        leader(batch)


def test_a_header_claiming_fewer_records_than_present_is_invalid_record() -> None:
    with pytest.raises(InvalidRecordError, match="bytes remain in the record area after its 2"):
        leader(claims(good_batch(3), 2))


def test_trailing_bytes_after_the_last_record_are_invalid_record() -> None:
    batch = good_batch(2)
    with pytest.raises(InvalidRecordError, match="3 bytes remain"):
        leader(with_records_area(batch, batch[RECORDS_OFFSET:] + b"\x00\x00\x00"))


def test_a_negative_record_count_is_invalid_record() -> None:
    with pytest.raises(InvalidRecordError, match="invalid record count -3"):
        validate_batch_records(with_header(good_batch(3), records_count=-3))


def test_a_garbage_record_area_is_invalid_record() -> None:
    batch = good_batch(3)
    garbage = bytes(range(251, 256)) * 8
    with pytest.raises(InvalidRecordError, match="record 0"):
        leader(with_records_area(batch, garbage))


@pytest.mark.parametrize(
    ("adjust", "match"),
    [(5, "declares 13 bytes but its fields take 8"), (-2, "runs past the record's end")],
)
def test_a_record_whose_length_does_not_match_its_fields_is_invalid_record(
    adjust: int, match: str
) -> None:
    records = [record(0), record(1, length_adjust=adjust), record(2)]
    with pytest.raises(InvalidRecordError, match=f"record 1.*{match}"):
        leader(batch_of(records))


def test_a_bad_header_count_or_header_key_is_invalid_record() -> None:
    negative = batch_of([record(0, raw_headers=b"\x01")])
    with pytest.raises(InvalidRecordError, match="record 0: invalid number of record headers -1"):
        leader(negative)
    not_utf8 = batch_of([record(0, raw_headers=b"\x02\x04\xff\xfe\x01")])
    with pytest.raises(InvalidRecordError, match="record 0: record header key is not UTF-8"):
        leader(not_utf8)


# -- codecs and compressed payloads ------------------------------------------------------------


@pytest.mark.parametrize("codec_id", [5, 6, 7])
def test_an_unknown_codec_id_is_corrupt_message(codec_id: int) -> None:
    with pytest.raises(CorruptRecordError, match=f"unknown compression type id {codec_id}"):
        leader(with_header(good_batch(3), attributes=codec_id))


@pytest.mark.parametrize("codec", CODECS[1:], ids=[c.kafka_name for c in CODECS[1:]])
def test_a_codec_flag_on_data_that_is_not_of_that_codec_is_corrupt_message(
    codec: CompressionType,
) -> None:
    plain = good_batch(3)
    lying = with_header(plain, attributes=int(codec))
    with pytest.raises(CorruptRecordError, match=f"position 0: {codec.kafka_name} "):
        leader(lying)


def test_a_compressed_payload_of_garbage_records_is_invalid_record() -> None:
    batch = with_records_area(good_batch(3), b"\xff" * 40, CompressionType.ZSTD)
    with pytest.raises(InvalidRecordError, match=r"record batch at position 0 \(zstd, 3 records"):
        leader(batch)


# -- offsets -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("deltas", "bad_index", "got"), [([0, 2, 1], 1, 2), ([0, 0, 1], 1, 0), ([1, 2, 3], 0, 1)]
)
@pytest.mark.parametrize("codec", [CompressionType.NONE, CompressionType.LZ4], ids=["none", "lz4"])
def test_inner_record_offsets_must_be_0_to_n_minus_1_in_order(
    deltas: list[int], bad_index: int, got: int, codec: CompressionType
) -> None:
    batch = batch_of([record(d) for d in deltas], compression=codec)
    with pytest.raises(
        InvalidRecordError,
        match=f"record {bad_index} has offset delta {got}, expected {bad_index}: inner record",
    ):
        leader(batch)


def test_the_last_offset_delta_must_match_the_count_for_a_client() -> None:
    with pytest.raises(InvalidRecordError, match=r"inconsistent batch offset range \[0, 5\]"):
        leader(with_header(good_batch(3), last_offset_delta=5))
    with pytest.raises(InvalidRecordError, match="invalid offset range"):
        leader(with_header(good_batch(3), last_offset_delta=-1))


def test_without_dense_offsets_gaps_pass_but_disorder_and_overrun_do_not() -> None:
    """A compacted batch keeps its offset span with records missing: structurally fine."""
    gaps = batch_of([record(0), record(2), record(5)], last_offset_delta=5)
    validate_batch_records(gaps)
    _, records = decode_batch(gaps)
    assert [r.offset for r in records] == [0, 2, 5]
    with pytest.raises(InvalidRecordError, match="record 2 has offset delta 1 after 2"):
        validate_batch_records(batch_of([record(0), record(2), record(1)], last_offset_delta=5))
    with pytest.raises(InvalidRecordError, match=r"offset delta 6 after 2 \(batch last offset"):
        validate_batch_records(batch_of([record(0), record(2), record(6)], last_offset_delta=5))


# -- client rules --------------------------------------------------------------------------------


def test_client_batch_rules_of_kafkas_validate_batch() -> None:
    with pytest.raises(InvalidRecordError, match="invalid reported count for record batch: 0"):
        leader(encode_batch([]))
    marker = encode_control_batch(
        ControlRecordType.ABORT, producer_id=5, producer_epoch=0, timestamp=T0
    )
    with pytest.raises(InvalidRecordError, match="not allowed to write control records"):
        leader(marker)
    with pytest.raises(InvalidRecordError, match=r"invalid sequence number -1 .* producerId 9"):
        leader(good_batch(2, producer_id=9, producer_epoch=0, base_sequence=-1))


def test_a_compacted_topic_refuses_a_null_key_naming_the_record() -> None:
    batch = good_batch(3, keys=[b"a", None, b"c"])
    with pytest.raises(
        InvalidRecordError, match="record 1: compacted topic cannot accept message without key"
    ):
        leader(batch, compacted=True)
    leader(batch, compacted=False)


# -- timestamps --------------------------------------------------------------------------------


def test_create_time_beyond_the_difference_limit_is_invalid_timestamp() -> None:
    batch = good_batch(3, timestamps=[NOW, NOW + 500, NOW - 5000])
    with pytest.raises(InvalidTimestampError, match=r"record 2: timestamp \d+ is out of range"):
        leader(batch, limit=1000)
    leader(batch, limit=5000)
    leader(batch, log_append_time=True, limit=1000)  # the broker's time replaces them


def test_records_without_a_timestamp_are_exempt_from_the_limit() -> None:
    batch = good_batch(2, timestamps=[-1, NOW])
    leader(batch, limit=1000)


def test_a_producer_may_not_set_log_append_time() -> None:
    batch = with_header(good_batch(2), attributes=0x08)
    assert BatchHeader.parse(batch).timestamp_type is TimestampType.LOG_APPEND_TIME
    for log_append_time in (False, True):
        with pytest.raises(InvalidTimestampError, match="should not set the timestamp type"):
            leader(batch, log_append_time=log_append_time)


def test_a_lying_max_timestamp_is_replaced_by_the_records_largest() -> None:
    """Kafka's in-place assignment sets maxTimestamp from the records (retention and the time
    index trust it)."""
    batch = with_header(good_batch(3, timestamps=[T0, T0 + 7, T0 + 2]), max_timestamp=2**62)
    header, out = leader(batch)
    assert header.max_timestamp == T0 + 7
    assert validate_batch(out).max_timestamp == T0 + 7


# -- the produce request -----------------------------------------------------------------------


def test_a_produce_request_needs_exactly_one_v2_batch_per_partition() -> None:
    with pytest.raises(InvalidRecordError, match="at least one record batch"):
        check_produce_records(b"")
    with pytest.raises(InvalidRecordError, match="exactly one record batch per partition"):
        check_produce_records(good_batch(1) + good_batch(1))
    check_produce_records(good_batch(2))
    check_produce_records(encode_legacy([(T0, None, b"v")], magic=1))  # the log answers it


# -- the validator never lets through what the decoder refuses ----------------------------------


@settings(max_examples=300, deadline=None)
@given(
    codec=st.sampled_from([CompressionType.NONE, CompressionType.GZIP]),
    n=st.integers(1, 4),
    position=st.integers(0, 200),
    value=st.integers(0, 255),
    cut=st.integers(0, 30),
)
def test_a_damaged_record_area_is_refused_or_fully_decodable(
    codec: CompressionType, n: int, position: int, value: int, cut: int
) -> None:
    area = bytearray(decode_area(good_batch(n)))
    area[position % len(area)] = value
    damaged = bytes(area[: max(1, len(area) - cut)])
    batch = with_records_area(good_batch(n), damaged, codec)
    try:
        leader(batch)
    except (InvalidRecordError, CorruptRecordError, InvalidTimestampError):
        return
    _, records = decode_batch(batch)
    assert len(records) == n
    assert [r.offset for r in records] == list(range(n))


def decode_area(batch: bytes) -> bytes:
    return batch[RECORDS_OFFSET:]


def test_crafted_helpers_keep_the_crc_valid() -> None:
    for batch in (claims(good_batch(3), 1000), with_header(good_batch(3), attributes=5)):
        header = validate_batch(batch)
        assert struct.unpack_from(">i", batch, 57)[0] == header.records_count
