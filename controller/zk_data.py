"""ZooKeeper paths and JSON payloads, exactly as Kafka's ZooKeeper mode writes them (ZkData).

Pure: bytes in, values out. Used by the controller and by brokers (registration, ISR writes).

::

    /controller                                   ephemeral {"version":1,"brokerid":B,
                                                   "timestamp":"ms"}
    /controller_epoch                             "N"; its znode version fences zombie controllers
    /brokers/ids/<id>                             ephemeral, broker registration (version 5 JSON)
    /brokers/topics/<t>                           {"version":2,"partitions":{"0":[1,2,3]},...}
    /brokers/topics/<t>/partitions/<p>/state      {"controller_epoch":C,"leader":L,"version":1,
                                                   "leader_epoch":E,"isr":[...]}
    /config/topics/<t>                            {"version":1,"config":{...}}
    /config/changes/config_change_<seq>           {"version":2,"entity_path":"topics/<t>"}
    /config/users/<user>                          {"version":1,"config":{"SCRAM-SHA-256":"…"}}
    /admin/delete_topics/<t>                      deletion request (empty)
    /admin/preferred_replica_election             {"version":1,"partitions":[...]}
    /isr_change_notification/isr_change_<seq>     {"version":1,"partitions":[{"topic","partition"}]}
    /latest_producer_id_block                     {"version":1,"broker":B,"block_start":"s",
                                                   "block_end":"e"}
    /cluster/id                                   {"version":"1","id":"..."}
    /brokers/seqid                                broker id generation (its znode version)
"""

from __future__ import annotations

import dataclasses
import json
import urllib.parse
from dataclasses import dataclass, field
from typing import Any

from kafkasim.common.types import TopicPartition
from kafkasim.common.zk_acl import CREATOR_ALL_ACL, OPEN_ACL_UNSAFE, READ_ACL_UNSAFE, Acl

CONTROLLER = "/controller"
CONTROLLER_EPOCH = "/controller_epoch"
BROKER_IDS = "/brokers/ids"
BROKER_TOPICS = "/brokers/topics"
BROKER_SEQID = "/brokers/seqid"
CONFIG_TOPICS = "/config/topics"
CONFIG_CHANGES = "/config/changes"
CONFIG_CHANGE_PREFIX = "config_change_"
DELETE_TOPICS = "/admin/delete_topics"
PREFERRED_REPLICA_ELECTION = "/admin/preferred_replica_election"
ISR_CHANGE_NOTIFICATION = "/isr_change_notification"
ISR_CHANGE_PREFIX = "isr_change_"
LATEST_PRODUCER_ID_BLOCK = "/latest_producer_id_block"
CLUSTER_ID = "/cluster/id"
CONSUMERS = "/consumers"

# Created at startup by whoever gets there first (Kafka's ZkData.PersistentZkPaths).
PERSISTENT_PATHS = (
    CONSUMERS,
    BROKER_IDS,
    BROKER_TOPICS,
    CONFIG_CHANGES,
    "/config/topics",
    "/config/clients",
    "/config/users",  # SCRAM credentials (ConfigType.User); sensitive under set.acl
    "/config/brokers",
    "/admin/delete_topics",
    BROKER_SEQID,
    ISR_CHANGE_NOTIFICATION,
    "/cluster",
)

# zookeeper.set.acl=true: the znodes only the brokers may read (ZkData.SensitiveRootPaths:
# SCRAM credentials, dynamic broker configs with their passwords, delegation tokens). The old
# consumers' path (CONSUMERS) stays open (ZkData.defaultAcls), as old consumers write under it.
SENSITIVE_ROOT_PATHS = ("/config/users", "/config/brokers", "/delegation_token/tokens")


def is_sensitive(path: str) -> bool:
    """Kafka's ZkData.sensitivePath: the path starts with a sensitive root."""
    return any(path.startswith(root) for root in SENSITIVE_ROOT_PATHS)


def default_acls(path: str, secure: bool) -> tuple[Acl, ...]:
    """Kafka's ZkData.defaultAcls: with ``secure`` (zookeeper.set.acl) the creator — the
    brokers' shared ZooKeeper identity — gets everything and the world may read, except on
    the sensitive paths; without it (and on /consumers) everyone may do everything."""
    if not secure or path == CONSUMERS:
        return OPEN_ACL_UNSAFE
    return CREATOR_ALL_ACL if is_sensitive(path) else (*CREATOR_ALL_ACL, *READ_ACL_UNSAFE)


PRODUCER_ID_BLOCK_SIZE = 1000
NO_LEADER = -1


def broker_path(broker_id: int) -> str:
    return f"{BROKER_IDS}/{broker_id}"


def topic_path(topic: str) -> str:
    return f"{BROKER_TOPICS}/{topic}"


def partitions_path(topic: str) -> str:
    return f"{BROKER_TOPICS}/{topic}/partitions"


def partition_path(tp: TopicPartition) -> str:
    return f"{BROKER_TOPICS}/{tp.topic}/partitions/{tp.partition}"


