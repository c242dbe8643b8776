"""The topic admin calls: CreateTopics, DeleteTopics, CreatePartitions and
IncrementalAlterConfigs, as entry points (Python values) and in protobuf form for the
broker's request handlers.

Each call is one event: validated in Kafka's order against the context and ZooKeeper, then
written in one fenced multi (config and assignment of a new topic; the grown assignment; the
topic's overrides with a ``/config/changes`` notification; the deletion request znode). The
rest follows from the watches (:mod:`controller.cluster_changes`,
:mod:`controller.topic_deletion`); a ``timeout_ms`` makes the call wait until it has.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Sequence

from kafkasim.common.coordination import (
    BadVersionError,
    CreateOp,
    NodeExistsError,
    NoNodeError,
    Op,
    SetOp,
)
from kafkasim.common.errors import KafkaError
from kafkasim.common.types import validate_topic_name
from kafkasim.controller import zk_data
from kafkasim.controller.api import (
    INTERNAL_TOPICS,
    InvalidPartitionsError,
    InvalidRequestError,
    InvalidTopicError,
    NewPartitions,
    NewTopic,
    RequestTimedOutError,
    TopicAlreadyExistsError,
    TopicConfigAlteration,
    TopicResult,
    UnknownTopicOrPartitionError,
)
from kafkasim.controller.assignment import (
    add_partitions,
    assign_new_topic,
    validate_manual_assignment,
)
from kafkasim.controller.core import STATE_WRITE_ATTEMPTS_MAX, ControllerCore
from kafkasim.controller.topic_configs import AlterConfigOp, apply_incremental_ops
from kafkasim.proto import kafkasim_pb2 as pb
from kafkasim.storage.config import LOG_CONFIG_DEF

_CONFIG_CHANGES_RETAINED = 100  # newest /config/changes notifications kept (brokers' catch-up)
RESOURCE_TYPE_TOPIC = 2  # Kafka's ConfigResource.Type.TOPIC


class TopicAdmin(ControllerCore):
    """Create, delete and grow topics; alter their configs."""

    # -- admin entry points -------------------------------------------------------------------

    async def create_topics(
        self, topics: Sequence[NewTopic], *, validate_only: bool = False, timeout_ms: int = 0
    ) -> list[TopicResult]:
        """Validate and create topics: ``/config/topics/<t>`` then ``/brokers/topics/<t>``.

        One result per topic, in order. With ``timeout_ms`` > 0, waits until every partition
        of each created topic has a live leader, else that topic's result is
        REQUEST_TIMED_OUT (the topic still exists, as in Kafka). Raises NOT_CONTROLLER.
        """
        results = await self._submit(
            "CreateTopics", lambda: self._do_create_topics(topics, validate_only)
        )
        if timeout_ms > 0 and not validate_only:
            results = await self._await_topics(
                results, lambda t: self._ctx is not None and self._ctx.has_leaders(t), timeout_ms
            )
        return results

    async def delete_topics(
        self, names: Sequence[str], *, timeout_ms: int = 0
    ) -> list[TopicResult]:
        """Mark topics for deletion (``/admin/delete_topics/<t>``); the deletion itself runs
        as events. With ``timeout_ms`` > 0, waits until it completed (else REQUEST_TIMED_OUT).
        Raises NOT_CONTROLLER."""
        results = await self._submit("DeleteTopics", lambda: self._do_delete_topics(names))
        if timeout_ms > 0:
            results = await self._await_topics(
                results,
                lambda t: self._ctx is not None and t not in self._ctx.assignments,
                timeout_ms,
            )
        return results

    async def create_partitions(
        self,
        requests: Sequence[NewPartitions],
        *,
        validate_only: bool = False,
        timeout_ms: int = 0,
    ) -> list[TopicResult]:
        """Grow topics (existing partitions keep their replicas). With ``timeout_ms`` > 0,
        waits until the new partitions have leaders. Raises NOT_CONTROLLER."""
        results = await self._submit(
            "CreatePartitions", lambda: self._do_create_partitions(requests, validate_only)
        )
        if timeout_ms > 0 and not validate_only:
            wanted = {r.topic: r.count for r in requests}

            def grown(topic: str) -> bool:
                ctx = self._ctx
                return (
                    ctx is not None
                    and len(ctx.assignments.get(topic, {})) >= wanted[topic]
                    and ctx.has_leaders(topic)
                )

            results = await self._await_topics(results, grown, timeout_ms)
        return results

    async def alter_topic_configs(
        self, alterations: Sequence[TopicConfigAlteration], *, validate_only: bool = False
    ) -> list[TopicResult]:
        """Kafka's IncrementalAlterConfigs for topics: apply each topic's operations to its
        overrides, write ``/config/topics/<t>`` and announce the change with a
        ``/config/changes/config_change_<seq>`` notification (one fenced multi), which every
        broker watches to reload the topic's config. One result per topic, in order
        (INVALID_CONFIG, INVALID_REQUEST, UNKNOWN_TOPIC_OR_PARTITION). Raises NOT_CONTROLLER."""
        return await self._submit(
            "IncrementalAlterConfigs",
            lambda: self._do_alter_topic_configs(alterations, validate_only),
        )

    async def _await_topics(
        self, results: list[TopicResult], done: Callable[[str], bool], timeout_ms: int
    ) -> list[TopicResult]:
        """Wait until ``done(topic)`` for every successful result, or the timeout."""
        pending = [r.name for r in results if r.ok]

        async def wait() -> None:
            while not all(done(t) for t in pending):
                await self._changed.wait()

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

    # -- the same, in protobuf form, for the broker's request handlers ------------------------

    async def handle_create_topics(
        self, request: pb.CreateTopicsRequest
    ) -> pb.CreateTopicsResponse:
        """Clients send -1 for "broker default" (proto3 reads an unset count as 0, which is
        INVALID_PARTITIONS, except next to a manual assignment, where it counts as unset).

        An internal topic (``__consumer_offsets``, ``__transaction_state``) is refused with
        INVALID_REQUEST: only the brokers create it, with the partition count their
        coordinator hashes over (a client's one-partition ``__consumer_offsets`` left every
        group hashing elsewhere without a coordinator). ZooKeeper-mode Kafka has no such
        check (its brokers create the topic by writing ZooKeeper themselves, as kafkasim's do,
        see :mod:`node.topic_creation`); the refusal and its message are those of Kafka's
        KRaft controller for its internal topic."""
        internal = [t.name for t in request.topics if t.name in INTERNAL_TOPICS]
        if internal:
            refused = {
                name: TopicResult(
                    name,
                    InvalidRequestError.code,
                    f"Creation of internal topic {name} is prohibited.",
                )
                for name in internal
            }
            rest = pb.CreateTopicsRequest()
            rest.CopyFrom(request)
            del rest.topics[:]
            rest.topics.extend(t for t in request.topics if t.name not in INTERNAL_TOPICS)
            created = iter((await self.handle_create_topics(rest)).topics if rest.topics else [])
            return pb.CreateTopicsResponse(
                topics=[
                    _topic_result_pb(refused[t.name]) if t.name in refused else next(created)
                    for t in request.topics
                ]
            )
        topics = [
            NewTopic(
                t.name,
                -1 if t.assignments and t.num_partitions == 0 else t.num_partitions,
                -1 if t.assignments and t.replication_factor == 0 else t.replication_factor,
                {a.partition: list(a.broker_ids) for a in t.assignments} or None,
                # Sorted: a protobuf map iterates in a per-process order (the simulation's
                # traces, and the log line naming the configs, must not depend on it).
                dict(sorted(t.configs.items())),
            )
            for t in request.topics
        ]
        try:
            results = await self.create_topics(
                topics, validate_only=request.validate_only, timeout_ms=request.timeout_ms
            )
        except KafkaError as e:
            results = [_error_result(t.name, e) for t in topics]
        return pb.CreateTopicsResponse(topics=[_topic_result_pb(r) for r in results])

    async def handle_delete_topics(
        self, request: pb.DeleteTopicsRequest
    ) -> pb.DeleteTopicsResponse:
        names = list(request.topic_names)
        try:
            results = await self.delete_topics(names, timeout_ms=request.timeout_ms)
        except KafkaError as e:
            results = [_error_result(n, e) for n in names]
        return pb.DeleteTopicsResponse(topics=[_topic_result_pb(r) for r in results])

    async def handle_create_partitions(
        self, request: pb.CreatePartitionsRequest
    ) -> pb.CreatePartitionsResponse:
        asks = [
            NewPartitions(
                t.name,
                t.count,
                [list(a.broker_ids) for a in sorted(t.assignments, key=lambda a: a.partition)]
                or None,
            )
            for t in request.topics
        ]
        try:
            results = await self.create_partitions(
                asks, validate_only=request.validate_only, timeout_ms=request.timeout_ms
            )
        except KafkaError as e:
            results = [_error_result(a.topic, e) for a in asks]
        return pb.CreatePartitionsResponse(results=[_topic_result_pb(r) for r in results])

    async def handle_incremental_alter_configs(
        self, request: pb.IncrementalAlterConfigsRequest
    ) -> pb.IncrementalAlterConfigsResponse:
        """Topic resources go to :meth:`alter_topic_configs`; other resource types are
        refused with INVALID_REQUEST (kafkasim has no dynamic broker configs)."""
        response = pb.IncrementalAlterConfigsResponse()
        alterations = [
            TopicConfigAlteration(
                r.resource_name,
                [AlterConfigOp(c.name, c.config_operation, c.value) for c in r.configs],
            )
            for r in request.resources
            if r.resource_type == RESOURCE_TYPE_TOPIC
        ]
        try:
            results = await self.alter_topic_configs(
                alterations, validate_only=request.validate_only
            )
        except KafkaError as e:
            results = [_error_result(a.topic, e) for a in alterations]
        by_topic = iter(results)
        for r in request.resources:
            answer = response.responses.add(
                resource_type=r.resource_type, resource_name=r.resource_name
            )
            if r.resource_type != RESOURCE_TYPE_TOPIC:
                answer.error_code = InvalidRequestError.code
                answer.error_message = (
                    f"resource type {r.resource_type} cannot be altered here: only topics (2)"
                )
                continue
            result = next(by_topic)
            answer.error_code, answer.error_message = result.error_code, result.error_message
        return response

    # -- create topics and partitions ---------------------------------------------------------

    async def _do_create_topics(
        self, topics: Sequence[NewTopic], validate_only: bool
    ) -> list[TopicResult]:
        ctx = self._require_ctx()
        broker_ids = sorted(ctx.live_brokers)
        names = [t.name for t in topics]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        results: list[TopicResult] = []
        for topic in topics:
            if topic.name in duplicates:
                results.append(
                    _error_result(
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
                results.append(_error_result(topic.name, e))
                continue
            results.append(TopicResult(topic.name))
        return results

    async def _validate_new_topic(
        self, topic: NewTopic, broker_ids: Sequence[int]
    ) -> dict[int, list[int]]:
        """Kafka's ``createTopics`` checks, in Kafka's order; the assignment to write."""
        ctx = self._require_ctx()
        validate_topic_name(topic.name)
        if (
            topic.name in ctx.assignments
            or await self._zk.exists(zk_data.topic_path(topic.name)) is not None
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
            if await self._zk.exists(config_path) is not None
            else CreateOp(config_path, config_data)
        )
        try:
            await self._fenced(
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

    async def _do_create_partitions(
        self, requests: Sequence[NewPartitions], validate_only: bool
    ) -> list[TopicResult]:
        ctx = self._require_ctx()
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
                results.append(_error_result(ask.topic, e))
                continue
            results.append(TopicResult(ask.topic))
        return results

    async def _write_topic_assignment(self, topic: str, assignment: dict[int, list[int]]) -> None:
        ctx = self._require_ctx()
        try:
            await self._fenced(
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

    # -- topic configs ------------------------------------------------------------------------

    async def _do_alter_topic_configs(
        self, alterations: Sequence[TopicConfigAlteration], validate_only: bool
    ) -> list[TopicResult]:
        self._require_ctx()
        results: list[TopicResult] = []
        for alteration in alterations:
            topic = alteration.topic
            try:
                # ZooKeeper, not the context: a topic just created may not be loaded yet.
                exists = await self._zk.exists(zk_data.topic_path(topic)) is not None
                if not exists:
                    raise UnknownTopicOrPartitionError(f"Topic '{topic}' does not exist.")
                await self._alter_topic_config(topic, alteration.ops, validate_only)
            except KafkaError as e:
                results.append(_error_result(topic, e))
                continue
            results.append(TopicResult(topic))
        if not validate_only and any(r.ok for r in results):
            await self._purge_config_changes()
        return results

    async def _alter_topic_config(
        self, topic: str, ops: Sequence[AlterConfigOp], validate_only: bool
    ) -> None:
        """Read the overrides, apply ``ops``, write them conditionally (re-read on a
        concurrent write) together with the change notification."""
        path = zk_data.topic_config_path(topic)
        for _ in range(STATE_WRITE_ATTEMPTS_MAX):
            try:
                data, stat = await self._zk.get(path)
                current, version = zk_data.decode_topic_config(data), stat.version
            except NoNodeError:
                current, version = {}, None
            updated = apply_incremental_ops(current, ops)
            if validate_only:
                return
            encoded = zk_data.encode_topic_config(updated)
            write: Op = (
                CreateOp(path, encoded) if version is None else SetOp(path, encoded, version)
            )
            notification = CreateOp(
                f"{zk_data.CONFIG_CHANGES}/{zk_data.CONFIG_CHANGE_PREFIX}",
                zk_data.encode_config_change(zk_data.topic_entity_path(topic)),
                sequence=True,
            )
            try:
                await self._fenced([write, notification])
            except (BadVersionError, NodeExistsError, NoNodeError):
                continue  # written meanwhile: apply the operations to what is there now
            self._log.info("topic %s: config overrides %s -> %s", topic, current, updated)
            return
        raise InvalidRequestError(f"The config of topic '{topic}' changed concurrently; retry.")

    async def _purge_config_changes(self) -> None:
        """Keep the newest notifications only; a broker that finds one gone before it read
        it reloads every topic config it holds (``node.config_changes``)."""
        children = await self._zk.get_children(zk_data.CONFIG_CHANGES)
        changes = sorted(
            (zk_data.config_change_sequence(c), c)
            for c in children
            if zk_data.config_change_sequence(c) >= 0
        )
        for _, child in changes[:-_CONFIG_CHANGES_RETAINED]:
            await self._fenced_delete(f"{zk_data.CONFIG_CHANGES}/{child}")

    # -- topic deletion requests --------------------------------------------------------------

    async def _do_delete_topics(self, names: Sequence[str]) -> list[TopicResult]:
        ctx = self._require_ctx()
        duplicates = sorted({n for n in names if names.count(n) > 1})
        results: list[TopicResult] = []
        for name in names:
            if name in duplicates:
                results.append(
                    TopicResult(name, InvalidRequestError.code, "Duplicate topic in request.")
                )
            elif not self._config.delete_topic_enable:
                # Kafka answers TOPIC_DELETION_DISABLED from v3 of the API, INVALID_REQUEST
                # before; the error table has only the latter.
                results.append(
                    TopicResult(name, InvalidRequestError.code, "Topic deletion is disabled.")
                )
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
                    await self._fenced([CreateOp(zk_data.delete_topic_path(name))])
                results.append(TopicResult(name))
        return results


def _topics_collide(a: str, b: str) -> bool:
    """Kafka's ``Topic.hasCollision``: '.' and '_' map to the same metric name."""
    return a.replace(".", "_") == b.replace(".", "_")


def _error_result(name: str, e: KafkaError) -> TopicResult:
    return TopicResult(name, e.code, e.message)


def _topic_result_pb(result: TopicResult) -> pb.TopicResult:
    return pb.TopicResult(
        name=result.name, error_code=result.error_code, error_message=result.error_message
    )
