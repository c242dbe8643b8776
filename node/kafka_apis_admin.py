"""The admin requests on Kafka's protocol: CreateTopics, DeleteTopics, CreatePartitions,
AlterConfigs, IncrementalAlterConfigs and ElectLeaders, translated into the wire-free calls of
``node.admin_calls`` (the same the gRPC front door makes) and back.

Topic changes go to the controller: a broker hosting no controller answers NOT_CONTROLLER for
every item, as one whose controller is not the active one (the controller raises it); Kafka's
clients send these requests to the controller Metadata names, and retry elsewhere on
NOT_CONTROLLER. Config changes (AlterConfigs, IncrementalAlterConfigs) are served by every
broker, which writes ZooKeeper itself as Kafka's ``ZkAdminManager`` does
(``node.topic_config_admin``): Kafka's Java AdminClient sends them to any broker. The
requests a broker answers from its own state (DescribeConfigs, DescribeCluster,
DeleteRecords, DescribeLogDirs, DescribeProducers) are in ``node.kafka_apis_describe``.

Each request is translated by a pure function (``*_params``: a kio request → domain values and
the items the request layer refuses itself; ``*_response``: domain results → the kio response
of the version asked), unit-tested without a broker.
"""

from __future__ import annotations

import uuid
from collections.abc import Collection, Sequence
from typing import Any

from kafkasim.common.errors import error_for_name
from kafkasim.common.types import TopicPartition
from kafkasim.controller.api import (
    ElectionOutcome,
    NewPartitions,
    NewTopic,
    TopicResult,
)
from kafkasim.controller.topic_configs import AlterConfigOp, OpType
from kafkasim.node import admin_calls, broker_admin
from kafkasim.node.acl import AclOperation, ResourceType
from kafkasim.node.admin_calls import AdminCalls, ConfigAlteration, ResourceResult
from kafkasim.node.apis import BrokerServices
from kafkasim.node.authz import (
    ClusterAuthorizationFailed,
    TopicAuthorizationFailed,
    request_auth,
)
from kafkasim.node.kafka_codec import (
    KafkaRequest,
    build,
    group_by_topic,
    millis,
    response_schema,
)

CREATE_TOPICS, DELETE_TOPICS, ALTER_CONFIGS, CREATE_PARTITIONS = 19, 20, 33, 37
ELECT_LEADERS, INCREMENTAL_ALTER_CONFIGS = 43, 44

INVALID_REQUEST = error_for_name("INVALID_REQUEST").code
INVALID_CONFIG = error_for_name("INVALID_CONFIG").code
UNKNOWN_TOPIC_ID = error_for_name("UNKNOWN_TOPIC_ID").code
TOPIC_DELETION_DISABLED = error_for_name("TOPIC_DELETION_DISABLED").code
ELECTION_NOT_NEEDED = error_for_name("ELECTION_NOT_NEEDED").code
ZERO_UUID = uuid.UUID(int=0)


def _none_if_empty(message: str) -> str | None:
    return message or None


# -- CreateTopics -------------------------------------------------------------------------------


def create_topics_params(body: Any) -> tuple[list[NewTopic], dict[str, TopicResult]]:
    """The topics to create, and those refused here: a config with a null value is
    INVALID_CONFIG (Kafka's controller's message). A config named twice keeps its last value
    (as Kafka's Properties)."""
    topics: list[NewTopic] = []
    refused: dict[str, TopicResult] = {}
    for t in body.topics:
        nulls = [c.name for c in t.configs if c.value is None]
        if nulls:
            refused[t.name] = TopicResult(
                t.name, INVALID_CONFIG, f"Null value not supported for topic configs: {nulls[0]}"
            )
        topics.append(
            NewTopic(
                t.name,
                int(t.num_partitions),
                int(t.replication_factor),
                {int(a.partition_index): [int(b) for b in a.broker_ids] for a in t.assignments}
                or None,
                {c.name: c.value for c in t.configs if c.value is not None},
            )
        )
    return topics, refused