def partition_state_path(tp: TopicPartition) -> str:
    return f"{partition_path(tp)}/state"


def topic_config_path(topic: str) -> str:
    return f"{CONFIG_TOPICS}/{topic}"


def delete_topic_path(topic: str) -> str:
    return f"{DELETE_TOPICS}/{topic}"


def _dumps(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


def _loads(data: bytes, what: str) -> Any:
    try:
        return json.loads(data.decode())
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"malformed {what} znode data: {data[:80]!r}") from e


# -- /controller and /controller_epoch --------------------------------------------------------


def encode_controller(broker_id: int, timestamp_ms: int) -> bytes:
    return _dumps({"version": 1, "brokerid": broker_id, "timestamp": str(timestamp_ms)})


def decode_controller(data: bytes) -> int:
    obj = _loads(data, "controller")
    # Kafka 0.8 wrote a bare integer; later versions the JSON object.
    return int(obj) if isinstance(obj, int) else int(obj["brokerid"])


def encode_controller_epoch(epoch: int) -> bytes:
    return str(epoch).encode()


def decode_controller_epoch(data: bytes) -> int:
    return int(data.decode())


# -- /brokers/ids/<id> ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class BrokerInfo:
    """A broker registration: id, where the controller and replicas reach it (``host``,
    ``port``: its inter-broker listener), rack, its epoch (the czxid of its ephemeral znode,
    KIP-380: a restarted broker gets a higher one), and every advertised listener as
    ``(name, host, port)`` (empty: the one endpoint ``host:port``, named PLAINTEXT)."""

    broker_id: int
    host: str
    port: int
    rack: str | None = None
    epoch: int = -1
    endpoints: tuple[tuple[str, str, int], ...] = ()

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def listeners(self) -> tuple[tuple[str, str, int], ...]:
        return self.endpoints or (("PLAINTEXT", self.host, self.port),)


def encode_broker(info: BrokerInfo, timestamp_ms: int) -> bytes:
    """Kafka's version-5 registration: every listener under ``endpoints`` with its protocol
    (always PLAINTEXT here); ``host``/``port`` name the PLAINTEXT-protocol endpoint Kafka
    keeps for old clients, which is the first listener."""
    listeners = info.listeners
    obj: dict[str, Any] = {
        "listener_security_protocol_map": {name: "PLAINTEXT" for name, _, _ in listeners},
        "endpoints": [f"{name}://{host}:{port}" for name, host, port in listeners],
        "jmx_port": -1,
        "features": {},
        "host": listeners[0][1],
        "timestamp": str(timestamp_ms),
        "port": listeners[0][2],
        "version": 5,
    }
    if info.rack is not None:
        obj["rack"] = info.rack
    return _dumps(obj)


def decode_broker(
    broker_id: int, data: bytes, epoch: int = -1, listener: str = "PLAINTEXT"
) -> BrokerInfo:
    """A registration read back; ``host``/``port`` are those of ``listener`` (the reader's
    ``inter.broker.listener.name``, as Kafka's controller picks each broker's endpoint).
    A registration without that listener is a ValueError naming what it has."""
    obj = _loads(data, "broker registration")
    endpoints: list[tuple[str, str, int]] = []
    for endpoint in obj.get("endpoints") or []:
        name, _, address = str(endpoint).partition("://")
        host, _, port_s = address.rpartition(":")
        endpoints.append((name, host, int(port_s)))
    if not endpoints:
        endpoints.append(("PLAINTEXT", str(obj["host"]), int(obj["port"])))
    chosen = [e for e in endpoints if e[0] == listener]
    if not chosen:
        names = ", ".join(e[0] for e in endpoints)
        raise ValueError(f"broker {broker_id} has no listener {listener} (it has {names})")
    _, host, port = chosen[0]
    return BrokerInfo(broker_id, host, port, obj.get("rack"), epoch, tuple(endpoints))


# -- /brokers/topics/<t> ----------------------------------------------------------------------


def encode_topic_assignment(assignment: dict[int, list[int]]) -> bytes:
    return _dumps(
        {
            "version": 2,
            "partitions": {str(p): list(r) for p, r in sorted(assignment.items())},
            "adding_replicas": {},
            "removing_replicas": {},
        }
    )


def decode_topic_assignment(data: bytes) -> dict[int, list[int]]:
    obj = _loads(data, "topic assignment")
    return {int(p): [int(b) for b in r] for p, r in obj["partitions"].items()}


# -- partition state --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class LeaderAndIsr:
    """What the partition state znode holds, plus that znode's version (``zk_version``)."""

    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    controller_epoch: int
    zk_version: int = 0

    def with_(self, **changes: Any) -> LeaderAndIsr:
        if "isr" in changes:
            changes["isr"] = tuple(changes["isr"])
        return dataclasses.replace(self, **changes)


def encode_partition_state(state: LeaderAndIsr) -> bytes:
    return _dumps(
        {
            "controller_epoch": state.controller_epoch,
            "leader": state.leader,
            "version": 1,
            "leader_epoch": state.leader_epoch,
            "isr": list(state.isr),
        }
    )


