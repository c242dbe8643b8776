"""Topics a broker creates on a client's behalf, through the active controller:

* ``__consumer_offsets``, when a FindCoordinator finds it missing (Kafka creates it on first
  use: ``offsets.topic.num.partitions`` partitions, ``offsets.topic.replication.factor``
  replicas, compacted);
* ``__transaction_state``, likewise on a transactional FindCoordinator
  (``transaction.state.log.num.partitions`` partitions, ``.replication.factor`` replicas, the
  configs of ``node.txn_log.transaction_topic_configs``: compacted, uncompressed, no unclean
  election, ``.min.isr``, ``.segment.bytes``);
* a topic named in a Metadata request that allows auto-creation, when the broker's
  ``auto.create.topics.enable`` is on (``num.partitions`` partitions of
  ``default.replication.factor`` replicas).

Kafka answers such a request at once with LEADER_NOT_AVAILABLE / COORDINATOR_NOT_AVAILABLE and
the client retries until the topic's leaders are elected; so do we. One creation per topic is
in flight at a time, however many requests ask for it.

An ordinary topic is created through the active controller (a CreateTopics request). An
internal topic is not: the controller refuses CreateTopics of internal topics from anyone, so
the broker writes the topic's config and assignment to ZooKeeper itself, as ZooKeeper-mode
Kafka's brokers do (``AdminZkClient.createTopic``); the controller's watch on
``/brokers/topics`` does the rest (:func:`create_internal_topic`).
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable, Sequence

from kafkasim.common.coordination import (
    Coordination,
    CoordinationError,
    CreateOp,
    NodeExistsError,
    Op,
    SetOp,
)
from kafkasim.common.errors import KafkaError, error_for_name
from kafkasim.controller import zk_data
from kafkasim.controller.api import INTERNAL_TOPICS
from kafkasim.controller.assignment import assign_new_topic
from kafkasim.node.config import BrokerConfig
from kafkasim.node.group_records import OFFSETS_TOPIC
from kafkasim.node.txn_log import TRANSACTION_STATE_TOPIC, transaction_topic_configs
from kafkasim.proto import kafkasim_pb2 as pb

logger = logging.getLogger(__name__)

TOPIC_ALREADY_EXISTS = error_for_name("TOPIC_ALREADY_EXISTS").code

CreateTopicsCall = Callable[[pb.CreateTopicsRequest], Awaitable[pb.CreateTopicsResponse]]
CreateInternalCall = Callable[[pb.CreatableTopic], Awaitable[tuple[int, str]]]


async def create_internal_topic(
    zk: Coordination, topic: pb.CreatableTopic, live_brokers: Sequence[int], rng: random.Random
) -> tuple[int, str]:
    """Write an internal topic's config and assignment to ZooKeeper in one multi (Kafka's
    ``AdminZkClient.createTopic`` from the broker); (0, "") when written or already there,
    else an error code and message (INVALID_REPLICATION_FACTOR while too few brokers are
    known to be alive; COORDINATOR_NOT_AVAILABLE when ZooKeeper cannot be reached)."""
    try:
        assignment = assign_new_topic(
            live_brokers, topic.num_partitions, topic.replication_factor, rng
        )
    except KafkaError as e:
        return e.code, e.message
    config_path = zk_data.topic_config_path(topic.name)
    config_data = zk_data.encode_topic_config(dict(sorted(topic.configs.items())))
    try:
        config_op: Op = (
            SetOp(config_path, config_data)
            if await zk.exists(config_path) is not None
            else CreateOp(config_path, config_data)
        )
        await zk.multi(
            [
                config_op,
                CreateOp(
                    zk_data.topic_path(topic.name), zk_data.encode_topic_assignment(assignment)
                ),
            ]
        )
    except NodeExistsError:
        return 0, ""
    except CoordinationError as e:
        return error_for_name("COORDINATOR_NOT_AVAILABLE").code, f"ZooKeeper: {e}"
    logger.info(
        "created internal topic %s with assignment %s", topic.name, dict(sorted(assignment.items()))
    )
    return 0, ""


class TopicCreator:
    def __init__(
        self,
        config: BrokerConfig,
        create_topics: CreateTopicsCall,
        create_internal: CreateInternalCall,
    ) -> None:
        self._config = config
        self._create_topics = create_topics
        self._create_internal = create_internal
        self._in_flight: dict[str, asyncio.Future[tuple[int, str]]] = {}

    @property
    def auto_create_enabled(self) -> bool:
        enabled: bool = self._config["auto.create.topics.enable"]
        return enabled

    def offsets_topic(self) -> pb.CreatableTopic:
        return pb.CreatableTopic(
            name=OFFSETS_TOPIC,
            num_partitions=self._config["offsets.topic.num.partitions"],
            replication_factor=self._config["offsets.topic.replication.factor"],
            configs={
                "cleanup.policy": "compact",
                "compression.type": "producer",
                "segment.bytes": str(self._config["offsets.topic.segment.bytes"]),
            },
        )

    def transaction_state_topic(self) -> pb.CreatableTopic:
        return pb.CreatableTopic(
            name=TRANSACTION_STATE_TOPIC,
            num_partitions=self._config["transaction.state.log.num.partitions"],
            replication_factor=self._config["transaction.state.log.replication.factor"],
            configs=transaction_topic_configs(self._config),
        )

    def auto_topic(self, name: str) -> pb.CreatableTopic:
        if name == OFFSETS_TOPIC:
            return self.offsets_topic()
        if name == TRANSACTION_STATE_TOPIC:
            return self.transaction_state_topic()
        return pb.CreatableTopic(
            name=name,
            num_partitions=self._config["num.partitions"],
            replication_factor=self._config["default.replication.factor"],
        )

    async def create(self, topic: pb.CreatableTopic) -> tuple[int, str]:
        """(0, "") once the controller has created ``topic`` (or it already existed), else
        the controller's error code and message."""
        pending = self._in_flight.get(topic.name)
        if pending is not None:
            return await asyncio.shield(pending)
        future: asyncio.Future[tuple[int, str]] = asyncio.get_running_loop().create_future()
        self._in_flight[topic.name] = future
        try:
            result = await self._call(topic)
            future.set_result(result)
            return result
        finally:
            del self._in_flight[topic.name]
            if not future.done():
                future.set_result((error_for_name("UNKNOWN_SERVER_ERROR").code, "cancelled"))

    async def _call(self, topic: pb.CreatableTopic) -> tuple[int, str]:
        if topic.name in INTERNAL_TOPICS:
            return await self._create_internal(topic)
        request = pb.CreateTopicsRequest(topics=[topic], timeout_ms=0)
        try:
            response = await self._create_topics(request)
        except KafkaError as e:
            return e.code, e.message
        result = response.topics[0]
        if result.error_code in (0, TOPIC_ALREADY_EXISTS):
            if result.error_code == 0:
                logger.info(
                    "created topic %s (%d partitions, RF %d) on a client's behalf",
                    topic.name,
                    topic.num_partitions,
                    topic.replication_factor,
                )
            return 0, ""
        return result.error_code, result.error_message
