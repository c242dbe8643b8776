"""The internal topics a broker creates on first use: their partitions, replication factor and
configs come from the broker's config."""

from __future__ import annotations

from kafkasim.node.config import BrokerConfig
from kafkasim.node.topic_creation import TopicCreator
from kafkasim.proto import kafkasim_pb2 as pb


async def _never_topics(request: pb.CreateTopicsRequest) -> pb.CreateTopicsResponse:
    raise AssertionError("no topic is created here")


async def _never_internal(topic: pb.CreatableTopic) -> tuple[int, str]:
    raise AssertionError("no topic is created here")


def creator(**props: object) -> TopicCreator:
    base: dict[str, object] = {"broker.id": 1, "log.dirs": "/nonexistent", "zookeeper.connect": "z"}
    config = BrokerConfig.from_props({**base, **props})
    return TopicCreator(config, _never_topics, _never_internal)


def test_transaction_state_topic_takes_the_transaction_state_log_settings() -> None:
    topic = creator(
        **{
            "transaction.state.log.num.partitions": 7,
            "transaction.state.log.replication.factor": 2,
            "transaction.state.log.min.isr": 1,
            "transaction.state.log.segment.bytes": 1048576,
        }
    ).transaction_state_topic()
    assert (topic.name, topic.num_partitions, topic.replication_factor) == (
        "__transaction_state",
        7,
        2,
    )
    assert dict(topic.configs) == {
        "cleanup.policy": "compact",
        "compression.type": "uncompressed",
        "unclean.leader.election.enable": "false",
        "min.insync.replicas": "1",
        "segment.bytes": "1048576",
    }


def test_transaction_state_topic_defaults_are_kafkas() -> None:
    topic = creator().transaction_state_topic()
    assert (topic.num_partitions, topic.replication_factor) == (50, 3)
    assert topic.configs["min.insync.replicas"] == "2"
    assert topic.configs["segment.bytes"] == str(100 * 1024 * 1024)


def test_auto_creation_of_an_internal_topic_uses_its_own_settings() -> None:
    c = creator(**{"transaction.state.log.num.partitions": 3, "num.partitions": 9})
    assert c.auto_topic("__transaction_state") == c.transaction_state_topic()
    assert c.auto_topic("__consumer_offsets") == c.offsets_topic()
    assert c.auto_topic("plain").num_partitions == 9
