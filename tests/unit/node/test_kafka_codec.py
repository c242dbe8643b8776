"""Kafka's binary protocol at the byte level (``node.kafka_codec``), without sockets: request
frames in (header v1 and v2), response frames out (header v0 and v1), entities of any version
built from one set of plain values, and every kind of bad frame ending in one of the codec's
two errors, never in anything else (a crash of kio's native reader would take the broker down).
"""

from __future__ import annotations

import contextlib
import datetime
import struct
import uuid
from collections.abc import Iterator
from typing import Any, cast

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from kio.schema.api_versions.v0.response import ApiVersionsResponse as ApiVersionsResponseV0
from kio.schema.api_versions.v3.request import ApiVersionsRequest as ApiVersionsRequestV3
from kio.schema.api_versions.v3.response import ApiVersionsResponse as ApiVersionsResponseV3
from kio.schema.errors import ErrorCode
from kio.schema.fetch.v4.request import FetchRequest as FetchRequestV4
from kio.schema.metadata.v1.request import MetadataRequest as MetadataRequestV1
from kio.schema.metadata.v12.response import MetadataResponse as MetadataResponseV12
from kio.schema.produce.v3.response import ProduceResponse as ProduceResponseV3
from kio.schema.produce.v9.response import PartitionProduceResponse as PartitionProduceV9
from kio.schema.produce.v9.response import ProduceResponse as ProduceResponseV9

from kafkasim.node.kafka_apis import KafkaProtocolApis
from kafkasim.node.kafka_codec import (
    InvalidRequestFrameError,
    KafkaRequest,
    UnsupportedVersionError,
    build,
    check_frame,
    decode_request,
    encode_response,
    millis,
    response_schema,
)
from tests.kafka_wire import API_VERSIONS, METADATA, PRODUCE, read_response, request_frame

# What the broker serves: the handler table's versions (listing them needs no broker).
SERVED = KafkaProtocolApis(cast(Any, None), "KAFKA").versions
CODEC_ERRORS = (InvalidRequestFrameError, UnsupportedVersionError)


def produce_frame(version: int, correlation_id: int = 5) -> bytes:
    return request_frame(
        PRODUCE,
        version,
        correlation_id,
        "producer-1",
        acks=-1,
        timeout=1500,
        topic_data=[{"name": "t", "partition_data": [{"index": 2, "records": b"batch"}]}],
    )


# -- requests ---------------------------------------------------------------------------------


def test_a_flexible_request_is_read_with_header_v2() -> None:
    frame = request_frame(
        API_VERSIONS, 3, 42, "rdkafka", client_software_name="x", client_software_version="1"
    )
    # Header v2: client_id stays a legacy string (int16 length), then an empty tag section.
    assert frame[8:18] == b"\x00\x07rdkafka\x00"
    request = decode_request(frame, SERVED)
    assert (request.api_key, request.api_version) == (API_VERSIONS, 3)
    assert (request.correlation_id, request.client_id) == (42, "rdkafka")
    assert request.body == ApiVersionsRequestV3(
        client_software_name="x", client_software_version="1"
    )
    assert request.api_name == "ApiVersions"


def test_a_non_flexible_request_is_read_with_header_v1() -> None:
    frame = request_frame(METADATA, 1, 7, None, topics=[{"name": "a"}, {"name": "b"}])
    request = decode_request(frame, SERVED)
    assert (request.correlation_id, request.client_id) == (7, None)
    assert isinstance(request.body, MetadataRequestV1)
    assert [t.name for t in request.body.topics] == ["a", "b"]


@pytest.mark.parametrize("version", [3, 8, 9])
def test_produce_records_come_through_as_bytes_in_every_version(version: int) -> None:
    request = decode_request(produce_frame(version), SERVED)
    (topic,) = request.body.topic_data
    (partition,) = topic.partition_data
    assert (topic.name, partition.index, bytes(partition.records)) == ("t", 2, b"batch")
    assert (int(request.body.acks), millis(request.body.timeout)) == (-1, 1500)
    assert request.client_id == "producer-1"


def test_bytes_after_the_request_are_ignored_as_kafka_does() -> None:
    frame = request_frame(
        METADATA, 12, 3, "c", topics=None, include_topic_authorized_operations=False
    )
    request = decode_request(frame + b"\x00\x00\x00", SERVED)
    assert request.correlation_id == 3
    assert request.body.topics is None


