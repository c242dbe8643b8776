"""SASL on the Kafka listener with real processes: confluent-kafka (librdkafka: SaslHandshake
v1 + SaslAuthenticate) and kafka-python produce and consume over SASL_PLAINTEXT with PLAIN
and SCRAM-SHA-256/512, and over SASL_SSL with SCRAM; SCRAM users are managed with
``kafkasim configs --entity-type users`` and reach the broker without a restart; a wrong
password is refused with a clear error, logged, and the broker goes on serving."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, Producer
from confluent_kafka import TopicPartition as CkPartition
from confluent_kafka.admin import AdminClient as CkAdmin
from kafka import KafkaConsumer, KafkaProducer
from kafka import TopicPartition as KpPartition
from kafka.errors import KafkaError as KpError

from kafkasim.cluster.local import LocalCluster
from kafkasim.common.sasl import jaas_config
from tests.cli_run import kafkasim, local_cluster
from tests.interop.kafkasim_side import DEADLINE_S

COUNT = 10
PLAIN_USERS = {"admin": "admin-secret", "alice": "alice-secret"}
SASL_PROPS: dict[str, object] = {
    "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,KAFKA:SASL_PLAINTEXT",
    "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
    "listener.name.kafka.plain.sasl.jaas.config": jaas_config(
        "PLAIN", "admin", "admin-secret", **PLAIN_USERS
    ),
    "offsets.topic.replication.factor": 1,
}


@pytest.fixture(scope="module")
def sasl_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with local_cluster(tmp_path_factory.mktemp("sasl"), brokers=1, broker_props=SASL_PROPS) as c:
        yield c


def ck_config(cluster: LocalCluster, mechanism: str, user: str, password: str) -> dict[str, str]:
    return {
        "bootstrap.servers": cluster.kafka_bootstrap,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": mechanism,
        "sasl.username": user,
        "sasl.password": password,
    }


def ck_round_trip(config: dict[str, str], topic: str) -> list[bytes]:
    """Produce COUNT records to ``topic`` (auto-created) and read them back."""
    producer = Producer({**config, "acks": "all"})
    errors: list[object] = []
    for i in range(COUNT):
        producer.produce(topic, b"c%d" % i, on_delivery=lambda e, _m: e and errors.append(e))
    assert producer.flush(DEADLINE_S) == 0 and errors == []
    consumer = Consumer({**config, "group.id": f"g-{topic}", "enable.auto.commit": False})
    got: list[bytes] = []
    try:
        consumer.assign([CkPartition(topic, 0, OFFSET_BEGINNING)])
        deadline = time.monotonic() + DEADLINE_S
        while len(got) < COUNT and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error():
                raise KafkaException(msg.error())
            got.append(msg.value())
    finally:
        consumer.close()
    return got


def kp_round_trip(args: dict[str, object], topic: str) -> list[bytes]:
    producer = KafkaProducer(acks="all", **args)
    try:
        for i in range(COUNT):
            producer.send(topic, b"p%d" % i, partition=0)
        producer.flush(DEADLINE_S)
    finally:
        producer.close()
    consumer = KafkaConsumer(enable_auto_commit=False, **args)
    got: list[bytes] = []
    try:
        tp = KpPartition(topic, 0)
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        deadline = time.monotonic() + DEADLINE_S
        while len(got) < COUNT and time.monotonic() < deadline:
            for batch in consumer.poll(timeout_ms=500).values():
                got.extend(r.value for r in batch)
    finally:
        consumer.close()
    return got


def ck_metadata_error(config: dict[str, str]) -> str:
    """What confluent-kafka's admin says when asked for metadata ("" if it got an answer)."""
    admin = CkAdmin({**config, "socket.timeout.ms": 3000})
    try:
        admin.list_topics(timeout=5)
    except KafkaException as e:
        return str(e)
    return ""


def kp_refused(**args: object) -> None:
    """kafka-python's producer cannot get metadata with these settings (the api_version
    given: its constructor does not connect, and it is closed whatever happens)."""
    producer = KafkaProducer(api_version=(2, 5), max_block_ms=5000, **args)
    try:
        with pytest.raises(KpError):
            producer.partitions_for("any")
    finally:
        producer.close(timeout=5)


def test_confluent_kafka_over_sasl_plain(sasl_cluster: LocalCluster) -> None:
    config = ck_config(sasl_cluster, "PLAIN", "alice", "alice-secret")
    assert ck_round_trip(config, "ck-plain") == [b"c%d" % i for i in range(COUNT)]


def test_kafka_python_over_sasl_plain(sasl_cluster: LocalCluster) -> None:
    args: dict[str, object] = {
        "bootstrap_servers": sasl_cluster.kafka_bootstrap,
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": "PLAIN",
        "sasl_plain_username": "alice",
        "sasl_plain_password": "alice-secret",
    }
    assert kp_round_trip(args, "kp-plain") == [b"p%d" % i for i in range(COUNT)]


