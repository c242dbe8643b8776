"""Kafka's admin client: topics, partitions, cluster, configs, leader elections and records.

Reads (``list_topics``, ``describe_topics``, ``describe_cluster``, ``describe_configs``) go to
any broker that answers; writes (create/delete topics, add partitions, alter topic configs,
elect leaders) go to the controller, found through the metadata and retried on NOT_CONTROLLER
and retriable errors until ``delivery.timeout.ms`` has passed on the injected clock
(``NetworkClient``'s policy).
``delete_records`` goes to each partition's leader, refreshing the metadata and retrying the
partitions whose leader moved, under the same policy.

A failed item raises the :class:`~common.errors.KafkaError` subclass of its error code; the
message names the topic. A write that succeeds has been recorded by the controller; the
brokers' metadata follows asynchronously (as in Kafka, a describe right after a create may
not see the topic yet).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType

from kafkasim import proto
from kafkasim.client.admin_config import ADMIN_CONFIG
from kafkasim.client.admin_groups import GroupAdmin
from kafkasim.client.admin_txn import TransactionAdmin
from kafkasim.client.network import INVALID_METADATA_CODES, NetworkClient
from kafkasim.common.clock import Clock, SystemClock
from kafkasim.common.errors import (
    KafkaError,
    LeaderNotAvailableError,
    UnknownTopicOrPartitionError,
    error_for_code,
    error_for_name,
)
from kafkasim.common.rpc import ClientTransport, RpcError
from kafkasim.common.rpc_grpc_client import client_transport
from kafkasim.common.types import TopicPartition
from kafkasim.proto import kafkasim_pb2 as pb

UNKNOWN_TOPIC_OR_PARTITION = UnknownTopicOrPartitionError.code
OP_SET, OP_DELETE = 0, 1  # Kafka's AlterConfigOp.OpType
NO_CONFIGS: Mapping[str, str] = MappingProxyType({})
RESOURCE_TYPE_TOPIC = 2  # Kafka's ConfigResource.Type.TOPIC
RESOURCE_TYPE_BROKER = 4  # Kafka's ConfigResource.Type.BROKER
InvalidRequestError = error_for_name("INVALID_REQUEST")
ELECTION_PREFERRED = 0  # Kafka's ElectionType.PREFERRED
ELECTION_UNCLEAN = 1


@dataclass(frozen=True, slots=True)
class NewTopic:
    """A topic to create: a partition count and replication factor (-1: the broker's
    defaults), or a manual ``assignment`` (partition -> broker ids) instead of both."""

    name: str
    num_partitions: int = -1
    replication_factor: int = -1
    assignment: Mapping[int, Sequence[int]] | None = None
    configs: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class PartitionDescription:
    partition: int
    leader: int  # -1: offline
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    offline_replicas: tuple[int, ...]

    @property
    def under_replicated(self) -> bool:
        return len(self.isr) < len(self.replicas)

    @property
    def unavailable(self) -> bool:
        return self.leader < 0


@dataclass(frozen=True, slots=True)
class TopicDescription:
    name: str
    partitions: tuple[PartitionDescription, ...]
    is_internal: bool

    @property
    def replication_factor(self) -> int:
        return len(self.partitions[0].replicas) if self.partitions else 0


@dataclass(frozen=True, slots=True)
class BrokerNode:
    node_id: int
    host: str
    port: int
    rack: str | None


@dataclass(frozen=True, slots=True)
class ClusterDescription:
    cluster_id: str
    controller_id: int  # -1: none elected
    brokers: tuple[BrokerNode, ...]


@dataclass(frozen=True, slots=True)
class ConfigEntry:
    name: str
    value: str
    is_default: bool
    read_only: bool
    source: int  # Kafka's DescribeConfigs ConfigSource number


def _raise_for(code: int, message: str, topic: str) -> None:
    """Raise the error class of ``code``, its message naming ``topic`` (and the error, when
    the broker gave no message: a tool that prints the message says what went wrong)."""
    if not code:
        return
    error = error_for_code(code)
    if topic not in message:
        message = f"topic '{topic}': {message or error.error_name}"
    raise error(message)


def _config_entries(response: object, topic: str = "") -> list[ConfigEntry]:
    """The entries of a DescribeConfigs answer, sorted by name; a resource's error raised
    (naming ``topic`` when it is one)."""
    assert isinstance(response, pb.DescribeConfigsResponse)
    out: list[ConfigEntry] = []
    for result in response.results:
        if topic:
            _raise_for(result.error_code, result.error_message, topic)
        elif result.error_code:
            raise error_for_code(result.error_code)(result.error_message)
        out.extend(
            ConfigEntry(c.name, c.value, c.is_default, c.read_only, c.config_source)
            for c in result.configs
        )
    return sorted(out, key=lambda c: c.name)


class AdminClient(GroupAdmin, TransactionAdmin):
    """Kafka's ``Admin`` over any ``ClientTransport``.

    ``config`` takes Kafka's admin keys (:data:`~client.admin_config.ADMIN_KEYS`:
    ``bootstrap.servers``, ``request.timeout.ms`` bounding one call, ``default.api.timeout.ms``
    the whole retried operation, ...), as the producer and consumer do. The older form, a list
    of ``host:port`` addresses with ``request_timeout_ms`` and ``timeout_ms`` keywords, still
    works. ``transport`` defaults to a ``GrpcTransport`` of its own, closed by :meth:`close`
    (one given stays the caller's to close), ``clock`` to the system clock. Use as
    ``async with AdminClient(...) as admin``, or call :meth:`close`.
    """

    def __init__(
        self,
        config: Mapping[str, object] | Sequence[str],
        *,
        transport: ClientTransport | None = None,
        clock: Clock | None = None,
        request_timeout_ms: int | None = None,
        timeout_ms: int | None = None,
    ) -> None:
        if isinstance(config, Mapping):
            if request_timeout_ms is not None or timeout_ms is not None:
                raise TypeError(
                    "with a config dict, set request.timeout.ms and default.api.timeout.ms "
                    "in it instead of request_timeout_ms/timeout_ms"
                )
            props = dict(config)
        else:
            props = {"bootstrap.servers": list(config)}
            if request_timeout_ms is not None:
                props["request.timeout.ms"] = request_timeout_ms
            if timeout_ms is not None:
                props["default.api.timeout.ms"] = timeout_ms
        self.config = ADMIN_CONFIG.parse(props)
        self._owns_transport = transport is None
        self.transport: ClientTransport = (
            transport if transport is not None else client_transport(props)
        )
        self._client = NetworkClient(
            self.transport,
            self.config["bootstrap.servers"],
            clock if clock is not None else SystemClock(),
            request_timeout_ms=self.config["request.timeout.ms"],
            delivery_timeout_ms=self.config["default.api.timeout.ms"],
            retry_backoff_ms=self.config["retry.backoff.ms"],
        )
        self.request_timeout_ms: int = self.config["request.timeout.ms"]

    async def __aenter__(self) -> AdminClient:
        return self

    async def __aexit__(self, *_exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        """Close the transport if the client made it (idempotent); one given is the caller's."""
        if self._owns_transport:
            await self.transport.close()

    # -- topics -----------------------------------------------------------------------------

    async def create_topics(
        self, specs: Iterable[NewTopic], *, validate_only: bool = False
    ) -> None:
        specs = list(specs)
        request = pb.CreateTopicsRequest(
            timeout_ms=self.request_timeout_ms, validate_only=validate_only
        )
        for spec in specs:
            topic = request.topics.add(
                name=spec.name,
                num_partitions=spec.num_partitions,
                replication_factor=spec.replication_factor,
                configs=dict(spec.configs),
            )
            if spec.assignment is not None:
                topic.num_partitions = -1
                topic.replication_factor = -1
                for partition, brokers in sorted(spec.assignment.items()):
                    topic.assignments.add(partition=partition, broker_ids=list(brokers))
        response = await self._client.controller_call(
            proto.METHOD_CREATE_TOPICS, request
        )  # shared retry policy
        assert isinstance(response, pb.CreateTopicsResponse)
        for result in response.topics:
            _raise_for(result.error_code, result.error_message, result.name)

    async def delete_topics(self, names: Iterable[str]) -> None:
        request = pb.DeleteTopicsRequest(
            topic_names=list(names), timeout_ms=self.request_timeout_ms
        )
        response = await self._client.controller_call(proto.METHOD_DELETE_TOPICS, request)
        assert isinstance(response, pb.DeleteTopicsResponse)
        for result in response.topics:
            _raise_for(result.error_code, result.error_message, result.name)

    async def create_partitions(self, topic: str, total_count: int) -> None:
        """Grow ``topic`` to ``total_count`` partitions (Kafka never shrinks a topic)."""
        request = pb.CreatePartitionsRequest(timeout_ms=self.request_timeout_ms)
        request.topics.add(name=topic, count=total_count)
        response = await self._client.controller_call(proto.METHOD_CREATE_PARTITIONS, request)
        assert isinstance(response, pb.CreatePartitionsResponse)
        for result in response.results:
            _raise_for(result.error_code, result.error_message, result.name)

    async def list_topics(self) -> list[str]:
        response = await self._client.refresh_metadata()
        return sorted(t.name for t in response.topics if not t.error_code)

    async def describe_topics(self, names: Sequence[str] | None = None) -> list[TopicDescription]:
        """Every topic (``names`` None) or the named ones, sorted by name; an unknown named
        topic raises UNKNOWN_TOPIC_OR_PARTITION."""
        response = await self._client.refresh_metadata(list(names or ()))
        out: list[TopicDescription] = []
        for topic in sorted(response.topics, key=lambda t: t.name):
            if topic.error_code == UNKNOWN_TOPIC_OR_PARTITION:
                _raise_for(topic.error_code, f"Topic '{topic.name}' does not exist.", topic.name)
            _raise_for(topic.error_code, "", topic.name)
            partitions = tuple(
                PartitionDescription(
                    partition=p.partition,
                    leader=p.leader,
                    leader_epoch=p.leader_epoch,
                    replicas=tuple(p.replicas),
                    isr=tuple(p.isr),
                    offline_replicas=tuple(p.offline_replicas),
                )
                for p in sorted(topic.partitions, key=lambda p: p.partition)
            )
            out.append(TopicDescription(topic.name, partitions, topic.is_internal))
        return out

    # -- cluster and configs ----------------------------------------------------------------

    async def describe_cluster(self) -> ClusterDescription:
        response = await self._client.call_any(  # any broker answers
            proto.METHOD_DESCRIBE_CLUSTER, pb.DescribeClusterRequest()
        )
        assert isinstance(response, pb.DescribeClusterResponse)
        if response.error_code:
            raise error_for_code(response.error_code)("describe cluster")
        return ClusterDescription(
            cluster_id=response.cluster_id,
            controller_id=response.controller_id,
            brokers=tuple(
                BrokerNode(b.node_id, b.host, b.port, b.rack or None) for b in response.brokers
            ),
        )

    async def describe_configs(self, topic: str) -> list[ConfigEntry]:
        """Every config of ``topic``, effective values, sorted by name; ``is_default`` False
        for the topic's own overrides."""
        request = pb.DescribeConfigsRequest()
        request.resources.add(resource_type=RESOURCE_TYPE_TOPIC, resource_name=topic)
        response = await self._client.call_any(proto.METHOD_DESCRIBE_CONFIGS, request)
        return _config_entries(response, topic)

    async def alter_topic_configs(
        self,
        topic: str,
        set: Mapping[str, str] = NO_CONFIGS,  # Kafka's op names: SET and DELETE
        delete: Iterable[str] = (),
        *,
        validate_only: bool = False,
    ) -> None:
        """Kafka's IncrementalAlterConfigs for one topic: SET each ``set`` key to its value,
        DELETE each ``delete`` key (the broker default applies again). Any broker would serve
        it (it writes the overrides to ZooKeeper itself, as Kafka's brokers do); this client
        sends it to the controller, as librdkafka does. Every broker applies the change to its
        logs without a restart. An unknown key or a bad value raises INVALID_CONFIG naming it;
        an unknown topic UNKNOWN_TOPIC_OR_PARTITION."""
        request = pb.IncrementalAlterConfigsRequest(validate_only=validate_only)
        resource = request.resources.add(resource_type=RESOURCE_TYPE_TOPIC, resource_name=topic)
        for name in delete:
            resource.configs.add(name=name, config_operation=OP_DELETE)
        for name, value in set.items():
            resource.configs.add(name=name, config_operation=OP_SET, value=value)
        response = await self._client.controller_call(
            proto.METHOD_INCREMENTAL_ALTER_CONFIGS, request
        )
        assert isinstance(response, pb.IncrementalAlterConfigsResponse)
        for result in response.responses:
            _raise_for(result.error_code, result.error_message, topic)

    # -- broker configs ---------------------------------------------------------------------

    async def _broker_call(self, broker_id: int | None, method: str, request: object) -> object:
        """Call broker ``broker_id`` (as Kafka's Admin sends a broker resource to that broker),
        or any broker for the cluster-wide default (None)."""
        if broker_id is None:
            return await self._client.call_any(method, request)
        await self._client.refresh_metadata()
        address = self._client.metadata.brokers.get(broker_id)
        if address is None:
            raise InvalidRequestError(f"Broker {broker_id} is not in the cluster")
        return await self._client.transport.call(
            address,
            method,
            request,  # type: ignore[arg-type]
            timeout_s=self._client.timeout_s,
        )

    async def describe_broker_configs(self, broker_id: int | None) -> list[ConfigEntry]:
        """Every config of broker ``broker_id`` (effective values, with their source), or
        the cluster-wide dynamic defaults (None), sorted by name."""
        name = "" if broker_id is None else str(broker_id)
        request = pb.DescribeConfigsRequest()
        request.resources.add(resource_type=RESOURCE_TYPE_BROKER, resource_name=name)
        response = await self._broker_call(broker_id, proto.METHOD_DESCRIBE_CONFIGS, request)
        return _config_entries(response)

    async def alter_broker_configs(
        self,
        broker_id: int | None,
        set: Mapping[str, str] = NO_CONFIGS,
        delete: Iterable[str] = (),
        *,
        validate_only: bool = False,
    ) -> None:
        """IncrementalAlterConfigs of broker ``broker_id``'s dynamic configs (None: the
        cluster-wide default); every broker it concerns applies them without a restart. A key
        that cannot change dynamically raises INVALID_REQUEST, a bad value INVALID_CONFIG."""
        name = "" if broker_id is None else str(broker_id)
        request = pb.IncrementalAlterConfigsRequest(validate_only=validate_only)
        resource = request.resources.add(resource_type=RESOURCE_TYPE_BROKER, resource_name=name)
        for key in delete:
            resource.configs.add(name=key, config_operation=OP_DELETE)
        for key, value in set.items():
            resource.configs.add(name=key, config_operation=OP_SET, value=value)
        response = await self._broker_call(
            broker_id, proto.METHOD_INCREMENTAL_ALTER_CONFIGS, request
        )
        assert isinstance(response, pb.IncrementalAlterConfigsResponse)
        for result in response.responses:
            if result.error_code:
                raise error_for_code(result.error_code)(result.error_message)

    # -- leader election --------------------------------------------------------------------

    async def elect_leaders(
        self, preferred: bool = True, partitions: Sequence[TopicPartition] | None = None
    ) -> dict[TopicPartition, KafkaError | None]:
        """A preferred (or unclean) election for ``partitions`` (None: every partition).
        Per partition: None when a leader was elected, else the error (ELECTION_NOT_NEEDED
        when the right replica already leads). A request-level error raises."""
        request = pb.ElectLeadersRequest(
            election_type=ELECTION_PREFERRED if preferred else ELECTION_UNCLEAN,
            timeout_ms=self.request_timeout_ms,
        )
        for tp in partitions or ():
            request.partitions.add(topic=tp.topic, partition=tp.partition)
        # A request-level NOT_CONTROLLER (not a per-item one) is retried here.
        response = pb.ElectLeadersResponse()
        async for attempt in self._client.retrying():
            with attempt:
                answer = await self._client.controller_call(proto.METHOD_ELECT_LEADERS, request)
                assert isinstance(answer, pb.ElectLeadersResponse)
                if answer.error_code:
                    raise error_for_code(answer.error_code)("leader election")
                response = answer
        results: dict[TopicPartition, KafkaError | None] = {}
        for r in response.results:
            tp = TopicPartition(r.topic, r.partition)
            results[tp] = error_for_code(r.error_code)(str(tp)) if r.error_code else None
        return results

    # -- records ----------------------------------------------------------------------------

    async def delete_records(
        self, offsets: Mapping[TopicPartition, int], timeout_ms: int = 30_000
    ) -> dict[TopicPartition, int]:
        """Delete the records below ``offsets[tp]`` (-1: the high watermark) in each partition;
        returns each partition's low watermark once every live replica has moved its log start
        offset there. A failed partition raises its error class (message naming it)."""
        results = await self.delete_records_results(offsets, timeout_ms)
        lows: dict[TopicPartition, int] = {}
        for tp, result in results.items():
            if isinstance(result, KafkaError):
                raise result
            lows[tp] = result
        return lows

    async def delete_records_results(
        self, offsets: Mapping[TopicPartition, int], timeout_ms: int = 30_000
    ) -> dict[TopicPartition, int | KafkaError]:
        """As :meth:`delete_records`, but per partition: the low watermark or the error (for
        tools that report each partition, as kafka-delete-records does). ``timeout_ms`` is
        how long a leader waits for its followers (REQUEST_TIMED_OUT after)."""
        results: dict[TopicPartition, int | KafkaError] = {}
        pending = dict(offsets)
        try:
            async for attempt in self._client.retrying():
                with attempt:
                    retry = await self._delete_records_round(pending, results, timeout_ms)
                    if retry is not None:
                        raise retry
        except (KafkaError, RpcError) as e:
            # Out of time with partitions still retriable: each gets its last error.
            for tp in pending:
                results.setdefault(tp, e if isinstance(e, KafkaError) else _rpc_failure(tp, e))
        return {tp: results[tp] for tp in offsets}

    async def _delete_records_round(
        self,
        pending: dict[TopicPartition, int],
        results: dict[TopicPartition, int | KafkaError],
        timeout_ms: int,
    ) -> KafkaError | RpcError | None:
        """Send the ``pending`` partitions to their leaders; move each answered one to
        ``results`` and return a retriable error if some must go again (leader moved)."""
        metadata = await self._client.refresh_metadata(sorted({tp.topic for tp in pending}))
        unknown_topics = {
            t.name for t in metadata.topics if t.error_code == UNKNOWN_TOPIC_OR_PARTITION
        }
        by_leader: dict[int, list[TopicPartition]] = {}
        retry: KafkaError | RpcError | None = None
        for tp in sorted(pending):
            leader = self._client.metadata.leader(tp)
            if tp.topic in unknown_topics or not self._client.metadata.has_partition(tp):
                results[tp] = UnknownTopicOrPartitionError(f"Partition {tp} does not exist.")
                del pending[tp]
            elif leader < 0:
                retry = LeaderNotAvailableError(f"no leader for partition {tp}")
            else:
                by_leader.setdefault(leader, []).append(tp)
        for leader, tps in sorted(by_leader.items()):
            request = pb.DeleteRecordsRequest(timeout_ms=timeout_ms)
            for tp in tps:
                request.partitions.add(topic=tp.topic, partition=tp.partition, offset=pending[tp])
            try:
                response = await self._client.transport.call(
                    self._client.metadata.brokers[leader],
                    proto.METHOD_DELETE_RECORDS,
                    request,
                    timeout_s=timeout_ms / 1000 + self._client.timeout_s,
                )
            except RpcError as e:
                retry = e
                continue
            assert isinstance(response, pb.DeleteRecordsResponse)
            for r in response.partitions:
                tp = TopicPartition(r.topic, r.partition)
                if tp not in pending:
                    continue
                if r.error_code in INVALID_METADATA_CODES:
                    retry = error_for_code(r.error_code)(_naming(r.error_message, tp))
                    continue
                del pending[tp]
                results[tp] = (
                    error_for_code(r.error_code)(_naming(r.error_message, tp))
                    if r.error_code
                    else r.low_watermark
                )
        return retry if pending else None


def _naming(message: str, tp: TopicPartition) -> str:
    """``message``, naming partition ``tp`` if it does not already."""
    name = str(tp)
    if name in message:
        return message
    return f"partition {name}: {message}" if message else f"partition {name}"


def _rpc_failure(tp: TopicPartition, e: RpcError) -> KafkaError:
    return error_for_name("NETWORK_EXCEPTION")(f"partition {tp}: {e}")
