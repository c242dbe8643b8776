"""node.produce_response: produce answers written straight to bytes are exactly the bytes kio's
typed build and writer made for them, in every version a Kafka listener serves."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kafkasim.common.errors import KafkaError, error_for_code, error_for_name
from kafkasim.common.types import TopicPartition
from kafkasim.node.kafka_codec import (
    KafkaRequest,
    build,
    encode_response,
    error_message,
    group_by_topic,
    load_response_schema,
)
from kafkasim.node.produce_response import encode_produce_response
from kafkasim.node.replica_types import ProducePartitionResult
from tests.kafka_wire import PRODUCE, read_response

VERSIONS = range(3, 10)
INT64 = st.integers(-(2**63), 2**63 - 1)
# Errors a produce answers, with and without a message.
ERRORS = st.one_of(
    st.none(),
    st.builds(
        lambda name, message: error_for_name(name)(message),
        st.sampled_from(
            [
                "NOT_LEADER_OR_FOLLOWER",
                "NOT_ENOUGH_REPLICAS",
                "CORRUPT_MESSAGE",
                "INVALID_RECORD",
                "TOPIC_AUTHORIZATION_FAILED",
                "UNKNOWN_TOPIC_OR_PARTITION",
            ]
        ),
        st.text(max_size=40),
    ),
)
RESULTS = st.lists(
    st.builds(
        ProducePartitionResult,
        st.builds(
            TopicPartition,
            st.sampled_from(["t", "orders", "ünïcode-topic", "x" * 249]),
            st.integers(0, 2**31 - 1),
        ),
        ERRORS,
        INT64,
        # kio writes a time through a float of seconds: exact for every millisecond before
        # the year 2248 (and the append times a broker gives are now).
        st.one_of(st.integers(-(2**40), -1), st.integers(0, 2**43)),
        INT64,
    ),
    max_size=8,
)


def kio_answer(version: int, results: list[ProducePartitionResult]) -> Any:
    """The answer as the listener built it before: kio's entity from plain values."""
    by_topic = group_by_topic(
        (
            r.tp.topic,
            {
                "index": r.tp.partition,
                "error_code": 0 if r.error is None else r.error.code,
                "base_offset": r.base_offset,
                "log_append_time": r.log_append_time_ms,
                "log_start_offset": r.log_start_offset,
                "error_message": error_message(r.error),
            },
        )
        for r in results
    )
    return build(
        load_response_schema(PRODUCE, version),
        responses=[{"name": n, "partition_responses": p} for n, p in by_topic.items()],
    )


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(VERSIONS), RESULTS, st.integers(-(2**31), 2**31 - 1))
def test_the_bytes_are_kios(
    version: int, results: list[ProducePartitionResult], correlation_id: int
) -> None:
    request = KafkaRequest(PRODUCE, version, correlation_id, "c", None)
    ours = encode_response(request, encode_produce_response(version, results))
    assert ours == encode_response(request, kio_answer(version, results))


@pytest.mark.parametrize("version", VERSIONS)
def test_a_client_reads_every_field_back(version: int) -> None:
    moved = error_for_name("NOT_LEADER_OR_FOLLOWER")("moved to 2")
    results = [
        ProducePartitionResult(TopicPartition("a", 0), None, 7, -1, 3),
        ProducePartitionResult(TopicPartition("b", 4), moved),
        ProducePartitionResult(TopicPartition("a", 1), None, 9, 1_700_000_000_123, 0),
    ]
    request = KafkaRequest(PRODUCE, version, 41, "c", None)
    frame = encode_response(request, encode_produce_response(version, results))
    assert int.from_bytes(frame[:4], "big") == len(frame) - 4
    correlation_id, answer = read_response(frame[4:], PRODUCE, version)
    assert correlation_id == 41
    topics = {t.name: t.partition_responses for t in answer.responses}
    assert list(topics) == ["a", "b"]
    a0, a1 = topics["a"]
    (b4,) = topics["b"]
    assert (a0.index, a0.error_code, a0.base_offset, a0.log_append_time) == (0, 0, 7, None)
    assert (a1.index, a1.base_offset) == (1, 9)
    assert a1.log_append_time is not None
    assert round(a1.log_append_time.timestamp() * 1000) == 1_700_000_000_123
    assert (b4.index, b4.error_code, b4.base_offset) == (4, moved.code, -1)
    if version >= 5:
        assert (a0.log_start_offset, a1.log_start_offset) == (3, 0)
    if version >= 8:
        assert (b4.error_message, a0.error_message) == ("moved to 2", None)
        assert b4.record_errors == () and a0.record_errors == ()
    assert int(answer.throttle_time.total_seconds()) == 0


def test_an_error_without_a_message_answers_null() -> None:
    silent: KafkaError = error_for_code(error_for_name("NOT_ENOUGH_REPLICAS").code)("")
    results = [ProducePartitionResult(TopicPartition("t", 0), silent)]
    request = KafkaRequest(PRODUCE, 9, 1, "c", None)
    _, answer = read_response(
        encode_response(request, encode_produce_response(9, results))[4:], PRODUCE, 9
    )
    assert answer.responses[0].partition_responses[0].error_message is None


@pytest.mark.parametrize("version", [0, 2, 10])
def test_a_version_not_served_is_refused(version: int) -> None:
    with pytest.raises(ValueError, match=f"v{version} is not written here"):
        encode_produce_response(version, [])
