"""The producer's settings: one declaration per Kafka key (name, type, default, doc, valid
range), the cross-field rules Kafka 3.x applies at load, and :class:`ProducerConfig`, the
parsed and frozen result the other producer modules read.

Unknown keys, values out of range and conflicting settings raise ``InvalidConfigError``
naming the key, when the producer is created (never later).
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from kafkasim.client.partitioner import PARTITIONERS
from kafkasim.client.serde import SERDE_NAMES
from kafkasim.common.config import Config, ConfigDef, ConfigKey, ConfigType
from kafkasim.common.errors import InvalidConfigError
from kafkasim.common.sentinels import INT32_MAX
from kafkasim.common.tls import CLIENT_SECURITY_KEYS
from kafkasim.storage.records.compression import CompressionType

__all__ = [
    "MAX_IN_FLIGHT_FOR_IDEMPOTENCE",
    "NEVER_MS",
    "PRODUCER_CONFIG",
    "PRODUCER_KEYS",
    "ProducerConfig",
]

# The idempotent producer's limit: the broker remembers the last 5 batches of each producer
# and partition, so at most 5 may be unanswered for a retry to be recognised as a duplicate.
MAX_IN_FLIGHT_FOR_IDEMPOTENCE: Final = 5
NEVER_MS: Final = 2**62  # "no timer" in the producer's ms computations (linger, backoff, ...)

_client_ids = itertools.count(1)

_I, _L, _B, _S, _LST = (
    ConfigType.INT,
    ConfigType.LONG,
    ConfigType.BOOLEAN,
    ConfigType.STRING,
    ConfigType.LIST,
)

PRODUCER_KEYS: tuple[ConfigKey, ...] = (
    ConfigKey("bootstrap.servers", _LST, None, "host:port of brokers to ask for metadata."),
    ConfigKey("client.id", _S, "", "A name for logs; default producer-N."),
    ConfigKey(
        "acks",
        _S,
        "all",
        "Acknowledgements the leader waits for: 0 (none), 1 (its own log), all/-1 (the ISR).",
        choices=("all", "-1", "0", "1"),
    ),
    ConfigKey(
        "enable.idempotence",
        _B,
        True,
        "Producer id + sequence numbers: retries are never appended twice. Needs acks=all, "
        "retries > 0, max.in.flight.requests.per.connection <= 5; left at its default it is "
        "turned off (not an error) when those are set otherwise, as in Kafka 3.x.",
    ),
    ConfigKey("batch.size", _I, 16_384, "Largest batch per partition, in bytes.", low=0),
    ConfigKey(
        "linger.ms",
        _L,
        0,
        "How long a batch waits for more records before it is sendable. 0 (Kafka 3.x's "
        "default; 4.0 made it 5) still batches whatever arrives while a request is in flight.",
        low=0,
    ),
    ConfigKey(
        "compression.type",
        _S,
        "none",
        "Codec of the batches.",
        choices=tuple(c.kafka_name for c in CompressionType),
    ),
    ConfigKey(
        "max.in.flight.requests.per.connection",
        _I,
        5,
        "Unanswered requests per broker; 1 keeps order on retries without idempotence.",
        low=1,
    ),
    ConfigKey("retries", _I, INT32_MAX, "Retries of a failed batch (within the timeout).", low=0),
    ConfigKey("retry.backoff.ms", _L, 100, "Wait before a batch is retried.", low=0),
    ConfigKey(
        "delivery.timeout.ms",
        _I,
        120_000,
        "Upper bound from send() to success or failure, retries included; at least "
        "linger.ms + request.timeout.ms.",
        low=0,
    ),
    ConfigKey("request.timeout.ms", _I, 30_000, "How long to wait for an answer.", low=0),
    ConfigKey("max.request.size", _I, 1_048_576, "Largest request (and record).", low=0),
    ConfigKey(
        "max.block.ms", _L, 60_000, "How long a record waits for its topic's metadata.", low=0
    ),
    ConfigKey("metadata.max.age.ms", _L, 300_000, "Refresh metadata at least this often.", low=0),
    ConfigKey(
        "partitioner",
        _S,
        "murmur2",
        "murmur2: keys by Kafka's murmur2, keyless records sticky (KIP-480); "
        "uniform_sticky: every record sticky. A callable can be passed to Producer instead.",
        choices=tuple(PARTITIONERS),
    ),
    ConfigKey(
        "transactional.id",
        _S,
        None,
        "The id that makes the producer transactional: transactions of earlier producers with "
        "the same id are finished (and those producers fenced) before this one starts any. "
        "Needs enable.idempotence; unset, the producer is idempotent at most.",
    ),
    ConfigKey(
        "transaction.timeout.ms",
        _I,
        60_000,
        "How long the coordinator lets a transaction stay open before aborting it; above the "
        "broker's transaction.max.timeout.ms, InitProducerId fails with "
        "INVALID_TRANSACTION_TIMEOUT.",
    ),
    *(
        ConfigKey(
            f"{part}.serializer",
            _S,
            "bytes",
            f"How send() turns the record's {part} into bytes: bytes (as given), str (UTF-8) or "
            "json; or a callable returning bytes (client.serde). None stays None.",
            choices=SERDE_NAMES,
        )
        for part in ("key", "value")
    ),
)


def _check_required(config: Config) -> None:
    if not config["bootstrap.servers"]:
        raise InvalidConfigError(
            'Missing required configuration "bootstrap.servers" which has no default value.'
        )


def _check_idempotence(config: Config) -> None:
    """Kafka 3.x's rules: an explicit enable.idempotence=true must not conflict (the default
    true is dropped silently instead, see :func:`_idempotence_enabled`)."""
    if not (config["enable.idempotence"] and config.is_set("enable.idempotence")):
        return
    if config["retries"] == 0:
        raise InvalidConfigError("Must set retries to non-zero when using the idempotent producer.")
    if config["acks"] not in ("all", "-1"):
        raise InvalidConfigError(
            "Must set acks to all in order to use the idempotent producer. "
            "Otherwise we cannot guarantee idempotence."
        )
    if config["max.in.flight.requests.per.connection"] > MAX_IN_FLIGHT_FOR_IDEMPOTENCE:
        raise InvalidConfigError(
            "Must set max.in.flight.requests.per.connection to at most 5 to use the "
            "idempotent producer."
        )


def _check_transactional_id(config: Config) -> None:
    """Kafka's NonEmptyString validator, then its rule that a transactional id needs the
    idempotent producer: checked after idempotence may have been turned off by acks, retries
    or max.in.flight (ProducerConfig.postProcessAndValidateIdempotenceConfigs)."""
    if not config.is_set("transactional.id"):
        return
    if config["transactional.id"] == "":
        raise InvalidConfigError(
            "Invalid value  for configuration transactional.id: String must be non-empty"
        )
    if not _idempotence_enabled(config):
        raise InvalidConfigError("Cannot set a transactional.id without also enabling idempotence.")


def _check_delivery_timeout(config: Config) -> None:
    if not config.is_set("delivery.timeout.ms"):
        return  # the default is raised to the minimum instead (as Kafka does)
    minimum = config["linger.ms"] + config["request.timeout.ms"]
    if config["delivery.timeout.ms"] < minimum:
        raise InvalidConfigError(
            "delivery.timeout.ms should be equal to or larger than linger.ms + "
            f"request.timeout.ms ({config['delivery.timeout.ms']} < {minimum})"
        )


PRODUCER_CONFIG = ConfigDef(
    (*PRODUCER_KEYS, *CLIENT_SECURITY_KEYS),
    rules=(_check_required, _check_idempotence, _check_transactional_id, _check_delivery_timeout),
    kind="producer configuration",
)
"""The producer's keys, one declaration each; unknown keys are an error naming them."""


