"""The options of the ``kafkasim`` data source, named as Spark's Kafka source names them.

One declaration per option (:data:`SOURCE_OPTIONS`, :data:`SINK_OPTIONS`): its name, where it
applies and what it means. :func:`parse_source_options` and :func:`parse_sink_options` turn
Spark's case-insensitive string map into frozen values, checking every cross-option rule
at once, so that a bad option fails on the driver before a task starts. An option that is
not declared is an error naming it (:class:`SparkOptionError`, a ``ValueError``).

As in Spark's Kafka source, ``kafka.``-prefixed options are the client's: ``kafka.bootstrap.
servers`` (or ``kafkasim.bootstrap.servers``) names the brokers, and every other ``kafka.KEY``
is checked against kafkasim's consumer keys (reads) or producer keys (writes) and passed on;
the keys Spark refuses (``auto.offset.reset``, the (de)serializers, ``enable.auto.commit``,
``interceptor.classes``) are refused with its reason.

Pure: no IO, no clock. Spark hands options over with lower-cased keys, so lookups here are
case-insensitive too; messages name options in their documented spelling.

Offsets JSON has Spark's Kafka layout, ``{"topic": {"0": 23, "1": -2}}``, with -2 meaning
earliest and -1 latest; ``assign`` is ``{"topic": [0, 1]}``.
"""

from __future__ import annotations

import difflib
import json
import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Final

from kafkasim.client.consumer_config import CONSUMER_CONFIG
from kafkasim.client.producer_config import PRODUCER_CONFIG
from kafkasim.common.errors import InvalidConfigError
from kafkasim.common.sentinels import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP
from kafkasim.common.types import TopicPartition

logger = logging.getLogger(__name__)

# Spark's option values "earliest"/"latest" are these ListOffsets sentinels.
EARLIEST: Final = EARLIEST_TIMESTAMP
LATEST: Final = LATEST_TIMESTAMP
BOOTSTRAP_SERVERS: Final = "kafkasim.bootstrap.servers"
# Spark's own spelling: ``kafka.``-prefixed options go to the client (Spark's Kafka source
# passes them to its KafkaConsumer/KafkaProducer); ``kafka.bootstrap.servers`` is the same
# option as ``kafkasim.bootstrap.servers``.
KAFKA_PREFIX: Final = "kafka."
KAFKA_BOOTSTRAP_SERVERS: Final = "kafka.bootstrap.servers"
READ_FORMAT: Final = "kafkasim.read.format"
EXACTLY_ONCE: Final = "kafkasim.sink.exactlyOnce"
TXN_ID_PREFIX: Final = "kafkasim.transactional.id.prefix"


class SparkOptionError(ValueError):
    """A data source option is unknown, missing, malformed or conflicts with another one."""


class Use(Enum):
    """Where an option means something."""

    BATCH = "batch read"
    STREAM = "streaming read"
    WRITE = "write"


_READS = frozenset({Use.BATCH, Use.STREAM})
_ALL = frozenset(Use)


@dataclass(frozen=True, slots=True)
class OptionDecl:
    name: str
    uses: frozenset[Use]
    doc: str