def test_an_unknown_api_key_carries_the_correlation_id_and_client_id() -> None:
    frame = struct.pack(">hhih", 999, 0, 77, 4) + b"kcat" + b"junk"
    with pytest.raises(UnsupportedVersionError) as caught:
        decode_request(frame, SERVED)
    error = caught.value
    assert (error.api_key, error.api_version, error.correlation_id, error.client_id) == (
        999,
        0,
        77,
        "kcat",
    )
    assert str(error) == "unsupported API key 999 version 0"


@pytest.mark.parametrize(("api_key", "version"), [(PRODUCE, 2), (PRODUCE, 10), (API_VERSIONS, 99)])
def test_a_version_outside_the_served_range_is_unsupported(api_key: int, version: int) -> None:
    frame = struct.pack(">hhih", api_key, version, 9, 2) + b"id" + b"\x00"
    with pytest.raises(UnsupportedVersionError) as caught:
        decode_request(frame, SERVED)
    assert (caught.value.api_version, caught.value.correlation_id) == (version, 9)
    assert caught.value.client_id == "id"


def test_an_unsupported_request_with_a_broken_client_id_still_has_its_correlation_id() -> None:
    frame = struct.pack(">hhih", 999, 1, 31, 200) + b"short"
    with pytest.raises(UnsupportedVersionError) as caught:
        decode_request(frame, SERVED)
    assert (caught.value.correlation_id, caught.value.client_id) == (31, None)


def test_the_unsupported_version_error_survives_a_context_manager() -> None:
    # Python sets __traceback__ on an exception leaving a @contextmanager: a frozen dataclass
    # exception turned that into a TypeError.
    @contextlib.contextmanager
    def scope() -> Iterator[None]:
        yield

    with pytest.raises(UnsupportedVersionError), scope():
        raise UnsupportedVersionError(1, 99, 3, None)


@pytest.mark.parametrize("size", range(8))
def test_a_frame_shorter_than_a_header_is_invalid(size: int) -> None:
    with pytest.raises(InvalidRequestFrameError, match="shorter than its header"):
        decode_request(produce_frame(9)[:size], SERVED)


@pytest.mark.parametrize("version", [3, 9])
def test_every_truncation_of_a_request_is_invalid(version: int) -> None:
    frame = produce_frame(version)
    for cut in range(8, len(frame)):
        with pytest.raises(InvalidRequestFrameError, match=f"api key 0 version {version}"):
            decode_request(frame[:cut], SERVED)


def test_a_garbled_array_length_is_invalid_and_names_the_field() -> None:
    # Metadata v11: null client id, empty header tags, then a compact array of ~2^31 topics.
    # kio's native reader would reserve memory for all of them and abort the process.
    frame = bytes.fromhex("0003000b0000ae36ffff00f5a8c2937e815ef4c247980ea6d9ab51da")
    with pytest.raises(InvalidRequestFrameError, match=r"MetadataRequest\.topics: an array of"):
        decode_request(frame, SERVED)


def test_a_legacy_array_longer_than_the_frame_is_invalid() -> None:
    frame = struct.pack(">hhih", METADATA, 1, 1, -1) + struct.pack(">i", 2**31 - 1)
    with pytest.raises(InvalidRequestFrameError, match=r"an array of 2147483647 items"):
        decode_request(frame, SERVED)


def test_a_string_longer_than_the_frame_is_invalid() -> None:
    frame = struct.pack(">hhih", METADATA, 1, 1, -1) + struct.pack(">ih", 1, 30000) + b"ab"
    with pytest.raises(InvalidRequestFrameError, match=r"MetadataRequestTopic\.name: 30000 bytes"):
        decode_request(frame, SERVED)


def test_a_negative_length_other_than_null_is_invalid() -> None:
    frame = struct.pack(">hhih", METADATA, 1, 1, -1) + struct.pack(">i", -2)
    with pytest.raises(InvalidRequestFrameError, match="a negative length -2"):
        decode_request(frame, SERVED)


