"""Topic config changes, written to ZooKeeper by whichever broker receives the request, as
ZooKeeper-mode Kafka's ``ZkAdminManager`` does (``incrementalAlterConfigs`` and
``alterConfigs`` for a topic → ``AdminZkClient.changeTopicConfig``). Kafka's Java AdminClient
sends AlterConfigs and IncrementalAlterConfigs to any broker (the least loaded one), so every
broker must serve them, not only the controller; librdkafka sends them to the controller,
which serves them the same way.

Why the broker writes ZooKeeper itself rather than forwarding to the active controller over
the inter-broker transport: it is what Kafka does; the change needs nothing the controller
holds (no context, no controller epoch: Kafka's write is not fenced by it either); every broker
has a ZooKeeper session already; and a forward would add a hop and a failure mode (the
controller moving mid-request) for nothing. The controller plays no part in config changes:
the brokers' ``/config/changes`` listener (``node.config_changes``) applies them.

Per topic, in order (wire-free: a ``Coordination`` in, results out; both front doors call
:func:`alter_topic_configs` through ``node.admin_calls.alter_configs``):

1. the topic must exist (``/brokers/topics/<t>``), else UNKNOWN_TOPIC_OR_PARTITION (Kafka's
   ``AdminZkClient.validateTopicConfig``);
2. the overrides ``/config/topics/<t>`` are read with their znode version and the operations
   applied to them (:func:`controller.topic_configs.apply_incremental_ops`, Kafka's
   ``prepareIncrementalConfigs`` and ``LogConfig.validate``): a bad key or value is
   INVALID_CONFIG (a misused operation INVALID_REQUEST) naming it, and nothing is written;
3. unless ``validate_only``, one multi writes the overrides, conditional on the version read
   (created when absent), with a sequential ``/config/changes/config_change_`` notification
   ``{"version":2,"entity_path":"topics/<t>"}``. A concurrent change of the same topic (from
   another broker) fails the condition: the overrides are re-read and the operations applied
   again, so neither change is lost. Kafka writes the overrides unconditionally (of two
   concurrent read-modify-writes, one can be lost) and the notification separately; here both
   are one atomic, version-checked write;
4. after a successful write, the notifications beyond the newest
   :data:`CONFIG_CHANGES_RETAINED` are deleted (a broker that finds the last one it handled
   purged reloads every topic config it holds). Kafka's listener purges by age instead.

A lost ZooKeeper connection is retried (bounded backoff); when it stays lost, the topic's
answer is UNKNOWN_SERVER_ERROR naming ZooKeeper, which is what Kafka answers when its
ZooKeeper client times out waiting for a connection.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Sequence

from kafkasim.common.coordination import (
    BadVersionError,
    Coordination,
    CoordinationError,
    CreateOp,
    NodeExistsError,
    NoNodeError,
    Op,
    SetOp,
)
from kafkasim.common.errors import KafkaError, error_for_name
from kafkasim.controller import zk_data
from kafkasim.controller.api import (
    InvalidRequestError,
    TopicConfigAlteration,
    TopicResult,
    UnknownTopicOrPartitionError,
)
from kafkasim.controller.partition_state_machine import STATE_WRITE_ATTEMPTS_MAX
from kafkasim.controller.topic_admin import error_result
from kafkasim.controller.topic_configs import AlterConfigOp, apply_incremental_ops
from kafkasim.controller.zk_access import RetryingCoordination

logger = logging.getLogger(__name__)

UnknownServerError = error_for_name("UNKNOWN_SERVER_ERROR")

CONFIG_CHANGES_RETAINED = 100  # newest /config/changes notifications kept (brokers' catch-up)
ZK_ATTEMPTS_MAX = 10  # attempts of one ZooKeeper operation on connection loss
ZK_BACKOFF_MAX_S = 2.0


async def alter_topic_configs(
    zk: Coordination, alterations: Sequence[TopicConfigAlteration], *, validate_only: bool
) -> list[TopicResult]:
    """One result per topic, in order (see the module's steps)."""
    retrying = RetryingCoordination(zk, ZK_ATTEMPTS_MAX, ZK_BACKOFF_MAX_S)
    results: list[TopicResult] = []
    for alteration in alterations:
        topic = alteration.topic
        try:
            if await retrying.exists(zk_data.topic_path(topic)) is None:
                raise UnknownTopicOrPartitionError(f"Topic '{topic}' does not exist.")
            await _alter_topic_config(retrying, topic, alteration.ops, validate_only)
        except KafkaError as e:
            results.append(error_result(topic, e))
            continue
        except CoordinationError as e:
            logger.error("config change of topic %s failed: ZooKeeper: %r", topic, e)
            results.append(error_result(topic, UnknownServerError(f"ZooKeeper: {e!r}")))
            continue
        results.append(TopicResult(topic))
    if not validate_only and any(r.ok for r in results):
        with contextlib.suppress(CoordinationError):  # the next change purges them
            await purge_config_changes(retrying)
    return results


async def _alter_topic_config(
    zk: RetryingCoordination, topic: str, ops: Sequence[AlterConfigOp], validate_only: bool
) -> None:
    await write_entity_config(
        zk,
        zk_data.topic_config_path(topic),
        zk_data.topic_entity_path(topic),
        lambda current: apply_incremental_ops(current, ops),
        validate_only=validate_only,
    )


async def write_entity_config(
    zk: Coordination | RetryingCoordination,
    path: str,
    entity_path: str,
    apply: Callable[[dict[str, str]], dict[str, str]],
    *,
    validate_only: bool,
) -> None:
    """Read an entity's configs at ``path`` (a topic's or a broker's), ``apply`` the change
    (it raises the error of a refused one), write the result conditionally with the
    ``entity_path`` notification; re-read and re-apply after a concurrent write."""
    for _ in range(STATE_WRITE_ATTEMPTS_MAX):
        try:
            data, stat = await zk.get(path)
            current, version = zk_data.decode_topic_config(data), stat.version
        except NoNodeError:
            current, version = {}, None
        updated = apply(current)
        if validate_only:
            return
        encoded = zk_data.encode_topic_config(updated)
        write: Op = CreateOp(path, encoded) if version is None else SetOp(path, encoded, version)
        notification = CreateOp(
            f"{zk_data.CONFIG_CHANGES}/{zk_data.CONFIG_CHANGE_PREFIX}",
            zk_data.encode_config_change(entity_path),
            sequence=True,
        )
        try:
            await zk.multi([write, notification])
        except (BadVersionError, NodeExistsError, NoNodeError):
            continue  # written meanwhile: apply the operations to what is there now
        logger.info("%s: config %s -> %s", entity_path, current, updated)
        return
    raise InvalidRequestError(f"The config of {entity_path} changed concurrently; retry.")


async def purge_config_changes(zk: RetryingCoordination) -> None:
    """Delete all but the newest :data:`CONFIG_CHANGES_RETAINED` notifications (one gone
    already, purged by another broker meanwhile, is skipped)."""
    children = await zk.get_children(zk_data.CONFIG_CHANGES)
    changes = sorted(
        (seq, child) for child in children if (seq := zk_data.config_change_sequence(child)) >= 0
    )
    for _, child in changes[:-CONFIG_CHANGES_RETAINED]:
        with contextlib.suppress(NoNodeError):
            await zk.delete(f"{zk_data.CONFIG_CHANGES}/{child}")