OPTIONS: tuple[OptionDecl, ...] = (
    OptionDecl(BOOTSTRAP_SERVERS, _ALL, "host:port[,host:port...] of brokers (required)."),
    OptionDecl("subscribe", _READS, "Comma-separated topics to read."),
    OptionDecl("subscribePattern", _READS, "A regular expression; every matching topic is read."),
    OptionDecl("assign", _READS, 'JSON of the partitions to read: {"topicA": [0, 1]}.'),
    OptionDecl(
        "startingOffsets",
        _READS,
        'earliest, latest (streaming only) or JSON {"t": {"0": 23, "1": -2}}; default '
        "earliest for batch, latest for streaming (used only by a new streaming query).",
    ),
    OptionDecl(
        "endingOffsets",
        frozenset({Use.BATCH}),
        'latest or JSON {"t": {"0": 50, "1": -1}} (-2 is not allowed); default latest.',
    ),
    OptionDecl(
        "startingTimestamp",
        _READS,
        "Milliseconds since the epoch: every partition starts at its first record with a "
        "timestamp at or after it (takes precedence over startingOffsets).",
    ),
    OptionDecl(
        "startingOffsetsByTimestamp",
        _READS,
        'JSON {"t": {"0": 1700000000000}}: a start timestamp per partition (takes precedence '
        "over startingOffsets, but not over startingTimestamp).",
    ),
    OptionDecl(
        "startingOffsetsByTimestampStrategy",
        _READS,
        "error (default): fail when a partition has no record at or after its start "
        "timestamp; latest: start such a partition at its latest offset.",
    ),
    OptionDecl(
        "maxOffsetsPerTrigger",
        frozenset({Use.STREAM}),
        "Most records per micro-batch, split over partitions in proportion to their backlog.",
    ),
    OptionDecl(
        "minPartitions",
        _READS,
        "Least number of Spark tasks: large offset ranges are split to reach it.",
    ),
    OptionDecl(
        "failOnDataLoss",
        _READS,
        "true (default): fail when records to read were deleted (retention, delete_records) "
        "or a partition vanished; false: log a warning and skip them.",
    ),
    OptionDecl("includeHeaders", _READS, "true: add the headers column (default false)."),
    OptionDecl(
        READ_FORMAT,
        _READS,
        "arrow (default): read tasks yield Arrow record batches; tuples: one Python tuple per "
        "record (the slow path, kept for comparison in bench/spark_bench.py).",
    ),
    OptionDecl(
        "topic",
        frozenset({Use.WRITE}),
        "The topic to write to; overrides a topic column.",
    ),
    OptionDecl(
        EXACTLY_ONCE,
        frozenset({Use.WRITE}),
        "true: streaming writes are exactly-once for read_committed consumers (each task's "
        "rows and the micro-batch id in one Kafka transaction); needs the 'topic' option. "
        "Default false: at-least-once.",
    ),
    OptionDecl(
        TXN_ID_PREFIX,
        frozenset({Use.WRITE}),
        "Exactly-once writes: the prefix of the tasks' transactional ids (default "
        "kafkasim-spark-<query id>); task p of a query uses <prefix>-p.",
    ),
    # Spark itself passes these to streaming sources and sinks; they mean nothing to us.
    OptionDecl("checkpointLocation", _ALL, "Spark's checkpoint directory (ignored here)."),
    OptionDecl("path", _ALL, "Spark's load()/save() argument: not supported, must be absent."),
)
_BY_KEY: Final = {decl.name.lower(): decl for decl in OPTIONS}


@dataclass(frozen=True, slots=True)
class Subscribe:
    topics: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class SubscribePattern:
    pattern: str


@dataclass(frozen=True, slots=True)
class Assign:
    partitions: tuple[TopicPartition, ...]


Subscription = Subscribe | SubscribePattern | Assign


@dataclass(frozen=True, slots=True)
class OffsetSpec:
    """Where reading starts or ends. ``default`` (EARLIEST or LATEST) holds for partitions
    that ``offsets`` does not name; ``offsets`` values may be EARLIEST or LATEST too."""

    default: int
    offsets: Mapping[TopicPartition, int]


@dataclass(frozen=True, slots=True)
class TimestampSpec:
    """Start at the first record at or after a timestamp: one for all partitions
    (``timestamp_ms``) or one per named partition (``per_partition``)."""

    timestamp_ms: int | None
    per_partition: Mapping[TopicPartition, int]
    strategy_latest: bool  # startingOffsetsByTimestampStrategy=latest


@dataclass(frozen=True, slots=True)
class ReadSettings:
    """What a read task needs besides its offset range (shipped inside each InputPartition).
    ``request_timeout_ms`` bounds one request, ``api_timeout_ms`` a lookup or a read with its
    retries (``kafka.request.timeout.ms``, ``kafka.default.api.timeout.ms``).
    ``read_committed`` (``kafka.isolation.level=read_committed``): offsets end at the last
    stable offset and aborted transactions' records are dropped."""

    bootstrap_servers: tuple[str, ...]
    include_headers: bool
    fail_on_data_loss: bool
    arrow: bool
    read_committed: bool = False
    request_timeout_ms: int = 30_000
    api_timeout_ms: int = 60_000


@dataclass(frozen=True, slots=True)
class SourceOptions:
    settings: ReadSettings
    subscription: Subscription
    starting: OffsetSpec | TimestampSpec
    ending: OffsetSpec
    max_offsets_per_trigger: int | None
    min_partitions: int | None

    @property
    def bootstrap_servers(self) -> tuple[str, ...]:
        return self.settings.bootstrap_servers