def test_a_varint_longer_than_five_bytes_is_invalid() -> None:
    frame = struct.pack(">hhih", METADATA, 12, 1, -1) + b"\x00" + b"\xff" * 6
    with pytest.raises(InvalidRequestFrameError, match="varint longer than 5 bytes"):
        decode_request(frame, SERVED)


def test_a_value_kio_refuses_is_invalid() -> None:
    # A null topic name in Metadata v1 (non-nullable there): the lengths fit, kio refuses it.
    frame = struct.pack(">hhih", METADATA, 1, 1, -1) + struct.pack(">ih", 1, -1)
    with pytest.raises(InvalidRequestFrameError, match="api key 3 version 1"):
        decode_request(frame, SERVED)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=64))
def test_random_bytes_raise_only_the_codec_errors(frame: bytes) -> None:
    with contextlib.suppress(*CODEC_ERRORS):
        decode_request(frame, SERVED)


@settings(max_examples=1500, deadline=None)
@given(
    st.sampled_from(sorted((k, v) for k, (lo, hi) in SERVED.items() for v in range(lo, hi + 1))),
    st.booleans(),
    st.binary(max_size=48),
)
def test_a_valid_header_before_random_bytes_raises_only_the_codec_errors(
    key_version: tuple[int, int], null_client: bool, body: bytes
) -> None:
    api_key, version = key_version
    header = struct.pack(">hhi", api_key, version, 1)
    header += struct.pack(">h", -1) if null_client else struct.pack(">h", 1) + b"c"
    try:
        request = decode_request(header + body, SERVED)
    except CODEC_ERRORS:
        return
    assert (request.api_key, request.api_version, request.correlation_id) == (api_key, version, 1)


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_a_request_with_one_byte_changed_raises_only_the_codec_errors(data: st.DataObject) -> None:
    frame = bytearray(produce_frame(data.draw(st.integers(3, 9))))
    frame[data.draw(st.integers(0, len(frame) - 1))] = data.draw(st.integers(0, 255))
    with contextlib.suppress(*CODEC_ERRORS):
        decode_request(bytes(frame), SERVED)


# -- responses --------------------------------------------------------------------------------


def request(api_key: int, version: int, correlation_id: int = 11) -> KafkaRequest:
    return KafkaRequest(api_key, version, correlation_id, "c", None)


def test_api_versions_answers_with_header_v0_even_when_flexible() -> None:
    body = build(
        ApiVersionsResponseV3,
        error_code=0,
        api_keys=[{"api_key": 18, "min_version": 0, "max_version": 3}],
    )
    frame = encode_response(request(API_VERSIONS, 3), body)
    assert struct.unpack_from(">ii", frame) == (len(frame) - 4, 11)
    # Header v0: the body (its error code) follows the correlation id, no tag section.
    assert frame[8:10] == b"\x00\x00"
    assert read_response(frame[4:], API_VERSIONS, 3) == (11, body)


def test_a_flexible_response_has_header_v1_and_an_older_one_header_v0() -> None:
    flexible = encode_response(request(METADATA, 12), build(MetadataResponseV12))
    assert flexible[8] == 0  # header v1's empty tag section
    assert read_response(flexible[4:], METADATA, 12)[0] == 11
    legacy = encode_response(request(PRODUCE, 3), build(ProduceResponseV3))
    assert read_response(legacy[4:], PRODUCE, 3) == (11, build(ProduceResponseV3))


def test_an_unsupported_api_versions_is_answered_v0_with_its_correlation_id() -> None:
    error = UnsupportedVersionError(API_VERSIONS, 99, 123, "c")
    body = build(ApiVersionsResponseV0, error_code=35, api_keys=[])
    frame = encode_response(error, body)
    assert read_response(frame[4:], API_VERSIONS, 0) == (123, body)


def test_response_schema_is_the_response_of_the_same_version() -> None:
    assert response_schema(request(PRODUCE, 9)) is ProduceResponseV9
    assert response_schema(request(API_VERSIONS, 0)) is ApiVersionsResponseV0


# -- build ------------------------------------------------------------------------------------

PARTITION = {
    "index": 1,
    "error_code": 6,
    "base_offset": 40,
    "log_append_time": 1_700_000_000_123,
    "log_start_offset": 3,
    "error_message": "not the leader",
}


