"""A broker's ZooKeeper security from its configuration: credentials and Kafka's ACL policy.

``zookeeper.sasl.client`` (default true) with ``zookeeper.jaas.config.file``: the session
authenticates with the JAAS file's ``Client`` username and password (ZooKeeper's digest
scheme). ``zookeeper.set.acl=true``: every znode the broker (and its controller) creates gets
Kafka's default ACLs (``controller/zk_data.default_acls``).
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import partial
from pathlib import Path

from kafkasim.common.config import Config
from kafkasim.common.errors import InvalidConfigError
from kafkasim.common.zk_acl import OPEN, JaasConfigError, ZkSecurity, read_jaas_client
from kafkasim.controller.zk_data import default_acls
from kafkasim.node.config import BrokerConfig


def zk_security_for(config: BrokerConfig | Config) -> ZkSecurity:
    """The ZooKeeper credentials and ACL policy ``config`` asks for; InvalidConfigError if its
    JAAS file cannot be read."""
    path = config["zookeeper.jaas.config.file"]
    secure = bool(config["zookeeper.set.acl"])
    if not config["zookeeper.sasl.client"] or not path:
        if secure:  # BrokerConfig already refuses this; other configs may not
            raise InvalidConfigError("zookeeper.set.acl is true, but no ZooKeeper credentials")
        return OPEN
    try:
        auth = read_jaas_client(Path(path))
    except JaasConfigError as e:
        raise InvalidConfigError(f"zookeeper.jaas.config.file: {e}") from None
    return ZkSecurity(auth, partial(default_acls, secure=secure))


ZK_SECURITY_KEYS = ("zookeeper.set.acl", "zookeeper.sasl.client", "zookeeper.jaas.config.file")


def zk_security_from_props(props: Mapping[str, object]) -> ZkSecurity:
    """For tools (``kafkasim acls --authorizer-properties``, a cluster's saved overrides):
    the ZooKeeper security keys among ``props``, checked as a broker's are."""
    chosen = {key: props[key] for key in ZK_SECURITY_KEYS if key in props}
    return zk_security_for(BrokerConfig.from_props({"zookeeper.connect": "-", **chosen}))
