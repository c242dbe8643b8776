"""The topic admin calls (Kafka's ``ZkAdminManager`` work, done by the controller here):
CreateTopics, DeleteTopics and CreatePartitions. Topic config changes are not here: any
broker writes them itself, as Kafka's brokers do (``node.topic_config_admin``).

Each call is one event: validated in Kafka's order against the context and ZooKeeper, then
written in one fenced multi (config and assignment of a new topic; the grown assignment; the
deletion request znode). The rest follows from the watches (:mod:`controller.cluster_changes`,
:mod:`controller.topic_deletion`); a ``timeout_ms`` makes the call wait until it has.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import Callable, Sequence

from kafkasim.common.coordination import (
    BadVersionError,
    CreateOp,
    NodeExistsError,
    NoNodeError,
    Op,
    SetOp,
)
from kafkasim.common.errors import KafkaError, error_for_name
from kafkasim.common.types import validate_topic_name
from kafkasim.controller import zk_data
from kafkasim.controller.api import (
    InvalidPartitionsError,
    InvalidRequestError,
    InvalidTopicError,
    NewPartitions,
    NewTopic,
    RequestTimedOutError,
    TopicAlreadyExistsError,
    TopicResult,
    UnknownTopicOrPartitionError,
)
from kafkasim.controller.assignment import (
    add_partitions,
    assign_new_topic,
    validate_manual_assignment,
)
from kafkasim.controller.term import Term
from kafkasim.storage.config import LOG_CONFIG_DEF

TopicDeletionDisabledError = error_for_name("TOPIC_DELETION_DISABLED")


class TopicAdmin:
    """Create, delete and grow topics (one term's; each call is one event)."""

    def __init__(self, term: Term, rng: random.Random) -> None:
        self._term = term
        self._ctx = term.ctx
        self._zk = term.zk
        self._log = term.log
        self._config = term.config
        self._rng = rng

    # -- create topics and partitions ---------------------------------------------------------

    async def create_topics(
        self, topics: Sequence[NewTopic], validate_only: bool
    ) -> list[TopicResult]:
        ctx = self._ctx
        broker_ids = sorted(ctx.live_brokers)
        names = [t.name for t in topics]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        results: list[TopicResult] = []
        for topic in topics:
            if topic.name in duplicates:
                results.append(
                    error_result(
                        topic.name,
                        InvalidRequestError(
                            "Create topics request contains multiple entries for the following "
                            f"topics: {', '.join(duplicates)}"
                        ),
                    )
                )
                continue
            try:
                assignment = await self._validate_new_topic(topic, broker_ids)
                if not validate_only:
                    await self._write_new_topic(topic, assignment)
            except KafkaError as e:
                results.append(error_result(topic.name, e))
                continue
            results.append(TopicResult(topic.name))
        return results

    async def _validate_new_topic(
        self, topic: NewTopic, broker_ids: Sequence[int]
    ) -> dict[int, list[int]]:
        """Kafka's ``createTopics`` checks, in Kafka's order; the assignment to write."""
        ctx = self._ctx
        validate_topic_name(topic.name)
        if (
            topic.name in ctx.assignments
            or await self._zk.zk.exists(zk_data.topic_path(topic.name)) is not None
        ):
            raise TopicAlreadyExistsError(f"Topic '{topic.name}' already exists.")
        collisions = sorted(
            t for t in ctx.assignments if t != topic.name and _topics_collide(t, topic.name)
        )
        if collisions:
            raise InvalidTopicError(
                f"Topic '{topic.name}' collides with existing topics: {', '.join(collisions)}"
            )
        if topic.assignments and (topic.num_partitions != -1 or topic.replication_factor != -1):
            raise InvalidRequestError(
                "Both numPartitions or replicationFactor and replicasAssignments were set. "
                "Both cannot be used at the same time."
            )
        if topic.assignments:
            validate_manual_assignment(topic.assignments, broker_ids)
            assignment = {p: list(r) for p, r in sorted(topic.assignments.items())}
        else:
            n = self._config.num_partitions if topic.num_partitions == -1 else topic.num_partitions
            rf = (
                self._config.default_replication_factor
                if topic.replication_factor == -1
                else topic.replication_factor
            )
            assignment = assign_new_topic(broker_ids, n, rf, self._rng)
        LOG_CONFIG_DEF.parse(dict(topic.configs))
        return assignment

    async def _write_new_topic(self, topic: NewTopic, assignment: dict[int, list[int]]) -> None:
        """Config, then assignment, in one fenced multi (Kafka writes them one after the
        other; together, a failure leaves neither)."""
        config_path = zk_data.topic_config_path(topic.name)
        config_data = zk_data.encode_topic_config(dict(topic.configs))
        config_op: Op = (
            SetOp(config_path, config_data)
            if await self._zk.zk.exists(config_path) is not None
            else CreateOp(config_path, config_data)
        )
        try:
            await self._zk.fenced(
                [
                    config_op,
                    CreateOp(
                        zk_data.topic_path(topic.name), zk_data.encode_topic_assignment(assignment)
                    ),
                ]
            )
        except NodeExistsError:
            raise TopicAlreadyExistsError(f"Topic '{topic.name}' already exists.") from None
        self._log.info(
            "creating topic %s with configuration %s and initial partition assignment %s",
            topic.name,
            dict(topic.configs),
            assignment,
        )

    async def create_partitions(
        self, requests: Sequence[NewPartitions], validate_only: bool
    ) -> list[TopicResult]:
        ctx = self._ctx
        names = [r.topic for r in requests]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        results: list[TopicResult] = []
        for ask in requests:
            try:
                if ask.topic in duplicates:
                    raise InvalidRequestError("Duplicate topic in request.")
                if ask.topic not in ctx.assignments:
                    raise UnknownTopicOrPartitionError(f"The topic '{ask.topic}' does not exist.")
                if ctx.is_being_deleted(ask.topic):
                    raise InvalidTopicError("The topic is queued for deletion.")
                current = len(ctx.assignments[ask.topic])
                if ask.count < current:
                    raise InvalidPartitionsError(
                        f"Topic currently has {current} partitions, which is higher than the "
                        f"requested {ask.count}."
                    )
                if ask.count == current:
                    raise InvalidPartitionsError(f"Topic already has {current} partitions.")
                existing = {p: list(r) for p, r in ctx.assignments[ask.topic].items()}
                added = add_partitions(
                    ask.topic, existing, sorted(ctx.live_brokers), ask.count, ask.assignments
                )
                if not validate_only:
                    await self._write_topic_assignment(ask.topic, {**existing, **added})
            except KafkaError as e:
                results.append(error_result(ask.topic, e))
                continue
            results.append(TopicResult(ask.topic))
        return results

    async def _write_topic_assignment(self, topic: str, assignment: dict[int, list[int]]) -> None:
        ctx = self._ctx
        try:
            await self._zk.fenced(
                [
                    SetOp(
                        zk_data.topic_path(topic),
                        zk_data.encode_topic_assignment(assignment),
                        ctx.topic_zk_versions[topic],
                    )
                ]
            )
        except (BadVersionError, NoNodeError):
            raise InvalidRequestError(
                f"The assignment of topic '{topic}' changed concurrently; retry."
            ) from None
        self._log.info("topic %s: assignment now %s", topic, assignment)

    # -- topic deletion requests --------------------------------------------------------------

    async def delete_topics(self, names: Sequence[str]) -> list[TopicResult]:
        ctx = self._ctx
        duplicates = sorted({n for n in names if names.count(n) > 1})
        results: list[TopicResult] = []
        for name in names:
            if name in duplicates:
                results.append(
                    TopicResult(name, InvalidRequestError.code, "Duplicate topic in request.")
                )
            elif not self._config.delete_topic_enable:
                # Kafka's request layer answers INVALID_REQUEST instead to DeleteTopics < v3.
                disabled = TopicDeletionDisabledError.code
                results.append(TopicResult(name, disabled, "Topic deletion is disabled."))
            elif name not in ctx.assignments:
                results.append(
                    TopicResult(
                        name,
                        UnknownTopicOrPartitionError.code,
                        "This server does not host this topic-partition.",
                    )
                )
            else:
                # Already marked (NodeExists): the deletion is under way.
                with contextlib.suppress(NodeExistsError):
                    await self._zk.fenced([CreateOp(zk_data.delete_topic_path(name))])
                results.append(TopicResult(name))
        return results


async def await_topics(
    results: list[TopicResult],
    done: Callable[[str], bool],
    timeout_ms: int,
    changed: Callable[[], asyncio.Event],
) -> list[TopicResult]:
    """Wait until ``done(topic)`` for every successful result (checked each time
    ``changed()`` fires), or the timeout: then the results not done are REQUEST_TIMED_OUT."""
    pending = [r.name for r in results if r.ok]

    async def wait() -> None:
        while not all(done(t) for t in pending):
            await changed().wait()

    try:
        await asyncio.wait_for(wait(), timeout_ms / 1000)
    except TimeoutError:
        return [
            r
            if not r.ok or done(r.name)
            else TopicResult(r.name, RequestTimedOutError.code, "Operation timed out.")
            for r in results
        ]
    return results


def _topics_collide(a: str, b: str) -> bool:
    """Kafka's ``Topic.hasCollision``: '.' and '_' map to the same metric name."""
    return a.replace(".", "_") == b.replace(".", "_")


def error_result(name: str, e: KafkaError) -> TopicResult:
    return TopicResult(name, e.code, e.message)