def created_shape(topic: NewTopic, num_partitions: int, replication_factor: int) -> tuple[int, int]:
    """A created topic's partition count and replication factor (the broker defaults for -1,
    the manual assignment's when given), as CreateTopics v5+ answers them."""
    if topic.assignments:
        first = next(iter(topic.assignments.values()))
        return len(topic.assignments), len(first)
    return (
        num_partitions if topic.num_partitions == -1 else topic.num_partitions,
        replication_factor if topic.replication_factor == -1 else topic.replication_factor,
    )


def create_topics_response(
    schema: type[Any],
    topics: Sequence[NewTopic],
    results: Sequence[TopicResult],
    created: dict[str, tuple[int, int, Sequence[broker_admin.DescribedConfig]]],
    configs_refused: Collection[str] = (),
) -> Any:
    """``created``: for each topic created (or validated), its partition count, replication
    factor and configs (v5+ answer them; -1, -1 and none for a topic that failed).
    ``configs_refused``: the topics whose configs the caller may not describe: their
    ``topic_config_error_code`` is TOPIC_AUTHORIZATION_FAILED, unless the controller refused
    the creation (Kafka resets it then; a topic refused here, for CREATE, keeps it)."""
    del topics
    answers = []
    for r in results:
        shape = created.get(r.name) if r.ok else None
        config_refused = r.name in configs_refused and (
            r.ok or r.error_code == TopicAuthorizationFailed.code
        )
        answers.append(
            {
                "name": r.name,
                "topic_id": ZERO_UUID,
                "error_code": r.error_code,
                "topic_config_error_code": TopicAuthorizationFailed.code if config_refused else 0,
                "error_message": _none_if_empty(r.error_message),
                "num_partitions": shape[0] if shape else -1,
                "replication_factor": shape[1] if shape else -1,
                "configs": [
                    {
                        "name": c.name,
                        "value": c.value,
                        "read_only": c.read_only,
                        "config_source": c.source,
                        "is_sensitive": c.is_sensitive,
                    }
                    for c in (shape[2] if shape else ())
                ],
            }
        )
    return build(schema, topics=answers)


# -- DeleteTopics -------------------------------------------------------------------------------


def delete_topics_params(
    request: KafkaRequest,
) -> tuple[list[str], dict[int, tuple[str | None, uuid.UUID, int, str]]]:
    """The topic names to delete, and the entries refused here by index (v6 names topics by
    name or by id: kafkasim has no topic ids, so an id is UNKNOWN_TOPIC_ID; both is
    INVALID_REQUEST, as Kafka)."""
    body = request.body
    if request.api_version < 6:
        return [str(n) for n in body.topic_names], {}
    names: list[str] = []
    refused: dict[int, tuple[str | None, uuid.UUID, int, str]] = {}
    for index, t in enumerate(body.topics):
        topic_id = t.topic_id or ZERO_UUID
        if t.name is not None and topic_id != ZERO_UUID:
            refused[index] = (
                t.name,
                topic_id,
                INVALID_REQUEST,
                "You may not specify both topic name and topic id.",
            )
        elif t.name is None:
            refused[index] = (None, topic_id, UNKNOWN_TOPIC_ID, f"Topic id {topic_id} not found")
        else:
            names.append(t.name)
    return names, refused


def delete_topics_response(
    request: KafkaRequest,
    results: Sequence[TopicResult],
    refused: dict[int, tuple[str | None, uuid.UUID, int, str]],
) -> Any:
    """TOPIC_DELETION_DISABLED is INVALID_REQUEST before v3 (Kafka's rule)."""
    count = len(results) + len(refused)
    deleted = iter(results)
    answers = []
    for index in range(count):
        if index in refused:
            name, topic_id, code, message = refused[index]
        else:
            r = next(deleted)
            name, topic_id, code, message = r.name, ZERO_UUID, r.error_code, r.error_message
            if code == TOPIC_DELETION_DISABLED and request.api_version < 3:
                code = INVALID_REQUEST
        answers.append(
            {
                "name": name,
                "topic_id": topic_id,
                "error_code": code,
                "error_message": _none_if_empty(message),
            }
        )
    return build(response_schema(request), responses=answers)


# -- CreatePartitions ---------------------------------------------------------------------------


def create_partitions_params(body: Any) -> list[NewPartitions]:
    return [
        NewPartitions(
            t.name,
            int(t.count),
            None
            if t.assignments is None
            else [[int(b) for b in a.broker_ids] for a in t.assignments] or None,
        )
        for t in body.topics
    ]


