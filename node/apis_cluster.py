"""The cluster requests of both front doors as domain calls: Metadata (with auto-creation),
FindCoordinator and InitProducerId. The gRPC request layer (``node.apis``) and Kafka's
(``node.kafka_apis``) translate their own structs into these calls and the answers back."""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass
from typing import Protocol

from kafkasim.common.coordination import CoordinationError
from kafkasim.common.errors import KafkaError, error_for_code, error_for_name
from kafkasim.common.types import TopicPartition
from kafkasim.node.group_coordinator import GroupCoordinator
from kafkasim.node.group_records import OFFSETS_TOPIC
from kafkasim.node.metadata_cache import BrokerAddress, ClusterView, MetadataCache
from kafkasim.node.producer_ids import NO_PRODUCER_EPOCH, NO_PRODUCER_ID, ProducerIdManager
from kafkasim.node.topic_creation import TopicCreator


class ClusterServices(Protocol):
    """What the cluster requests read of the broker (``node.apis.BrokerServices`` has it)."""

    broker_id: int
    metadata: MetadataCache
    groups: GroupCoordinator
    topic_creator: TopicCreator

logger = logging.getLogger(__name__)

COORDINATOR_GROUP = 0  # FindCoordinator key_type: a consumer group
COORDINATOR_TRANSACTION = 1  # a transactional id


async def describe_cluster(
    broker: ClusterServices, topics: list[str] | None, *, auto_create: bool, listener: str | None
) -> ClusterView:
    """Kafka's Metadata: the cache's view for ``listener``; with ``auto_create`` (and
    ``auto.create.topics.enable``) an unknown topic is created and answers
    LEADER_NOT_AVAILABLE until it has leaders, as Kafka does."""
    view = broker.metadata.describe(topics, listener)
    creator = broker.topic_creator
    if not (auto_create and creator.auto_create_enabled):
        return view
    unknown = error_for_name("UNKNOWN_TOPIC_OR_PARTITION")
    answered = []
    for known in view.topics:
        topic = known
        if topic.error is unknown:
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
    broker: ClusterServices, key_type: int, key: str, listener: str | None
) -> CoordinatorAnswer:
    """The broker leading ``key``'s ``__consumer_offsets`` partition (creating the topic on
    first use, answering COORDINATOR_NOT_AVAILABLE meanwhile)."""
    if key_type != COORDINATOR_GROUP:
        return CoordinatorAnswer(
            None,
            error_for_name("INVALID_REQUEST"),
            f"key_type {key_type}: only groups (0) have coordinators here (no transactions)",
        )
    if not key:
        return CoordinatorAnswer(None, error_for_name("INVALID_GROUP_ID"), "the group id is empty")
    not_available = error_for_name("COORDINATOR_NOT_AVAILABLE")
    partition = broker.groups.partition_of(key)
    if broker.metadata.partition_count(OFFSETS_TOPIC) == 0:
        creator = broker.topic_creator
        code, message = await creator.create(creator.offsets_topic())
        return CoordinatorAnswer(
            None,
            not_available,
            f"creating {OFFSETS_TOPIC}"
            + (f": {error_for_code(code).error_name}: {message}" if code else ""),
        )
    state = broker.metadata.partitions.get(TopicPartition(OFFSETS_TOPIC, partition))
    address = broker.metadata.address(state.leader, listener) if state is not None else None
    if address is None:
        return CoordinatorAnswer(
            None, not_available, f"{OFFSETS_TOPIC}-{partition} has no live leader"
        )
    return CoordinatorAnswer(address)


@dataclass(frozen=True, slots=True)
class ProducerIdAnswer:
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH
    error: type[KafkaError] | None = None


async def init_producer_id(
    manager: ProducerIdManager | None, transactional_id: str | None
) -> ProducerIdAnswer:
    """InitProducerId: a fresh producer id with epoch 0, or an error.

    Transactions are not supported: a non-empty ``transactional_id`` is INVALID_REQUEST.
    A broker that cannot reserve a block (no session yet, ZooKeeper unreachable or contended)
    answers COORDINATOR_LOAD_IN_PROGRESS, which the producer retries (Kafka answers it rather
    than REQUEST_TIMED_OUT, which older clients treat as fatal).
    """
    if transactional_id:
        logger.info(
            "InitProducerId for transactional id %r refused: transactions are not supported",
            transactional_id,
        )
        return ProducerIdAnswer(error=error_for_name("INVALID_REQUEST"))
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
