"""Kafka's admin APIs with real clients: confluent-kafka's AdminClient (librdkafka) creates,
describes, alters and deletes topics, grows them, deletes records and elects leaders;
kafka-python describes log dirs and producers; kcat lists the metadata; raw requests send
config changes to brokers that are not the controller, as the Java AdminClient may. One
3-broker cluster for the module; every wait polls against a deadline."""

from __future__ import annotations

import datetime
import io
import socket
import struct
import subprocess
import time
import warnings
from collections.abc import Callable
from typing import Any, TypeVar

import pytest
from confluent_kafka import Consumer as KafkaConsumer
from confluent_kafka import (
    ElectionType,
    KafkaError,
    KafkaException,
    Producer,
    TopicCollection,
    TopicPartition,
)
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewPartitions,
    NewTopic,
    ResourceType,
)
from kio.index import load_response_schema
from kio.schema.alter_configs.v1.request import AlterableConfig as LegacyAlterableConfig
from kio.schema.alter_configs.v1.request import AlterConfigsRequest
from kio.schema.alter_configs.v1.request import AlterConfigsResource as LegacyAlterableResource
from kio.schema.create_topics.v7.request import CreatableTopic, CreateTopicsRequest
from kio.schema.describe_configs.v1.request import DescribeConfigsRequest, DescribeConfigsResource
from kio.schema.incremental_alter_configs.v1.request import (
    AlterableConfig as IncrementalAlterableConfig,
)
from kio.schema.incremental_alter_configs.v1.request import (
    AlterConfigsResource as IncrementalAlterableResource,
)
from kio.schema.incremental_alter_configs.v1.request import IncrementalAlterConfigsRequest
from kio.schema.metadata.v1.request import MetadataRequest
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import i8, i16, i32, i32Timedelta

from kafkasim.cluster.local import LocalCluster

with warnings.catch_warnings():
    # kafka-python reads its schemas with a deprecated importlib call at import.
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka import TopicPartition as KafkaPythonTopicPartition
    from kafka.admin import KafkaAdminClient

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

T = TypeVar("T")
DEADLINE_S = 60.0


def eventually(check: Callable[[], T | None], what: str, timeout_s: float = DEADLINE_S) -> T:
    """``check()`` until it returns something other than None (exceptions count as not yet)."""
    deadline = time.monotonic() + timeout_s
    last: BaseException | None = None
    while time.monotonic() < deadline:
        try:
            value = check()
        except (KafkaException, AssertionError) as e:
            last, value = e, None
        if value is not None:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what} (last error: {last!r})")


def admin(cluster: LocalCluster) -> AdminClient:
    return AdminClient({"bootstrap.servers": cluster.kafka_bootstrap})


def error_of(future: Any) -> KafkaError | None:
    try:
        future.result(timeout=DEADLINE_S)
    except KafkaException as e:
        error: KafkaError = e.args[0]
        return error
    return None


def create(client: AdminClient, *topics: NewTopic, validate_only: bool = False) -> None:
    futures = client.create_topics(
        list(topics), validate_only=validate_only, operation_timeout=30, request_timeout=60
    )
    for future in futures.values():
        future.result(timeout=DEADLINE_S)


def topic_configs(client: AdminClient, topic: str) -> dict[str, Any]:
    futures = client.describe_configs([ConfigResource(ResourceType.TOPIC, topic)])
    configs: dict[str, Any] = next(iter(futures.values())).result(timeout=DEADLINE_S)
    return configs


def leaders(client: AdminClient, topic: str) -> dict[int, int]:
    metadata = client.list_topics(topic, timeout=30)
    return {p.id: p.leader for p in metadata.topics[topic].partitions.values()}


