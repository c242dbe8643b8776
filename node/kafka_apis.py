"""The request layer of the Kafka-protocol front door: Kafka's requests (kio structs, decoded
by ``node.kafka_codec``) translated into the same domain calls the gRPC front door makes
(``node.apis``: the replica manager, the group coordinator, the hosted controller, the
metadata cache), and the domain answers built back into Kafka's responses of the version
asked.

Only what is implemented is advertised in ApiVersions (:data:`KafkaProtocolApis.versions`).
The partition and cluster requests are answered here; the group requests by
``node.kafka_apis_group``, the controller's admin requests by ``node.kafka_apis_admin`` and
those a broker answers itself (DescribeConfigs, DescribeCluster, DeleteRecords,
DescribeLogDirs, DescribeProducers) by ``node.kafka_apis_describe``, the transactional ones
(InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn, EndTxn, DescribeTransactions,
ListTransactions) by ``node.kafka_apis_txn``, each a table of
{api key: (min version, max version, handler)} merged below.

Differences from Kafka, on purpose:

* Fetch is sessionless (KIP-227 allows it): a broker may always answer session id 0, and
  the client then sends full fetch requests; an incremental request (a session epoch other
  than 0 or -1) names a session this broker never gave and answers FETCH_SESSION_ID_NOT_FOUND.
* WriteTxnMarkers (inter-broker: kafkasim's coordinators send it over gRPC, Kafka clients
  never do) is served at v1 only: kio, generated from a Kafka whose WriteTxnMarkers starts at
  v1, has no schema for v0.
* Followers replicate over gRPC: a Fetch with a replica id ≥ 0 on a Kafka listener is refused
  with TOPIC_AUTHORIZATION_FAILED per partition (as Kafka answers a follower fetch from a
  principal without CLUSTER_ACTION).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from kio.schema.api_versions.v0.response import ApiVersionsResponse as ApiVersionsResponseV0

from kafkasim.common.errors import error_for_name
from kafkasim.common.types import TopicPartition
from kafkasim.node import apis_cluster, authz_replica, kafka_apis_group
from kafkasim.node import replica_types as rt
from kafkasim.node.acl import CLUSTER_NAME, ResourceType
from kafkasim.node.apis import BrokerServices
from kafkasim.node.apis_replica import error_code
from kafkasim.node.authz import request_auth
from kafkasim.node.kafka_apis_acls import KafkaAclApis
from kafkasim.node.kafka_apis_admin import KafkaAdminApis
from kafkasim.node.kafka_apis_describe import KafkaDescribeApis
from kafkasim.node.kafka_apis_txn import KafkaTxnApis
from kafkasim.node.kafka_codec import (
    AUTHORIZED_OPERATIONS_OMITTED,
    KafkaRequest,
    UnsupportedVersionError,
    build,
    group_by_topic,
    millis,
    response_schema,
)
from kafkasim.node.produce_response import encode_produce_response
from kafkasim.storage.records.batch import ControlRecordType

logger = logging.getLogger(__name__)

KafkaHandler = Callable[[KafkaRequest], Awaitable[Any]]
HandlerTable = Mapping[int, tuple[int, int, KafkaHandler]]

PRODUCE, FETCH, LIST_OFFSETS, METADATA = 0, 1, 2, 3
FIND_COORDINATOR, API_VERSIONS, OFFSET_FOR_LEADER_EPOCH = 10, 18, 23
WRITE_TXN_MARKERS = 27
SASL_HANDSHAKE, SASL_AUTHENTICATE = 17, 36
ILLEGAL_SASL_STATE = error_for_name("ILLEGAL_SASL_STATE").code
UNSUPPORTED_VERSION = error_for_name("UNSUPPORTED_VERSION").code
# A follower's fetch from a principal without CLUSTER_ACTION: Kafka answers each partition so.
TOPIC_AUTHORIZATION_FAILED = error_for_name("TOPIC_AUTHORIZATION_FAILED")
FETCH_SESSION_ID_NOT_FOUND = error_for_name("FETCH_SESSION_ID_NOT_FOUND").code
INVALID_RECORD = error_for_name("INVALID_RECORD")
INITIAL_EPOCH, FINAL_EPOCH = 0, -1  # fetch session epochs of a full fetch (KIP-227)


class CloseConnectionError(Exception):
    """The request is answered by closing the connection (Kafka's way of telling an acks=0
    producer that a produce failed, since it reads no response)."""


def _aborted_transactions(result: rt.FetchPartitionData) -> list[dict[str, int]] | None:
    """A fetch answer's aborted transactions; null unless read_committed (as Kafka's)."""
    if result.aborted_transactions is None:
        return None
    return [
        {"producer_id": t.producer_id, "first_offset": t.first_offset}
        for t in result.aborted_transactions
    ]


class KafkaProtocolApis:
    """The handlers of one Kafka listener (``listener``: its name, for the addresses that
    Metadata and FindCoordinator answer)."""

    def __init__(
        self, broker: BrokerServices, listener: str, extra: tuple[HandlerTable, ...] = ()
    ) -> None:
        self.broker = broker
        self.listener = listener
        self.handlers: dict[int, tuple[int, int, KafkaHandler]] = {
            API_VERSIONS: (0, 3, self.api_versions),
            METADATA: (0, 12, self.metadata),
            PRODUCE: (3, 9, self.produce),
            FETCH: (4, 12, self.fetch),
            LIST_OFFSETS: (1, 7, self.list_offsets),
            OFFSET_FOR_LEADER_EPOCH: (2, 4, self.offset_for_leader_epoch),
            FIND_COORDINATOR: (0, 4, self.find_coordinator),
            WRITE_TXN_MARKERS: (1, 1, self.write_txn_markers),
        }
        for table in extra:
            self.handlers.update(table)
        # Read for every request the listener decodes: built once.
        self._versions = {key: (low, high) for key, (low, high, _) in self.handlers.items()}

    @property
    def versions(self) -> dict[int, tuple[int, int]]:
        """{api key: (min, max)} served: what ApiVersions advertises and the codec accepts."""
        return self._versions

    async def handle(self, request: KafkaRequest) -> Any:
        """The response body answering ``request`` (None: no response, an acks=0 produce)."""
        return await self.handlers[request.api_key][2](request)

    # -- ApiVersions ------------------------------------------------------------------------

    def _api_keys(self) -> list[dict[str, int]]:
        return [
            {"api_key": key, "min_version": low, "max_version": high}
            for key, (low, high) in sorted(self.versions.items())
        ]

    async def api_versions(self, request: KafkaRequest) -> Any:
        return build(response_schema(request), error_code=0, api_keys=self._api_keys())

    def unsupported_api_versions(self, request: UnsupportedVersionError) -> Any:
        """ApiVersions of a version this broker does not know: answered v0 with
        UNSUPPORTED_VERSION and, as Kafka does since 2.4 (KIP-511), ApiVersions' own version
        range only, so that the client retries with the highest version both know."""
        low, high, _ = self.handlers[API_VERSIONS]
        return build(
            ApiVersionsResponseV0,
            error_code=UNSUPPORTED_VERSION,
            api_keys=[{"api_key": API_VERSIONS, "min_version": low, "max_version": high}],
        )

    # -- Metadata, FindCoordinator -----------------------------------------------------------

    async def metadata(self, request: KafkaRequest) -> Any:
        body = request.body
        asked = body.topics
        # v0: an empty list means every topic; v1+: null means every topic.
        topics = None if asked is None or (request.api_version == 0 and not asked) else asked
        names = None if topics is None else [t.name for t in topics]
        auth = request_auth(self.broker, "Metadata")
        view = await apis_cluster.describe_cluster(
            self.broker,
            names,
            auto_create=getattr(body, "allow_auto_topic_creation", True),
            listener=self.listener,
            auth=auth,
        )
        topic_ops = getattr(body, "include_topic_authorized_operations", False)
        cluster_ops = getattr(body, "include_cluster_authorized_operations", False)
        return build(
            response_schema(request),
            brokers=[
                {"node_id": b.node_id, "host": b.host, "port": b.port, "rack": b.rack}
                for b in view.brokers
            ],
            cluster_id=view.cluster_id or None,
            controller_id=view.controller_id,
            topics=[
                {
                    "error_code": error_code(t.error),
                    "name": t.name,
                    "topic_id": 0,
                    "is_internal": t.is_internal,
                    "partitions": [
                        {
                            "error_code": error_code(p.error),
                            "partition_index": p.partition,
                            "leader_id": p.leader,
                            "leader_epoch": p.leader_epoch,
                            "replica_nodes": p.replicas,
                            "isr_nodes": p.isr,
                            "offline_replicas": p.offline_replicas,
                        }
                        for p in t.partitions
                    ],
                    "topic_authorized_operations": (
                        auth.operations(ResourceType.TOPIC, t.name)
                        if topic_ops and t.error is None
                        else AUTHORIZED_OPERATIONS_OMITTED
                    ),
                }
                for t in view.topics
            ],
            cluster_authorized_operations=(
                auth.operations(ResourceType.CLUSTER, CLUSTER_NAME)
                if cluster_ops
                else AUTHORIZED_OPERATIONS_OMITTED
            ),
        )

    async def find_coordinator(self, request: KafkaRequest) -> Any:
        body = request.body
        key_type = getattr(body, "key_type", apis_cluster.COORDINATOR_GROUP)
        auth = request_auth(self.broker, "FindCoordinator")
        if request.api_version >= 4:
            coordinators = []
            for key in body.coordinator_keys:
                answer = await apis_cluster.find_coordinator(
                    self.broker, key_type, key, self.listener, auth
                )
                coordinators.append({"key": key, **self._coordinator(answer)})
            return build(response_schema(request), coordinators=coordinators)
        answer = await apis_cluster.find_coordinator(
            self.broker, key_type, body.key, self.listener, auth
        )
        return build(response_schema(request), self._coordinator(answer))

    @staticmethod
    def _coordinator(answer: apis_cluster.CoordinatorAnswer) -> dict[str, Any]:
        if answer.address is None:
            return {
                "error_code": error_code(answer.error),
                "error_message": answer.message,
                "node_id": -1,
                "host": "",
                "port": -1,
            }
        address = answer.address
        return {
            "error_code": 0,
            "error_message": None,
            "node_id": address.node_id,
            "host": address.host,
            "port": address.port,
        }

    # -- partitions: the replica manager ----------------------------------------------------

    async def produce(self, request: KafkaRequest) -> Any:
        body = request.body
        partitions = tuple(
            rt.PartitionRecords(
                TopicPartition(topic.name, part.index),
                bytes(part.records) if part.records is not None else b"",
            )
            for topic in body.topic_data
            for part in topic.partition_data
        )
        params = rt.ProduceParams(int(body.acks), millis(body.timeout, 0), partitions)
        results = await authz_replica.append_records(
            self.broker, params, getattr(body, "transactional_id", None)
        )
        if params.acks == 0:
            failed = [r for r in results if r.error is not None]
            if failed:
                raise CloseConnectionError(
                    f"acks=0 produce to {failed[0].tp} failed: {failed[0].error!r}"
                )
            return None
        # Written straight to bytes: kio's typed build and generic writer cost a fifth of a
        # small produce's time (node.produce_response).
        return encode_produce_response(request.api_version, results)

    async def fetch(self, request: KafkaRequest) -> Any:
        body = request.body
        schema = response_schema(request)
        # KIP-227: epoch 0 (open a session) and -1 (sessionless; closes the session named) are
        # full fetches, answered without a session; any other epoch continues a session this
        # broker never gave, as Kafka answers a session id missing from its cache.
        if int(getattr(body, "session_epoch", FINAL_EPOCH)) not in (INITIAL_EPOCH, FINAL_EPOCH):
            return build(schema, error_code=FETCH_SESSION_ID_NOT_FOUND, session_id=0)
        partitions = tuple(
            rt.FetchPartitionParams(
                TopicPartition(topic.topic, part.partition),
                int(part.fetch_offset),
                int(getattr(part, "current_leader_epoch", rt.NO_EPOCH)),
                -1,
                int(part.partition_max_bytes),
            )
            for topic in body.topics
            for part in topic.partitions
        )
        if int(body.replica_id) != rt.CONSUMER_REPLICA_ID:
            results = [
                rt.FetchPartitionData(p.tp, TOPIC_AUTHORIZATION_FAILED()) for p in partitions
            ]
        else:
            params = rt.FetchParams(
                rt.CONSUMER_REPLICA_ID,
                millis(body.max_wait, 0),
                int(body.min_bytes),
                int(body.max_bytes),
                partitions,
                int(getattr(body, "isolation_level", rt.READ_UNCOMMITTED)),
            )
            results = await authz_replica.fetch_messages(self.broker, params)
        by_topic = group_by_topic(
            (
                result.tp.topic,
                {
                    "partition_index": result.tp.partition,
                    "error_code": error_code(result.error),
                    "high_watermark": result.high_watermark,
                    "last_stable_offset": result.last_stable_offset,
                    "log_start_offset": result.log_start_offset,
                    "aborted_transactions": _aborted_transactions(result),
                    "preferred_read_replica": -1,
                    "records": result.records,
                },
            )
            for result in results
        )
        return build(
            schema,
            error_code=0,
            session_id=0,
            responses=[{"topic": name, "partitions": parts} for name, parts in by_topic.items()],
        )

    async def list_offsets(self, request: KafkaRequest) -> Any:
        body = request.body
        partitions = tuple(
            rt.ListOffsetsPartition(
                TopicPartition(topic.name, part.partition_index),
                int(part.timestamp),
                int(getattr(part, "current_leader_epoch", rt.NO_EPOCH)),
            )
            for topic in body.topics
            for part in topic.partitions
        )
        # As Kafka: a replica id (≥ 0) only lifts the high-watermark bound (it is not
        # authorized separately; followers here ask over gRPC anyway).
        params = rt.ListOffsetsParams(
            int(body.replica_id),
            partitions,
            int(getattr(body, "isolation_level", rt.READ_UNCOMMITTED)),
        )
        results = await authz_replica.list_offsets(self.broker, params)
        by_topic = group_by_topic(
            (
                result.tp.topic,
                {
                    "partition_index": result.tp.partition,
                    "error_code": error_code(result.error),
                    "timestamp": result.timestamp,
                    "offset": result.offset,
                    "leader_epoch": result.leader_epoch,
                },
            )
            for result in results
        )
        return build(
            response_schema(request),
            topics=[{"name": name, "partitions": parts} for name, parts in by_topic.items()],
        )

    async def write_txn_markers(self, request: KafkaRequest) -> Any:
        markers = tuple(
            rt.TxnMarkerEntry(
                int(marker.producer_id),
                int(marker.producer_epoch),
                int(marker.coordinator_epoch),
                ControlRecordType.COMMIT if marker.transaction_result else ControlRecordType.ABORT,
                tuple(
                    TopicPartition(topic.name, int(index))
                    for topic in marker.topics
                    for index in topic.partition_indexes
                ),
            )
            for marker in request.body.markers
        )
        results = await authz_replica.write_txn_markers(
            self.broker, rt.WriteTxnMarkersParams(markers)
        )
        answers = []
        for result in results:
            by_topic = group_by_topic(
                (tp.topic, {"partition_index": tp.partition, "error_code": error_code(error)})
                for tp, error in result.partitions
            )
            answers.append(
                {
                    "producer_id": result.producer_id,
                    "topics": [
                        {"name": name, "partitions": parts} for name, parts in by_topic.items()
                    ],
                }
            )
        return build(response_schema(request), markers=answers)

    async def offset_for_leader_epoch(self, request: KafkaRequest) -> Any:
        body = request.body
        wanted = tuple(
            rt.EpochRequest(
                TopicPartition(topic.topic, part.partition),
                int(part.leader_epoch),
                int(part.current_leader_epoch),
            )
            for topic in body.topics
            for part in topic.partitions
        )
        results = await authz_replica.offsets_for_leader_epoch(self.broker, wanted)
        by_topic = group_by_topic(
            (
                result.tp.topic,
                {
                    "error_code": error_code(result.error),
                    "partition": result.tp.partition,
                    "leader_epoch": result.leader_epoch,
                    "end_offset": result.end_offset,
                },
            )
            for result in results
        )
        return build(
            response_schema(request),
            topics=[{"topic": name, "partitions": parts} for name, parts in by_topic.items()],
        )


def kafka_handler_tables(
    broker: BrokerServices, listener: str | None = None
) -> tuple[HandlerTable, ...]:
    """The handler tables beyond :class:`KafkaProtocolApis`'s own (groups, admin, describe,
    transactions) for the
    Kafka listener named ``listener``."""
    return (
        kafka_apis_group.group_table(broker),
        KafkaAdminApis(broker).table(),
        KafkaDescribeApis(broker, listener).table(),
        KafkaTxnApis(broker).table(),
        KafkaAclApis(broker).table(),
        sasl_table(),
    )


def sasl_table() -> HandlerTable:
    """SaslHandshake and SaslAuthenticate once a connection is past authentication (or on a
    listener without SASL): ILLEGAL_SASL_STATE, as Kafka's ``KafkaApis``."""

    async def handshake(request: KafkaRequest) -> Any:
        return build(response_schema(request), error_code=ILLEGAL_SASL_STATE, mechanisms=[])

    async def authenticate(request: KafkaRequest) -> Any:
        return build(
            response_schema(request),
            error_code=ILLEGAL_SASL_STATE,
            error_message="SaslAuthenticate request received after successful authentication",
            auth_bytes=b"",
        )

    return {SASL_HANDSHAKE: (0, 1, handshake), SASL_AUTHENTICATE: (0, 2, authenticate)}