@dataclass(frozen=True, slots=True)
class SinkOptions:
    """``producer_config``: the ``kafka.*`` options without their prefix (checked against
    the producer's keys), applied over the sink's defaults."""

    bootstrap_servers: tuple[str, ...]
    topic: str | None
    producer_config: tuple[tuple[str, str], ...] = ()
    exactly_once: bool = False
    transactional_id_prefix: str | None = None


# -- parsing --------------------------------------------------------------------------------


def _lowered(options: Mapping[str, str]) -> dict[str, str]:
    return {k.lower(): v for k, v in options.items()}


def check_known(options: Mapping[str, str], use: Use) -> None:
    """Every option is declared and applies to ``use``; else the first offender is named.
    ``kafka.*`` options are the client's (checked by :func:`client_options`)."""
    for key in sorted(options):
        if key.lower().startswith(KAFKA_PREFIX):
            continue
        decl = _BY_KEY.get(key.lower())
        if decl is None:
            close = difflib.get_close_matches(key.lower(), _BY_KEY, n=1)
            hint = (
                f"did you mean '{_BY_KEY[close[0]].name}'?"
                if close
                else f"known: {', '.join(d.name for d in OPTIONS)}, and kafka.* client options"
            )
            raise SparkOptionError(f"Unknown option '{key}' for the kafkasim data source ({hint})")
        if use not in decl.uses:
            where = ", ".join(sorted(u.value for u in decl.uses))
            raise SparkOptionError(
                f"Option '{decl.name}' does not apply to a kafkasim {use.value} (only to {where})"
            )
    if options and "path" in _lowered(options):
        raise SparkOptionError(
            "The kafkasim data source takes no path: give topics with 'subscribe', "
            "'subscribePattern' or 'assign' (reads) or 'topic' (writes)"
        )


def parse_bootstrap(options: Mapping[str, str]) -> tuple[str, ...]:
    """``kafka.bootstrap.servers`` (Spark's spelling) or ``kafkasim.bootstrap.servers``."""
    lowered = _lowered(options)
    names = (KAFKA_BOOTSTRAP_SERVERS, BOOTSTRAP_SERVERS)
    given = {name: lowered[name] for name in names if name in lowered}
    if not given or not any(raw.strip() for raw in given.values()):
        raise SparkOptionError(
            f"Option '{KAFKA_BOOTSTRAP_SERVERS}' (or '{BOOTSTRAP_SERVERS}') must be specified "
            "for the kafkasim data source"
        )
    if len(given) == 2 and given[KAFKA_BOOTSTRAP_SERVERS] != given[BOOTSTRAP_SERVERS]:
        raise SparkOptionError(
            f"Options '{KAFKA_BOOTSTRAP_SERVERS}' and '{BOOTSTRAP_SERVERS}' are the same option "
            f"and differ ({given[KAFKA_BOOTSTRAP_SERVERS]!r}, {given[BOOTSTRAP_SERVERS]!r}): "
            "give one"
        )
    name, raw = next(iter(given.items()))
    servers = tuple(s.strip() for s in raw.split(",") if s.strip())
    bad = [s for s in servers if not s.rpartition(":")[2].isdigit() or not s.rpartition(":")[0]]
    if bad or not servers:
        raise SparkOptionError(f"Option '{name}' expects host:port[,host:port...], got {raw!r}")
    return servers


# Client options Spark's Kafka source and sink refuse, and why (its wording, shortened).
_REFUSED_READ: Final = {
    "auto.offset.reset": "set the source option 'startingOffsets' to 'earliest' or 'latest' "
    "instead: the query tracks its offsets itself",
    "key.deserializer": "keys are read as bytes; deserialize them with DataFrame operations",
    "value.deserializer": "values are read as bytes; deserialize them with DataFrame operations",
    "enable.auto.commit": "the query tracks its offsets itself (no consumer group commits)",
    "interceptor.classes": "interceptors could change the records",
}
_REFUSED_WRITE: Final = {
    "key.serializer": "keys are written as bytes; serialize them with DataFrame operations",
    "value.serializer": "values are written as bytes; serialize them with DataFrame operations",
    "interceptor.classes": "interceptors could change the records",
    "transactional.id": f"set '{EXACTLY_ONCE}' to true: each write task then gets a "
    f"transactional id of its own, from the query id (or '{TXN_ID_PREFIX}') and its partition",
}