def decode_partition_state(data: bytes, zk_version: int) -> LeaderAndIsr:
    obj = _loads(data, "partition state")
    return LeaderAndIsr(
        int(obj["leader"]),
        int(obj["leader_epoch"]),
        tuple(int(b) for b in obj["isr"]),
        int(obj["controller_epoch"]),
        zk_version,
    )


# -- configs, notifications, producer ids, cluster id -----------------------------------------


def encode_topic_config(config: dict[str, str]) -> bytes:
    return _dumps({"version": 1, "config": dict(sorted(config.items()))})


def decode_topic_config(data: bytes) -> dict[str, str]:
    obj = _loads(data, "topic config")
    return {str(k): str(v) for k, v in obj.get("config", {}).items()}


def encode_config_change(entity_path: str) -> bytes:
    """A config change notification: ``entity_path`` is ``<entity type>/<name>``, e.g.
    ``topics/orders`` (Kafka's version 2 format)."""
    return _dumps({"version": 2, "entity_path": entity_path})


def decode_config_change(data: bytes) -> tuple[str, str]:
    """(entity type, entity name) of a version 2 config change notification."""
    obj = _loads(data, "config change notification")
    if obj.get("version") != 2:
        raise ValueError(f"unsupported config change notification version: {obj.get('version')}")
    entity_type, sep, name = str(obj["entity_path"]).partition("/")
    if not sep or not name:
        raise ValueError(f"malformed config change entity_path: {obj['entity_path']!r}")
    return entity_type, name


def topic_entity_path(topic: str) -> str:
    return f"topics/{topic}"


CONFIG_BROKERS = "/config/brokers"
BROKER_DEFAULT_ENTITY = "<default>"  # the cluster-wide dynamic broker defaults


def broker_config_path(entity: str) -> str:
    """``/config/brokers/<id>`` or ``/config/brokers/<default>`` (same JSON as a topic's)."""
    return f"{CONFIG_BROKERS}/{entity}"


def broker_entity_path(entity: str) -> str:
    return f"brokers/{entity}"


CONFIG_USERS = "/config/users"
USERS_ENTITY = "users"


def sanitize_user(name: str) -> str:
    """Kafka's ``Sanitizer.sanitize`` of a user name in a znode name: URL-encoded (UTF-8),
    ``*``, ``~`` and spaces too, so that any name is one path element."""
    return urllib.parse.quote(name, safe="").replace("~", "%7E")


def desanitize_user(sanitized: str) -> str:
    return urllib.parse.unquote(sanitized)


def user_config_path(user: str) -> str:
    """``/config/users/<sanitized user>``: SCRAM credentials, the same JSON as a topic's config
    (``{"version":1,"config":{"SCRAM-SHA-256":"salt=…,stored_key=…,…"}}``)."""
    return f"{CONFIG_USERS}/{sanitize_user(user)}"


def user_entity_path(user: str) -> str:
    return f"{USERS_ENTITY}/{sanitize_user(user)}"


def config_change_sequence(child: str) -> int:
    """The sequence number of a ``config_change_<seq>`` child name (-1 if it is not one)."""
    if not child.startswith(CONFIG_CHANGE_PREFIX):
        return -1
    digits = child[len(CONFIG_CHANGE_PREFIX) :]
    return int(digits) if digits.isdigit() else -1


def encode_isr_change(partitions: list[TopicPartition]) -> bytes:
    return _dumps(
        {
            "version": 1,
            "partitions": [{"topic": tp.topic, "partition": tp.partition} for tp in partitions],
        }
    )


def decode_isr_change(data: bytes) -> list[TopicPartition]:
    obj = _loads(data, "isr change notification")
    return [TopicPartition(p["topic"], int(p["partition"])) for p in obj["partitions"]]


def encode_preferred_election(partitions: list[TopicPartition]) -> bytes:
    return encode_isr_change(partitions)


decode_preferred_election = decode_isr_change


@dataclass(frozen=True, slots=True)
class ProducerIdBlock:
    broker_id: int
    block_start: int
    block_end: int  # inclusive


def encode_producer_id_block(block: ProducerIdBlock) -> bytes:
    return _dumps(
        {
            "version": 1,
            "broker": block.broker_id,
            "block_start": str(block.block_start),
            "block_end": str(block.block_end),
        }
    )


def decode_producer_id_block(data: bytes) -> ProducerIdBlock:
    obj = _loads(data, "producer id block")
    return ProducerIdBlock(int(obj["broker"]), int(obj["block_start"]), int(obj["block_end"]))


def encode_cluster_id(cluster_id: str) -> bytes:
    return _dumps({"version": "1", "id": cluster_id})


def decode_cluster_id(data: bytes) -> str:
    return str(_loads(data, "cluster id")["id"])


@dataclass
class TopicDescription:
    """A topic as the controller sees it in ZooKeeper."""

    name: str
    assignment: dict[int, list[int]] = field(default_factory=dict)
    config: dict[str, str] = field(default_factory=dict)