def _idempotence_enabled(config: Config) -> bool:
    if not config["enable.idempotence"]:
        return False
    return (
        config["retries"] > 0
        and config["acks"] in ("all", "-1")
        and config["max.in.flight.requests.per.connection"] <= MAX_IN_FLIGHT_FOR_IDEMPOTENCE
    )


@dataclass(frozen=True, slots=True)
class ProducerConfig:
    """The parsed settings, cross-field rules applied (see :data:`PRODUCER_CONFIG`)."""

    bootstrap_servers: tuple[str, ...]
    client_id: str
    acks: int
    idempotence: bool
    batch_size: int
    linger_ms: int
    compression: CompressionType
    max_in_flight: int
    retries: int
    retry_backoff_ms: int
    delivery_timeout_ms: int
    request_timeout_ms: int
    max_request_size: int
    max_block_ms: int
    metadata_max_age_ms: int
    partitioner: str
    transactional_id: str | None
    transaction_timeout_ms: int

    @classmethod
    def from_props(cls, props: Mapping[str, object]) -> ProducerConfig:
        raw = dict(props)
        acks = raw.get("acks")
        if isinstance(acks, int) and not isinstance(acks, bool):
            raw["acks"] = str(acks)  # acks=1 as a number is what users write
        config = PRODUCER_CONFIG.parse(raw)
        linger_ms = int(config["linger.ms"])
        request_timeout_ms = int(config["request.timeout.ms"])
        delivery_timeout_ms = int(config["delivery.timeout.ms"])
        # Only a default can be below the minimum here (_check_delivery_timeout): raise it.
        delivery_timeout_ms = max(delivery_timeout_ms, linger_ms + request_timeout_ms)
        transactional_id: str | None = config["transactional.id"]
        # Kafka names an unnamed transactional producer after its transactional id.
        default_client_id = (
            f"producer-{transactional_id}" if transactional_id else f"producer-{next(_client_ids)}"
        )
        return cls(
            bootstrap_servers=tuple(config["bootstrap.servers"]),
            client_id=config["client.id"] or default_client_id,
            acks=-1 if config["acks"] == "all" else int(config["acks"]),
            idempotence=_idempotence_enabled(config),
            batch_size=int(config["batch.size"]),
            linger_ms=linger_ms,
            compression=CompressionType.from_name(config["compression.type"]),
            max_in_flight=int(config["max.in.flight.requests.per.connection"]),
            retries=int(config["retries"]),
            retry_backoff_ms=int(config["retry.backoff.ms"]),
            delivery_timeout_ms=delivery_timeout_ms,
            request_timeout_ms=request_timeout_ms,
            max_request_size=int(config["max.request.size"]),
            max_block_ms=int(config["max.block.ms"]),
            metadata_max_age_ms=int(config["metadata.max.age.ms"]),
            partitioner=config["partitioner"],
            transactional_id=transactional_id,
            transaction_timeout_ms=int(config["transaction.timeout.ms"]),
        )
