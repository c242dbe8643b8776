"""The data source's options and read planning, without Spark or a cluster: Spark's Kafka
option names and rules, the offsets JSON layout of Spark's checkpoints, the minPartitions
split and the maxOffsetsPerTrigger allowance."""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import pytest

from kafkasim.common.types import TopicPartition
from kafkasim.spark.options import (
    EARLIEST,
    LATEST,
    Assign,
    OffsetSpec,
    SparkOptionError,
    Subscribe,
    SubscribePattern,
    TimestampSpec,
    offsets_from_json,
    offsets_to_json,
    parse_sink_options,
    parse_source_options,
)
from kafkasim.spark.planning import (
    OffsetRange,
    OffsetRangeError,
    offset_ranges,
    rate_limit,
    split_ranges,
)

SERVERS = {"kafkasim.bootstrap.servers": "127.0.0.1:9092,127.0.0.1:9093"}
A0, A1, B0 = TopicPartition("a", 0), TopicPartition("a", 1), TopicPartition("b", 0)


def test_defaults_are_sparks_earliest_for_batch_and_latest_for_streaming() -> None:
    batch = parse_source_options({**SERVERS, "subscribe": "a, b,a"}, streaming=False)
    assert batch.subscription == Subscribe(("a", "b"))
    assert batch.starting == OffsetSpec(EARLIEST, {})
    assert batch.ending == OffsetSpec(LATEST, {})
    assert batch.bootstrap_servers == ("127.0.0.1:9092", "127.0.0.1:9093")
    assert batch.settings.fail_on_data_loss and batch.settings.arrow
    assert not batch.settings.include_headers
    stream = parse_source_options({**SERVERS, "subscribePattern": "a.*"}, streaming=True)
    assert stream.subscription == SubscribePattern("a.*")
    assert stream.starting == OffsetSpec(LATEST, {})


def test_option_names_are_case_insensitive_as_in_spark() -> None:
    """Spark lower-cases option keys before the source sees them."""
    opts = parse_source_options(
        {"KAFKASIM.BOOTSTRAP.SERVERS": "h:1", "assign": '{"a": [1, 0]}', "includeheaders": "TRUE"},
        streaming=False,
    )
    assert opts.subscription == Assign((A1, A0))
    assert opts.settings.include_headers


def test_offsets_json_and_timestamps_are_parsed_per_partition() -> None:
    opts = parse_source_options(
        {
            **SERVERS,
            "subscribe": "a",
            "startingOffsets": '{"a": {"0": 5, "1": -2}}',
            "endingOffsets": '{"a": {"0": -1}}',
        },
        streaming=False,
    )
    assert opts.starting == OffsetSpec(EARLIEST, {A0: 5, A1: EARLIEST})
    assert opts.ending == OffsetSpec(LATEST, {A0: LATEST})
    by_time = parse_source_options(
        {
            **SERVERS,
            "subscribe": "a",
            "startingOffsets": "earliest",
            "startingOffsetsByTimestamp": '{"a": {"0": 1700000000000}}',
            "startingOffsetsByTimestampStrategy": "latest",
        },
        streaming=True,
    )
    assert by_time.starting == TimestampSpec(None, {A0: 1_700_000_000_000}, strategy_latest=True)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"subscribe": "a", "bogus": "1"}, "Unknown option 'bogus'"),
        ({"subscribe": "a", "topic": "b"}, "'topic' does not apply to a kafkasim batch read"),
        ({}, "One of the following options must be specified"),
        ({"subscribe": "a", "subscribePattern": "b"}, "Only one of the following options"),
        ({"subscribe": " , "}, "No topics to subscribe to"),
        ({"subscribePattern": "("}, "not a valid regular expression"),
        ({"assign": '{"a": []}'}, "No topic partitions to assign"),
        ({"assign": '{"a": ["x"]}'}, "Option 'assign' expects JSON"),
        ({"subscribe": "a", "startingOffsets": '{"a": {"0": -3}}'}, "offsets below -2"),
        ({"subscribe": "a", "startingOffsets": '{"a": [1]}'}, "expects JSON like"),
        ({"subscribe": "a", "startingTimestamp": "soon"}, "must be milliseconds"),
        ({"subscribe": "a", "startingOffsetsByTimestampStrategy": "x"}, "must be error or latest"),
        ({"subscribe": "a", "kafkasim.read.format": "rows"}, "must be arrow or tuples"),
        ({"subscribe": "a", "includeHeaders": "yes"}, "'includeHeaders' must be true or false"),
        ({"subscribe": "a", "path": "/x"}, "takes no path"),
    ],
)
def test_bad_read_options_are_named(options: dict[str, str], message: str) -> None:
    with pytest.raises(SparkOptionError, match=message):
        parse_source_options({**SERVERS, **options}, streaming=False)


@pytest.mark.parametrize("servers", ["", "host", "host:port", ":9092"])
def test_bootstrap_servers_must_be_host_port_pairs(servers: str) -> None:
    with pytest.raises(SparkOptionError, match=r"kafkasim\.bootstrap\.servers"):
        parse_source_options(
            {"kafkasim.bootstrap.servers": servers, "subscribe": "a"}, streaming=True
        )