def client_options(options: Mapping[str, str], use: Use) -> dict[str, str]:
    """The ``kafka.*`` options without their prefix (``bootstrap.servers`` left out), each
    checked against the consumer's keys (reads) or the producer's (writes): an unknown key
    or a bad value is a SparkOptionError naming the option as the user wrote it."""

    writing = use is Use.WRITE
    definition = PRODUCER_CONFIG if writing else CONSUMER_CONFIG
    refused = _REFUSED_WRITE if writing else _REFUSED_READ
    out: dict[str, str] = {}
    for option in sorted(options):
        if not option.lower().startswith(KAFKA_PREFIX):
            continue
        key = option[len(KAFKA_PREFIX) :].lower()
        if key == "bootstrap.servers":
            continue
        if key in refused:
            raise SparkOptionError(f"Kafka option '{key}' is not supported: {refused[key]}")
        declared = definition.keys.get(key)
        if declared is None:
            raise SparkOptionError(
                f"Unknown Kafka option '{option}': '{key}' is not a kafkasim "
                f"{'producer' if writing else 'consumer'} configuration key "
                "(docs/configuration.md lists them)"
            )
        try:
            declared.parse(options[option])
        except InvalidConfigError as e:
            raise SparkOptionError(f"Option '{option}': {e}") from None
        out[key] = options[option]
    return out


def _bool(options: Mapping[str, str], name: str, default: bool) -> bool:
    raw = options.get(name.lower())
    if raw is None:
        return default
    value = raw.strip().lower()
    if value not in ("true", "false"):
        raise SparkOptionError(f"Option '{name}' must be true or false, got {raw!r}")
    return value == "true"


def _positive_int(options: Mapping[str, str], name: str) -> int | None:
    raw = options.get(name.lower())
    if raw is None:
        return None
    try:
        value = int(raw.strip())
    except ValueError:
        raise SparkOptionError(f"Option '{name}' must be a positive integer, got {raw!r}") from None
    if value <= 0:
        raise SparkOptionError(f"Option '{name}' must be a positive integer, got {raw!r}")
    return value


def _json(name: str, raw: str) -> object:
    try:
        return json.loads(raw)
    except json.JSONDecodeError as e:
        raise SparkOptionError(f"Option '{name}' is not valid JSON ({e.msg}): {raw!r}") from None


def parse_partition_map(name: str, raw: str) -> dict[TopicPartition, int]:
    """``{"topic": {"0": 23}}`` as a map; SparkOptionError naming ``name`` when malformed."""
    parsed = _json(name, raw)
    example = '{"topicA": {"0": 23, "1": -1}}'
    if not isinstance(parsed, dict):
        raise SparkOptionError(f"Option '{name}' expects JSON like {example}, got {raw!r}")
    out: dict[TopicPartition, int] = {}
    for topic, parts in parsed.items():
        if not isinstance(parts, dict):
            raise SparkOptionError(f"Option '{name}' expects JSON like {example}, got {raw!r}")
        for partition, value in parts.items():
            if not (str(partition).isdigit() and isinstance(value, int)) or isinstance(value, bool):
                raise SparkOptionError(f"Option '{name}' expects JSON like {example}, got {raw!r}")
            out[TopicPartition(topic, int(partition))] = value
    return out


