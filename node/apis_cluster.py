"""The cluster requests of both front doors as domain calls: Metadata (with auto-creation),
FindCoordinator (groups and transactional ids) and InitProducerId (idempotent and
transactional). The gRPC request layer (``node.apis``) and Kafka's
(``node.kafka_apis``) translate their own structs into these calls and the answers back."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol

from kafkasim.common.coordination import CoordinationError
from kafkasim.common.errors import KafkaError, error_for_code, error_for_name
from kafkasim.common.types import TopicPartition
from kafkasim.controller.api import INTERNAL_TOPICS
from kafkasim.node.acl import AclOperation, ResourceType
from kafkasim.node.acl_authorizer import AclAuthorizer
from kafkasim.node.authz import RequestAuth
from kafkasim.node.group_coordinator import GroupCoordinator
from kafkasim.node.group_records import OFFSETS_TOPIC
from kafkasim.node.metadata_cache import BrokerAddress, ClusterView, MetadataCache, TopicView
from kafkasim.node.producer_ids import NO_PRODUCER_EPOCH, NO_PRODUCER_ID, ProducerIdManager
from kafkasim.node.topic_creation import TopicCreator
from kafkasim.node.txn_coordinator import TransactionCoordinator
from kafkasim.node.txn_log import TRANSACTION_STATE_TOPIC
from kafkasim.node.txn_types import InitProducerIdParams


class ClusterServices(Protocol):
    """What the cluster requests read of the broker (``node.apis.BrokerServices`` has it)."""

    broker_id: int
    metadata: MetadataCache
    groups: GroupCoordinator
    transactions: TransactionCoordinator
    topic_creator: TopicCreator
    producer_ids: ProducerIdManager | None

    @property
    def authorizer(self) -> AclAuthorizer | None: ...


logger = logging.getLogger(__name__)

COORDINATOR_GROUP = 0  # FindCoordinator key_type: a consumer group
COORDINATOR_TRANSACTION = 1  # a transactional id


async def describe_cluster(
    broker: ClusterServices,
    topics: list[str] | None,
    *,
    auto_create: bool,
    listener: str | None,
    auth: RequestAuth | None = None,
) -> ClusterView:
    """Kafka's Metadata: the cache's view for ``listener``; with ``auto_create`` (and
    ``auto.create.topics.enable``) an unknown topic is created and answers
    LEADER_NOT_AVAILABLE until it has leaders, as Kafka does.

    Authorization (``auth``, as Kafka's ``handleTopicMetadataRequest``): a topic needs
    DESCRIBE; one named but refused answers TOPIC_AUTHORIZATION_FAILED without a word on
    whether it exists, and an all-topics answer leaves it out. Auto-creation needs CREATE on
    the cluster or on the topic: an unknown topic refused it answers UNKNOWN_TOPIC_OR_PARTITION
    (TOPIC_AUTHORIZATION_FAILED for an internal one) and is not created."""
    if auth is None or not auth.enabled:
        return await _described(broker, topics, auto_create, listener, frozenset())
    if topics is None:
        view = await _described(broker, None, False, listener, frozenset())
        shown = auth.allowed_names(
            AclOperation.DESCRIBE,
            ResourceType.TOPIC,
            (t.name for t in view.topics),
            log_if_denied=False,
        )
        return dataclasses.replace(view, topics=tuple(t for t in view.topics if t.name in shown))
    allowed = auth.allowed_names(AclOperation.DESCRIBE, ResourceType.TOPIC, topics)
    no_create: frozenset[str] = frozenset()
    missing = [t for t in topics if t in allowed and broker.metadata.partition_count(t) == 0]
    if auto_create and missing and not auth.cluster(AclOperation.CREATE, log_if_denied=False):
        may_create = auth.allowed_names(AclOperation.CREATE, ResourceType.TOPIC, missing)
        no_create = frozenset(t for t in missing if t not in may_create)
    view = await _described(
        broker, [t for t in topics if t in allowed], auto_create, listener, no_create
    )
    described = {t.name: t for t in view.topics}
    refused = error_for_name("TOPIC_AUTHORIZATION_FAILED")
    answered = [
        described[t] if t in described else TopicView(t, refused, False, ())
        for t in dict.fromkeys(topics)
    ]
    return dataclasses.replace(view, topics=tuple(answered))


async def _described(
    broker: ClusterServices,
    topics: list[str] | None,
    auto_create: bool,
    listener: str | None,
    no_create: frozenset[str],
) -> ClusterView:
    view = broker.metadata.describe(topics, listener)
    creator = broker.topic_creator
    if not (auto_create and creator.auto_create_enabled):
        return view
    unknown = error_for_name("UNKNOWN_TOPIC_OR_PARTITION")
    answered = []
    for known in view.topics:
        topic = known
        if topic.name in no_create:
            if topic.name in INTERNAL_TOPICS:
                topic = dataclasses.replace(
                    topic, error=error_for_name("TOPIC_AUTHORIZATION_FAILED")
                )
        elif topic.error is unknown:
            code, message = await creator.create(creator.auto_topic(topic.name))
            if code:
                logger.info(
                    "broker %d: auto-creating %s: %s", broker.broker_id, topic.name, message
                )
            error = error_for_code(code) if code else error_for_name("LEADER_NOT_AVAILABLE")
            topic = dataclasses.replace(topic, error=error)
        answered.append(topic)
    return dataclasses.replace(view, topics=tuple(answered))


@dataclass(frozen=True, slots=True)
class CoordinatorAnswer:
    """FindCoordinator's answer: the coordinator's address on the asking listener, or an
    error (Kafka's error class) with a message."""

    address: BrokerAddress | None
    error: type[KafkaError] | None = None
    message: str | None = None


async def find_coordinator(
    broker: ClusterServices,
    key_type: int,
    key: str,
    listener: str | None,
    auth: RequestAuth | None = None,
) -> CoordinatorAnswer:
    """The broker leading the partition of ``key`` in its internal topic (Kafka's
    ``getCoordinator``): a group's ``__consumer_offsets`` partition (key_type 0), a
    transactional id's ``__transaction_state`` partition (key_type 1). The topic is created
    on first use; meanwhile, and while the partition has no live leader, the answer is
    COORDINATOR_NOT_AVAILABLE (the client retries). ``auth``: DESCRIBE on the group, resp.
    the transactional id, is needed first (GROUP_AUTHORIZATION_FAILED,
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED), as Kafka."""
    guarded = {
        COORDINATOR_GROUP: (ResourceType.GROUP, "GROUP_AUTHORIZATION_FAILED"),
        COORDINATOR_TRANSACTION: (
            ResourceType.TRANSACTIONAL_ID,
            "TRANSACTIONAL_ID_AUTHORIZATION_FAILED",
        ),
    }.get(key_type)
    if (
        auth is not None
        and guarded is not None
        and not auth.allowed(AclOperation.DESCRIBE, guarded[0], key)
    ):
        return CoordinatorAnswer(None, error_for_name(guarded[1]), None)
    creator = broker.topic_creator
    partition_for: Callable[[str], int]
    if key_type == COORDINATOR_GROUP:
        empty, what = "INVALID_GROUP_ID", "the group id"
        name, make = OFFSETS_TOPIC, creator.offsets_topic
        partition_for = broker.groups.partition_of
    elif key_type == COORDINATOR_TRANSACTION:
        empty, what = "INVALID_REQUEST", "the transactional id"
        name, make = TRANSACTION_STATE_TOPIC, creator.transaction_state_topic
        partition_for = broker.transactions.partition_for
    else:
        return CoordinatorAnswer(
            None,
            error_for_name("INVALID_REQUEST"),
            f"key_type {key_type}: 0 (a group) or 1 (a transactional id)",
        )
    if not key:
        return CoordinatorAnswer(None, error_for_name(empty), f"{what} is empty")
    partition = partition_for(key)
    return await _leader_of(broker, name, partition, listener, lambda: creator.create(make()))


async def _leader_of(
    broker: ClusterServices,
    name: str,
    partition: int,
    listener: str | None,
    create: Callable[[], Awaitable[tuple[int, str]]],
) -> CoordinatorAnswer:
    """The leader of ``name``-``partition``; ``create`` makes the topic when it is missing."""
    not_available = error_for_name("COORDINATOR_NOT_AVAILABLE")
    if broker.metadata.partition_count(name) == 0:
        code, message = await create()
        return CoordinatorAnswer(
            None,
            not_available,
            f"creating {name}"
            + (f": {error_for_code(code).error_name}: {message}" if code else ""),
        )
    state = broker.metadata.partitions.get(TopicPartition(name, partition))
    address = broker.metadata.address(state.leader, listener) if state is not None else None
    if address is None:
        return CoordinatorAnswer(None, not_available, f"{name}-{partition} has no live leader")
    return CoordinatorAnswer(address)


@dataclass(frozen=True, slots=True)
class ProducerIdRequest:
    """InitProducerId as both front doors ask it. ``transactional_id`` None: idempotence only
    (Kafka's null; gRPC's empty string); ``producer_id``/``producer_epoch``: what the client
    had (KIP-360), -1/-1 for a fresh one."""

    transactional_id: str | None
    transaction_timeout_ms: int = 0
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH


@dataclass(frozen=True, slots=True)
class ProducerIdAnswer:
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH
    error: type[KafkaError] | None = None


async def init_producer_id(
    broker: ClusterServices, request: ProducerIdRequest, auth: RequestAuth | None = None
) -> ProducerIdAnswer:
    """InitProducerId (Kafka's ``handleInitProducerIdRequest``): a producer id and epoch
    pair of which one half only is -1 is INVALID_REQUEST; without a transactional id a fresh
    producer id with epoch 0 (:func:`new_producer_id`); with one, the transaction
    coordinator's answer (an empty id is INVALID_REQUEST there, as Kafka's).

    ``auth`` (Kafka 3.x, KIP-679): a transactional id needs WRITE on it
    (TRANSACTIONAL_ID_AUTHORIZATION_FAILED); an idempotent producer IDEMPOTENT_WRITE on the
    cluster or WRITE on at least one topic (CLUSTER_AUTHORIZATION_FAILED)."""
    if auth is not None and auth.enabled:
        if request.transactional_id is not None:
            if not auth.allowed(
                AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, request.transactional_id
            ):
                return ProducerIdAnswer(
                    error=error_for_name("TRANSACTIONAL_ID_AUTHORIZATION_FAILED")
                )
        elif not auth.cluster(
            AclOperation.IDEMPOTENT_WRITE, log_if_denied=False
        ) and not auth.any_allowed(AclOperation.WRITE, ResourceType.TOPIC):
            return ProducerIdAnswer(error=error_for_name("CLUSTER_AUTHORIZATION_FAILED"))
    if (request.producer_id == NO_PRODUCER_ID) != (request.producer_epoch == NO_PRODUCER_EPOCH):
        return ProducerIdAnswer(error=error_for_name("INVALID_REQUEST"))
    if request.transactional_id is None:
        return await new_producer_id(broker.producer_ids)
    result = await broker.transactions.init_producer_id(
        InitProducerIdParams(
            request.transactional_id,
            request.transaction_timeout_ms,
            request.producer_id,
            request.producer_epoch,
        )
    )
    return ProducerIdAnswer(result.producer_id, result.producer_epoch, result.error)


async def new_producer_id(manager: ProducerIdManager | None) -> ProducerIdAnswer:
    """An idempotent producer's id: a fresh producer id with epoch 0, or an error.

    A broker that cannot reserve a block (no session yet, ZooKeeper unreachable or contended)
    answers COORDINATOR_LOAD_IN_PROGRESS, which the producer retries (Kafka answers it rather
    than REQUEST_TIMED_OUT, which older clients treat as fatal).
    """
    if manager is None:
        return ProducerIdAnswer(error=error_for_name("COORDINATOR_LOAD_IN_PROGRESS"))
    try:
        producer_id = await manager.generate_producer_id()
    except CoordinationError as e:
        logger.warning("broker %d: no producer id block: %s", manager.broker_id, e)
        return ProducerIdAnswer(error=error_for_name("COORDINATOR_LOAD_IN_PROGRESS"))
    except KafkaError as e:
        logger.error("broker %d: %s", manager.broker_id, e)
        return ProducerIdAnswer(error=type(e))
    return ProducerIdAnswer(producer_id, 0)