def test_sink_options_take_an_optional_topic_and_no_read_options() -> None:
    assert parse_sink_options({**SERVERS, "topic": "out"}).topic == "out"
    assert parse_sink_options(SERVERS).topic is None
    with pytest.raises(
        SparkOptionError, match="'startingOffsets' does not apply to a kafkasim write"
    ):
        parse_sink_options({**SERVERS, "startingOffsets": "earliest"})


def test_offsets_json_has_sparks_checkpoint_layout_and_round_trips() -> None:
    offsets = {A1: 7, A0: 3, B0: 0}
    assert offsets_to_json(offsets) == {"a": {"0": 3, "1": 7}, "b": {"0": 0}}
    assert offsets_from_json(offsets_to_json(offsets)) == offsets


def test_offset_ranges_skip_empty_partitions_and_refuse_a_start_past_the_end() -> None:
    assert offset_ranges({A0: 2, A1: 4}, {A0: 5, A1: 4}) == [OffsetRange("a", 0, 2, 5)]
    with pytest.raises(OffsetRangeError, match="starting offset 6 of a-0 is past"):
        offset_ranges({A0: 6}, {A0: 5})


@pytest.mark.parametrize(
    ("sizes", "min_partitions", "pieces"),
    [
        ([30, 30, 30], None, [1, 1, 1]),
        ([30, 30, 30], 2, [1, 1, 1]),  # already enough ranges
        ([30, 30, 30], 7, [3, 2, 2]),
        ([90, 10], 10, [9, 1]),
        ([2, 100], 10, [1, 9]),
        ([1, 1], 5, [1, 1]),  # a single offset cannot be cut
    ],
)
def test_min_partitions_deals_pieces_in_proportion_to_range_sizes(
    sizes: list[int], min_partitions: int | None, pieces: list[int]
) -> None:
    ranges = [OffsetRange("a", p, 10, 10 + size) for p, size in enumerate(sizes)]
    split = split_ranges(ranges, min_partitions)
    assert [sum(1 for s in split if s.partition == p) for p in range(len(sizes))] == pieces
    for p, size in enumerate(sizes):
        mine = [s for s in split if s.partition == p]
        # Contiguous, in order, covering the range exactly, near-equal pieces.
        assert mine[0].from_offset == 10 and mine[-1].until_offset == 10 + size
        assert all(x.until_offset == y.from_offset for x, y in itertools.pairwise(mine))
        assert max(s.size for s in mine) - min(s.size for s in mine) <= 1


@pytest.mark.parametrize(
    ("start", "latest", "limit", "end"),
    [
        ({A0: 0, A1: 0}, {A0: 10, A1: 10}, 100, {A0: 10, A1: 10}),  # under the limit
        ({A0: 0, A1: 0}, {A0: 10, A1: 30}, 8, {A0: 2, A1: 6}),  # by backlog
        ({A0: 0, A1: 0, B0: 0}, {A0: 1, A1: 1, B0: 1}, 2, {A0: 1, A1: 1, B0: 0}),
        ({A0: 5, A1: 0}, {A0: 5, A1: 3}, 1, {A0: 5, A1: 1}),  # nothing new in a-0
    ],
)
def test_max_offsets_per_trigger_reads_exactly_the_allowance(
    start: dict[TopicPartition, int],
    latest: dict[TopicPartition, int],
    limit: int,
    end: dict[TopicPartition, int],
) -> None:
    got = rate_limit(start, latest, limit)
    assert got == end
    assert sum(got[tp] - start[tp] for tp in got) == min(
        limit, sum(latest[tp] - start[tp] for tp in latest)
    )


# -- Spark's spelling: kafka.bootstrap.servers and kafka.* client options ---------------------


def test_sparks_bootstrap_spelling_is_the_same_option() -> None:
    spark_style = {"kafka.bootstrap.servers": "127.0.0.1:9092", "subscribe": "a"}
    assert parse_source_options(spark_style, streaming=False).bootstrap_servers == (
        "127.0.0.1:9092",
    )
    both = {**spark_style, "kafkasim.bootstrap.servers": "127.0.0.1:9092"}
    assert parse_source_options(both, streaming=True).bootstrap_servers == ("127.0.0.1:9092",)
    differ = {**spark_style, "kafkasim.bootstrap.servers": "127.0.0.1:9093"}
    with pytest.raises(SparkOptionError, match="same option and differ"):
        parse_source_options(differ, streaming=False)
    with pytest.raises(SparkOptionError, match=r"'kafka.bootstrap.servers' \(or"):
        parse_sink_options({"topic": "t"})


