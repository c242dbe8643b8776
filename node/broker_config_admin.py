"""Dynamic broker configs, as ZooKeeper-mode Kafka keeps them: ``/config/brokers/<id>`` for
one broker, ``/config/brokers/<default>`` for every broker, each ``{"version":1,"config":{}}``;
a change writes the znode and a ``/config/changes`` notification
``{"version":2,"entity_path":"brokers/<id>"}`` (or ``brokers/<default>``) in one multi, as a
topic change does (``node.topic_config_admin``), and every broker's listener
(``node.config_changes``) puts the new values in force.

Precedence is Kafka's: a broker's own dynamic value, then the cluster default, then
``server.properties``, then the key's default.

What can change: :data:`DYNAMIC_BROKER_KEYS`, the broker keys that give topics their defaults
(``log.retention.ms``, ``log.segment.bytes``, ``log.cleanup.policy``, ``min.insync.replicas``,
``message.max.bytes``, ``compression.type`` …: Kafka's ``DynamicLogConfig``). They apply
live, to every log of every topic that does not override the key, from its next append,
roll or retention pass. Any other key is refused with Kafka's INVALID_REQUEST "Cannot update
these configs dynamically" (Kafka allows a few more dynamically — thread pools, listeners,
``unclean.leader.election.enable`` — which kafkasim reads once at start, so they are refused
rather than stored and ignored). A bad value is INVALID_CONFIG naming it, checked with the
receiving broker's ``server.properties``; nothing is written then. APPEND and SUBTRACT are
refused (INVALID_REQUEST); SET and DELETE are Kafka's operations on broker configs.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from kafkasim.common.coordination import Coordination, CoordinationError, NoNodeError
from kafkasim.common.errors import KafkaError, error_for_name
from kafkasim.controller import zk_data
from kafkasim.controller.topic_configs import AlterConfigOp, OpType
from kafkasim.controller.zk_access import RetryingCoordination
from kafkasim.node.config import BrokerConfig
from kafkasim.node.topic_config_admin import (
    ZK_ATTEMPTS_MAX,
    ZK_BACKOFF_MAX_S,
    UnknownServerError,
    write_entity_config,
)
from kafkasim.storage.config import BROKER_LOG_KEYS

logger = logging.getLogger(__name__)

InvalidRequestError = error_for_name("INVALID_REQUEST")

# Broker keys that default a topic key (Kafka's DynamicLogConfig.ReconfigurableConfigs), but
# not the flush scheduler's interval (not a topic synonym in Kafka) nor
# unclean.leader.election.enable (the controller reads it once at start here).
DYNAMIC_BROKER_KEYS = frozenset(
    key.name
    for key, topic_key in BROKER_LOG_KEYS
    if topic_key is not None
    and key.name not in ("log.flush.scheduler.interval.ms", "unclean.leader.election.enable")
)


def broker_entity(resource_name: str) -> str:
    """``<default>`` for the empty name (the cluster default), else the broker id;
    INVALID_REQUEST when it is neither."""
    if resource_name == "":
        return zk_data.BROKER_DEFAULT_ENTITY
    if not resource_name.isdigit():
        raise InvalidRequestError(f"Broker id must be an integer, but it is: {resource_name}")
    return str(int(resource_name))


def apply_broker_ops(
    config: BrokerConfig, current: dict[str, str], ops: Sequence[AlterConfigOp]
) -> dict[str, str]:
    """``current`` (a znode's configs) after ``ops``, checked: INVALID_REQUEST for a key that
    cannot change dynamically or an operation other than SET/DELETE, INVALID_CONFIG for a bad
    value (with this broker's static config)."""
    refused = sorted({op.name for op in ops if op.name not in DYNAMIC_BROKER_KEYS})
    if refused:
        raise InvalidRequestError(f"Cannot update these configs dynamically: {', '.join(refused)}")
    updated = dict(current)
    for op in ops:
        if op.op == OpType.SET:
            updated[op.name] = op.value
        elif op.op == OpType.DELETE:
            updated.pop(op.name, None)
        else:
            raise InvalidRequestError(
                f"Operation {op.op} on {op.name}: broker configs take SET (0) and DELETE (1)"
            )
    config.with_dynamic(updated)  # raises INVALID_CONFIG naming the key
    return updated


async def alter_broker_config(
    zk: Coordination,
    config: BrokerConfig,
    resource_name: str,
    ops: Sequence[AlterConfigOp],
    *,
    validate_only: bool,
) -> KafkaError | None:
    """One broker resource of IncrementalAlterConfigs: None when done, else its error."""
    try:
        entity = broker_entity(resource_name)
        await write_entity_config(
            RetryingCoordination(zk, ZK_ATTEMPTS_MAX, ZK_BACKOFF_MAX_S),
            zk_data.broker_config_path(entity),
            zk_data.broker_entity_path(entity),
            lambda current: apply_broker_ops(config, current, ops),
            validate_only=validate_only,
        )
    except KafkaError as e:
        return e
    except CoordinationError as e:
        logger.error("config change of broker %r failed: ZooKeeper: %r", resource_name, e)
        return UnknownServerError(f"ZooKeeper: {e!r}")
    return None


async def read_dynamic(zk: Coordination, entity: str) -> dict[str, str]:
    """The dynamic configs of ``entity`` (a broker id or ``<default>``); {} when none."""
    try:
        data, _ = await zk.get(zk_data.broker_config_path(entity))
    except NoNodeError:
        return {}
    return zk_data.decode_topic_config(data)


async def load_dynamic_config(zk: Coordination, config: BrokerConfig) -> bool:
    """Read ``<default>`` and this broker's own dynamic configs and put them in force (a
    value that no longer parses keeps the previous set, logged). True when they changed."""
    stored_default = await read_dynamic(zk, zk_data.BROKER_DEFAULT_ENTITY)
    stored_own = await read_dynamic(zk, str(config.broker_id))
    cluster_default = {k: v for k, v in stored_default.items() if k in DYNAMIC_BROKER_KEYS}
    own = {k: v for k, v in stored_own.items() if k in DYNAMIC_BROKER_KEYS}
    if (cluster_default, own) == (config.dynamic.cluster_default, config.dynamic.own):
        return False
    merged = {**cluster_default, **own}
    try:
        config.with_dynamic(merged)
    except (KafkaError, ValueError) as e:
        logger.error("broker %d: keeping the dynamic configs: %s", config.broker_id, e)
        return False
    config.apply_dynamic(cluster_default, own)
    logger.info("broker %d: dynamic broker configs in force: %s", config.broker_id, merged)
    return True