def create_partitions_response(schema: type[Any], results: Sequence[TopicResult]) -> Any:
    return build(
        schema,
        results=[
            {
                "name": r.name,
                "error_code": r.error_code,
                "error_message": _none_if_empty(r.error_message),
            }
            for r in results
        ],
    )


# -- AlterConfigs, IncrementalAlterConfigs ------------------------------------------------------


def alter_configs_params(
    body: Any, *, incremental: bool
) -> tuple[list[ConfigAlteration], dict[int, ResourceResult]]:
    """The alterations, and the resources refused here by index: a null value for anything
    but DELETE (INVALID_CONFIG, naming the key). Legacy AlterConfigs replaces the whole set
    (``admin_calls.replace_all_ops``)."""
    alterations: list[ConfigAlteration] = []
    refused: dict[int, ResourceResult] = {}
    for index, r in enumerate(body.resources):
        kind, name = int(r.resource_type), str(r.resource_name)
        if incremental:
            nulls = [
                c.name for c in r.configs if c.value is None and c.config_operation != OpType.DELETE
            ]
            if nulls:
                refused[index] = ResourceResult(
                    kind, name, INVALID_CONFIG, f"Null value not supported for: {nulls[0]}"
                )
            ops = [AlterConfigOp(c.name, int(c.config_operation), c.value or "") for c in r.configs]
        elif kind == admin_calls.RESOURCE_TYPE_TOPIC:
            ops = admin_calls.replace_all_ops([(c.name, c.value) for c in r.configs])
        else:
            ops = [AlterConfigOp(c.name, OpType.SET, c.value or "") for c in r.configs]
        alterations.append(ConfigAlteration(kind, name, ops))
    return alterations, refused


def alter_configs_response(schema: type[Any], results: Sequence[ResourceResult]) -> Any:
    return build(
        schema,
        responses=[
            {
                "error_code": r.error_code,
                "error_message": _none_if_empty(r.error_message),
                "resource_type": r.resource_type,
                "resource_name": r.resource_name,
            }
            for r in results
        ],
    )


# -- ElectLeaders -------------------------------------------------------------------------------


def elect_leaders_params(request: KafkaRequest) -> tuple[int, list[TopicPartition] | None]:
    """The election type (v0: preferred) and the partitions (None: every partition)."""
    body = request.body
    election_type = int(getattr(body, "election_type", 0))
    if body.topic_partitions is None:
        return election_type, None
    return election_type, [
        TopicPartition(t.topic, int(p)) for t in body.topic_partitions for p in t.partitions
    ]


def elect_leaders_response(
    schema: type[Any],
    asked: Sequence[TopicPartition] | None,
    outcomes: dict[TopicPartition, ElectionOutcome],
    *,
    error_code: int = 0,
) -> Any:
    """Per partition, by topic. For an election over every partition (``asked`` None) the
    partitions that needed none are left out (Kafka's rule). ``error_code``: the top-level
    error (v1+; CLUSTER_AUTHORIZATION_FAILED, as Kafka answers a refused election)."""
    items = sorted(outcomes.items())
    if asked is None:
        items = [(tp, o) for tp, o in items if o.error_code != ELECTION_NOT_NEEDED]
    by_topic = group_by_topic(
        (
            tp.topic,
            {
                "partition_id": tp.partition,
                "error_code": o.error_code,
                "error_message": _none_if_empty(o.error_message),
            },
        )
        for tp, o in items
    )
    return build(
        schema,
        error_code=error_code,
        replica_election_results=[
            {"topic": topic, "partition_result": parts} for topic, parts in by_topic.items()
        ],
    )


# -- the handlers -------------------------------------------------------------------------------