@pytest.mark.parametrize("version", range(3, 10))
def test_one_set_of_values_builds_every_version_and_round_trips(version: int) -> None:
    schema = response_schema(request(PRODUCE, version))
    body = build(schema, responses=[{"name": "t", "partition_responses": [PARTITION]}])
    (partition,) = body.responses[0].partition_responses
    assert (partition.index, partition.error_code, partition.base_offset) == (
        1,
        ErrorCode.not_leader_or_follower,
        40,
    )
    assert millis(partition.log_append_time) == 1_700_000_000_123
    # log_start_offset is v5+, error_message v8+: dropped from the versions without them.
    assert hasattr(partition, "log_start_offset") == (version >= 5)
    assert hasattr(partition, "error_message") == (version >= 8)
    frame = encode_response(request(PRODUCE, version), body)
    assert read_response(frame[4:], PRODUCE, version) == (11, body)


def test_missing_values_take_the_schema_default_or_zero() -> None:
    partition = build(PartitionProduceV9, index=2)
    assert partition.log_start_offset == -1  # the schema's default
    assert partition.error_message is None
    assert partition.log_append_time is None
    assert (partition.base_offset, partition.error_code) == (0, ErrorCode.none)
    assert partition.record_errors == ()
    metadata = build(MetadataResponseV12)
    assert (metadata.brokers, metadata.topics, metadata.cluster_id) == ((), (), None)


def test_milliseconds_become_time_spans_and_back() -> None:
    fetch = build(FetchRequestV4, max_wait=500, min_bytes=1, topics=[])
    assert fetch.max_wait == datetime.timedelta(milliseconds=500)
    assert millis(fetch.max_wait) == 500
    assert fetch.max_bytes == 2**31 - 1  # default kept
    assert fetch.replica_id == -1


def test_a_nullable_timestamp_is_none_for_minus_one_and_back() -> None:
    assert build(PartitionProduceV9, log_append_time=-1).log_append_time is None
    assert millis(None) == -1
    assert millis(None, default=0) == 0
    stamp = build(PartitionProduceV9, log_append_time=0).log_append_time
    assert stamp == datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)


@given(st.integers(0, 253_402_300_799_999))  # up to the last millisecond of year 9999
@example(69_493_042_499_926)  # a float timestamp turned it into ...925
def test_every_timestamp_round_trips_exactly(ms: int) -> None:
    assert millis(build(PartitionProduceV9, log_append_time=ms).log_append_time) == ms


def test_nested_values_may_be_mappings_or_entities_and_uuids_ints() -> None:
    partition = build(PartitionProduceV9, index=4)
    body = build(ProduceResponseV9, responses=[{"name": "t", "partition_responses": [partition]}])
    assert body.responses[0].partition_responses == (partition,)
    metadata = build(MetadataResponseV12, topics=[{"name": "t", "topic_id": 0}])
    assert metadata.topics[0].topic_id == uuid.UUID(int=0)


# -- the structural check on what the codec writes --------------------------------------------


def test_the_check_walks_tagged_fields_to_the_end_of_a_response() -> None:
    body = build(
        ApiVersionsResponseV3,
        api_keys=[{"api_key": 0, "min_version": 3, "max_version": 9}],
        supported_features=[{"name": "f", "min_version": 1, "max_version": 2}],
        finalized_features_epoch=7,
        zk_migration_ready=True,
    )
    frame = encode_response(request(API_VERSIONS, 3), body)
    assert check_frame(ApiVersionsResponseV3, frame, 8) == len(frame)
    with pytest.raises(InvalidRequestFrameError, match="tagged fields"):
        check_frame(ApiVersionsResponseV3, frame[:-1], 8)


@pytest.mark.parametrize("version", range(0, 13))
def test_the_check_agrees_with_kio_on_where_a_metadata_response_ends(version: int) -> None:
    schema = response_schema(request(METADATA, version))
    body = build(
        schema,
        brokers=[{"node_id": 1, "host": "h", "port": 9092, "rack": "r"}],
        cluster_id="c",
        topics=[
            {
                "name": "t",
                "partitions": [{"partition_index": 0, "replica_nodes": [1, 2], "isr_nodes": [1]}],
            }
        ],
    )
    frame = encode_response(request(METADATA, version), body)
    start = 9 if schema.__flexible__ else 8
    assert check_frame(schema, frame, start) == len(frame)
