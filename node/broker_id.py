"""The id a broker runs under, as Kafka's ZooKeeper-era start-up decides it
(``KafkaServer.getOrGenerateBrokerId``):

1. a configured ``broker.id`` (the log manager's start-up refuses one that differs from the
   id stored in ``meta.properties``: InconsistentBrokerMetadataError);
2. else (``broker.id=-1``) the id stored in the log dirs' ``meta.properties`` (a broker that
   ran here before);
3. else (``broker.id.generation.enable``) a new one from ZooKeeper:
   ``/brokers/seqid`` is written unconditionally and its new znode version, plus
   ``reserved.broker.max.id``, is the id (1001, 1002, … with the default 1000). Configured ids
   stay at or below ``reserved.broker.max.id`` (a config rule), so the two never meet.

The log manager then writes the id into ``meta.properties``, so a restarted broker keeps it.
This is what lets ``docker compose --scale`` start brokers from one service definition.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable

from kafkasim.common.coordination import Coordination, NodeExistsError
from kafkasim.controller import zk_data
from kafkasim.node.config import BrokerConfig
from kafkasim.storage.checkpoints import stored_broker_metadata


async def generate_broker_id(zk: Coordination, reserved_max_id: int) -> int:
    """A cluster-wide new id: one more version of ``/brokers/seqid`` above the reserved ids."""
    with contextlib.suppress(NodeExistsError):
        await zk.create(zk_data.BROKER_SEQID, b"", makepath=True)
    stat = await zk.set(zk_data.BROKER_SEQID, b"", version=-1)
    return stat.version + reserved_max_id


async def resolve_broker_id(
    config: BrokerConfig, coordination_factory: Callable[[], Coordination]
) -> BrokerConfig:
    """``config`` with the broker id to run under (see the module doc); a ZooKeeper session
    from ``coordination_factory`` is opened only to generate a new id, and closed after."""
    if config.broker_id >= 0:
        return config
    stored = stored_broker_metadata(config.log_dirs)
    if stored is not None:
        return config.with_broker_id(stored.broker_id)
    zk = coordination_factory()
    await zk.start()
    try:
        broker_id = await generate_broker_id(zk, config["reserved.broker.max.id"])
    finally:
        await zk.close()
    return config.with_broker_id(broker_id)