def raw_request(address: str, request: Any) -> Any:
    """One request on a fresh connection to ``address``, its response decoded (kio)."""
    header_cls = request.__header_schema__
    header = header_cls(
        request_api_key=request.__api_key__,
        request_api_version=request.__version__,
        correlation_id=i32(7),
        client_id="interop",
    )
    buffer = io.BytesIO()
    entity_writer(header_cls)(buffer, header)
    entity_writer(type(request))(buffer, request)
    data = buffer.getvalue()
    host, port = address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=DEADLINE_S) as sock:
        sock.sendall(struct.pack(">i", len(data)) + data)
        frame = b""
        while len(frame) < 4 or len(frame) < 4 + struct.unpack(">i", frame[:4])[0]:
            chunk = sock.recv(65536)
            assert chunk, "connection closed before the response"
            frame += chunk
    schema = load_response_schema(request.__api_key__, request.__version__)
    payload = frame[4:]
    _, offset = entity_reader(schema.__header_schema__)(payload, 0)
    body, _ = entity_reader(schema)(payload, offset)
    return body


def test_controller_is_the_one_metadata_names(kafka_cluster: LocalCluster) -> None:
    """Every broker names the same controller; it creates topics, the others answer
    NOT_CONTROLLER (so that clients follow Metadata's controller_id)."""
    client = admin(kafka_cluster)
    described = client.describe_cluster(request_timeout=30).result(timeout=DEADLINE_S)
    assert sorted(n.id for n in described.nodes) == [1, 2, 3]
    controller = described.controller.id
    for broker in kafka_cluster.brokers.values():
        other = KafkaAdminClient(bootstrap_servers=broker.kafka_address)
        try:
            assert other.describe_cluster()["controller_id"] == controller
        finally:
            other.close()
    for broker_id, broker in kafka_cluster.brokers.items():
        request = CreateTopicsRequest(
            topics=(
                CreatableTopic(
                    name=f"raw-{broker_id}",
                    num_partitions=i32(1),
                    replication_factor=i16(1),
                    assignments=(),
                    configs=(),
                ),
            ),
            timeout=i32Timedelta.parse(datetime.timedelta(seconds=30)),
            validate_only=True,
        )
        answer = raw_request(broker.kafka_address, request).topics[0]
        expected = 0 if broker_id == controller else 41  # NOT_CONTROLLER
        assert (answer.name, int(answer.error_code)) == (f"raw-{broker_id}", expected)
        if broker_id == controller:  # v5+: what the topic would get
            assert (answer.num_partitions, answer.replication_factor) == (1, 1)
            assert {c.name for c in answer.configs} >= {"retention.ms", "cleanup.policy"}


def test_create_describe_and_delete_topics(kafka_cluster: LocalCluster) -> None:
    client = admin(kafka_cluster)
    create(
        client,
        NewTopic("orders", 3, 3, config={"retention.ms": "7200000"}),
        NewTopic("defaults"),  # -1/-1: num.partitions and default.replication.factor
    )
    create(client, NewTopic("only-validated", 2, 1), validate_only=True)

    def listed() -> dict[str, Any] | None:
        topics: dict[str, Any] = client.list_topics(timeout=30).topics
        return topics if "defaults" in topics else None

    topics = eventually(listed, "the new topics in Metadata")
    assert len(topics["orders"].partitions) == 3
    assert len(topics["defaults"].partitions) == 1
    assert "only-validated" not in topics
    described = client.describe_topics(TopicCollection(["orders"]))["orders"].result(timeout=60)
    assert all(len(p.replicas) == 3 for p in described.partitions)

    futures = client.create_topics(
        [
            NewTopic("orders", 1, 1),
            NewTopic("too-many-replicas", 1, 5),
            NewTopic("bad-config", 1, 1, config={"retention.ms": "soon"}),
            NewTopic("unknown-config", 1, 1, config={"no.such.key": "1"}),
            NewTopic("zero-partitions", 0, 1),
        ],
        request_timeout=60,
    )
    codes = {name: error_of(f) for name, f in futures.items()}
    assert {name: e.code() if e else None for name, e in codes.items()} == {
        "orders": KafkaError.TOPIC_ALREADY_EXISTS,
        "too-many-replicas": KafkaError.INVALID_REPLICATION_FACTOR,
        "bad-config": KafkaError.INVALID_CONFIG,
        "unknown-config": KafkaError.INVALID_CONFIG,
        "zero-partitions": KafkaError.INVALID_PARTITIONS,
    }
    assert "5" in codes["too-many-replicas"].str()  # type: ignore[union-attr]

    for future in client.delete_topics(["defaults"], operation_timeout=30).values():
        future.result(timeout=DEADLINE_S)
    eventually(
        lambda: True if "defaults" not in client.list_topics(timeout=30).topics else None,
        "the deleted topic gone from Metadata",
    )
    missing = client.delete_topics(["never-was"], operation_timeout=30)["never-was"]
    assert error_of(missing).code() == KafkaError.UNKNOWN_TOPIC_OR_PART  # type: ignore[union-attr]