def _subscription(options: Mapping[str, str]) -> Subscription:
    given = [n for n in ("subscribe", "subscribePattern", "assign") if n.lower() in options]
    if len(given) != 1:
        which = "One" if not given else "Only one"
        verb = "must" if not given else "can"
        raise SparkOptionError(
            f"{which} of the following options {verb} be specified for the kafkasim source: "
            f"subscribe, subscribePattern, assign (got {', '.join(given) or 'none'})"
        )
    name = given[0]
    raw = options[name.lower()]
    if name == "subscribe":
        topics = tuple(dict.fromkeys(t.strip() for t in raw.split(",") if t.strip()))
        if not topics:
            raise SparkOptionError(f"No topics to subscribe to: option 'subscribe' is {raw!r}")
        return Subscribe(topics)
    if name == "subscribePattern":
        if not raw.strip():
            raise SparkOptionError(
                f"Pattern to subscribe is empty: option 'subscribePattern' is {raw!r}"
            )
        try:
            re.compile(raw)
        except re.error as e:
            raise SparkOptionError(
                f"Option 'subscribePattern' is not a valid regular expression ({e}): {raw!r}"
            ) from None
        return SubscribePattern(raw)
    parsed = _json("assign", raw)
    tps: list[TopicPartition] = []
    if isinstance(parsed, dict):
        for topic, parts in parsed.items():
            if not isinstance(parts, list) or not all(
                isinstance(p, int) and not isinstance(p, bool) and p >= 0 for p in parts
            ):
                parsed = None
                break
            tps.extend(TopicPartition(topic, p) for p in parts)
    if not isinstance(parsed, dict):
        raise SparkOptionError(
            f"Option 'assign' expects JSON like {{\"topicA\": [0, 1]}}, got {raw!r}"
        )
    if not tps:
        raise SparkOptionError(f"No topic partitions to assign: option 'assign' is {raw!r}")
    return Assign(tuple(dict.fromkeys(tps)))


def _offsets(options: Mapping[str, str], name: str, default: int, streaming: bool) -> OffsetSpec:
    raw = options.get(name.lower())
    if raw is None:
        return OffsetSpec(default, {})
    word = raw.strip().lower()
    if word == "earliest":
        spec = OffsetSpec(EARLIEST, {})
    elif word == "latest":
        spec = OffsetSpec(LATEST, {})
    else:
        offsets = parse_partition_map(name, raw)
        bad = {tp: o for tp, o in offsets.items() if o < EARLIEST}
        if bad:
            raise SparkOptionError(
                f"Option '{name}' has offsets below -2 (-2 is earliest, -1 latest): "
                f"{', '.join(f'{tp}={o}' for tp, o in sorted(bad.items()))}"
            )
        spec = OffsetSpec(default, offsets)
    ending = name == "endingOffsets"
    if ending and (spec.default == EARLIEST or EARLIEST in spec.offsets.values()):
        raise SparkOptionError(
            "Option 'endingOffsets' cannot be earliest (-2) for a kafkasim batch query"
        )
    if not ending and not streaming and (spec.default == LATEST or LATEST in spec.offsets.values()):
        raise SparkOptionError(
            "Option 'startingOffsets' cannot be latest (-1) for a kafkasim batch query"
        )
    return spec


def _starting_timestamp(options: Mapping[str, str]) -> TimestampSpec | None:
    strategy = options.get("startingoffsetsbytimestampstrategy", "error").strip().lower()
    if strategy not in ("error", "latest"):
        raise SparkOptionError(
            "Option 'startingOffsetsByTimestampStrategy' must be error or latest, "
            f"got {options['startingoffsetsbytimestampstrategy']!r}"
        )
    raw = options.get("startingtimestamp")
    if raw is not None:
        try:
            timestamp_ms = int(raw.strip())
        except ValueError:
            timestamp_ms = -1
        if timestamp_ms < 0:
            raise SparkOptionError(
                f"Option 'startingTimestamp' must be milliseconds since the epoch, got {raw!r}"
            )
        return TimestampSpec(timestamp_ms, {}, strategy == "latest")
    raw = options.get("startingoffsetsbytimestamp")
    if raw is not None:
        per_partition = parse_partition_map("startingOffsetsByTimestamp", raw)
        negative = [str(tp) for tp, ts in per_partition.items() if ts < 0]
        if negative:
            raise SparkOptionError(
                "Option 'startingOffsetsByTimestamp' has negative timestamps for "
                + ", ".join(sorted(negative))
            )
        return TimestampSpec(None, per_partition, strategy == "latest")
    return None