def test_a_wrong_password_is_refused_and_the_broker_goes_on(sasl_cluster: LocalCluster) -> None:
    wrong = ck_config(sasl_cluster, "PLAIN", "alice", "not-her-password")
    error = ck_metadata_error(wrong)
    assert error != ""
    unknown = ck_config(sasl_cluster, "PLAIN", "mallory", "x")
    assert ck_metadata_error(unknown) != ""
    kp_refused(
        bootstrap_servers=sasl_cluster.kafka_bootstrap,
        security_protocol="SASL_PLAINTEXT",
        sasl_mechanism="PLAIN",
        sasl_plain_username="alice",
        sasl_plain_password="wrong",
    )
    log = sasl_cluster.brokers[1].log_path.read_text()
    assert (
        "Failed authentication with /127.0.0.1 (Authentication failed: Invalid username or "
        "password (SASL_AUTHENTICATION_FAILED))"
    ) in log
    assert ck_metadata_error(ck_config(sasl_cluster, "PLAIN", "alice", "alice-secret")) == ""
    assert sasl_cluster.brokers[1].running


def users(cluster: LocalCluster, *args: str) -> str:
    """``kafkasim configs --entity-type users ARGS`` against the cluster's ZooKeeper."""
    done = kafkasim(
        "configs", "--zookeeper", cluster.zookeeper.connect_string, "--entity-type", "users",
        *args,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_scram_users_managed_with_configs_reach_the_broker(sasl_cluster: LocalCluster) -> None:
    """Added, described (mechanisms and iterations, no secret), used by confluent-kafka
    (SHA-256 and SHA-512) and kafka-python (SHA-256), then deleted: refused afterwards."""
    added = users(
        sasl_cluster, "--entity-name", "carol", "--alter", "--add-config",
        "SCRAM-SHA-256=[iterations=8192,password=carol-secret],"
        "SCRAM-SHA-512=[password=carol-secret]",
    )  # fmt: skip
    assert added.strip() == "Completed updating config for user carol."
    described = users(sasl_cluster, "--entity-name", "carol", "--describe")
    assert described.strip() == (
        "SCRAM credential configs for user-principal 'carol' are "
        "SCRAM-SHA-256=iterations=8192, SCRAM-SHA-512=iterations=4096"
    )
    assert "salt" not in described and "carol-secret" not in described
    for mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
        config = ck_config(sasl_cluster, mechanism, "carol", "carol-secret")
        topic = f"ck-{mechanism.lower()}"
        assert ck_round_trip(config, topic) == [b"c%d" % i for i in range(COUNT)], mechanism
    args: dict[str, object] = {
        "bootstrap_servers": sasl_cluster.kafka_bootstrap,
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": "SCRAM-SHA-256",
        "sasl_plain_username": "carol",
        "sasl_plain_password": "carol-secret",
    }
    assert kp_round_trip(args, "kp-scram") == [b"p%d" % i for i in range(COUNT)]
    wrong = ck_config(sasl_cluster, "SCRAM-SHA-256", "carol", "not-carols")
    assert ck_metadata_error(wrong) != ""
    users(sasl_cluster, "--entity-name", "carol", "--alter", "--delete-config", "SCRAM-SHA-256")
    assert "SCRAM-SHA-256" not in users(sasl_cluster, "--describe")
    deadline = time.monotonic() + DEADLINE_S
    config = ck_config(sasl_cluster, "SCRAM-SHA-256", "carol", "carol-secret")
    while ck_metadata_error(config) == "" and time.monotonic() < deadline:
        time.sleep(0.2)  # the notification reaches the broker
    assert ck_metadata_error(config) != ""
    sha512 = ck_config(sasl_cluster, "SCRAM-SHA-512", "carol", "carol-secret")
    assert ck_metadata_error(sha512) == ""
    log = sasl_cluster.brokers[1].log_path.read_text()
    assert "due to invalid credentials with SASL mechanism SCRAM-SHA-256" in log


def test_bad_users_commands_say_what_is_wrong(sasl_cluster: LocalCluster) -> None:
    zk = sasl_cluster.zookeeper.connect_string
    for add, why in [
        ("SCRAM-SHA-256=[iterations=100,password=x]", "less than the minimum 4096"),
        ("SCRAM-SHA-1=[password=x]", "only SCRAM-SHA-256, SCRAM-SHA-512 are supported"),
        ("SCRAM-SHA-256=[iterations=4096]", "expected SCRAM-SHA-256=[iterations=N,password=P]"),
    ]:
        done = kafkasim(
            "configs", "--zookeeper", zk, "--entity-type", "users", "--entity-name", "dave",
            "--alter", "--add-config", add,
        )  # fmt: skip
        assert done.returncode == 1 and why in done.stderr, done.stderr