@pytest.mark.parametrize(
    ("key", "message"),
    [
        ("kafka.auto.offset.reset", "set the source option 'startingOffsets'"),
        ("kafka.key.deserializer", "keys are read as bytes"),
        ("kafka.value.deserializer", "values are read as bytes"),
        ("kafka.enable.auto.commit", "'enable.auto.commit' is not supported"),
        ("kafka.interceptor.classes", "'interceptor.classes' is not supported"),
        ("kafka.no.such.key", "Unknown Kafka option 'kafka.no.such.key'"),
        ("kafka.isolation.level", "Option 'kafka.isolation.level'"),
    ],
)
def test_source_refuses_the_client_options_spark_refuses(key: str, message: str) -> None:
    with pytest.raises(SparkOptionError, match=message):
        parse_source_options({**SERVERS, "subscribe": "a", key: "x"}, streaming=True)


@pytest.mark.parametrize(
    ("value", "committed"),
    [(None, False), ("read_uncommitted", False), ("read_committed", True)],
)
def test_source_isolation_level_chooses_read_committed(value: str | None, committed: bool) -> None:
    options = {**SERVERS, "subscribe": "a"}
    if value is not None:
        options["kafka.isolation.level"] = value
    assert parse_source_options(options, streaming=False).settings.read_committed is committed


def test_source_client_options_set_the_read_timeouts() -> None:
    options = {
        **SERVERS,
        "subscribe": "a",
        "kafka.request.timeout.ms": "1500",
        "kafka.default.api.timeout.ms": "4000",
        "kafka.group.id": "ignored",
    }
    settings = parse_source_options(options, streaming=False).settings
    assert (settings.request_timeout_ms, settings.api_timeout_ms) == (1500, 4000)
    with pytest.raises(SparkOptionError, match=r"Option 'kafka.request.timeout.ms': .*-1"):
        parse_source_options({**options, "kafka.request.timeout.ms": "-1"}, streaming=False)


def test_sink_passes_kafka_options_to_the_producer_and_checks_them_on_the_driver() -> None:
    sink = parse_sink_options(
        {**SERVERS, "topic": "t", "kafka.acks": "1", "KAFKA.max.block.ms": "2000"}
    )
    assert dict(sink.producer_config) == {"acks": "1", "max.block.ms": "2000"}
    for key, message in [
        ("kafka.key.serializer", "keys are written as bytes"),
        ("kafka.batch.sizes", "'batch.sizes' is not a kafkasim producer configuration key"),
    ]:
        with pytest.raises(SparkOptionError, match=message):
            parse_sink_options({**SERVERS, "topic": "t", key: "1"})
    conflict = {**SERVERS, "topic": "t", "kafka.acks": "1", "kafka.enable.idempotence": "true"}
    with pytest.raises(SparkOptionError, match=r"producer options conflict.*acks"):
        parse_sink_options(conflict)


def test_user_facing_errors_lose_their_traceback_and_bugs_keep_it() -> None:
    import traceback

    from kafkasim.spark.errors import user_facing

    def deep(error: Exception) -> None:
        raise error

    @user_facing
    def call(error: Exception) -> None:
        deep(error)

    @user_facing
    def stream(error: Exception) -> Iterator[int]:
        yield 1
        deep(error)

    for run in (call, lambda e: list(stream(e))):
        try:
            run(SparkOptionError("bad option"))
        except SparkOptionError as e:
            frames = traceback.extract_tb(e.__traceback__)
            assert [f.name for f in frames][-1] in ("plain", "generator")
            assert e.__cause__ is None and e.__suppress_context__
        try:
            run(TypeError("a bug"))
        except TypeError as e:
            assert traceback.extract_tb(e.__traceback__)[-1].name == "deep"


def test_sink_exactly_once_options_are_parsed_and_checked() -> None:
    sink = parse_sink_options(
        {
            **SERVERS,
            "topic": "t",
            "kafkasim.sink.exactlyOnce": "TRUE",
            "kafkasim.transactional.id.prefix": "orders-copy",
        }
    )
    assert (sink.exactly_once, sink.transactional_id_prefix) == (True, "orders-copy")
    assert parse_sink_options({**SERVERS, "topic": "t"}).exactly_once is False
    with pytest.raises(SparkOptionError, match="needs the 'topic' option"):
        parse_sink_options({**SERVERS, "kafkasim.sink.exactlyOnce": "true"})
    with pytest.raises(SparkOptionError, match="must not be empty"):
        parse_sink_options({**SERVERS, "topic": "t", "kafkasim.transactional.id.prefix": " "})
    no_idempotence = {**SERVERS, "topic": "t", "kafka.enable.idempotence": "false"}
    assert parse_sink_options(no_idempotence).exactly_once is False
    with pytest.raises(SparkOptionError, match="producer options conflict"):
        parse_sink_options({**no_idempotence, "kafkasim.sink.exactlyOnce": "true"})
    with pytest.raises(SparkOptionError, match=r"set 'kafkasim\.sink\.exactlyOnce' to true"):
        parse_sink_options({**SERVERS, "topic": "t", "kafka.transactional.id": "mine"})
    with pytest.raises(SparkOptionError, match="does not apply to a kafkasim batch read"):
        parse_source_options(
            {**SERVERS, "subscribe": "a", "kafkasim.sink.exactlyOnce": "true"}, streaming=False
        )