def test_describe_and_alter_configs(kafka_cluster: LocalCluster) -> None:
    client = admin(kafka_cluster)
    create(client, NewTopic("configured", 1, 1, config={"retention.ms": "3600000"}))
    configs = topic_configs(client, "configured")
    assert configs["retention.ms"].value == "3600000"
    assert configs["retention.ms"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert configs["cleanup.policy"].value == "delete"
    assert configs["cleanup.policy"].source == ConfigSource.DEFAULT_CONFIG.value

    broker = ConfigResource(ResourceType.BROKER, "1")
    broker_configs = next(iter(client.describe_configs([broker]).values())).result(timeout=60)
    assert broker_configs["broker.id"].value == "1"
    assert broker_configs["broker.id"].source == ConfigSource.STATIC_BROKER_CONFIG.value
    assert broker_configs["broker.id"].is_read_only

    # Legacy AlterConfigs replaces the whole set: retention.ms goes back to the default.
    legacy = ConfigResource(ResourceType.TOPIC, "configured", set_config={"segment.ms": "600000"})
    next(iter(client.alter_configs([legacy]).values())).result(timeout=DEADLINE_S)
    configs = eventually(
        lambda: (
            c
            if (c := topic_configs(client, "configured"))["segment.ms"].value == "600000"
            else None
        ),
        "the legacy alteration",
    )
    assert configs["retention.ms"].source == ConfigSource.DEFAULT_CONFIG.value
    assert configs["retention.ms"].value == "604800000"

    incremental = ConfigResource(
        ResourceType.TOPIC,
        "configured",
        incremental_configs=[
            ConfigEntry("retention.bytes", "1048576", incremental_operation=AlterConfigOpType.SET),
            ConfigEntry("segment.ms", None, incremental_operation=AlterConfigOpType.DELETE),
            ConfigEntry(
                "cleanup.policy", "compact", incremental_operation=AlterConfigOpType.APPEND
            ),
        ],
    )
    next(iter(client.incremental_alter_configs([incremental]).values())).result(timeout=60)
    configs = topic_configs(client, "configured")
    assert configs["retention.bytes"].value == "1048576"
    assert configs["segment.ms"].source == ConfigSource.DEFAULT_CONFIG.value
    assert configs["cleanup.policy"].value == "delete,compact"

    bad = ConfigResource(
        ResourceType.TOPIC,
        "configured",
        incremental_configs=[
            ConfigEntry("retention.ms", "1", incremental_operation=AlterConfigOpType.APPEND)
        ],
    )
    error = error_of(next(iter(client.incremental_alter_configs([bad]).values())))
    assert error is not None and error.code() == KafkaError.INVALID_REQUEST
    unknown = ConfigResource(ResourceType.TOPIC, "nowhere", set_config={"retention.ms": "1"})
    error = error_of(next(iter(client.alter_configs([unknown]).values())))
    assert error is not None and error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART


def described_topic(address: str, topic: str) -> dict[str, tuple[str | None, int]]:
    """DescribeConfigs v1 of ``topic`` sent to the broker at ``address``: value and source
    of every key."""
    request = DescribeConfigsRequest(
        resources=(
            DescribeConfigsResource(
                resource_type=i8(2), resource_name=topic, configuration_keys=None
            ),
        ),
    )
    (result,) = raw_request(address, request).results
    assert int(result.error_code) == 0, result
    return {c.name: (c.value, int(c.config_source)) for c in result.configs}


def incremental_alter(topic: str, *ops: tuple[str, int, str]) -> Any:
    """IncrementalAlterConfigs v1 of one topic: (key, operation, value) each."""
    configs = tuple(
        IncrementalAlterableConfig(name=name, config_operation=i8(op), value=value)
        for name, op, value in ops
    )
    resource = IncrementalAlterableResource(
        resource_type=i8(2), resource_name=topic, configs=configs
    )
    return IncrementalAlterConfigsRequest(resources=(resource,), validate_only=False)


def test_config_changes_are_served_by_a_broker_that_is_not_the_controller(
    kafka_cluster: LocalCluster,
) -> None:
    """The Java AdminClient sends AlterConfigs and IncrementalAlterConfigs to any broker (the
    least loaded one); Kafka's brokers all serve them. Sent here on raw connections to the two
    brokers that are not the controller Metadata names, the changes show in DescribeConfigs on
    every broker; a bad value is INVALID_CONFIG and changes nothing."""
    create(admin(kafka_cluster), NewTopic("altered-anywhere", 1, 3))
    metadata = raw_request(kafka_cluster.kafka_bootstrap.split(",")[0], MetadataRequest(topics=()))
    controller = int(metadata.controller_id)
    assert controller in kafka_cluster.brokers
    first, second = (b for b in sorted(kafka_cluster.brokers) if b != controller)
    addresses = [b.kafka_address for b in kafka_cluster.brokers.values()]

    def on_every_broker(check: Callable[[dict[str, tuple[str | None, int]]], bool]) -> None:
        for address in addresses:
            eventually(
                lambda a=address: True if check(described_topic(a, "altered-anywhere")) else None,
                f"the change in DescribeConfigs of {address}",
            )

    incremental = incremental_alter(
        "altered-anywhere", ("retention.ms", 0, "123456"), ("cleanup.policy", 2, "compact")
    )
    answer = raw_request(kafka_cluster.brokers[first].kafka_address, incremental)
    assert [(r.resource_name, int(r.error_code)) for r in answer.responses] == [
        ("altered-anywhere", 0)
    ]
    on_every_broker(
        lambda c: c["retention.ms"] == ("123456", 1) and c["cleanup.policy"][0] == "delete,compact"
    )

    legacy = AlterConfigsRequest(
        resources=(
            LegacyAlterableResource(
                resource_type=i8(2),
                resource_name="altered-anywhere",
                configs=(LegacyAlterableConfig(name="segment.ms", value="600000"),),
            ),
        ),
        validate_only=False,
    )
    answer = raw_request(kafka_cluster.brokers[second].kafka_address, legacy)
    assert [(r.resource_name, int(r.error_code)) for r in answer.responses] == [
        ("altered-anywhere", 0)
    ]
    # Legacy AlterConfigs replaces the whole set: retention.ms is back to its default.
    on_every_broker(lambda c: c["segment.ms"] == ("600000", 1) and c["retention.ms"][1] == 5)

    bad = incremental_alter("altered-anywhere", ("segment.ms", 0, "soon"))
    (refused,) = raw_request(kafka_cluster.brokers[second].kafka_address, bad).responses
    assert int(refused.error_code) == 40, refused  # INVALID_CONFIG
    assert "segment.ms" in (refused.error_message or "")
    assert described_topic(kafka_cluster.brokers[first].kafka_address, "altered-anywhere")[
        "segment.ms"
    ] == ("600000", 1)


def test_create_partitions(kafka_cluster: LocalCluster) -> None:
    client = admin(kafka_cluster)
    create(client, NewTopic("growing", 1, 2))
    grow = client.create_partitions([NewPartitions("growing", 4)], operation_timeout=30)
    grow["growing"].result(timeout=DEADLINE_S)
    eventually(
        lambda: (
            True
            if len(client.list_topics("growing", timeout=30).topics["growing"].partitions) == 4
            else None
        ),
        "four partitions in Metadata",
    )
    shrink = client.create_partitions([NewPartitions("growing", 2)])["growing"]
    assert error_of(shrink).code() == KafkaError.INVALID_PARTITIONS  # type: ignore[union-attr]


def test_delete_records_moves_the_low_watermark(kafka_cluster: LocalCluster) -> None:
    client = admin(kafka_cluster)
    create(client, NewTopic("trimmed", 1, 3))
    producer = Producer({"bootstrap.servers": kafka_cluster.kafka_bootstrap, "acks": "all"})
    for i in range(10):
        producer.produce("trimmed", f"r{i}".encode(), partition=0)
    assert producer.flush(DEADLINE_S) == 0
    deleted = client.delete_records([TopicPartition("trimmed", 0, 6)], operation_timeout=30)
    result = next(iter(deleted.values())).result(timeout=DEADLINE_S)
    assert result.low_watermark == 6
    consumer = KafkaConsumer(
        {"bootstrap.servers": kafka_cluster.kafka_bootstrap, "group.id": "trim-check"}
    )
    try:
        low, high = consumer.get_watermark_offsets(TopicPartition("trimmed", 0), timeout=30)
    finally:
        consumer.close()
    assert (low, high) == (6, 10)
    past_end = client.delete_records([TopicPartition("trimmed", 0, 50)])
    error = error_of(next(iter(past_end.values())))
    assert error is not None and error.code() == KafkaError.OFFSET_OUT_OF_RANGE


def test_preferred_election_after_a_restart(kafka_cluster: LocalCluster) -> None:
    client = admin(kafka_cluster)
    controller = client.describe_cluster().result(timeout=DEADLINE_S).controller.id
    victim = next(b for b in sorted(kafka_cluster.brokers) if b != controller)
    others = [b for b in sorted(kafka_cluster.brokers) if b != victim]
    create(client, NewTopic("elected", 1, replica_assignment=[[victim, *others]]))
    tp = TopicPartition("elected", 0)
    eventually(lambda: True if leaders(client, "elected").get(0) == victim else None, "leader")

    kafka_cluster.kill(victim)
    eventually(lambda: True if leaders(client, "elected").get(0) != victim else None, "failover")
    kafka_cluster.start_broker(victim)
    kafka_cluster.wait_serving(victim)

    def elect() -> bool | None:
        outcome = client.elect_leaders(ElectionType.PREFERRED, [tp]).result(timeout=DEADLINE_S)
        error = outcome[tp]
        assert error is None or error.code() == KafkaError.ELECTION_NOT_NEEDED, error
        return True if leaders(client, "elected").get(0) == victim else None

    eventually(elect, "the preferred leader back", timeout_s=120)
    again = client.elect_leaders(ElectionType.PREFERRED, [tp]).result(timeout=DEADLINE_S)
    assert again[tp] is not None and again[tp].code() == KafkaError.ELECTION_NOT_NEEDED
    unknown = TopicPartition("no-such-topic", 0)
    outcome = client.elect_leaders(ElectionType.PREFERRED, [unknown]).result(timeout=60)
    assert outcome[unknown].code() == KafkaError.UNKNOWN_TOPIC_OR_PART


def test_log_dirs_producers_and_kcat_listing(kafka_cluster: LocalCluster) -> None:
    client = admin(kafka_cluster)
    create(client, NewTopic("listed", 2, 1))
    producer = Producer(
        {"bootstrap.servers": kafka_cluster.kafka_bootstrap, "enable.idempotence": True}
    )
    for i in range(5):
        producer.produce("listed", f"r{i}".encode(), partition=0)
    assert producer.flush(DEADLINE_S) == 0

    other = KafkaAdminClient(bootstrap_servers=kafka_cluster.kafka_bootstrap)
    try:
        producers = other.describe_producers([KafkaPythonTopicPartition("listed", 0)])
        (state,) = producers.values()
        (active,) = state.active_producers
        assert active.last_sequence == 4
        dirs = other.describe_log_dirs(topic_partitions={"listed": [0, 1]})
    finally:
        other.close()
    held = {
        (t["name"], p["partition_index"]): p["partition_size"]
        for broker in dirs
        for d in broker["log_dirs"]
        for t in d["topics"]
        for p in t["partitions"]
    }
    assert set(held) == {("listed", 0), ("listed", 1)}, dirs
    assert held["listed", 0] > 0 and held["listed", 1] == 0, dirs
    assert all(d["error_code"] == 0 and d["usable_bytes"] > 0 for b in dirs for d in b["log_dirs"])

    listing = subprocess.run(
        ["kcat", "-L", "-b", kafka_cluster.kafka_bootstrap, "-m", "30"],
        capture_output=True,
        text=True,
        timeout=DEADLINE_S,
        check=True,
    ).stdout
    assert " 3 brokers:" in listing, listing
    assert 'topic "listed" with 2 partitions:' in listing, listing
