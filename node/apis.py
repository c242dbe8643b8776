"""The broker's request layer for its gRPC front door (Kafka's ``KafkaApis``): every request the
broker serves comes in here as protobuf, is translated into domain calls, and the domain
results are translated back.

What goes where:

* partition requests (Produce, ProduceStream, Fetch, ReplicaFetch, ListOffsets, DeleteRecords,
  DescribeReplicas, OffsetsForLeaderEpoch, WriteTxnMarkers, LeaderAndIsr, StopReplica) →
  ``ReplicaManager``, through the pure translations of ``node.apis_replica`` and the values
  of ``node.replica_types``;
* group requests → ``GroupCoordinator`` through ``node.apis_group`` (``node.group_types``);
* transactional requests (InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn, EndTxn,
  DescribeTransactions, ListTransactions) → ``TransactionCoordinator`` through
  ``node.apis_txn``;
* controller admin requests (CreateTopics, DeleteTopics, CreatePartitions, ElectLeaders,
  ControlledShutdown) → the hosted controller's domain entry points through
  ``node.apis_admin``; NOT_CONTROLLER when this broker hosts none;
* IncrementalAlterConfigs → this broker writes ZooKeeper itself (``node.apis_admin``,
  ``node.topic_config_admin``), on every broker, as Kafka's;
* cluster requests (Metadata, FindCoordinator, DescribeCluster, DescribeConfigs,
  UpdateMetadata) → the metadata cache, the topic creator and ZooKeeper, here.

Controller requests (LeaderAndIsr, UpdateMetadata, StopReplica) are checked against this
broker's epoch first (KIP-380). A second front door (Kafka's binary protocol) builds the same
domain values from its own structs and calls the same ``ReplicaManager``, coordinator and
controller entry points; what it needs of the cluster requests it reads from the same cache.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, Protocol

from kafkasim import proto
from kafkasim.common.coordination import Coordination, CoordinationError
from kafkasim.common.errors import error_for_name
from kafkasim.common.types import TopicPartition
from kafkasim.controller import zk_data
from kafkasim.node import apis_admin, apis_cluster, authz_admin, authz_replica, broker_admin
from kafkasim.node import apis_replica as replica
from kafkasim.node.acl_authorizer import AclAuthorizer
from kafkasim.node.admin_calls import RESOURCE_TYPE_TOPIC, AdminCalls
from kafkasim.node.apis_group import group_handlers
from kafkasim.node.apis_txn import txn_handlers
from kafkasim.node.authz import RequestAuth, request_auth
from kafkasim.node.authz_groups import AuthorizedGroups
from kafkasim.node.config import BrokerConfig
from kafkasim.node.group_coordinator import GroupCoordinator
from kafkasim.node.group_records import OFFSETS_TOPIC
from kafkasim.node.metadata_cache import ClusterView, MetadataCache
from kafkasim.node.produce_wire import ProduceRequestView
from kafkasim.node.producer_ids import ProducerIdManager
from kafkasim.node.replica_manager import ReplicaManager
from kafkasim.node.topic_creation import TopicCreator
from kafkasim.node.txn_coordinator import TransactionCoordinator
from kafkasim.node.txn_log import TRANSACTION_STATE_TOPIC
from kafkasim.proto import kafkasim_pb2 as pb


class BrokerServices(Protocol):
    """What the request layer reads of its broker (``node.broker.Broker``): the broker wires
    its parts and hands itself in; the request layer only calls them."""

    broker_id: int
    broker_epoch: int
    config: BrokerConfig
    zk: Coordination
    metadata: MetadataCache
    replica_manager: ReplicaManager
    groups: GroupCoordinator
    transactions: TransactionCoordinator
    # Kafka's ACL authorizer; None when authorizer.class.name is empty (everything allowed).
    authorizer: AclAuthorizer | None
    topic_creator: TopicCreator
    producer_ids: ProducerIdManager | None

    @property
    def controller(self) -> AdminCalls | None: ...

    async def load_topic_config(self, topic: str) -> None: ...

    def forget_topic_config(self, topic: str) -> None: ...


logger = logging.getLogger(__name__)

Handler = Callable[[Any], Awaitable[Any]]
StreamHandler = Callable[[AsyncIterator[Any]], AsyncIterator[Any]]

NOT_CONTROLLER = error_for_name("NOT_CONTROLLER").code
STALE_BROKER_EPOCH = error_for_name("STALE_BROKER_EPOCH").code
InvalidRequestError = error_for_name("INVALID_REQUEST")
CoordinatorLoadInProgressError = error_for_name("COORDINATOR_LOAD_IN_PROGRESS")


class KafkaApis:
    """The handlers of one broker's gRPC methods, by method name."""

    def __init__(self, broker: BrokerServices) -> None:
        self.broker = broker
        self.replica_manager = broker.replica_manager

    def unary_handlers(self, listener: str) -> dict[str, Handler]:
        """Every unary method; answers naming brokers name them by ``listener``."""
        return {
            proto.METHOD_METADATA: functools.partial(self.handle_metadata, listener=listener),
            proto.METHOD_PRODUCE: self.handle_produce,
            proto.METHOD_FETCH: self.handle_fetch,
            proto.METHOD_LIST_OFFSETS: self.handle_list_offsets,
            proto.METHOD_DELETE_RECORDS: self.handle_delete_records,
            proto.METHOD_CREATE_TOPICS: self._admin(
                "CreateTopics", pb.CreateTopicsResponse, apis_admin.create_topics
            ),
            proto.METHOD_DELETE_TOPICS: self._admin(
                "DeleteTopics", pb.DeleteTopicsResponse, apis_admin.delete_topics
            ),
            proto.METHOD_CREATE_PARTITIONS: self._admin(
                "CreatePartitions", pb.CreatePartitionsResponse, apis_admin.create_partitions
            ),
            proto.METHOD_ELECT_LEADERS: self._admin(
                "ElectLeaders", pb.ElectLeadersResponse, apis_admin.elect_leaders
            ),
            proto.METHOD_INCREMENTAL_ALTER_CONFIGS: self.handle_incremental_alter_configs,
            proto.METHOD_CONTROLLED_SHUTDOWN: self._admin(
                "ControlledShutdown",
                pb.ControlledShutdownResponse,
                apis_admin.controlled_shutdown,
                authorize_first=True,
            ),
            proto.METHOD_DESCRIBE_CLUSTER: functools.partial(
                self.handle_describe_cluster, listener=listener
            ),
            proto.METHOD_DESCRIBE_REPLICAS: self.handle_describe_replicas,
            proto.METHOD_DESCRIBE_CONFIGS: self.handle_describe_configs,
            proto.METHOD_DESCRIBE_PRODUCERS: self.handle_describe_producers,
            proto.METHOD_OFFSETS_FOR_LEADER_EPOCH: self.handle_offsets_for_leader_epoch,
            proto.METHOD_WRITE_TXN_MARKERS: self.handle_write_txn_markers,
            proto.METHOD_LEADER_AND_ISR: self.handle_leader_and_isr,
            proto.METHOD_UPDATE_METADATA: self.handle_update_metadata,
            proto.METHOD_STOP_REPLICA: self.handle_stop_replica,
            proto.METHOD_FIND_COORDINATOR: functools.partial(
                self.handle_find_coordinator, listener=listener
            ),
            **group_handlers(
                AuthorizedGroups(self.broker.groups, self.broker), self._known_partition
            ),
            **txn_handlers(self.broker),
        }

    def stream_handlers(self) -> dict[str, StreamHandler]:
        return {
            proto.METHOD_REPLICA_FETCH: self.handle_replica_fetch,
            proto.METHOD_PRODUCE_STREAM: self.handle_produce_stream,
        }

    # -- partitions: the replica manager ----------------------------------------------------

    async def handle_produce(
        self, request: pb.ProduceRequest | ProduceRequestView
    ) -> replica.EncodedProduceResponse:
        """A Produce: protobuf's message, or over gRPC a large request as ``node.produce_wire``
        reads it off the wire (the records not copied); answered in wire form
        (``apis_replica``)."""
        # acks=0 producers do not wait for this answer (it comes back at once: no purgatory).
        params = replica.produce_params(request)
        results = await authz_replica.append_records(
            self.broker, params, request.transactional_id or None
        )
        return replica.produce_response(results, request.correlation_id, params.partitions)

    async def handle_produce_stream(self, requests: AsyncIterator[Any]) -> AsyncIterator[Any]:
        """A producer's pipelined connection: one request at a time, answered in order (as
        Kafka handles a connection); the client keeps several in flight to fill the pipe."""
        broker = self.broker
        async for request in requests:
            # handle_produce's body, without a coroutine of its own per request.
            params = replica.produce_params(request)
            results = await authz_replica.append_records(
                broker, params, request.transactional_id or None
            )
            yield replica.produce_response(results, request.correlation_id, params.partitions)

    async def handle_fetch(self, request: pb.FetchRequest) -> replica.EncodedFetchResponse:
        """A Fetch (consumer or follower), answered in wire form (``apis_replica``)."""
        results = await authz_replica.fetch_messages(self.broker, replica.fetch_params(request))
        return replica.fetch_response(results)

    async def handle_replica_fetch(self, requests: AsyncIterator[Any]) -> AsyncIterator[Any]:
        """One follower's stream: answer each fetch in order (long-polling as needed)."""
        async for request in requests:
            yield await self.handle_fetch(request)

    async def handle_list_offsets(self, request: pb.ListOffsetsRequest) -> pb.ListOffsetsResponse:
        results = await authz_replica.list_offsets(
            self.broker, replica.list_offsets_params(request)
        )
        return replica.list_offsets_response(results)

    async def handle_offsets_for_leader_epoch(
        self, request: pb.OffsetsForLeaderEpochRequest
    ) -> pb.OffsetsForLeaderEpochResponse:
        params = replica.offsets_for_leader_epoch_params(request)
        return replica.offsets_for_leader_epoch_response(
            await authz_replica.offsets_for_leader_epoch(self.broker, params)
        )

    async def handle_write_txn_markers(
        self, request: pb.WriteTxnMarkersRequest
    ) -> pb.WriteTxnMarkersResponse:
        params = replica.write_txn_markers_params(request)
        return replica.write_txn_markers_response(
            await authz_replica.write_txn_markers(self.broker, params)
        )

    async def handle_delete_records(
        self, request: pb.DeleteRecordsRequest
    ) -> pb.DeleteRecordsResponse:
        results = await authz_replica.delete_records(
            self.broker, replica.delete_records_params(request)
        )
        return replica.delete_records_response(results)

    async def handle_describe_replicas(
        self, request: pb.DescribeReplicasRequest
    ) -> pb.DescribeReplicasResponse:
        """A caller's DescribeReplicas, authorized (``node.authz_replica``)."""
        wanted = replica.describe_replicas_params(request)
        return replica.describe_replicas_response(
            authz_replica.described_replicas(self.broker, wanted), self.broker.broker_epoch
        )

    def describe_replicas(self, request: pb.DescribeReplicasRequest) -> pb.DescribeReplicasResponse:
        """DescribeReplicas at once, unauthorized: for in-process callers (the simulation's
        sampler)."""
        wanted = replica.describe_replicas_params(request)
        return replica.describe_replicas_response(
            self.replica_manager.describe_replicas(wanted), self.broker.broker_epoch
        )

    def _known_partition(self, tp: TopicPartition) -> bool:
        """Whether the metadata cache knows ``tp`` (OffsetDelete refuses the others)."""
        return tp in self.broker.metadata.partitions

    # -- controller requests ----------------------------------------------------------------

    async def _is_current_broker_epoch(self, kind: str, request_epoch: int) -> bool:
        """Whether a controller request is for this incarnation of the broker (KIP-380): its
        ``broker_epoch`` must be the czxid of this broker's current registration znode.

        Checked before anything else of the request, the controller epoch included, so a
        request that does not carry the right broker epoch changes nothing. Kafka accepts an
        unknown epoch (-1, from controllers older than KIP-380) and a newer one (the
        controller may see the new registration before the broker has read its czxid);
        kafkasim has no older controllers, so -1 is refused, and a newer one is accepted only
        when ZooKeeper confirms it is the czxid of this session's registration."""
        broker = self.broker
        if request_epoch >= 0 and request_epoch == broker.broker_epoch:
            return True
        if request_epoch > broker.broker_epoch:
            try:
                stat = await broker.zk.exists(zk_data.broker_path(broker.broker_id))
            except CoordinationError:
                stat = None
            if (
                stat is not None
                and stat.ephemeral_owner == broker.zk.session_id
                and stat.czxid == request_epoch
            ):
                broker.broker_epoch = stat.czxid
                return True
        logger.warning(
            "broker %d: refusing %s with broker epoch %d (STALE_BROKER_EPOCH): the current "
            "broker epoch is %d",
            broker.broker_id,
            kind,
            request_epoch,
            broker.broker_epoch,
        )
        return False

    async def handle_leader_and_isr(
        self, request: pb.LeaderAndIsrRequest
    ) -> pb.LeaderAndIsrResponse:
        broker = self.broker
        if refusal := authz_admin.cluster_action_refusal(request_auth(broker, "LeaderAndIsr")):
            return pb.LeaderAndIsrResponse(error_code=refusal.code)
        if not await self._is_current_broker_epoch("LeaderAndIsr", request.broker_epoch):
            return pb.LeaderAndIsrResponse(error_code=STALE_BROKER_EPOCH)
        params = replica.leader_and_isr_params(request)
        for topic in sorted({s.tp.topic for s in params.partition_states}):
            await broker.load_topic_config(topic)
        broker.metadata.add_brokers(list(request.live_leaders))
        result = self.replica_manager.leader_and_isr(params)
        if result.error is None:
            failed = result.failed()
            txns = broker.transactions
            for state in params.partition_states:
                if state.tp in failed:
                    continue
                # Kafka's onLeadershipChange: a coordinator loads its partition when this
                # broker newly leads it; a new leader epoch of a partition it already leads
                # (an ISR change by the controller) is no election — reloading then would
                # answer NOT_COORDINATOR to every group member and open transaction.
                leads = state.leader == broker.broker_id
                elected = state.tp in result.new_leaders
                if state.tp.topic == OFFSETS_TOPIC:
                    if elected:
                        broker.groups.elect(state.tp.partition, state.leader_epoch)
                    elif not leads:
                        broker.groups.resign(state.tp.partition)
                elif state.tp.topic == TRANSACTION_STATE_TOPIC:
                    # The coordinator epoch is the partition's leader epoch (Kafka's onElection).
                    if elected:
                        txns.elect(state.tp.partition, state.leader_epoch)
                    elif not leads:
                        txns.resign(state.tp.partition, state.leader_epoch)
        return replica.leader_and_isr_response(result)

    async def handle_stop_replica(self, request: pb.StopReplicaRequest) -> pb.StopReplicaResponse:
        if refusal := authz_admin.cluster_action_refusal(request_auth(self.broker, "StopReplica")):
            return pb.StopReplicaResponse(error_code=refusal.code)
        if not await self._is_current_broker_epoch("StopReplica", request.broker_epoch):
            return pb.StopReplicaResponse(error_code=STALE_BROKER_EPOCH)
        params = replica.stop_replica_params(request)
        result = self.replica_manager.stop_replica(params)
        if result.error is None:
            txns = self.broker.transactions
            for part in params.partitions:
                if part.tp.topic == OFFSETS_TOPIC:
                    self.broker.groups.resign(part.tp.partition)
                elif part.tp.topic == TRANSACTION_STATE_TOPIC:
                    txns.resign(part.tp.partition)
        return replica.stop_replica_response(result)

    async def handle_update_metadata(
        self, request: pb.UpdateMetadataRequest
    ) -> pb.UpdateMetadataResponse:
        broker = self.broker
        if refusal := authz_admin.cluster_action_refusal(request_auth(broker, "UpdateMetadata")):
            return pb.UpdateMetadataResponse(error_code=refusal.code)
        if not await self._is_current_broker_epoch("UpdateMetadata", request.broker_epoch):
            return pb.UpdateMetadataResponse(error_code=STALE_BROKER_EPOCH)
        if request.controller_epoch < self.replica_manager.controller_epoch:
            return pb.UpdateMetadataResponse(
                error_code=error_for_name("STALE_CONTROLLER_EPOCH").code
            )
        self.replica_manager.controller_epoch = request.controller_epoch
        for topic in request.deleted_topics:
            broker.forget_topic_config(topic)
        broker.metadata.update(request)
        self.replica_manager.maybe_complete_delete_records()  # live brokers may have changed
        return pb.UpdateMetadataResponse()

    def _admin(
        self,
        api: str,
        response_cls: type[Any],
        translate: Callable[[Any, Any, RequestAuth], Awaitable[Any]],
        *,
        authorize_first: bool = False,
    ) -> Handler:
        """``authorize_first``: a request Kafka authorizes before it looks at the controller
        (ControlledShutdown: CLUSTER_ACTION); the others are NOT_CONTROLLER first, as Kafka."""

        async def handler(request: Any) -> Any:
            auth = request_auth(self.broker, api)
            controller = self.broker.controller
            if authorize_first and (refusal := authz_admin.cluster_action_refusal(auth)):
                return response_cls(error_code=refusal.code)
            if controller is None:
                return apis_admin.not_controller_response(request, response_cls)
            # The controller raises NOT_CONTROLLER itself when it is not the active one.
            return await translate(controller, request, auth)

        return handler

    async def handle_incremental_alter_configs(
        self, request: pb.IncrementalAlterConfigsRequest
    ) -> pb.IncrementalAlterConfigsResponse:
        """Any broker, controller or not (the session read now: a new one after expiry)."""
        return await apis_admin.incremental_alter_configs(
            self.broker.zk,
            request,
            self.broker.config,
            request_auth(self.broker, "IncrementalAlterConfigs"),
        )

    # -- cluster requests -------------------------------------------------------------------

    async def handle_metadata(
        self, request: pb.MetadataRequest, *, listener: str
    ) -> pb.MetadataResponse:
        topics = None if request.all_topics or not request.topics else list(request.topics)
        view = await apis_cluster.describe_cluster(
            self.broker,
            topics,
            auto_create=request.allow_auto_topic_creation,
            listener=listener,
            auth=request_auth(self.broker, "Metadata"),
        )
        return metadata_response(view)

    async def handle_find_coordinator(
        self, request: pb.FindCoordinatorRequest, *, listener: str
    ) -> pb.FindCoordinatorResponse:
        answer = await apis_cluster.find_coordinator(
            self.broker,
            request.key_type,
            request.key,
            listener,
            request_auth(self.broker, "FindCoordinator"),
        )
        if answer.address is None:
            return pb.FindCoordinatorResponse(
                error_code=answer.error.code if answer.error else 0,
                error_message=answer.message or "",
                node_id=-1,
            )
        address = answer.address
        return pb.FindCoordinatorResponse(
            node_id=address.node_id, host=address.host, port=address.port
        )

    async def handle_describe_cluster(
        self, _request: pb.DescribeClusterRequest, *, listener: str
    ) -> pb.DescribeClusterResponse:
        metadata = self.broker.metadata
        response = pb.DescribeClusterResponse(
            cluster_id=metadata.cluster_id, controller_id=metadata.controller_id
        )
        for broker_id in sorted(metadata.brokers):
            endpoint = metadata.endpoint_for(broker_id, listener)
            if endpoint is not None:
                response.brokers.append(endpoint)
        return response

    async def handle_describe_producers(
        self, request: pb.DescribeProducersRequest
    ) -> pb.DescribeProducersResponse:
        return apis_admin.describe_producers(self.broker, request)

    async def handle_describe_configs(
        self, request: pb.DescribeConfigsRequest
    ) -> pb.DescribeConfigsResponse:
        answers = await broker_admin.describe_configs(
            self.broker,
            [
                broker_admin.ConfigResource(
                    r.resource_type, r.resource_name, frozenset(r.config_names)
                )
                for r in request.resources
            ],
        )
        response = pb.DescribeConfigsResponse()
        for answer in answers:
            result = response.results.add(
                resource_type=answer.resource_type,
                resource_name=answer.resource_name,
                error_code=answer.error.code if answer.error is not None else 0,
                error_message=answer.error.message if answer.error is not None else "",
            )
            # is_default: a topic key the topic does not override; a broker key set nowhere.
            topic = answer.resource_type == RESOURCE_TYPE_TOPIC
            for c in answer.configs:
                if c.value is None:
                    continue
                result.configs.add(
                    name=c.name,
                    value=c.value,
                    read_only=c.read_only,
                    is_default=(
                        c.source != broker_admin.TOPIC_CONFIG
                        if topic
                        else c.source == broker_admin.DEFAULT_CONFIG
                    ),
                    config_source=c.source,
                    is_sensitive=c.is_sensitive,
                )
        return response


def metadata_response(view: ClusterView) -> pb.MetadataResponse:
    """A :class:`ClusterView` as gRPC's MetadataResponse."""
    response = pb.MetadataResponse(cluster_id=view.cluster_id, controller_id=view.controller_id)
    for b in view.brokers:
        response.brokers.add(node_id=b.node_id, host=b.host, port=b.port, rack=b.rack or "")
    for topic in view.topics:
        entry = response.topics.add(
            name=topic.name,
            is_internal=topic.is_internal,
            error_code=topic.error.code if topic.error else 0,
        )
        for p in topic.partitions:
            entry.partitions.add(
                error_code=p.error.code if p.error else 0,
                partition=p.partition,
                leader=p.leader,
                leader_epoch=p.leader_epoch,
                replicas=list(p.replicas),
                isr=list(p.isr),
                offline_replicas=list(p.offline_replicas),
            )
    return response