def parse_source_options(options: Mapping[str, str], *, streaming: bool) -> SourceOptions:
    """The options of a read, checked as Spark's Kafka source checks its own."""
    check_known(options, Use.STREAM if streaming else Use.BATCH)
    opts = _lowered(options)
    read_format = opts.get(READ_FORMAT, "arrow").strip().lower()
    if read_format not in ("arrow", "tuples"):
        raise SparkOptionError(
            f"Option '{READ_FORMAT}' must be arrow or tuples, got {opts[READ_FORMAT]!r}"
        )
    client = client_options(options, Use.STREAM if streaming else Use.BATCH)
    if "group.id" in client:
        logger.warning(
            "Kafka option 'group.id' is ignored: the kafkasim source reads without a consumer "
            "group (a query tracks its offsets in its checkpoint)"
        )
    settings = ReadSettings(
        bootstrap_servers=parse_bootstrap(opts),
        include_headers=_bool(opts, "includeHeaders", False),
        fail_on_data_loss=_bool(opts, "failOnDataLoss", True),
        arrow=read_format == "arrow",
        read_committed=client.get("isolation.level", "").strip() == "read_committed",
        request_timeout_ms=int(client.get("request.timeout.ms", 30_000)),
        api_timeout_ms=int(client.get("default.api.timeout.ms", 60_000)),
    )
    subscription = _subscription(opts)
    starting: OffsetSpec | TimestampSpec = _starting_timestamp(opts) or _offsets(
        opts, "startingOffsets", LATEST if streaming else EARLIEST, streaming
    )
    return SourceOptions(
        settings=settings,
        subscription=subscription,
        starting=starting,
        ending=_offsets(opts, "endingOffsets", LATEST, streaming),
        max_offsets_per_trigger=_positive_int(opts, "maxOffsetsPerTrigger"),
        min_partitions=_positive_int(opts, "minPartitions"),
    )


def parse_sink_options(options: Mapping[str, str]) -> SinkOptions:
    check_known(options, Use.WRITE)
    opts = _lowered(options)
    topic = opts.get("topic")
    if topic is not None and not topic.strip():
        raise SparkOptionError("Option 'topic' must not be empty")
    servers = parse_bootstrap(opts)
    producer = client_options(options, Use.WRITE)
    check_producer_config(sink_producer_config(servers, producer))
    exactly_once = _bool(opts, EXACTLY_ONCE, False)
    prefix = opts.get(TXN_ID_PREFIX.lower())
    if prefix is not None and not prefix.strip():
        raise SparkOptionError(f"Option '{TXN_ID_PREFIX}' must not be empty")
    if exactly_once and topic is None:
        raise SparkOptionError(
            f"Option '{EXACTLY_ONCE}' needs the 'topic' option: each task records its last "
            "written micro-batch as a transactional offset of that topic's partition 0"
        )
    if exactly_once:  # the tasks' producers are transactional: e.g. idempotence is a must
        check_producer_config(
            {**sink_producer_config(servers, producer), "transactional.id": "driver-check"}
        )
    return SinkOptions(
        bootstrap_servers=servers,
        topic=topic,
        producer_config=tuple(sorted(producer.items())),
        exactly_once=exactly_once,
        transactional_id_prefix=prefix,
    )


# The sink's producer: Kafka's defaults (acks=all, idempotent), batched a little.
SINK_PRODUCER_DEFAULTS: Final[Mapping[str, object]] = {"acks": "all", "linger.ms": 5}


def sink_producer_config(
    servers: tuple[str, ...], overrides: Mapping[str, str]
) -> dict[str, object]:
    """The write tasks' producer config: the sink's defaults, then the ``kafka.*`` options."""
    return {**SINK_PRODUCER_DEFAULTS, **overrides, "bootstrap.servers": ",".join(servers)}


def check_producer_config(config: Mapping[str, object]) -> None:
    """The producer's cross-key rules on the driver, so a conflict fails before any task."""

    try:
        PRODUCER_CONFIG.parse(config)
    except InvalidConfigError as e:
        raise SparkOptionError(f"The kafka.* producer options conflict: {e}") from None


# -- offsets JSON (Spark's checkpoint layout) -------------------------------------------------

OffsetJson = dict[str, dict[str, int]]


def offsets_to_json(offsets: Mapping[TopicPartition, int]) -> OffsetJson:
    """``{"topic": {"0": 12}}``: string partition keys, as Spark stores them in checkpoints."""
    out: OffsetJson = {}
    for tp in sorted(offsets):
        out.setdefault(tp.topic, {})[str(tp.partition)] = offsets[tp]
    return out


def offsets_from_json(data: Mapping[str, Mapping[str, int]]) -> dict[TopicPartition, int]:
    return {
        TopicPartition(topic, int(p)): int(o)
        for topic, parts in data.items()
        for p, o in parts.items()
    }