class KafkaAdminApis:
    """The admin requests of one broker (``broker.controller``: None when it hosts none;
    ``broker.zk``: its ZooKeeper session, for config changes)."""

    def __init__(self, broker: BrokerServices) -> None:
        self.broker = broker

    @property
    def controller(self) -> AdminCalls | None:
        return self.broker.controller

    def table(self) -> dict[int, tuple[int, int, Any]]:
        return {
            CREATE_TOPICS: (2, 7, self.create_topics),
            DELETE_TOPICS: (1, 6, self.delete_topics),
            CREATE_PARTITIONS: (0, 3, self.create_partitions),
            ALTER_CONFIGS: (0, 2, self.alter_configs),
            INCREMENTAL_ALTER_CONFIGS: (0, 1, self.incremental_alter_configs),
            ELECT_LEADERS: (0, 2, self.elect_leaders),
        }

    async def create_topics(self, request: KafkaRequest) -> Any:
        body = request.body
        topics, refused = create_topics_params(body)
        auth = request_auth(self.broker, "CreateTopics")
        results = await admin_calls.create_topics(
            self.controller,
            topics,
            validate_only=bool(getattr(body, "validate_only", False)),
            timeout_ms=millis(body.timeout, 0),
            refused=refused,
            auth=auth,
        )
        created: dict[str, tuple[int, int, Sequence[broker_admin.DescribedConfig]]] = {}
        configs_refused: set[str] = set()
        if request.api_version >= 5:
            # v5+ answer the configs: DESCRIBE_CONFIGS on the topic, as Kafka.
            names = [t.name for t in topics]
            configs_refused = set(names) - auth.allowed_names(
                AclOperation.DESCRIBE_CONFIGS, ResourceType.TOPIC, names, log_if_denied=False
            )
            config = self.broker.config
            values = config.config
            defaults = (values["num.partitions"], values["default.replication.factor"])
            for topic, result in zip(topics, results, strict=True):
                if result.ok and topic.name not in configs_refused:
                    created[topic.name] = (
                        *created_shape(topic, *defaults),
                        broker_admin.topic_config_entries(config, dict(topic.configs)),
                    )
        return create_topics_response(
            response_schema(request), topics, results, created, configs_refused
        )

    async def delete_topics(self, request: KafkaRequest) -> Any:
        names, refused = delete_topics_params(request)
        results = (
            await admin_calls.delete_topics(
                self.controller,
                names,
                timeout_ms=millis(request.body.timeout, 0),
                auth=request_auth(self.broker, "DeleteTopics"),
            )
            if names
            else []
        )
        return delete_topics_response(request, results, refused)

    async def create_partitions(self, request: KafkaRequest) -> Any:
        body = request.body
        results = await admin_calls.create_partitions(
            self.controller,
            create_partitions_params(body),
            validate_only=bool(body.validate_only),
            timeout_ms=millis(body.timeout, 0),
            auth=request_auth(self.broker, "CreatePartitions"),
        )
        return create_partitions_response(response_schema(request), results)

    async def alter_configs(self, request: KafkaRequest) -> Any:
        return await self._alter(request, incremental=False)

    async def incremental_alter_configs(self, request: KafkaRequest) -> Any:
        return await self._alter(request, incremental=True)

    async def _alter(self, request: KafkaRequest, *, incremental: bool) -> Any:
        alterations, refused = alter_configs_params(request.body, incremental=incremental)
        results = await admin_calls.alter_configs(
            self.broker.zk,
            alterations,
            validate_only=bool(request.body.validate_only),
            refused=refused,
            broker_config=self.broker.config if incremental else None,
            auth=request_auth(
                self.broker, "IncrementalAlterConfigs" if incremental else "AlterConfigs"
            ),
        )
        return alter_configs_response(response_schema(request), results)

    async def elect_leaders(self, request: KafkaRequest) -> Any:
        election_type, asked = elect_leaders_params(request)
        outcomes = await admin_calls.elect_leaders(
            self.controller, election_type, asked, request_auth(self.broker, "ElectLeaders")
        )
        if not isinstance(outcomes, dict):
            # The whole call failed: the error for every partition asked (or held).
            wanted = asked if asked is not None else sorted(self.broker.metadata.partitions)
            failed = ElectionOutcome(outcomes.code, outcomes.message)
            return elect_leaders_response(
                response_schema(request),
                wanted,
                dict.fromkeys(wanted, failed),
                error_code=outcomes.code if isinstance(outcomes, ClusterAuthorizationFailed) else 0,
            )
        return elect_leaders_response(response_schema(request), asked, outcomes)
